package reconcilers

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

func subnet(ns, name, pool string) *ipamv1.Subnet {
	return &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: pool}}}
}

func childPool(ns, name, parent string) *ipamv1.SubnetPool {
	return &ipamv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Generation: 1}, Spec: ipamv1.SubnetPoolSpec{CIDR: "10.0.0.0/24", ParentRef: parentRef(parent)}}
}

// The seed design's mapper test outline (§9).
func TestSubnetToPool(t *testing.T) {
	tests := []struct {
		name string
		obj  any
		want []reconcile.Request
	}{
		{"a Subnet with a poolRef", subnet("team-a", "web", "dc"), []reconcile.Request{request("team-a", "dc")}},
		{"a Subnet without a poolRef", subnet("team-a", "web", ""), nil},
		{"a tombstone", toolscache.DeletedFinalStateUnknown{Key: "team-a/web", Obj: subnet("team-a", "web", "dc")}, []reconcile.Request{request("team-a", "dc")}},
		{"a tombstone of something else", toolscache.DeletedFinalStateUnknown{Key: "x", Obj: "garbage"}, nil},
		{"not a Subnet", childPool("team-a", "x", "y"), nil},
		{"nil", nil, nil},
		{"a typed nil", (*ipamv1.Subnet)(nil), nil},
		{"no namespace (impossible for a stored Subnet)", subnet("", "web", "dc"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := subnetToPool(tt.obj)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			for _, r := range got {
				if r.Namespace == "" {
					t.Errorf("request %v has no namespace", r)
				}
			}
		})
	}
}

// The seed's trigger events (§10), as requests of the pool status
// controller.
func TestPoolEvents(t *testing.T) {
	grown := childPool("team-a", "child", "root")
	grown.Generation = 2
	grantLanded := childPool("team-a", "child", "root")
	grantLanded.Status.CIDR = "10.0.0.0/24"
	annotated := childPool("team-a", "child", "root")
	annotated.Annotations = map[string]string{ipamv1.AnnotationRecompute: "now"}
	moved := subnet("team-a", "web", "other")
	tests := []struct {
		name string
		ev   ledger.Event
		want []reconcile.Request
	}{
		{"1. Subnet created", ledger.Event{Type: ledger.Created, Kind: "Subnet", Namespace: "team-a", Name: "web", Object: subnet("team-a", "web", "dc")},
			[]reconcile.Request{request("team-a", "dc")}},
		{"1. Subnet deleted (tombstone)", ledger.Event{Type: ledger.Deleted, Kind: "Subnet", Namespace: "team-a", Name: "web",
			Object: toolscache.DeletedFinalStateUnknown{Obj: subnet("team-a", "web", "dc")}},
			[]reconcile.Request{request("team-a", "dc")}},
		{"1. Subnet moved to another pool (schema bypassed)", ledger.Event{Type: ledger.Updated, Kind: "Subnet", Namespace: "team-a", Name: "web",
			Object: moved, OldObject: subnet("team-a", "web", "dc")},
			[]reconcile.Request{request("team-a", "other"), request("team-a", "dc")}},
		{"1. Subnet updated, holding the range it held (the ledger says so): nothing", ledger.Event{Type: ledger.Updated, Kind: "Subnet", Namespace: "team-a", Name: "web",
			Object: subnet("team-a", "web", "dc"), HeldAsBefore: true},
			nil},
		{"1. Subnet updated otherwise", ledger.Event{Type: ledger.Updated, Kind: "Subnet", Namespace: "team-a", Name: "web",
			Object: subnet("team-a", "web", "dc")},
			[]reconcile.Request{request("team-a", "dc")}},
		{"2. child pool deleted", ledger.Event{Type: ledger.Deleted, Kind: "SubnetPool", Namespace: "team-a", Name: "child", Object: childPool("team-a", "child", "root")},
			[]reconcile.Request{request("team-a", "child"), request("team-a", "root")}},
		{"3. child pool spec changed", ledger.Event{Type: ledger.Updated, Kind: "SubnetPool", Namespace: "team-a", Name: "child",
			Object: grown, OldObject: childPool("team-a", "child", "root")},
			[]reconcile.Request{request("team-a", "child"), request("team-a", "root")}},
		{"3. child pool's grant written", ledger.Event{Type: ledger.Updated, Kind: "SubnetPool", Namespace: "team-a", Name: "child",
			Object: grantLanded, OldObject: childPool("team-a", "child", "root")},
			[]reconcile.Request{request("team-a", "child"), request("team-a", "root")}},
		{"4. a status change: itself, to correct a foreign write", ledger.Event{Type: ledger.Updated, Kind: "SubnetPool", Namespace: "team-a", Name: "child",
			Object: func() *ipamv1.SubnetPool { p := grantLanded.DeepCopy(); p.Status.Utilization = "5%"; return p }(), OldObject: grantLanded},
			[]reconcile.Request{request("team-a", "child")}},
		{"4. nothing we look at changed: nothing", ledger.Event{Type: ledger.Updated, Kind: "SubnetPool", Namespace: "team-a", Name: "child",
			Object: func() *ipamv1.SubnetPool {
				p := grantLanded.DeepCopy()
				p.Labels = map[string]string{"a": "b"}
				return p
			}(), OldObject: grantLanded},
			nil},
		{"5. external trigger", ledger.Event{Type: ledger.Updated, Kind: "SubnetPool", Namespace: "team-a", Name: "child",
			Object: annotated, OldObject: childPool("team-a", "child", "root")},
			[]reconcile.Request{request("team-a", "child")}},
		// A wake-only event names no object; each woken claim carries its
		// own namespace.
		{"woken child pools", ledger.Event{Type: ledger.Updated, Wake: []statuscalc.ClaimRef{{Kind: "SubnetPool", Namespace: "team-a", Name: "c1"}, {Kind: "SubnetPool", Namespace: "team-b", Name: "c1"}, {Kind: "Subnet", Namespace: "team-a", Name: "s1"}}},
			[]reconcile.Request{request("team-a", "c1"), request("team-b", "c1")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := poolEvents(tt.ev)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			for _, r := range got {
				if r.Namespace == "" {
					t.Errorf("request %v has no namespace", r)
				}
			}
		})
	}
}

