package ledger

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

// withUID gives an object a UID of its own, as a re-created object has.
func withUID[T interface{ SetUID(types.UID) }](obj T, uid string) T {
	obj.SetUID(types.UID(uid))
	return obj
}

// A decision and its withdrawal apply to the object they were made for: a
// Subnet deleted and created again under the same name is another claim.
func TestDecisionsAreForTheObjectTheyWereMadeFor(t *testing.T) {
	l, _ := newLedger()
	l.ApplyPool(rootPool("p", "10.0.0.0/24", 25), Created, nil)
	first := dynamic("a", "p", 25, 0)
	l.ApplySubnet(first, Created, nil)
	d := decide(t, l, "a")
	if !d.Assumed || d.CIDR.String() != "10.0.0.0/25" {
		t.Fatalf("first a: %+v", d)
	}
	// The user deletes "a" while its write is in flight, "b" gets the
	// range, and "a" is created again.
	l.DeleteSubnet(first)
	l.ApplySubnet(dynamic("b", "p", 25, 1), Created, nil)
	if d := decide(t, l, "b"); d.CIDR.String() != "10.0.0.0/25" {
		t.Fatalf("b: %+v", d)
	}
	second := withUID(dynamic("a", "p", 25, 2), "uid-a-2")
	l.ApplySubnet(second, Created, nil)

	// A reconcile that still holds the first object gets no decision.
	if d, ok := l.DecideSubnet(ns, "a", "uid-a"); ok {
		t.Fatalf("decided for the deleted object: %+v", d)
	}
	d2, ok := l.DecideSubnet(ns, "a", "uid-a-2")
	if !ok || d2.CIDR.String() != "10.0.0.128/25" {
		t.Fatalf("second a: %+v %v", d2, ok)
	}
	// The first object's failed write withdraws nothing of the second's.
	l.Forget(ns, SubnetKey("a"), "uid-a", d2.CIDR)
	if d, _ := l.DecideSubnet(ns, "a", "uid-a-2"); !d.Assumed || d.CIDR != d2.CIDR {
		t.Errorf("second a after the first's Forget: %+v", d)
	}
}

// Two explicit claims of one range: among the claims pending at one
// decision the oldest wins; a claim that arrives after a grant loses to it,
// whatever its age. No decision waits on the clock.
func TestFirstGrantStands(t *testing.T) {
	l, _ := newLedger()
	l.ApplyPool(rootPool("p", "10.0.0.0/24", 26), Created, nil)
	younger := explicit("younger", "p", "10.0.0.0/26", 5)
	l.ApplySubnet(younger, Created, nil)
	if d := decide(t, l, "younger"); !d.Ready() || !d.Assumed {
		t.Fatalf("younger, alone: %+v", d)
	}
	l.ApplySubnet(explicit("older", "p", "10.0.0.0/26", 1), Created, nil)
	if d := decide(t, l, "older"); d.Reason != ipamv1.ReasonOverlaps || refKey(d.Winner) != "Subnet/younger" {
		t.Errorf("older, after the grant: %+v", d)
	}
}

// Relaxing a pool's bounds wakes the explicit claim they kept out, and it is
// granted at once.
func TestRelaxedBoundsGrantAWaitingExplicitClaim(t *testing.T) {
	l, rec := newLedger()
	p := rootPool("p", "10.0.0.0/16", 24)
	p.Spec.MaxPrefixLength = ptr.To[int32](24)
	l.ApplyPool(p, Created, nil)
	l.ApplySubnet(explicit("small", "p", "10.0.5.0/26", 1), Created, nil)
	if d := decide(t, l, "small"); d.Reason != ipamv1.ReasonOutOfRange {
		t.Fatalf("before: %+v", d)
	}
	rec.events = nil
	relaxed := p.DeepCopy()
	relaxed.Spec.MaxPrefixLength = ptr.To[int32](28)
	l.ApplyPool(relaxed, Updated, p)
	if !slices.Contains(rec.woken(), "Subnet/small") {
		t.Error("relaxing the bounds did not wake the claim")
	}
	if d := decide(t, l, "small"); !d.Ready() || d.CIDR.String() != "10.0.5.0/26" {
		t.Errorf("after: %+v", d)
	}
}

