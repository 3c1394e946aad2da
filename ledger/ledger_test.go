package ledger

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

const ns = "team-a"

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func objMeta(name string, age int) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name),
		CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Second))}
}

// rootPool returns a root pool as the API shows it once its address space
// granted its range (status.cidr written).
func rootPool(name, cidr string, defaultLen int32) *ipamv1.SubnetPool {
	p := &ipamv1.SubnetPool{ObjectMeta: objMeta(name, 0), Spec: ipamv1.SubnetPoolSpec{CIDR: cidr}, Status: ipamv1.SubnetPoolStatus{CIDR: cidr}}
	if defaultLen > 0 {
		p.Spec.DefaultPrefixLength = ptr.To(defaultLen)
	}
	return p
}

func childPool(name, parent, cidr string, age int) *ipamv1.SubnetPool {
	return &ipamv1.SubnetPool{ObjectMeta: objMeta(name, age), Spec: ipamv1.SubnetPoolSpec{CIDR: cidr, ParentRef: parentRef(parent)}}
}

func explicit(name, pool, cidr string, age int) *ipamv1.Subnet {
	return &ipamv1.Subnet{ObjectMeta: objMeta(name, age), Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: pool}, CIDR: cidr}}
}

func dynamic(name, pool string, length int32, age int) *ipamv1.Subnet {
	return &ipamv1.Subnet{ObjectMeta: objMeta(name, age), Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: pool}, PrefixLength: ptr.To(length)}}
}

// ready returns s as the API shows it after the arbiter's status write.
func ready(s *ipamv1.Subnet, cidr string) *ipamv1.Subnet {
	s = s.DeepCopy()
	s.Status.CIDR = cidr
	s.Status.Conditions = []metav1.Condition{{Type: ipamv1.ConditionReady, Status: metav1.ConditionTrue, Reason: ipamv1.ReasonAllocated}}
	return s
}

// withStatus returns a child pool as the API shows it once its grant is
// written.
func withStatus(p *ipamv1.SubnetPool, cidr string) *ipamv1.SubnetPool {
	p = p.DeepCopy()
	p.Status.CIDR = cidr
	return p
}

// recorder collects the ledger's events.
type recorder struct{ events []Event }

// woken returns the keys of the claims woken, each once; all in ns.
func (r *recorder) woken() []ClaimKey {
	var out []ClaimKey
	for _, e := range r.events {
		for _, ref := range e.Wake {
			if ref.Namespace != ns {
				panic("woke a claim in namespace " + ref.Namespace)
			}
			out = append(out, refKey(ref))
		}
	}
	r.events = nil
	slices.Sort(out)
	return slices.Compact(out)
}

// refKey is a claim's key within its namespace.
// refKey writes a ref of this test namespace as "Kind/name" ("" for none).
func refKey(r statuscalc.ClaimRef) ClaimKey {
	if r == (statuscalc.ClaimRef{}) {
		return ""
	}
	return ClaimKey(r.Kind + "/" + r.Name)
}

func newLedger() (*Ledger, *recorder) {
	l := New()
	l.MarkSynced()
	r := &recorder{}
	l.Subscribe(func(e Event) { r.events = append(r.events, e) })
	return l, r
}

func decide(t *testing.T, l *Ledger, name string) Decision {
	t.Helper()
	d, ok := l.DecideSubnet(ns, name, types.UID("uid-"+name))
	if !ok {
		t.Fatalf("DecideSubnet(%s): unknown", name)
	}
	return d
}

func decidePool(t *testing.T, l *Ledger, name string) Decision {
	t.Helper()
	d, ok := l.DecidePool(ns, name, types.UID("uid-"+name))
	if !ok {
		t.Fatalf("DecidePool(%s): unknown", name)
	}
	return d
}

