//go:build integration

package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	capiipam "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// recorder keeps the full history of Subnets, SubnetPools, IPAddressClaims
// and IPAddresses in the test's namespaces: one watch per kind, across all
// namespaces, started from a listing's resourceVersion before the first
// operation. A resourceVersion is the store's revision, global across kinds
// (custom resources all live in the one etcd), so the streams merge into
// one exact order. Events of other namespaces (the fence's) are not kept,
// but they show how far each stream has come.
type recorder struct {
	c          client.WithWatch
	namespaces map[string]bool

	mu sync.Mutex
	// events per kind not yet handed to the replayer, in arrival order,
	// which is RV order.
	events map[string][]event
	// state per kind: the last version of each object, by key, as the
	// stream showed it (for re-listing after an expired watch).
	state map[string]map[string]obj
	// progress per kind: the highest RV the stream has shown, any namespace.
	progress map[string]uint64
	cut      uint64    // events up to here were handed out
	last     time.Time // when an event of the test's namespaces last arrived
	gaps     []gap
	problems []string // late events, re-lists: reported as H findings
	changed  chan struct{}

	stop context.CancelFunc
	done sync.WaitGroup
}

// recordedKinds are the kinds the recorder watches.
var recordedKinds = []string{kindSubnet, kindPool, kindClaim, kindAddress}

func startRecorder(ctx context.Context, c client.WithWatch, namespaces []string) (*recorder, error) {
	r := &recorder{
		c: c, namespaces: map[string]bool{},
		events: map[string][]event{}, state: map[string]map[string]obj{},
		progress: map[string]uint64{}, changed: make(chan struct{}),
	}
	for _, ns := range namespaces {
		r.namespaces[ns] = true
	}
	ctx, r.stop = context.WithCancel(ctx)
	for _, kind := range recordedKinds {
		r.state[kind] = map[string]obj{}
		rv, objs, err := r.list(ctx, kind)
		if err != nil {
			r.stop()
			return nil, err
		}
		for _, o := range objs {
			r.state[kind][o.key()] = o
			r.events[kind] = append(r.events[kind], event{Type: string(watch.Added), Obj: o, Received: time.Now()})
		}
		r.progress[kind] = rv
	}
	// The watches start once every kind is listed: a watch reads the maps
	// that the lists above fill (under r.mu from then on).
	for _, kind := range recordedKinds {
		rv := r.progress[kind]
		r.done.Add(1)
		go func() {
			defer r.done.Done()
			r.watch(ctx, kind, rv)
		}()
	}
	return r, nil
}

func (r *recorder) close() {
	r.stop()
	r.done.Wait()
}

func newList(kind string) client.ObjectList {
	switch kind {
	case kindSubnet:
		return &ipamv1.SubnetList{}
	case kindClaim:
		return &capiipam.IPAddressClaimList{}
	case kindAddress:
		return &capiipam.IPAddressList{}
	}
	return &ipamv1.SubnetPoolList{}
}

// list lists a kind in all namespaces: its resourceVersion and the objects
// of the test's namespaces.
func (r *recorder) list(ctx context.Context, kind string) (uint64, []obj, error) {
	list := newList(kind)
	if err := r.c.List(ctx, list); err != nil {
		return 0, nil, err
	}
	var out []obj
	switch l := list.(type) {
	case *ipamv1.SubnetList:
		for i := range l.Items {
			if r.namespaces[l.Items[i].Namespace] {
				out = append(out, fromSubnet(&l.Items[i]))
			}
		}
		return parseRV(l.ResourceVersion), out, nil
	case *ipamv1.SubnetPoolList:
		for i := range l.Items {
			if r.namespaces[l.Items[i].Namespace] {
				out = append(out, fromPool(&l.Items[i]))
			}
		}
		return parseRV(l.ResourceVersion), out, nil
	case *capiipam.IPAddressClaimList:
		for i := range l.Items {
			if r.namespaces[l.Items[i].Namespace] {
				out = append(out, fromClaim(&l.Items[i]))
			}
		}
		return parseRV(l.ResourceVersion), out, nil
	case *capiipam.IPAddressList:
		for i := range l.Items {
			if r.namespaces[l.Items[i].Namespace] {
				out = append(out, fromAddress(&l.Items[i]))
			}
		}
		return parseRV(l.ResourceVersion), out, nil
	}
	return 0, nil, fmt.Errorf("unknown list %T", list)
}