// A pool edit that races a grant: the claim keeps its range (a grant is
// never taken away), the pool says so (ClaimsOutside) until the claim goes,
// and no later decision breaks the new rules. The same view is rebuilt from
// the objects after a restart.
func TestPoolEditRacingAGrant(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) {
			l, rec := newLedger()
			pool := rootPool("p", "10.0.0.0/24", 26)
			l.ApplyPool(pool, Created, nil)
			granted := ready(dynamic("granted", "p", 26, 1), "10.0.0.0/26")
			l.ApplySubnet(granted, Created, nil)
			// The webhook admitted both edits on a view without the grant.
			edited := pool.DeepCopy()
			edited.Generation = 2
			edited.Spec.Reserved = []string{"10.0.0.0/25"}
			if restart {
				l, rec = newLedger()
				l.ApplySubnet(granted, Created, nil)
				l.ApplyPool(edited, Created, nil)
			} else {
				l.ApplyPool(edited, Updated, pool)
			}

			d := decidePool(t, l, "p")
			want := "serving 10.0.0.0/24 in address space default; 1 claim lies outside it or on a reserved range: Subnet team-a/granted (10.0.0.0/26); " +
				"they were granted before the pool's last change and keep their ranges: delete them to complete the change"
			if d.Reason != ipamv1.ReasonClaimsOutside || d.Message != want || d.Ready() {
				t.Errorf("pool: %s %q\nwant ClaimsOutside %q", d.Reason, d.Message, want)
			}
			if d := decide(t, l, "granted"); !d.Ready() || d.CIDR.String() != "10.0.0.0/26" {
				t.Errorf("granted: %+v", d)
			}
			f, _ := l.PoolFigures(ns, "p")
			if f.Usage.Held.Int64() != 64 || f.Usage.Reserved.Int64() != 64 || f.Usage.Free.Int64() != 128 {
				t.Errorf("figures: held %s reserved %s free %s", f.Usage.Held, f.Usage.Reserved, f.Usage.Free)
			}
			// The slow path from lists agrees.
			ref := statuscalc.Calculate(netip.MustParsePrefix("10.0.0.0/24"), edited, []ipamv1.Subnet{*granted}, nil)
			if diff := cmp.Diff(ref.Usage, f.Usage, cmp.Comparer(func(a, b interface{ String() string }) bool { return a.String() == b.String() })); diff != "" {
				t.Errorf("figures (-Calculate +ledger):\n%s", diff)
			}
			// New decisions follow the new rules: the rest of the reserved
			// range is not handed out.
			for i, want := range []string{"10.0.0.128/26", "10.0.0.192/26", ""} {
				name := fmt.Sprintf("new%d", i)
				l.ApplySubnet(dynamic(name, "p", 26, 2+i), Created, nil)
				got := decide(t, l, name).CIDR
				if (want == "" && got.IsValid()) || (want != "" && got.String() != want) {
					t.Errorf("%s got %s, want %q", name, got, want)
				}
			}
			// The claim goes: its range becomes reserved, not free, and the
			// pool is Available again.
			rec.events = nil
			l.DeleteSubnet(granted)
			if d := decide(t, l, "new2"); d.Reason != ipamv1.ReasonPoolExhausted {
				t.Errorf("new2 after the release: %+v", d)
			}
			if d := decidePool(t, l, "p"); d.Reason != ipamv1.ReasonAvailable {
				t.Errorf("pool after the release: %+v", d)
			}
			if f, _ := l.PoolFigures(ns, "p"); f.Usage.Reserved.Int64() != 128 || f.Usage.Free.Int64() != 0 {
				t.Errorf("figures after the release: reserved %s free %s", f.Usage.Reserved, f.Usage.Free)
			}
		})
	}
}