func TestExplicitClaimsOldestWins(t *testing.T) {
	l, _ := newLedger()
	l.ApplyPool(rootPool("p", "10.0.0.0/16", 24), Created, nil)
	// Created in this order, but the timestamps say "late" is younger than
	// both, and "b" and "a" are equally old: "a" wins by name.
	for _, s := range []*ipamv1.Subnet{
		explicit("late", "p", "10.0.0.0/24", 5),
		explicit("b", "p", "10.0.0.0/25", 1),
		explicit("a", "p", "10.0.0.0/23", 1),
	} {
		l.ApplySubnet(s, Created, nil)
	}
	// Whichever reconcile runs first, the sweep decides in winner order.
	got := map[string]string{}
	for _, name := range []string{"late", "b", "a"} {
		d := decide(t, l, name)
		got[name] = d.Reason + " " + string(refKey(d.Winner))
	}
	want := map[string]string{
		"a":    "Allocated ",
		"b":    "Overlaps Subnet/a",
		"late": "Overlaps Subnet/a",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decisions (-want +got):\n%s", diff)
	}
	d := decide(t, l, "b")
	wantMsg := "10.0.0.0/25 overlaps Subnet team-a/a (10.0.0.0/23), which holds it; this claim is granted if that one is deleted"
	if d.Message != wantMsg {
		t.Errorf("message %q\nwant      %q", d.Message, wantMsg)
	}
}

func TestLoserGrantedWhenWinnerGoes(t *testing.T) {
	l, rec := newLedger()
	l.ApplyPool(rootPool("p", "10.0.0.0/16", 24), Created, nil)
	winner, loser := explicit("winner", "p", "10.0.1.0/24", 1), explicit("loser", "p", "10.0.1.0/24", 2)
	l.ApplySubnet(winner, Created, nil)
	l.ApplySubnet(loser, Created, nil)
	if d := decide(t, l, "loser"); d.Reason != ipamv1.ReasonOverlaps {
		t.Fatalf("loser: %+v", d)
	}
	d := decide(t, l, "winner")
	if !d.Ready() || !d.Assumed {
		t.Fatalf("winner: %+v", d)
	}
	// The status write lands: the assumption is confirmed.
	l.ApplySubnet(ready(winner, "10.0.1.0/24"), Updated, winner)
	if d := decide(t, l, "winner"); !d.Ready() || d.Assumed {
		t.Fatalf("winner after write: %+v", d)
	}
	rec.events = nil
	l.DeleteSubnet(toolscache.DeletedFinalStateUnknown{Key: ns + "/winner", Obj: ready(winner, "10.0.1.0/24")})
	if diff := cmp.Diff([]ClaimKey{"Subnet/loser"}, rec.woken()); diff != "" {
		t.Errorf("woken (-want +got):\n%s", diff)
	}
	if d := decide(t, l, "loser"); !d.Ready() || d.CIDR.String() != "10.0.1.0/24" {
		t.Fatalf("loser after the winner went: %+v", d)
	}
}

func TestDynamicAllocationExhaustionAndRecovery(t *testing.T) {
	l, rec := newLedger()
	l.ApplyPool(rootPool("p", "10.0.0.0/24", 26), Created, nil)
	l.ApplySubnet(explicit("fixed", "p", "10.0.0.64/26", 0), Created, nil)
	var got []string
	for i := range 4 {
		s := dynamic(fmt.Sprintf("d%d", i), "p", 26, i+1)
		l.ApplySubnet(s, Created, nil)
		d := decide(t, l, s.Name)
		got = append(got, d.Reason+" "+d.CIDR.String())
	}
	// The explicit claim is decided first (its sweep), so dynamic ones go
	// around it; the fourth finds the pool full.
	want := []string{"Allocated 10.0.0.0/26", "Allocated 10.0.0.128/26", "Allocated 10.0.0.192/26", "PoolExhausted invalid Prefix"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("allocations (-want +got):\n%s", diff)
	}
	if d := decide(t, l, "d3"); d.Message != "no free /26 block in SubnetPool team-a/p (10.0.0.0/24); waiting for space to be freed or the pool to grow" {
		t.Errorf("message %q", d.Message)
	}
	rec.events = nil
	l.DeleteSubnet(dynamic("d1", "p", 26, 2))
	if diff := cmp.Diff([]ClaimKey{"Subnet/d3"}, rec.woken()); diff != "" {
		t.Errorf("woken (-want +got):\n%s", diff)
	}
	if d := decide(t, l, "d3"); d.CIDR.String() != "10.0.0.128/26" {
		t.Errorf("after release: %+v", d)
	}

	// The pool grows: the waiter is woken and fits.
	l.ApplySubnet(dynamic("d4", "p", 26, 9), Created, nil)
	if d := decide(t, l, "d4"); d.Reason != ipamv1.ReasonPoolExhausted {
		t.Fatalf("d4: %+v", d)
	}
	rec.events = nil
	bigger := rootPool("p", "10.0.0.0/23", 26)
	l.ApplyPool(bigger, Updated, nil)
	if !slices.Contains(rec.woken(), "Subnet/d4") {
		t.Error("growing the pool did not wake d4")
	}
	if d := decide(t, l, "d4"); d.CIDR.String() != "10.0.1.0/26" {
		t.Errorf("after growth: %+v", d)
	}
}