// watch follows one kind from rv until ctx ends, resuming after the
// server closes the stream, and re-listing when the revision it resumes
// from has been compacted (410 Gone).
func (r *recorder) watch(ctx context.Context, kind string, rv uint64) {
	for ctx.Err() == nil {
		w, err := r.c.Watch(ctx, newList(kind), &client.ListOptions{Raw: &metav1.ListOptions{
			ResourceVersion: strconv.FormatUint(rv, 10), AllowWatchBookmarks: true,
		}})
		if err == nil {
			rv, err = r.consume(kind, w, rv)
			w.Stop()
		}
		switch {
		case ctx.Err() != nil:
			return
		case apierrors.IsGone(err) || apierrors.IsResourceExpired(err):
			if next, lerr := r.relist(ctx, kind, rv); lerr == nil {
				rv = next
				continue
			}
		}
		// The API server is away or the stream ended: resume shortly.
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// consume records a stream's events until it ends; it returns the RV to
// resume from and the error that ended it, if any.
func (r *recorder) consume(kind string, w watch.Interface, rv uint64) (uint64, error) {
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Error:
			return rv, apierrors.FromObject(ev.Object)
		case watch.Bookmark:
			if m, err := metaOf(ev.Object); err == nil {
				rv = max(rv, parseRV(m.GetResourceVersion()))
				r.advance(kind, rv)
			}
		case watch.Added, watch.Modified, watch.Deleted:
			var o obj
			switch x := ev.Object.(type) {
			case *ipamv1.Subnet:
				o = fromSubnet(x)
			case *ipamv1.SubnetPool:
				o = fromPool(x)
			case *capiipam.IPAddressClaim:
				o = fromClaim(x)
			case *capiipam.IPAddress:
				o = fromAddress(x)
			default:
				continue
			}
			rv = max(rv, o.RV)
			r.record(kind, string(ev.Type), o)
		}
	}
	return rv, nil
}

func metaOf(o any) (metav1.Object, error) {
	m, ok := o.(metav1.Object)
	if !ok {
		return nil, errors.New("not an object")
	}
	return m, nil
}

func (r *recorder) record(kind, typ string, o obj) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// The members' claims in the hub namespaces are replayed too, for D6
	// only: they are not the test's objects, and not in its state.
	ours, hub := r.namespaces[o.Namespace], isHubClaim(&o)
	if ours || hub {
		if o.RV <= r.cut {
			r.problems = append(r.problems, fmt.Sprintf("%s event at rv %d arrived after the history was cut at %d: %s", typ, o.RV, r.cut, &o))
		}
		r.last = time.Now()
		r.events[kind] = append(r.events[kind], event{Type: typ, Obj: o, Received: r.last})
	}
	if ours {
		if typ == string(watch.Deleted) {
			delete(r.state[kind], o.key())
		} else {
			r.state[kind][o.key()] = o
		}
	}
	r.advanceLocked(kind, o.RV)
}

func (r *recorder) advance(kind string, rv uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.advanceLocked(kind, rv)
}

func (r *recorder) advanceLocked(kind string, rv uint64) {
	if rv > r.progress[kind] {
		r.progress[kind] = rv
		close(r.changed)
		r.changed = make(chan struct{})
	}
}