// A root pool shrunk below a claim it granted meanwhile: the claim keeps its
// range outside, new grants come from the new range only.
func TestRootPoolShrinkRacingAGrant(t *testing.T) {
	l, _ := newLedger()
	pool := rootPool("p", "10.0.0.0/23", 24)
	l.ApplyPool(pool, Created, nil)
	l.ApplySubnet(ready(dynamic("high", "p", 24, 1), "10.0.1.0/24"), Created, nil)
	shrunk := pool.DeepCopy()
	shrunk.Spec.CIDR = "10.0.0.0/24"
	// As the API shows it once its space granted the shrink: the grant
	// raced the claim's (an earlier release, or a hand-over).
	shrunk.Status.CIDR = shrunk.Spec.CIDR
	l.ApplyPool(shrunk, Updated, pool)
	if d := decidePool(t, l, "p"); d.Reason != ipamv1.ReasonClaimsOutside || !strings.Contains(d.Message, "Subnet team-a/high (10.0.1.0/24)") {
		t.Errorf("pool: %+v", d)
	}
	l.ApplySubnet(dynamic("next", "p", 24, 2), Created, nil)
	if d := decide(t, l, "next"); d.CIDR.String() != "10.0.0.0/24" {
		t.Errorf("next: %+v", d)
	}
	f, _ := l.PoolFigures(ns, "p")
	if f.Usage.Capacity.Int64() != 256 || f.Usage.Held.Int64() != 256 {
		t.Errorf("figures: capacity %s held %s", f.Usage.Capacity, f.Usage.Held)
	}
	l.DeleteSubnet(ready(dynamic("high", "p", 24, 1), "10.0.1.0/24"))
	if d := decidePool(t, l, "p"); d.Reason != ipamv1.ReasonAvailable {
		t.Errorf("pool after the claim went: %+v", d)
	}
}

// A child pool asked to shrink below its own claims keeps serving its range
// and says why, without being decided again until a claim goes; then it
// shrinks.
func TestBlockedChildShrinkWaitsForItsClaims(t *testing.T) {
	l, rec := newLedger()
	l.ApplyPool(rootPool("root", "10.0.0.0/22", 24), Created, nil)
	child := childPool("child", "root", "10.0.0.0/23", 1)
	l.ApplyPool(child, Created, nil)
	decidePool(t, l, "child")
	child = child.DeepCopy()
	child.Status.CIDR = "10.0.0.0/23"
	l.ApplyPool(child, Updated, nil)
	upper := ready(explicit("upper", "child", "10.0.1.0/24", 2), "10.0.1.0/24")
	l.ApplySubnet(upper, Created, nil)

	shrunk := child.DeepCopy()
	shrunk.Spec.CIDR = "10.0.0.0/24"
	l.ApplyPool(shrunk, Updated, child)
	d := decidePool(t, l, "child")
	want := "cannot change to 10.0.0.0/24: 1 claim lies outside it: Subnet team-a/upper (10.0.1.0/24); still serving 10.0.0.0/23"
	if d.Reason != ipamv1.ReasonClaimsOutside || d.Message != want || d.CIDR.String() != "10.0.0.0/23" {
		t.Fatalf("child: %s %q %s\nwant ClaimsOutside %q", d.Reason, d.Message, d.CIDR, want)
	}
	rec.events = nil
	l.DeleteSubnet(upper)
	if !slices.Contains(rec.woken(), "SubnetPool/child") {
		t.Error("the claim's release did not wake the child pool")
	}
	if d := decidePool(t, l, "child"); !d.Ready() || d.CIDR.String() != "10.0.0.0/24" || !d.Assumed {
		t.Errorf("child after the claim went: %+v", d)
	}
}