func TestSubnetBeforePool(t *testing.T) {
	l, rec := newLedger()
	l.ApplySubnet(dynamic("early", "later", 24, 0), Created, nil)
	d := decide(t, l, "early")
	if d.Reason != ipamv1.ReasonPoolNotFound || d.Message != "SubnetPool team-a/later does not exist; waiting for it to be created" {
		t.Fatalf("before the pool: %+v", d)
	}
	rec.events = nil
	l.ApplyPool(rootPool("later", "10.9.0.0/16", 0), Created, nil)
	if diff := cmp.Diff([]ClaimKey{"Subnet/early"}, rec.woken()); diff != "" {
		t.Errorf("woken (-want +got):\n%s", diff)
	}
	if d := decide(t, l, "early"); d.CIDR.String() != "10.9.0.0/24" {
		t.Errorf("after the pool: %+v", d)
	}
}

func TestOutOfRangeAndBounds(t *testing.T) {
	l, _ := newLedger()
	p := rootPool("p", "10.0.0.0/16", 0)
	p.Spec.Reserved = []string{"10.0.0.0/24"}
	p.Spec.MinPrefixLength, p.Spec.MaxPrefixLength = ptr.To[int32](20), ptr.To[int32](28)
	l.ApplyPool(p, Created, nil)
	tests := []struct {
		subnet *ipamv1.Subnet
		want   string
	}{
		{explicit("outside", "p", "10.1.0.0/24", 0), "10.1.0.0/24: lies outside SubnetPool team-a/p (10.0.0.0/16)"},
		{explicit("v6", "p", "2001:db8::/64", 0), "2001:db8::/64: is IPv6 but SubnetPool team-a/p (10.0.0.0/16) is IPv4"},
		{explicit("reserved", "p", "10.0.0.128/25", 0), "10.0.0.128/25: overlaps reserved range 10.0.0.0/24 of SubnetPool team-a/p"},
		{explicit("too-big", "p", "10.0.32.0/19", 0), "10.0.32.0/19: prefix length 19 is shorter than minPrefixLength 20 of SubnetPool team-a/p: use 20 to 28"},
		{dynamic("too-small", "p", 30, 0), "prefix length 30 is longer than maxPrefixLength 28 of SubnetPool team-a/p: use 20 to 28"},
		{dynamic("too-short", "p", 8, 0), "prefix length 8 does not fit SubnetPool team-a/p (10.0.0.0/16): use 20 to 28"},
		{&ipamv1.Subnet{ObjectMeta: objMeta("no-length", 0), Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: "p"}}},
			"the Subnet sets neither cidr nor prefixLength and SubnetPool team-a/p has no defaultPrefixLength"},
	}
	for _, tt := range tests {
		l.ApplySubnet(tt.subnet, Created, nil)
		d := decide(t, l, tt.subnet.Name)
		if d.Ready() || d.Message != tt.want {
			t.Errorf("%s: %s %q\nwant %q", tt.subnet.Name, d.Reason, d.Message, tt.want)
		}
	}
}

