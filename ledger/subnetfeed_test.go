package ledger

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

func withVersion(s *ipamv1.Subnet, rv string) *ipamv1.Subnet {
	s = s.DeepCopy()
	s.ResourceVersion = rv
	return s
}

// The feed's store turns a (re)list into the events an informer would have
// made, without an event for what did not change, and reports the ledger
// synced only after the first list.
func TestSubnetStoreReplace(t *testing.T) {
	l := New()
	store := &subnetStore{ledger: l}
	l.synced = func() bool { return store.listed.Load() }
	l.ApplyPool(rootPool("p", "10.0.0.0/16", 24), Created, nil)
	var events []string
	l.Subscribe(func(e Event) {
		if e.Kind == statuscalc.KindSubnet {
			if _, tomb := e.Object.(toolscache.DeletedFinalStateUnknown); tomb {
				events = append(events, string(e.Type)+" "+e.Name+" (tombstone)")
			} else {
				events = append(events, string(e.Type)+" "+e.Name)
			}
		}
	})
	if l.Synced() {
		t.Fatal("synced before the first list")
	}

	kept := withVersion(ready(dynamic("kept", "p", 24, 1), "10.0.0.0/24"), "10")
	changed := withVersion(dynamic("changed", "p", 24, 2), "11")
	gone := withVersion(ready(dynamic("gone", "p", 24, 3), "10.0.1.0/24"), "12")
	if err := store.Replace([]any{kept, changed, gone}, "12"); err != nil {
		t.Fatal(err)
	}
	if !l.Synced() {
		t.Error("not synced after the first list")
	}

	// The watch fell behind; the relist shows one change, one new Subnet,
	// and one delete the watch missed. The change comes first and is the
	// newest (lists are not in resourceVersion order): until the whole list
	// is applied, the mark must not pass the older Subnet still to come.
	events = nil
	var markedEarly []string
	l.Subscribe(func(e Event) {
		if e.Kind == statuscalc.KindSubnet && l.CaughtUp(Watermark{Kind: statuscalc.KindSubnet, Namespace: ns, ResourceVersion: "21", Count: -1}) {
			markedEarly = append(markedEarly, string(e.Type)+" "+e.Name)
		}
	})
	changedNow := withVersion(ready(dynamic("changed", "p", 24, 2), "10.0.1.0/24"), "25")
	added := withVersion(dynamic("added", "p", 24, 4), "21")
	if err := store.Replace([]any{changedNow, withVersion(kept, "10"), added}, "30"); err != nil {
		t.Fatal(err)
	}
	// The delete goes first: changed now holds the range gone held.
	want := []string{"delete gone (tombstone)", "update changed", "create added"}
	if diff := cmp.Diff(want, events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if len(markedEarly) > 0 {
		t.Errorf("the admission barrier passed for resourceVersion 21 at %v, before the relist was applied", markedEarly)
	}
	if _, ok := l.Subnet(ns, "gone"); ok {
		t.Error("a Subnet missing from the relist is still known")
	}
	if figures, _ := l.PoolFigures(ns, "p"); figures.Usage.Held.String() != "512" {
		t.Errorf("the pool holds %s addresses; want 512 (kept and changed)", figures.Usage.Held)
	}
	if !l.CaughtUp(Watermark{Kind: statuscalc.KindSubnet, Namespace: ns, ResourceVersion: "30", Count: -1}) {
		t.Error("the list's resourceVersion did not move the freshness mark")
	}
	if err := store.Bookmark("40"); err != nil {
		t.Fatal(err)
	}
	if !l.CaughtUp(Watermark{Kind: statuscalc.KindSubnet, Namespace: ns, ResourceVersion: "40", Count: -1}) {
		t.Error("a bookmark did not move the freshness mark")
	}
}

// The ledger is the Subnet controller's store: what it returns must be the
// object as the API showed it, in everything the controller reads, and a
// copy the caller may change.
func TestSubnetViewIsTheObjectAsDelivered(t *testing.T) {
	l := New()
	s := withVersion(ready(explicit("web", "p", "10.0.4.0/24", 1), "10.0.4.0/24"), "7")
	s.Generation = 3
	s.Status.ObservedGeneration = 3
	s.Status.Addresses = "256"
	s.Status.Conditions[0].Message = "Holds 10.0.4.0/24"
	s.Status.Conditions[0].LastTransitionTime = metav1.NewTime(t0)
	now := metav1.NewTime(t0)
	s.DeletionTimestamp = &now
	l.ApplySubnet(s, Created, nil)

	got, ok := l.Subnet(ns, "web")
	if !ok {
		t.Fatal("unknown")
	}
	if got.UID != s.UID || got.ResourceVersion != "7" || got.Generation != 3 || got.DeletionTimestamp == nil ||
		!got.CreationTimestamp.Equal(&s.CreationTimestamp) || got.Spec.PoolRef.Name != "p" || got.Spec.CIDR != "10.0.4.0/24" {
		t.Errorf("view %+v", got)
	}
	if !equality.Semantic.DeepEqual(got.Status, s.Status) {
		t.Errorf("status %+v; want %+v", got.Status, s.Status)
	}
	got.Status.Conditions[0].Reason = "Changed"
	if again, _ := l.Subnet(ns, "web"); again.Status.Conditions[0].Reason != ipamv1.ReasonAllocated {
		t.Error("the view shares its status with the ledger")
	}
	dyn := dynamic("d", "p", 26, 2)
	l.ApplySubnet(dyn, Created, nil)
	if got, _ := l.Subnet(ns, "d"); got.Spec.PrefixLength == nil || *got.Spec.PrefixLength != 26 || got.Spec.CIDR != "" {
		t.Errorf("dynamic view spec %+v", got.Spec)
	}
}

// Most statuses are kept compactly (the form the controller writes); any
// other is kept whole. Either way the view shows exactly what the API
// showed: the controller compares its write with it, and a difference
// would make it write again on every event.
func TestSubnetViewKeepsEveryStatusExactly(t *testing.T) {
	at := metav1.NewTime(t0.Add(90 * time.Second))
	readyCond := metav1.Condition{Type: ipamv1.ConditionReady, Status: metav1.ConditionTrue, ObservedGeneration: 2,
		LastTransitionTime: at, Reason: ipamv1.ReasonAllocated, Message: "Holds 10.0.4.0/24"}
	waiting := readyCond
	waiting.Status, waiting.Reason, waiting.Message = metav1.ConditionFalse, ipamv1.ReasonPoolExhausted, "no /24 left"
	other := metav1.Condition{Type: "Audited", Status: metav1.ConditionTrue, LastTransitionTime: at, Reason: "Fine"}
	for name, st := range map[string]ipamv1.SubnetStatus{
		"empty":                         {},
		"ready":                         {ObservedGeneration: 2, CIDR: "10.0.4.0/24", Addresses: "256", Gateway: "10.0.4.1", Conditions: []metav1.Condition{readyCond}},
		"written before status.gateway": {ObservedGeneration: 2, CIDR: "10.0.4.0/24", Addresses: "256", Conditions: []metav1.Condition{readyCond}},
		"hand-written gateway":          {ObservedGeneration: 2, CIDR: "10.0.4.0/24", Addresses: "256", Gateway: "10.0.4.9", Conditions: []metav1.Condition{readyCond}},
		"gateway while waiting":         {ObservedGeneration: 2, Gateway: "10.0.4.1", Conditions: []metav1.Condition{waiting}},
		"waiting":                       {ObservedGeneration: 2, Conditions: []metav1.Condition{waiting}},
		"another condition":             {ObservedGeneration: 2, CIDR: "10.0.4.0/24", Addresses: "256", Conditions: []metav1.Condition{readyCond, other}},
		"older generation":              {ObservedGeneration: 1, CIDR: "10.0.4.0/24", Addresses: "256", Conditions: []metav1.Condition{readyCond}},
		"hand-written count":            {ObservedGeneration: 2, CIDR: "10.0.4.0/24", Addresses: "255", Conditions: []metav1.Condition{readyCond}},
		"range while waiting":           {ObservedGeneration: 2, CIDR: "10.0.4.0/24", Addresses: "256", Conditions: []metav1.Condition{waiting}},
		"no condition":                  {ObservedGeneration: 2, CIDR: "10.0.4.0/24"},
		"ready without range":           {ObservedGeneration: 2, Conditions: []metav1.Condition{readyCond}},
	} {
		t.Run(name, func(t *testing.T) {
			l := New()
			s := explicit("web", "p", "10.0.4.0/24", 1)
			s.Status = st
			l.ApplySubnet(s, Created, nil)
			got, _ := l.Subnet(ns, "web")
			if !equality.Semantic.DeepEqual(got.Status, st) {
				t.Errorf("status %+v\nwant %+v", got.Status, st)
			}
			c := l.b.claim(idOf(ns, SubnetKey("web")))
			if compact := name == "ready" || name == "waiting"; compact != (c.shown != nil) {
				t.Errorf("kept compactly: %v; want %v", c.shown != nil, compact)
			}
			// The auditor's view says the same, from the facts alone.
			var want []ReadySubnet
			if meta.IsStatusConditionTrue(st.Conditions, ipamv1.ConditionReady) && st.CIDR != "" {
				want = []ReadySubnet{{Namespace: ns, Name: "web", UID: s.UID, Pool: ipamv1.PoolReference{Namespace: ns, Name: "p"}, CIDR: netip.MustParsePrefix(st.CIDR)}}
			}
			if diff := cmp.Diff(want, slices.Collect(l.ReadySubnets()), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
				t.Errorf("ReadySubnets (-want +got):\n%s", diff)
			}
		})
	}
}

// The reflector pages its lists (500 objects a page by default); the
// list function must pass its limit and continue token on, or a relist at
// 100k Subnets is one response holding every object.
func TestSubnetListIsPaged(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := ipamv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var got []metav1.ListOptions
	stored := dynamic("web", "p", 24, 1)
	stored.Labels = map[string]string{"team": "a"}
	stored.Annotations = map[string]string{corev1.LastAppliedConfigAnnotation: "{}"}
	c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme).WithObjects(stored).Build(), interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			got = append(got, *(&client.ListOptions{}).ApplyOptions(opts).AsListOptions())
			return c.List(ctx, list, opts...)
		},
	})
	list, err := subnetListWatch(c).ListWithContext(t.Context(), metav1.ListOptions{Limit: 500, Continue: "token", ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Limit != 500 || got[0].Continue != "token" || got[0].ResourceVersion != "0" {
		t.Errorf("the list was sent with %+v; want limit 500, continue \"token\", resourceVersion 0", got)
	}
	// What the ledger never reads is dropped as the list arrives.
	items := list.(*ipamv1.SubnetList).Items
	if len(items) != 1 || items[0].Labels != nil || items[0].Annotations != nil || items[0].ManagedFields != nil || items[0].Spec.PoolRef.Name != "p" {
		t.Errorf("listed %+v; want web, trimmed of labels, annotations and managed fields", items)
	}
}

// Watch events are trimmed too, except bookmarks: a watch-list's end of
// initial events is an annotation on one.
func TestSubnetWatchEventsAreTrimmedButNotBookmarks(t *testing.T) {
	subnet := dynamic("web", "p", 24, 1)
	subnet.Annotations = map[string]string{"a": "b"}
	subnet.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	if e, keep := trimEvent(watch.Event{Type: watch.Added, Object: subnet}); !keep || e.Object.(*ipamv1.Subnet).Annotations != nil || e.Object.(*ipamv1.Subnet).ManagedFields != nil {
		t.Errorf("added: %+v, kept %v", e.Object, keep)
	}
	bookmark := &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "7", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	if e, keep := trimEvent(watch.Event{Type: watch.Bookmark, Object: bookmark}); !keep || e.Object.(*ipamv1.Subnet).Annotations[metav1.InitialEventsAnnotationKey] != "true" {
		t.Errorf("bookmark: %+v, kept %v", e.Object, keep)
	}
}

// A loop over ReadySubnets may stop early; a child pool is not a Subnet.
func TestReadySubnetsYieldsSubnetsOnlyAndStopsWhenAsked(t *testing.T) {
	l := New()
	l.ApplyPool(rootPool("p", "10.0.0.0/16", 24), Created, nil)
	l.ApplyPool(withStatus(childPool("child", "p", "10.0.128.0/17", 0), "10.0.128.0/17"), Created, nil)
	for i, name := range []string{"a", "b", "c"} {
		l.ApplySubnet(ready(dynamic(name, "p", 24, i), fmt.Sprintf("10.0.%d.0/24", i)), Created, nil)
	}
	var names []string
	for s := range l.ReadySubnets() {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	if diff := cmp.Diff([]string{"a", "b", "c"}, names); diff != "" {
		t.Errorf("ReadySubnets (-want +got):\n%s", diff)
	}
	n := 0
	for range l.ReadySubnets() {
		n++
		break
	}
	if n != 1 {
		t.Errorf("the loop ran %d times after a break", n)
	}
}

// listOnly makes a reflector list rather than stream its initial state
// (watch-list), so that a test can hand it lists.
type listOnly struct{ *toolscache.ListWatch }

func (listOnly) IsWatchListSemanticsUnSupported() bool { return true }

// The feed under client-go's own reflector: it lists, watches, and when its
// watch has fallen too far behind (410 Expired) lists again; the relist
// brings the ledger to the API's state (a Subnet deleted while nobody
// watched is gone, its range free), and the freshness mark reaches the
// list's resourceVersion.
func TestSubnetFeedRelistsAfterItsWatchExpired(t *testing.T) {
	l := New()
	store := &subnetStore{ledger: l}
	l.synced = func() bool { return store.listed.Load() }
	l.ApplyPool(rootPool("p", "10.0.0.0/16", 24), Created, nil)
	lists := make(chan runtime.Object)
	watches := make(chan watch.Interface)
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, _ metav1.ListOptions) (runtime.Object, error) {
			select {
			case list := <-lists:
				return list, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
		WatchFuncWithContext: func(ctx context.Context, _ metav1.ListOptions) (watch.Interface, error) {
			select {
			case w := <-watches:
				return w, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
	}
	reflector := toolscache.NewReflectorWithOptions(listOnly{lw}, &ipamv1.Subnet{}, store, toolscache.ReflectorOptions{Name: "test"})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { reflector.RunWithContext(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	caughtUp := func(rv string) {
		t.Helper()
		if !l.AwaitCaughtUp(t.Context(), 30*time.Second, Watermark{Kind: statuscalc.KindSubnet, Namespace: ns, ResourceVersion: rv, Count: -1}) {
			t.Fatalf("the ledger did not reach resourceVersion %s", rv)
		}
	}
	list := func(rv string, subnets ...*ipamv1.Subnet) *ipamv1.SubnetList {
		out := &ipamv1.SubnetList{ListMeta: metav1.ListMeta{ResourceVersion: rv}}
		for _, s := range subnets {
			out.Items = append(out.Items, *s)
		}
		return out
	}

	a := withVersion(ready(dynamic("a", "p", 24, 1), "10.0.0.0/24"), "10")
	b := withVersion(ready(dynamic("b", "p", 24, 2), "10.0.1.0/24"), "11")
	lists <- list("12", a, b)
	first := watch.NewFake()
	watches <- first
	caughtUp("12")
	first.Add(withVersion(dynamic("c", "p", 24, 3), "13"))
	caughtUp("13")

	// While nobody watched: b deleted, d created for b's range, a's status
	// rewritten. The watch reports it fell too far behind.
	first.Error(&metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired})
	aNow := withVersion(ready(dynamic("a", "p", 24, 1), "10.0.0.0/24"), "25")
	aNow.Status.Conditions[0].Message = "rewritten"
	d := withVersion(explicit("d", "p", "10.0.1.0/24", 4), "24")
	lists <- list("30", aNow, withVersion(dynamic("c", "p", 24, 3), "13"), d)
	watches <- watch.NewFake()
	caughtUp("30")

	if _, ok := l.Subnet(ns, "b"); ok {
		t.Error("b, deleted while the watch was behind, is still known")
	}
	if got, ok := l.Subnet(ns, "a"); !ok || got.ResourceVersion != "25" || got.Status.Conditions[0].Message != "rewritten" {
		t.Errorf("a after the relist: %+v", got)
	}
	if _, ok := l.Subnet(ns, "d"); !ok {
		t.Error("d, created while the watch was behind, is not known")
	}
	if figures, _ := l.PoolFigures(ns, "p"); figures.Usage.Held.String() != "256" {
		t.Errorf("the pool holds %s addresses; want 256 (a only: b's range is free for d)", figures.Usage.Held)
	}
}