// Shrinking a child pool gives space back to its parent: the parent's
// waiting claims are woken and fit.
func TestShrinkingAChildWakesTheParentsWaiters(t *testing.T) {
	l, rec := newLedger()
	l.ApplyPool(rootPool("parent", "10.0.0.0/22", 24), Created, nil)
	child := childPool("child", "parent", "10.0.0.0/23", 1)
	l.ApplyPool(child, Created, nil)
	decidePool(t, l, "child")
	child = child.DeepCopy()
	child.Status.CIDR = "10.0.0.0/23"
	l.ApplyPool(child, Updated, nil)
	for i, want := range []string{"Allocated", "Allocated", "PoolExhausted"} {
		name := fmt.Sprintf("d%d", i)
		l.ApplySubnet(dynamic(name, "parent", 24, 2+i), Created, nil)
		if d := decide(t, l, name); d.Reason != want {
			t.Fatalf("%s: %+v", name, d)
		}
	}
	shrunk := child.DeepCopy()
	shrunk.Spec.CIDR = "10.0.0.0/24"
	l.ApplyPool(shrunk, Updated, child)
	if d := decidePool(t, l, "child"); !d.Ready() || d.CIDR.String() != "10.0.0.0/24" {
		t.Fatalf("child: %+v", d)
	}
	// Until the API shows the child's new range, its old one stays held:
	// a new leader would read only the old one.
	if d := decide(t, l, "d2"); d.Reason != ipamv1.ReasonPoolExhausted {
		t.Fatalf("d2 before the child's new range is written: %+v", d)
	}
	rec.events = nil
	l.ApplyPool(withStatus(shrunk, "10.0.0.0/24"), Updated, shrunk)
	if !slices.Contains(rec.woken(), "Subnet/d2") {
		t.Error("the shrink did not wake the parent's waiter")
	}
	if d := decide(t, l, "d2"); d.CIDR.String() != "10.0.1.0/24" {
		t.Errorf("d2: %+v", d)
	}
}

// A release wakes the waiters it may let in, not every waiter of the pool.
func TestReleaseWakesOnlyWaitersThatMayFit(t *testing.T) {
	l, rec := newLedger()
	l.ApplyPool(rootPool("p", "10.0.0.0/24", 26), Created, nil)
	var holders []*ipamv1.Subnet
	for i := range 4 {
		s := dynamic(fmt.Sprintf("h%d", i), "p", 26, i)
		l.ApplySubnet(s, Created, nil)
		holders = append(holders, ready(s, decide(t, l, s.Name).CIDR.String()))
		l.ApplySubnet(holders[i], Updated, nil)
	}
	waiters := []*ipamv1.Subnet{
		dynamic("wants-25", "p", 25, 10),
		dynamic("wants-26", "p", 26, 11),
		dynamic("wants-27", "p", 27, 12),
		explicit("over-h3", "p", "10.0.0.192/26", 13),
		explicit("over-h1", "p", "10.0.0.64/26", 14),
	}
	for _, w := range waiters {
		l.ApplySubnet(w, Created, nil)
		if d := decide(t, l, w.Name); d.Ready() {
			t.Fatalf("%s: %+v", w.Name, d)
		}
	}
	rec.events = nil
	l.DeleteSubnet(holders[1]) // frees 10.0.0.64/26
	if diff := cmp.Diff([]ClaimKey{"Subnet/over-h1", "Subnet/wants-26", "Subnet/wants-27"}, rec.woken()); diff != "" {
		t.Errorf("woken (-want +got):\n%s", diff)
	}
	// The PoolExhausted message does not change with the free space, so a
	// woken waiter that still does not fit has nothing new to write.
	before := decide(t, l, "wants-25").Message
	l.DeleteSubnet(holders[0])
	if after := decide(t, l, "wants-25").Message; after != before {
		t.Errorf("message changed with the free space:\n%q\n%q", before, after)
	}
}