func TestParentRequeueMetric(t *testing.T) {
	counter := parentRequeues.WithLabelValues("delete")
	before := testutil.ToFloat64(counter)
	poolEvents(ledger.Event{Type: ledger.Deleted, Kind: "Subnet", Namespace: "team-a", Object: subnet("team-a", "web", "dc")})
	if after := testutil.ToFloat64(counter); after != before+1 {
		t.Errorf("subnetpool_parent_requeue_total{event_type=delete}: %v -> %v", before, after)
	}
}

// Concurrent create and delete events of one Subnet: no panic, and the
// queue holds its pool once (the work queue coalesces; the seed's
// "duplicate suppression").
func TestConcurrentEventsCoalesce(t *testing.T) {
	q := workqueue.NewTypedRateLimitingQueue(rateLimiter())
	defer q.ShutDown()
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			typ := ledger.Created
			if i%2 == 1 {
				typ = ledger.Deleted
			}
			for _, r := range poolEvents(ledger.Event{Type: typ, Kind: "Subnet", Namespace: "team-a", Object: subnet("team-a", "web", "dc")}) {
				q.Add(r)
			}
		}()
	}
	wg.Wait()
	if q.Len() != 1 {
		t.Errorf("queue length %d, want 1", q.Len())
	}
}

// The seed's rate limiter: 50 ms, doubling per failure, capped at 30 s,
// reset on success (Forget).
func TestRateLimiter(t *testing.T) {
	rl := rateLimiter()
	r := request("team-a", "dc")
	var got []time.Duration
	for range 4 {
		got = append(got, rl.When(r))
	}
	want := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("back-off (-want +got):\n%s", diff)
	}
	for range 20 {
		rl.When(r)
	}
	if d := rl.When(r); d != 30*time.Second {
		t.Errorf("capped at %s, want 30s", d)
	}
	rl.Forget(r)
	if d := rl.When(r); d != 50*time.Millisecond {
		t.Errorf("after Forget: %s", d)
	}
}