// relist recovers from an expired watch: it lists, turns the differences
// from the last state seen into events (an object changed since carries
// its own RV; a deletion, unseen, is placed at the listing's RV), and
// records the span as a gap in which S1 is not checked event by event.
func (r *recorder) relist(ctx context.Context, kind string, from uint64) (uint64, error) {
	rv, objs, err := r.list(ctx, kind)
	if err != nil {
		return 0, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	listed := map[string]obj{}
	var evs []event
	for _, o := range objs {
		listed[o.key()] = o
		old, ok := r.state[kind][o.key()]
		switch {
		case !ok:
			evs = append(evs, event{Type: string(watch.Added), Obj: o, Received: now, Relisted: true})
		case old.UID != o.UID:
			gone := old
			gone.RV = o.RV
			evs = append(evs, event{Type: string(watch.Deleted), Obj: gone, Received: now, Relisted: true},
				event{Type: string(watch.Added), Obj: o, Received: now, Relisted: true})
		case old.RV != o.RV:
			evs = append(evs, event{Type: string(watch.Modified), Obj: o, Received: now, Relisted: true})
		}
	}
	for k, old := range r.state[kind] {
		if _, ok := listed[k]; !ok {
			gone := old
			gone.RV = rv
			evs = append(evs, event{Type: string(watch.Deleted), Obj: gone, Received: now, Relisted: true})
		}
	}
	slices.SortStableFunc(evs, func(a, b event) int { return compareRV(a.Obj.RV, b.Obj.RV) })
	r.events[kind] = append(r.events[kind], evs...)
	r.state[kind] = listed
	r.gaps = append(r.gaps, gap{Kind: kind, From: from, To: rv})
	r.problems = append(r.problems, fmt.Sprintf("the %s watch expired at rv %d and was re-listed at %d: S1 is not checked event by event in between", kind, from, rv))
	r.advanceLocked(kind, rv)
	return rv, nil
}

func compareRV(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// quiet is how long no object of the test's namespaces has changed.
func (r *recorder) quiet() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Since(r.last)
}

// waitFor waits until the kind's stream has shown revision rv.
func (r *recorder) waitFor(ctx context.Context, kind string, rv uint64, timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		r.mu.Lock()
		got, changed := r.progress[kind], r.changed
		r.mu.Unlock()
		if got >= rv {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("the %s watch has shown rv %d, not %d, after %s", kind, got, rv, timeout)
		}
	}
}

// take hands out the events up to cut that were not handed out yet, every
// kind merged in RV order, and the gaps noted so far.
func (r *recorder) take(cut uint64) ([]event, []gap, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []event
	for _, kind := range recordedKinds {
		evs := r.events[kind]
		i := 0
		for i < len(evs) && evs[i].Obj.RV <= cut {
			i++
		}
		out = append(out, evs[:i]...)
		r.events[kind] = slices.Clone(evs[i:]) // handed out: forget them
	}
	slices.SortStableFunc(out, func(a, b event) int { return compareRV(a.Obj.RV, b.Obj.RV) })
	r.cut = max(r.cut, cut)
	gaps, problems := r.gaps, r.problems
	r.gaps, r.problems = nil, nil
	return out, gaps, problems
}

// fence proves how far the watches have come: a write to an object of each
// kind in a namespace of its own, whose event the stream must show. A
// watch delivers in order, so once it shows the fence it has shown
// everything before it. (Comparing a listing with the watched state alone
// would not see a create and a delete both still undelivered.)
type fence struct {
	c         client.Client
	namespace string
	n         int
}

func newFence(ctx context.Context, c client.Client, namespace string, run int) (*fence, error) {
	f := &fence{c: c, namespace: namespace}
	// A root pool of its own per run: the runs of one process (-count)
	// share the API server, and root pools may not overlap.
	octet := 256 - run
	pool := &ipamv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "fence"}, Spec: ipamv1.SubnetPoolSpec{CIDR: fmt.Sprintf("192.168.%d.0/24", octet)}}
	subnet := &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "fence"}, Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: "fence"}, CIDR: fmt.Sprintf("192.168.%d.0/28", octet)}}
	// The Cluster API fences name a pool of another kind, which the
	// operator leaves alone: they only ever change by the fence's writes.
	other := capiipam.IPPoolReference{APIGroup: "fence.lifecycle.test", Kind: "Fence", Name: "fence"}
	claim := &capiipam.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "fence"}, Spec: capiipam.IPAddressClaimSpec{PoolRef: other}}
	address := &capiipam.IPAddress{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "fence"}, Spec: capiipam.IPAddressSpec{
		ClaimRef: capiipam.IPAddressClaimReference{Name: "fence"}, PoolRef: other, Address: fmt.Sprintf("192.168.%d.1", octet), Prefix: ptr.To[int32](24),
	}}
	for _, o := range []client.Object{pool, subnet, claim, address} {
		if err := retryTransient(ctx, func(ctx context.Context) error { return c.Create(ctx, o) }); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating the fence %T: %w", o, err)
		}
	}
	return f, nil
}

