package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

// SubnetFeed lists and watches Subnets straight into the ledger: the
// ledger is the reflector's store, and no informer cache holds the objects
// beside it. At 100k Subnets a cache of typed objects with its indexes was
// about as large as everything else in the manager together, and every
// reader of Subnets in the manager reads the ledger anyway (the Subnet
// controller through Ledger.Subnet, the auditor through Ledger.ReadySubnets).
//
// The reflector is client-go's: the same list, watch, resume from the last
// resourceVersion, relist after "too old" and back-off as an informer's.
// Its store calls arrive on one goroutine, in watch order, as an informer
// handler's do.
type SubnetFeed struct {
	reflector *toolscache.Reflector
}

// newSubnetFeed returns the feed of l's Subnets from the API server, read
// with c. It runs (Start) on every replica: the webhooks need it as much as
// the controllers. l reports itself synced once the feed has stored its
// first list and synced() holds (the pool informer).
func (l *Ledger) newSubnetFeed(c client.WithWatch, synced func() bool) *SubnetFeed {
	store := &subnetStore{ledger: l}
	lw := subnetListWatch(c)
	l.freshMu.Lock()
	l.synced = func() bool { return store.listed.Load() && synced() }
	l.freshMu.Unlock()
	return &SubnetFeed{reflector: toolscache.NewReflectorWithOptions(lw, &ipamv1.Subnet{}, store, toolscache.ReflectorOptions{Name: "subnets (ledger)"})}
}

// subnetListWatch lists and watches every Subnet with c, trimmed of what
// the ledger never reads.
func subnetListWatch(c client.WithWatch) *toolscache.ListWatch {
	return &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			// Limit and Continue are given again: controller-runtime takes
			// them from these fields, not from Raw, and would drop the
			// reflector's paging.
			list := &ipamv1.SubnetList{}
			err := c.List(ctx, list, &client.ListOptions{Raw: &opts, Limit: opts.Limit, Continue: opts.Continue})
			for i := range list.Items {
				trimSubnet(&list.Items[i])
			}
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			w, err := c.Watch(ctx, &ipamv1.SubnetList{}, &client.ListOptions{Raw: &opts})
			if err != nil {
				return nil, err
			}
			return watch.Filter(w, trimEvent), nil
		},
	}
}

// trimEvent trims the Subnet of a watch event. Not a bookmark's: the end
// of a watch-list's initial events is an annotation on one.
func trimEvent(e watch.Event) (watch.Event, bool) {
	if s, ok := e.Object.(*ipamv1.Subnet); ok && e.Type != watch.Bookmark {
		trimSubnet(s)
	}
	return e, true
}

// trimSubnet drops from a decoded Subnet what the ledger never reads:
// managed fields, labels and annotations. On a restart the reflector holds
// every Subnet of a watch-list's initial stream at once, before the ledger
// keeps their facts: at 100k Subnets trimming them cut the restart's peak
// RSS from 294 to 218 MiB (docs/benchmarks.md).
func trimSubnet(s *ipamv1.Subnet) {
	s.ManagedFields, s.Labels, s.Annotations = nil, nil, nil
}

// Start runs the feed until ctx ends.
func (f *SubnetFeed) Start(ctx context.Context) error {
	f.reflector.RunWithContext(ctx)
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every
// replica feeds its ledger.
func (f *SubnetFeed) NeedLeaderElection() bool { return false }

// subnetStore is the reflector's store: each call applies to the ledger
// what an informer's handler would have.
type subnetStore struct {
	ledger *Ledger
	listed atomic.Bool // the first list is stored
}

var (
	_ toolscache.ReflectorStore         = &subnetStore{}
	_ toolscache.ReflectorBookmarkStore = &subnetStore{}
)

func (s *subnetStore) Add(obj any) error { return s.apply(obj, Created) }

func (s *subnetStore) Update(obj any) error { return s.apply(obj, Updated) }

// apply records a watch event: the ledger's freshness mark moves with it.
func (s *subnetStore) apply(obj any, typ EventType) error {
	sub, ok := obj.(*ipamv1.Subnet)
	if !ok {
		return fmt.Errorf("not a Subnet: %T", obj)
	}
	s.ledger.ApplySubnet(sub, typ, nil)
	return nil
}

func (s *subnetStore) Delete(obj any) error {
	s.ledger.DeleteSubnet(obj)
	return nil
}

// Replace stores a full list (the first, and each relist after the watch
// fell too far behind): what is no longer listed is deleted (as a
// tombstone, the way an informer reports a delete its watch missed), then
// what is new is created and what changed is updated. Objects listed
// unchanged, at the resourceVersion the ledger holds, make no event: a
// relist at 100k Subnets does not requeue them all.
//
// The freshness mark moves once, to the list's resourceVersion, after the
// last object is applied. Listed objects come in no particular order (key
// order, or a watch-list's map order), so moving it per object, as a watch
// event does, would let the admission barrier pass on a half-applied list.
// Deletes go first so that a range a vanished Subnet held is free before a
// listed claim that asks for it is decided.
func (s *subnetStore) Replace(items []any, resourceVersion string) error {
	listed := make(map[Object]struct{}, len(items))
	var errs []error
	subnets := make([]*ipamv1.Subnet, 0, len(items))
	for _, item := range items {
		sub, ok := item.(*ipamv1.Subnet)
		if !ok {
			errs = append(errs, fmt.Errorf("not a Subnet: %T", item))
			continue
		}
		listed[Object{sub.Namespace, sub.Name}] = struct{}{}
		subnets = append(subnets, sub)
	}
	stored, _ := s.ledger.Objects()
	for _, o := range stored {
		if _, ok := listed[o]; ok {
			continue
		}
		if sub, ok := s.ledger.Subnet(o.Namespace, o.Name); ok {
			s.ledger.deleteSubnet(toolscache.DeletedFinalStateUnknown{Key: o.Namespace + "/" + o.Name, Obj: sub})
		}
	}
	for _, sub := range subnets {
		rv, known := s.ledger.subnetVersion(sub.Namespace, sub.Name)
		switch {
		case !known:
			s.ledger.applySubnet(sub, Created, nil)
		case rv != sub.ResourceVersion:
			s.ledger.applySubnet(sub, Updated, nil)
		}
	}
	s.ledger.noteChange(statuscalc.KindSubnet, resourceVersion)
	s.listed.Store(true)
	return errors.Join(errs...)
}

// Bookmark moves the ledger's freshness mark: the watch has delivered every
// Subnet event up to resourceVersion.
func (s *subnetStore) Bookmark(resourceVersion string) error {
	s.ledger.noteChange(statuscalc.KindSubnet, resourceVersion)
	return nil
}

// Resync has nothing to do: the ledger is not a queue.
func (s *subnetStore) Resync() error { return nil }

// subnetVersion returns the resourceVersion of the Subnet the ledger holds.
func (l *Ledger) subnetVersion(namespace, name string) (string, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	c := l.b.claim(idOf(namespace, SubnetKey(name)))
	if c == nil {
		return "", false
	}
	return c.rv, true
}
