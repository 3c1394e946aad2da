package ledger

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// Feed registers the ledger's handlers on the cache's SubnetPool informer
// and returns the feed of Subnets, read with c, which the caller runs beside
// the cache (SubnetFeed.Start). Call it before the cache starts; the ledger
// reports itself synced once the pool informer and the Subnet feed have
// delivered their initial lists, which is when the arbiter may decide
// (design: restore before allocate).
func (l *Ledger) Feed(ctx context.Context, pools cache.Cache, c client.WithWatch) (*SubnetFeed, error) {
	informer, err := pools.GetInformer(ctx, &ipamv1.SubnetPool{})
	if err != nil {
		return nil, fmt.Errorf("subnetpool informer: %w", err)
	}
	reg, err := informer.AddEventHandler(toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, _ bool) {
			if p, ok := obj.(*ipamv1.SubnetPool); ok {
				l.ApplyPool(p, Created, nil)
			}
		},
		UpdateFunc: func(old, obj any) {
			if p, ok := obj.(*ipamv1.SubnetPool); ok {
				l.ApplyPool(p, Updated, old)
			}
		},
		DeleteFunc: l.DeletePool,
	})
	if err != nil {
		return nil, err
	}
	nsReg, err := l.feedNamespaces(ctx, pools)
	if err != nil {
		return nil, err
	}
	spaceReg, err := l.feedAddressSpaces(ctx, pools)
	if err != nil {
		return nil, err
	}
	return l.newSubnetFeed(c, func() bool { return reg.HasSynced() && nsReg.HasSynced() && spaceReg.HasSynced() }), nil
}

// feedAddressSpaces registers the ledger's handlers on the AddressSpace
// informer: the spaces root pools claim from, and who may hold root pools
// in each.
func (l *Ledger) feedAddressSpaces(ctx context.Context, c cache.Cache) (toolscache.ResourceEventHandlerRegistration, error) {
	informer, err := c.GetInformer(ctx, &ipamv1.AddressSpace{})
	if err != nil {
		return nil, fmt.Errorf("addressspace informer: %w", err)
	}
	return informer.AddEventHandler(toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, _ bool) {
			if as, ok := obj.(*ipamv1.AddressSpace); ok {
				l.ApplyAddressSpace(as, Created)
			}
		},
		UpdateFunc: func(_, obj any) {
			if as, ok := obj.(*ipamv1.AddressSpace); ok {
				l.ApplyAddressSpace(as, Updated)
			}
		},
		DeleteFunc: l.DeleteAddressSpace,
	})
}

// feedNamespaces registers the ledger's handlers on a metadata-only
// informer of Namespaces: consent (spec.allowedNamespaces) reads their
// labels. Metadata only: no Namespace spec or status is ever needed.
func (l *Ledger) feedNamespaces(ctx context.Context, c cache.Cache) (toolscache.ResourceEventHandlerRegistration, error) {
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	informer, err := c.GetInformer(ctx, ns)
	if err != nil {
		return nil, fmt.Errorf("namespace informer: %w", err)
	}
	apply := func(obj any, typ EventType) {
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
			l.ApplyNamespace(m.Name, m.Labels, typ)
			l.markTerminating(m.Name, m.DeletionTimestamp != nil)
		}
	}
	return informer.AddEventHandler(toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, _ bool) { apply(obj, Created) },
		UpdateFunc: func(_, obj any) { apply(obj, Updated) },
		DeleteFunc: func(obj any) {
			if m, ok := unwrap[*metav1.PartialObjectMetadata](obj); ok {
				l.DeleteNamespace(m.Name)
			}
		},
	})
}

// MarkSynced makes a ledger that is fed by hand (tests, benchmarks) report
// itself synced.
func (l *Ledger) MarkSynced() {
	l.freshMu.Lock()
	l.synced = func() bool { return true }
	l.freshMu.Unlock()
}

// Synced reports whether the ledger has received the informers' initial
// lists.
func (l *Ledger) Synced() bool {
	l.freshMu.Lock()
	synced := l.synced
	l.freshMu.Unlock()
	return synced()
}

// WaitForSync blocks until the ledger is synced or ctx ends.
func (l *Ledger) WaitForSync(ctx context.Context) error {
	for !l.Synced() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the ledger to sync: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}