func TestChildPools(t *testing.T) {
	l, rec := newLedger()
	l.ApplyPool(rootPool("root", "10.0.0.0/16", 24), Created, nil)
	team := childPool("team", "root", "10.0.128.0/17", 1)
	l.ApplyPool(team, Created, nil)
	l.ApplySubnet(dynamic("in-team", "team", 24, 2), Created, nil)
	if d := decide(t, l, "in-team"); d.Reason != ipamv1.ReasonPoolNotReady {
		t.Fatalf("before the grant: %+v", d)
	}
	d := decidePool(t, l, "team")
	if !d.Ready() || d.CIDR.String() != "10.0.128.0/17" || !d.Assumed {
		t.Fatalf("child pool: %+v", d)
	}
	// The child serves its grant once the API shows it: a Subnet granted
	// from a grant never written would outlive it after a hand-over.
	if d := decide(t, l, "in-team"); d.Reason != ipamv1.ReasonPoolNotReady {
		t.Fatalf("before the grant is written: %+v", d)
	}
	rec.events = nil
	team = withStatus(team, "10.0.128.0/17")
	l.ApplyPool(team, Updated, nil)
	if !slices.Contains(rec.woken(), "Subnet/in-team") {
		t.Error("the child's written grant did not wake its Subnet")
	}
	if d := decide(t, l, "in-team"); d.CIDR.String() != "10.0.128.0/24" {
		t.Fatalf("Subnet in the child: %+v", d)
	}
	// The child counts as allocated space of its parent, and a Subnet of the
	// parent cannot take the child's range.
	f, _ := l.PoolFigures(ns, "root")
	if f.Usage.Held.Int64() != 32768 || f.ChildPools != 1 {
		t.Errorf("root figures: held %s, children %d", f.Usage.Held, f.ChildPools)
	}
	l.ApplySubnet(explicit("steal", "root", "10.0.200.0/24", 5), Created, nil)
	if d := decide(t, l, "steal"); d.Reason != ipamv1.ReasonOverlaps || refKey(d.Winner) != "SubnetPool/team" {
		t.Errorf("Subnet over the child: %+v", d)
	}
	// A sibling that overlaps loses, and says so.
	l.ApplyPool(childPool("sibling", "root", "10.0.192.0/18", 3), Created, nil)
	if d := decidePool(t, l, "sibling"); d.Reason != ipamv1.ReasonOverlaps || refKey(d.Winner) != "SubnetPool/team" {
		t.Errorf("overlapping sibling: %+v", d)
	}
	// Growing the child past a sibling's range fails and keeps the old range.
	l.ApplyPool(childPool("low", "root", "10.0.64.0/18", 4), Created, nil)
	if d := decidePool(t, l, "low"); !d.Ready() {
		t.Fatalf("low: %+v", d)
	}
	grown := withStatus(childPool("team", "root", "10.0.0.0/16", 1), "10.0.128.0/17")
	l.ApplyPool(grown, Updated, team)
	d = decidePool(t, l, "team")
	if d.Ready() || d.CIDR.String() != "10.0.128.0/17" || d.Reason != ipamv1.ReasonOverlaps || refKey(d.Winner) != "SubnetPool/low" {
		t.Errorf("blocked growth: %+v", d)
	}
}

func TestCycleIsReported(t *testing.T) {
	l, _ := newLedger()
	l.ApplyPool(childPool("a", "b", "10.0.0.0/16", 0), Created, nil)
	l.ApplyPool(childPool("b", "a", "10.0.0.0/8", 0), Created, nil)
	d := decidePool(t, l, "a")
	if d.Reason != ipamv1.ReasonCycle || d.Message != "parentRef chain leads back to this pool: a -> b -> a" {
		t.Errorf("cycle: %+v", d)
	}
	if got := l.Ancestors(ns, "a"); !slices.Equal(got, []types.NamespacedName{{Namespace: ns, Name: "b"}, {Namespace: ns, Name: "a"}}) {
		t.Errorf("Ancestors = %v", got)
	}
}

func TestCollidingHeldRangesAreReported(t *testing.T) {
	l, _ := newLedger()
	l.ApplyPool(rootPool("p", "10.0.0.0/16", 24), Created, nil)
	// Two Ready Subnets that overlap: only hand-written status can do it.
	l.ApplySubnet(ready(explicit("older", "p", "10.0.0.0/23", 1), "10.0.0.0/23"), Created, nil)
	l.ApplySubnet(ready(explicit("younger", "p", "10.0.1.0/24", 2), "10.0.1.0/24"), Created, nil)
	f, _ := l.PoolFigures(ns, "p")
	var got []string
	for _, c := range f.Conflicts {
		got = append(got, c.String())
	}
	want := []string{"Subnet team-a/younger (10.0.1.0/24) overlaps Subnet team-a/older (10.0.0.0/23)"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("conflicts (-want +got):\n%s", diff)
	}
	// Deleting the older one lets the younger be placed.
	l.DeleteSubnet(ready(explicit("older", "p", "10.0.0.0/23", 1), "10.0.0.0/23"))
	if f, _ := l.PoolFigures(ns, "p"); len(f.Conflicts) != 0 || f.Usage.Held.Int64() != 256 {
		t.Errorf("after delete: conflicts %v held %s", f.Conflicts, f.Usage.Held)
	}
}