// raise writes every fence object and returns the revisions of the writes.
func (f *fence) raise(ctx context.Context) (map[string]uint64, error) {
	f.n++
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{"lifecycle.test/fence":"%d"}}}`, f.n))
	out := map[string]uint64{}
	for kind, o := range map[string]client.Object{
		kindSubnet:  &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: "fence"}},
		kindPool:    &ipamv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: "fence"}},
		kindClaim:   &capiipam.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: "fence"}},
		kindAddress: &capiipam.IPAddress{ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: "fence"}},
	} {
		if err := retryTransient(ctx, func(ctx context.Context) error { return f.c.Patch(ctx, o, patch) }); err != nil {
			return nil, fmt.Errorf("raising the %s fence: %w", kind, err)
		}
		out[kind] = parseRV(o.GetResourceVersion())
	}
	return out, nil
}

// sync brings the history up to now, at quiescence: it lists every kind,
// raises the fence, waits for every stream to show it, and checks that the
// history's state at each listing's revision is the listing (same objects,
// same resourceVersions). It returns the events up to the fence, merged,
// with the gaps and the recorder's problems (H findings).
func (r *recorder) sync(ctx context.Context, f *fence, rep *replayer) ([]event, []finding, error) {
	listRV := map[string]uint64{}
	listed := map[string][]obj{}
	for _, kind := range recordedKinds {
		rv, objs, err := r.list(ctx, kind)
		if err != nil {
			return nil, nil, err
		}
		listRV[kind], listed[kind] = rv, objs
	}
	fences, err := f.raise(ctx)
	if err != nil {
		return nil, nil, err
	}
	for kind, rv := range fences {
		if err := r.waitFor(ctx, kind, rv, time.Minute); err != nil {
			return nil, nil, err
		}
	}
	cut := uint64(0)
	for _, rv := range fences {
		if cut == 0 || rv < cut {
			cut = rv
		}
	}
	events, gaps, problems := r.take(cut)
	var findings []finding
	for _, p := range problems {
		findings = append(findings, finding{Check: "H", Key: "H/" + p, Detail: p})
	}
	for _, g := range gaps {
		rep.noteGap(g)
	}
	for _, ev := range events {
		rep.apply(maskRestoredStatus(ev)) // the test's own status writes: ops_restore_test.go
	}
	for _, kind := range recordedKinds {
		want := map[string]uint64{}
		for _, o := range listed[kind] {
			want[o.key()] = o.RV
		}
		got := map[string]uint64{}
		for k, o := range rep.stateAt(kind, listRV[kind]) {
			got[k] = o.RV
		}
		if !maps.Equal(got, want) {
			d := fmt.Sprintf("the history's %s state at rv %d is not the listing: %s", kind, listRV[kind], mapDiff(got, want))
			findings = append(findings, finding{Check: "H", Key: "H/" + d, Detail: d})
		}
	}
	return events, findings, nil
}

func mapDiff(got, want map[string]uint64) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] != want[k] {
			out = append(out, fmt.Sprintf("%s: history rv %d, listed rv %d", k, got[k], want[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			out = append(out, fmt.Sprintf("%s: in the history (rv %d), not listed", k, got[k]))
		}
	}
	return fmt.Sprint(out)
}