// metadataLister answers the catch-up's metadata LISTs with fixed objects.
type metadataLister struct {
	readerFunc
	subnets []metav1.PartialObjectMetadata
}

func (m *metadataLister) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	l := list.(*metav1.PartialObjectMetadataList)
	if l.GroupVersionKind().Kind == "SubnetList" {
		l.Items = m.subnets
	}
	return nil
}

// A replica that becomes leader right after a graceful hand-over may not
// have received the old leader's last writes yet. Its controllers' workers
// start only once its ledger reflects what the API server holds.
func TestNewLeaderDecidesOnlyAfterCatchingUp(t *testing.T) {
	l := ledger.New()
	l.MarkSynced()
	s := subnet("team-a", "web", "dc")
	s.UID, s.ResourceVersion = "uid-web", "5"
	l.ApplySubnet(s, ledger.Created, nil)
	src := &ledgerSource{ledger: l, reader: &metadataLister{subnets: []metav1.PartialObjectMetadata{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "web", UID: "uid-web", ResourceVersion: "9"}}, // the old leader's grant
	}}}
	synced := make(chan error, 1)
	go func() { synced <- src.WaitForSync(context.Background()) }()
	select {
	case err := <-synced:
		t.Fatalf("the workers would start on a view behind the API server (%v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	granted := s.DeepCopy()
	granted.ResourceVersion = "9"
	l.ApplySubnet(granted, ledger.Updated, s) // the informer delivers it
	select {
	case err := <-synced:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the workers did not start once the view caught up")
	}
}

// A backlog enqueued at start (the recorder's Subnets to record after an
// upgrade or a failover) waits behind what happens meanwhile.
func TestInitialRequestsGoBehindEvents(t *testing.T) {
	l := ledger.New()
	l.MarkSynced()
	backlog := request("team-a", "old")
	src := &ledgerSource{ledger: l, reader: &metadataLister{}, initialLow: true,
		mapEvent: func(e ledger.Event) []reconcile.Request { return []reconcile.Request{request(e.Namespace, e.Name)} },
		initial:  func() []reconcile.Request { return []reconcile.Request{backlog} }}
	q := priorityqueue.New[reconcile.Request]("initial-test")
	defer q.ShutDown()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := src.Start(ctx, q); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for q.Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the initial request was never enqueued")
		}
		time.Sleep(time.Millisecond)
	}
	l.ApplySubnet(subnet("team-a", "new", "dc"), ledger.Created, nil)
	first, _, _ := q.GetWithPriority()
	second, priority, _ := q.GetWithPriority()
	if first.Name != "new" || second != backlog || priority != handler.LowPriority {
		t.Errorf("got %s then %s (priority %d); want the event's request first, the backlog after at low priority", first, second, priority)
	}
}

// parentRef references the parent pool name in the pool's own namespace;
// none for "".
func parentRef(name string) *ipamv1.PoolReference {
	if name == "" {
		return nil
	}
	return &ipamv1.PoolReference{Name: name}
}

// A namespace's label change requeues the pools its claims use (in their
// own namespace, not the tenant's), and wakes its waiting claims: Subnets
// for the Subnet controller, child pools for the pool controller.
func TestNamespaceEventsRequeuePoolsAndWakeClaims(t *testing.T) {
	e := ledger.Event{Type: ledger.Updated, Kind: ledger.KindNamespace, Name: "team-a",
		Pools: []ipamv1.PoolReference{{Namespace: "netops", Name: "corp"}},
		Wake: []statuscalc.ClaimRef{{Kind: statuscalc.KindSubnet, Namespace: "team-a", Name: "web"},
			{Kind: statuscalc.KindSubnetPool, Namespace: "team-a", Name: "kids"}}}
	if diff := cmp.Diff([]reconcile.Request{request("team-a", "kids"), request("netops", "corp")}, poolEvents(e)); diff != "" {
		t.Errorf("pool requests (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]reconcile.Request{request("team-a", "web")}, subnetEvents(e)); diff != "" {
		t.Errorf("Subnet requests (-want +got):\n%s", diff)
	}
}