// pagedReader serves metadata LISTs of Subnets and pools in pages, and GETs
// of what they list but for the names in gone (deleted since).
type pagedReader struct {
	client.Reader
	subnets, pools []metav1.PartialObjectMetadata
	gone           map[string]bool
	pageSize       int
	lists          int
}

func (r *pagedReader) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	o := (&client.ListOptions{}).ApplyOptions(opts)
	l := list.(*metav1.PartialObjectMetadataList)
	items := r.subnets
	if l.GroupVersionKind().Kind == "SubnetPoolList" {
		items = r.pools
	}
	start := 0
	if o.Continue != "" {
		if _, err := fmt.Sscan(o.Continue, &start); err != nil {
			return err
		}
	}
	end := min(start+r.pageSize, len(items))
	l.Items = items[start:end]
	l.Continue = ""
	if end < len(items) {
		l.Continue = fmt.Sprint(end)
	}
	r.lists++
	return nil
}

func (r *pagedReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	for _, o := range append(slices.Clone(r.subnets), r.pools...) {
		if o.Name == key.Name && o.Namespace == key.Namespace && !r.gone[o.Name] {
			obj.SetUID(o.UID)
			return nil
		}
	}
	return apierrors.NewNotFound(schema.GroupResource{}, key.Name)
}

func listedMeta(name, uid, rv string) metav1.PartialObjectMetadata {
	return metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), ResourceVersion: rv}}
}