func TestForgetReleasesTheAssumption(t *testing.T) {
	l, rec := newLedger()
	l.ApplyPool(rootPool("p", "10.0.0.0/24", 25), Created, nil)
	l.ApplySubnet(dynamic("a", "p", 24, 0), Created, nil)
	l.ApplySubnet(dynamic("b", "p", 24, 1), Created, nil)
	d := decide(t, l, "a")
	if d.CIDR.String() != "10.0.0.0/24" {
		t.Fatal(d)
	}
	if d := decide(t, l, "b"); d.Reason != ipamv1.ReasonPoolExhausted {
		t.Fatal(d)
	}
	rec.events = nil
	l.Forget(ns, SubnetKey("a"), "uid-a", d.CIDR)
	if !slices.Contains(rec.woken(), "Subnet/b") {
		t.Error("Forget did not wake b")
	}
	if d := decide(t, l, "b"); d.CIDR.String() != "10.0.0.0/24" {
		t.Errorf("b after Forget: %+v", d)
	}
}

// The ledger's maintained figures agree with statuscalc's rebuild from lists.
func TestPoolFiguresMatchCalculate(t *testing.T) {
	l, _ := newLedger()
	pool := rootPool("p", "10.0.0.0/20", 26)
	pool.Spec.Reserved = []string{"10.0.0.0/28"}
	l.ApplyPool(pool, Created, nil)
	var subnets []ipamv1.Subnet
	for i := range 40 {
		var s *ipamv1.Subnet
		if i%3 == 0 {
			s = explicit(fmt.Sprintf("e%d", i), "p", fmt.Sprintf("10.0.%d.0/25", i/3), i)
		} else {
			s = dynamic(fmt.Sprintf("d%d", i), "p", int32(24+i%5), i)
		}
		l.ApplySubnet(s, Created, nil)
		if d := decide(t, l, s.Name); d.Ready() {
			s = ready(s, d.CIDR.String())
			l.ApplySubnet(s, Updated, nil)
		}
		subnets = append(subnets, *s)
	}
	got, _ := l.PoolFigures(ns, "p")
	want := statuscalc.Calculate(netip.MustParsePrefix("10.0.0.0/20"), pool, subnets, nil)
	opts := cmp.Comparer(func(a, b interface{ String() string }) bool { return a.String() == b.String() })
	if diff := cmp.Diff(want, got, opts); diff != "" {
		t.Errorf("figures (-Calculate +ledger):\n%s", diff)
	}
}

func TestAdmissionQueries(t *testing.T) {
	l, _ := newLedger()
	l.ApplyPool(rootPool("p", "10.0.0.0/16", 24), Created, nil)
	l.ApplySubnet(explicit("a", "p", "10.0.1.0/24", 0), Created, nil)
	l.ApplySubnet(ready(dynamic("b", "p", 24, 0), "10.0.2.0/24"), Created, nil)
	l.ApplyPool(childPool("c", "p", "10.0.128.0/17", 0), Created, nil)

	found, total := l.Overlapping(ipamv1.PoolReference{Namespace: ns, Name: "p"}, netip.MustParsePrefix("10.0.0.0/22"), ns, "", 1)
	if total != 2 || len(found) != 1 || refKey(found[0].Ref) != "Subnet/a" {
		t.Errorf("Overlapping = %v, %d", found, total)
	}
	if _, total := l.Overlapping(ipamv1.PoolReference{Namespace: ns, Name: "p"}, netip.MustParsePrefix("10.0.1.0/24"), ns, "Subnet/a", 5); total != 0 {
		t.Errorf("Overlapping excluding itself = %d", total)
	}
	// Only held ranges bind a pool edit: "a" and "c" hold nothing yet.
	all := netip.MustParsePrefix("10.0.0.0/16")
	if found, total := l.HeldLeftOutside(ns, "p", all, netip.MustParsePrefix("10.0.0.0/23"), 5); total != 1 || refKey(found[0].Ref) != "Subnet/b" {
		t.Errorf("HeldLeftOutside = %v, %d", found, total)
	}
	if _, total := l.HeldLeftOutside(ns, "p", all, netip.MustParsePrefix("10.0.0.0/17"), 5); total != 0 {
		t.Errorf("HeldLeftOutside(10.0.0.0/17) = %d, want 0 (c only asks for 10.0.128.0/17)", total)
	}
	if _, total := l.HeldLeftOutside(ns, "p", netip.MustParsePrefix("10.0.0.0/23"), netip.MustParsePrefix("10.0.0.0/24"), 5); total != 0 {
		t.Errorf("HeldLeftOutside from 10.0.0.0/23 = %d, want 0 (b lies outside it already)", total)
	}
	if found, total := l.HeldOverlapping(ns, "p", netip.MustParsePrefix("10.0.0.0/22"), 5); total != 1 || refKey(found[0].Ref) != "Subnet/b" {
		t.Errorf("HeldOverlapping = %v, %d", found, total)
	}
	named, subnets, children := l.Users(ns, "p", 2)
	want := []statuscalc.ClaimRef{{Kind: "Subnet", Namespace: ns, Name: "a"}, {Kind: "Subnet", Namespace: ns, Name: "b"}}
	if diff := cmp.Diff(want, named); diff != "" || subnets != 2 || children != 1 {
		t.Errorf("Users = %v %d %d", named, subnets, children)
	}
	if v, ok := l.Pool(ns, "c"); !ok || v.Parent != "p" || v.Spec.String() != "10.0.128.0/17" {
		t.Errorf("Pool(c) = %+v, %v", v, ok)
	}
}

func TestCaughtUp(t *testing.T) {
	l, _ := newLedger()
	s := explicit("a", "p", "10.0.0.0/24", 0)
	s.ResourceVersion = "100"
	l.ApplySubnet(s, Created, nil)
	for _, tt := range []struct {
		w    Watermark
		want bool
	}{
		{Watermark{Kind: statuscalc.KindSubnet, Namespace: ns, ResourceVersion: "100", Count: 5}, true}, // seen that version
		{Watermark{Kind: statuscalc.KindSubnet, Namespace: ns, ResourceVersion: "250", Count: 1}, true}, // counts agree
		{Watermark{Kind: statuscalc.KindSubnet, Namespace: ns, ResourceVersion: "250", Count: 2}, false},
		{Watermark{Kind: statuscalc.KindSubnetPool, Namespace: ns, ResourceVersion: "250", Count: 0}, true},
		{Watermark{Kind: statuscalc.KindSubnet, Namespace: "other", ResourceVersion: "250", Count: 1}, false},
	} {
		if got := l.CaughtUp(tt.w); got != tt.want {
			t.Errorf("CaughtUp(%+v) = %v, want %v", tt.w, got, tt.want)
		}
	}
}

// The pool's status needs no recompute for a Subnet update that leaves its
// held range as it was: the record of the range in spec, and the status
// write for the record's generation. Anything else is a change.
func TestHeldAsBefore(t *testing.T) {
	web := dynamic("web", "dc", 26, 1)
	granted := ready(web, "10.0.0.0/26")
	recorded := granted.DeepCopy()
	recorded.Spec.CIDR, recorded.Generation = "10.0.0.0/26", 2
	observed := recorded.DeepCopy()
	observed.Status.ObservedGeneration = 2
	cleared := observed.DeepCopy()
	cleared.Status = ipamv1.SubnetStatus{}
	deleting := observed.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	recreated := ready(dynamic("web", "dc", 26, 9), "10.0.0.0/26")
	recreated.UID = "uid-web-2"
	otherRange := observed.DeepCopy()
	otherRange.Spec.CIDR, otherRange.Status.CIDR = "10.0.0.64/26", "10.0.0.64/26"
	steps := []struct {
		name string
		obj  *ipamv1.Subnet
		want bool
	}{
		{"created", web, false},
		{"granted", granted, false},
		{"the range recorded in spec", recorded, true},
		{"the status brought to the record's generation", observed, true},
		{"the status cleared by another client", cleared, false},
		{"Ready again", observed, false},
		{"being deleted", deleting, false},
		{"deleted and created again under the name, holding the same range", recreated, false},
		{"a status naming another range (a bypassed schema)", otherRange, false},
	}
	l, r := newLedger()
	l.ApplyPool(rootPool("dc", "10.0.0.0/24", 26), Created, nil)
	for i, step := range steps {
		typ := Updated
		if i == 0 {
			typ = Created
		}
		r.events = nil
		l.ApplySubnet(step.obj, typ, nil)
		if len(r.events) != 1 {
			t.Fatalf("%s: %d events", step.name, len(r.events))
		}
		if got := r.events[0].HeldAsBefore; got != step.want {
			t.Errorf("%s: HeldAsBefore %v, want %v", step.name, got, step.want)
		}
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