// A new leader decides only once its view has caught up with the API
// server: here the old leader's last grant (resourceVersion 20) has not
// reached this replica's informer yet.
func TestCatchUpWaitsForTheOldLeadersWrites(t *testing.T) {
	l, _ := newLedger()
	pool := rootPool("p", "10.0.0.0/24", 26)
	pool.ResourceVersion = "10"
	l.ApplyPool(pool, Created, nil)
	pending := dynamic("granted", "p", 26, 1)
	pending.ResourceVersion = "11"
	l.ApplySubnet(pending, Created, nil)
	// "vanished" is listed, but deleted by the time it is read again: this
	// replica never saw it and need not.
	reader := &pagedReader{pageSize: 1, gone: map[string]bool{"vanished": true},
		pools:   []metav1.PartialObjectMetadata{listedMeta("p", "uid-p", "10")},
		subnets: []metav1.PartialObjectMetadata{listedMeta("granted", "uid-granted", "20"), listedMeta("vanished", "uid-vanished", "15")},
	}
	done := make(chan CatchUpReport)
	go func() {
		r, err := l.CatchUp(context.Background(), reader)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	select {
	case <-done:
		t.Fatal("CatchUp returned before the ledger saw the old leader's grant")
	case <-time.After(200 * time.Millisecond):
	}
	granted := ready(pending, "10.0.0.0/26")
	granted.ResourceVersion = "20"
	l.ApplySubnet(granted, Updated, pending)
	select {
	case r := <-done:
		if r.Listed != 3 || r.Behind != 2 {
			t.Errorf("report %+v, want 3 listed, 2 behind", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("CatchUp did not return once the ledger caught up")
	}
	// Once caught up, a later call (the other controller) returns at once.
	lists := reader.lists
	if _, err := l.CatchUp(context.Background(), reader); err != nil || reader.lists != lists {
		t.Errorf("second CatchUp: %v, %d more lists", err, reader.lists-lists)
	}
	l.ApplySubnet(dynamic("next", "p", 26, 2), Created, nil)
	if d := decide(t, l, "next"); d.CIDR.String() != "10.0.0.64/26" {
		t.Errorf("next: %+v (the old leader's grant is 10.0.0.0/26)", d)
	}
}

// A follower sees a pool edit that raced a grant before the grant's status
// write (the usual order of two informers). Its map must still keep every
// held range: it decides on it once it leads.
func TestFollowerSeesAGrantOnANewlyReservedRange(t *testing.T) {
	l, _ := newLedger()
	pool := rootPool("p", "10.0.0.0/24", 26)
	l.ApplyPool(pool, Created, nil)
	l.ApplySubnet(ready(dynamic("h", "p", 26, 1), "10.0.0.128/26"), Created, nil)
	g := dynamic("g", "p", 26, 2)
	l.ApplySubnet(g, Created, nil)
	edited := pool.DeepCopy()
	edited.Generation = 2
	edited.Spec.Reserved = []string{"10.0.0.0/25"}
	l.ApplyPool(edited, Updated, pool)
	l.ApplySubnet(ready(g, "10.0.0.0/26"), Updated, g) // the old leader's grant
	if f, _ := l.PoolFigures(ns, "p"); f.Usage.Held.Int64() != 128 || f.Usage.Reserved.Int64() != 64 || f.Usage.Free.Int64() != 64 {
		t.Errorf("figures: held %s reserved %s free %s", f.Usage.Held, f.Usage.Reserved, f.Usage.Free)
	}
	l.ApplySubnet(dynamic("n", "p", 26, 3), Created, nil)
	if d := decide(t, l, "n"); d.CIDR.String() != "10.0.0.192/26" {
		t.Errorf("n: %+v (h holds 10.0.0.128/26, g 10.0.0.0/26, 10.0.0.64/26 is reserved)", d)
	}
}

// A pool shrunk, in a race with a grant, to a range inside the granted one:
// the claim keeps its range, which covers everything the pool now serves.
func TestShrinkInsideAHeldRangeKeepsItFromOthers(t *testing.T) {
	l, _ := newLedger()
	pool := rootPool("p", "10.0.0.0/23", 26)
	l.ApplyPool(pool, Created, nil)
	l.ApplySubnet(ready(dynamic("big", "p", 24, 1), "10.0.0.0/24"), Created, nil)
	shrunk := pool.DeepCopy()
	shrunk.Generation = 2
	shrunk.Spec.CIDR = "10.0.0.0/25"
	shrunk.Status.CIDR = shrunk.Spec.CIDR // the shrink granted, racing big's grant
	l.ApplyPool(shrunk, Updated, pool)
	l.ApplySubnet(dynamic("d", "p", 26, 2), Created, nil)
	if d := decide(t, l, "d"); d.Ready() {
		t.Errorf("d granted %s inside big's 10.0.0.0/24", d.CIDR)
	}
	l.ApplySubnet(explicit("e", "p", "10.0.0.64/26", 3), Created, nil)
	if d := decide(t, l, "e"); d.Ready() {
		t.Errorf("e granted %s inside big's 10.0.0.0/24", d.CIDR)
	}
	if d := decidePool(t, l, "p"); d.Reason != ipamv1.ReasonClaimsOutside {
		t.Errorf("pool: %+v", d)
	}
	l.DeleteSubnet(ready(dynamic("big", "p", 24, 1), "10.0.0.0/24"))
	if d := decide(t, l, "d"); !d.Ready() {
		t.Errorf("d after big went: %+v", d)
	}
}

// A child pool granted before its parent reserved its range moves off it:
// once the API shows the move, the parent no longer reports it.
func TestChildMovedOffAReservedRangeIsNoLongerReported(t *testing.T) {
	l, _ := newLedger()
	parent := rootPool("parent", "10.0.0.0/22", 24)
	l.ApplyPool(parent, Created, nil)
	child := withStatus(childPool("child", "parent", "10.0.0.0/24", 1), "10.0.0.0/24")
	l.ApplyPool(child, Created, nil)
	edited := parent.DeepCopy()
	edited.Generation = 2
	edited.Spec.Reserved = []string{"10.0.0.0/24"}
	l.ApplyPool(edited, Updated, parent)
	if d := decidePool(t, l, "parent"); d.Reason != ipamv1.ReasonClaimsOutside {
		t.Fatalf("parent before: %+v", d)
	}
	moved := child.DeepCopy()
	moved.Generation = 2
	moved.Spec.CIDR = "10.0.1.0/24"
	l.ApplyPool(moved, Updated, child)
	if d := decidePool(t, l, "child"); !d.Ready() || d.CIDR.String() != "10.0.1.0/24" {
		t.Fatalf("child: %+v", d)
	}
	l.ApplyPool(withStatus(moved, "10.0.1.0/24"), Updated, moved)
	if d := decidePool(t, l, "parent"); d.Reason != ipamv1.ReasonAvailable {
		t.Errorf("parent after the child moved off the reserved range: %s %q", d.Reason, d.Message)
	}
	if f, _ := l.PoolFigures(ns, "parent"); f.Usage.Reserved.Int64() != 256 || f.Usage.Held.Int64() != 256 {
		t.Errorf("parent figures: reserved %s held %s", f.Usage.Reserved, f.Usage.Held)
	}
}

// A child pool that moves keeps its old range in its parent until the API
// shows the new one: the Subnet controller could otherwise write a grant
// inside it while the pool controller has not written the move, and a new
// leader would read both.
func TestAChildMoveKeepsItsOldRangeUntilWritten(t *testing.T) {
	l, rec := newLedger()
	l.ApplyPool(rootPool("p", "10.0.0.0/22", 24), Created, nil)
	c := withStatus(childPool("c", "p", "10.0.0.0/23", 1), "10.0.0.0/23")
	l.ApplyPool(c, Created, nil)
	l.ApplySubnet(ready(dynamic("s0", "p", 24, 2), "10.0.2.0/24"), Created, nil)
	l.ApplySubnet(dynamic("s1", "p", 23, 3), Created, nil)
	if d := decide(t, l, "s1"); d.Reason != ipamv1.ReasonPoolExhausted {
		t.Fatalf("s1: %+v", d)
	}
	moved := c.DeepCopy()
	moved.Generation = 2
	moved.Spec.CIDR = "10.0.3.0/24"
	l.ApplyPool(moved, Updated, c)
	if d := decidePool(t, l, "c"); d.CIDR.String() != "10.0.3.0/24" || !d.Assumed {
		t.Fatalf("c: %+v", d)
	}
	if d := decide(t, l, "s1"); d.Ready() {
		t.Errorf("s1 granted %s while c's status still shows 10.0.0.0/23", d.CIDR)
	}
	rec.events = nil
	l.ApplyPool(withStatus(moved, "10.0.3.0/24"), Updated, moved)
	if !slices.Contains(rec.woken(), "Subnet/s1") {
		t.Error("the written move did not wake s1")
	}
	if d := decide(t, l, "s1"); d.CIDR.String() != "10.0.0.0/23" {
		t.Errorf("s1 after the move was written: %+v", d)
	}
}

// Ranges that collide in what the API shows (written before the fix above,
// or by hand) are kept from other claims: the younger claim's too.
func TestCollidingRangesAreKeptFromOthers(t *testing.T) {
	for _, childFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("childFirst=%v", childFirst), func(t *testing.T) {
			l, _ := newLedger()
			l.ApplyPool(rootPool("p", "10.0.0.0/22", 24), Created, nil)
			c := withStatus(childPool("c", "p", "10.0.2.0/24", 1), "10.0.0.0/23")
			s1 := ready(dynamic("s1", "p", 23, 2), "10.0.0.0/23")
			if childFirst {
				l.ApplyPool(c, Created, nil)
				l.ApplySubnet(s1, Created, nil)
			} else {
				l.ApplySubnet(s1, Created, nil)
				l.ApplyPool(c, Created, nil)
			}
			decidePool(t, l, "c")
			l.ApplySubnet(dynamic("s2", "p", 23, 3), Created, nil)
			if d := decide(t, l, "s2"); d.Ready() && d.CIDR.Overlaps(netip.MustParsePrefix("10.0.0.0/23")) {
				t.Errorf("s2 granted %s inside Ready s1 (10.0.0.0/23)", d.CIDR)
			}
			if f, _ := l.PoolFigures(ns, "p"); len(f.Conflicts) != 1 {
				t.Errorf("conflicts %v, want s1 reported once", f.Conflicts)
			}
		})
	}
}

// A child pool serves its grant only once the API shows it: no Subnet is
// granted from a grant that a hand-over could drop.
func TestAChildServesOnlyItsWrittenGrant(t *testing.T) {
	l, rec := newLedger()
	l.ApplyPool(rootPool("p", "10.0.0.0/22", 24), Created, nil)
	c := childPool("c", "p", "10.0.0.0/24", 1)
	c.Spec.DefaultPrefixLength = ptr.To[int32](25)
	l.ApplyPool(c, Created, nil)
	l.ApplySubnet(dynamic("x", "c", 25, 2), Created, nil)
	if d := decidePool(t, l, "c"); d.CIDR.String() != "10.0.0.0/24" || !d.Assumed {
		t.Fatalf("c: %+v", d)
	}
	if d := decide(t, l, "x"); d.Reason != ipamv1.ReasonPoolNotReady {
		t.Fatalf("x before c's grant is written: %+v", d)
	}
	rec.events = nil
	l.ApplyPool(withStatus(c, "10.0.0.0/24"), Updated, c)
	if !slices.Contains(rec.woken(), "Subnet/x") {
		t.Error("the written grant did not wake x")
	}
	if d := decide(t, l, "x"); d.CIDR.String() != "10.0.0.0/25" {
		t.Errorf("x: %+v", d)
	}
	// A child is never granted a range that leaves out its own claims.
	moved := withStatus(c, "10.0.0.0/24")
	moved.Spec.CIDR = "10.0.2.0/24"
	moved.Generation = 2
	l.ApplyPool(moved, Updated, nil)
	if d := decidePool(t, l, "c"); d.Reason != ipamv1.ReasonClaimsOutside || d.CIDR.String() != "10.0.0.0/24" {
		t.Errorf("c asked to move away from x: %+v", d)
	}
}

// A grant withdrawn because its write failed (the Subnet was deleted or
// replaced) wakes what it blocked, not the claim itself: that one would be
// granted again, written again and fail again until the informer catches up.
func TestForgetWakesWhatTheGrantBlockedButNotItself(t *testing.T) {
	l, rec := newLedger()
	l.ApplyPool(rootPool("p", "10.0.0.0/22", 24), Created, nil)
	c := withStatus(childPool("c", "p", "10.0.0.0/23", 1), "10.0.0.0/23")
	c.Spec.DefaultPrefixLength = ptr.To[int32](24)
	l.ApplyPool(c, Created, nil)
	decidePool(t, l, "c")
	l.ApplySubnet(ready(dynamic("low", "c", 24, 2), "10.0.0.0/24"), Created, nil)
	l.ApplySubnet(dynamic("x", "c", 24, 3), Created, nil)
	d := decide(t, l, "x")
	if d.CIDR.String() != "10.0.1.0/24" || !d.Assumed {
		t.Fatalf("x: %+v", d)
	}
	shrunk := c.DeepCopy()
	shrunk.Generation = 2
	shrunk.Spec.CIDR = "10.0.0.0/24"
	l.ApplyPool(shrunk, Updated, c)
	if d := decidePool(t, l, "c"); d.Reason != ipamv1.ReasonClaimsOutside {
		t.Fatalf("c blocked: %+v", d)
	}
	rec.events = nil
	l.Forget(ns, SubnetKey("x"), "uid-x", d.CIDR)
	woken := rec.woken()
	if slices.Contains(woken, "Subnet/x") {
		t.Error("Forget woke the claim it withdrew")
	}
	if !slices.Contains(woken, "SubnetPool/c") {
		t.Error("Forget released the only claim blocking c's shrink, but did not wake c")
	}
	if d := decidePool(t, l, "c"); d.CIDR.String() != "10.0.0.0/24" {
		t.Errorf("c when decided: %+v", d)
	}
}
