package ledger

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

func moveSubnet(s *ipamv1.Subnet, namespace string) *ipamv1.Subnet {
	s = s.DeepCopy()
	s.Namespace = namespace
	s.UID = types.UID(fmt.Sprintf("uid-%s-%s", namespace, s.Name))
	return s
}

func movePool(p *ipamv1.SubnetPool, namespace string) *ipamv1.SubnetPool {
	p = p.DeepCopy()
	p.Namespace = namespace
	p.UID = types.UID(fmt.Sprintf("uid-%s-%s", namespace, p.Name))
	return p
}

// One book for every namespace: objects with the same names in two
// namespaces stay independent (decisions, wake lists, barrier counts,
// queries), and a namespace that empties leaves nothing behind.
func TestNamespacesShareNothingButTheLock(t *testing.T) {
	l := New()
	l.MarkSynced()
	var events []Event
	l.Subscribe(func(e Event) { events = append(events, e) })
	for _, n := range []string{"a", "b"} {
		l.ApplyPool(movePool(rootPool("p", "10.0.0.0/24", 25), n), Created, nil)
		l.ApplyPool(movePool(childPool("c", "p", "10.0.0.0/25", 1), n), Created, nil)
	}
	// Both children should get their range: their parents are different pools.
	for _, n := range []string{"a", "b"} {
		d, ok := l.DecidePool(n, "c", types.UID("uid-"+n+"-c"))
		if !ok || !d.Ready() || d.CIDR.String() != "10.0.0.0/25" {
			t.Fatalf("%s/c: %+v %v", n, d, ok)
		}
	}
	// Fill a/p with a dynamic /25 and ask b/p for two; the second waits.
	s1 := moveSubnet(dynamic("s", "p", 25, 2), "a")
	l.ApplySubnet(s1, Created, nil)
	if d, _ := l.DecideSubnet("a", "s", s1.UID); !d.Ready() || d.CIDR.String() != "10.0.0.128/25" {
		t.Fatalf("a/s: %+v", d)
	}
	w := moveSubnet(dynamic("w", "p", 25, 3), "b")
	w2 := moveSubnet(dynamic("w2", "p", 25, 3), "b")
	l.ApplySubnet(w, Created, nil)
	l.ApplySubnet(w2, Created, nil)
	l.DecideSubnet("b", "w", w.UID)
	if d, _ := l.DecideSubnet("b", "w2", w2.UID); d.Reason != ipamv1.ReasonPoolExhausted {
		t.Fatalf("b/w2: %+v", d)
	}
	// a waiting claim in a/p as well
	aw := moveSubnet(dynamic("w2", "p", 25, 3), "a")
	l.ApplySubnet(aw, Created, nil)
	if d, _ := l.DecideSubnet("a", "w2", aw.UID); d.Reason != ipamv1.ReasonPoolExhausted {
		t.Fatalf("a/w2: %+v", d)
	}
	events = nil
	// Deleting a/s must wake a/w2 only.
	l.DeleteSubnet(s1)
	var woken []statuscalc.ClaimRef
	for _, e := range events {
		woken = append(woken, e.Wake...)
	}
	if want := []statuscalc.ClaimRef{{Kind: "Subnet", Namespace: "a", Name: "w2"}}; !slices.Equal(woken, want) {
		t.Errorf("woken %v, want %v", woken, want)
	}
	// Counts and barrier per namespace.
	if !l.CaughtUp(Watermark{Kind: statuscalc.KindSubnet, Namespace: "a", Count: 1, ResourceVersion: "999999"}) {
		t.Errorf("a: count")
	}
	if !l.CaughtUp(Watermark{Kind: statuscalc.KindSubnet, Namespace: "b", Count: 2, ResourceVersion: "999999"}) {
		t.Errorf("b: count")
	}
	subs, pools := l.Objects()
	if len(subs) != 3 || len(pools) != 4 {
		t.Errorf("Objects: %v %v", subs, pools)
	}
	named, subnets, children := l.Users("b", "p", 10)
	wantNamed := []statuscalc.ClaimRef{{Kind: "Subnet", Namespace: "b", Name: "w"}, {Kind: "Subnet", Namespace: "b", Name: "w2"}, {Kind: "SubnetPool", Namespace: "b", Name: "c"}}
	if subnets != 2 || children != 1 || !slices.Equal(named, wantNamed) {
		t.Errorf("Users b/p: %v %d %d", named, subnets, children)
	}
	// Users' first few, without naming any when asked for none.
	if named, subnets, children := l.Users("b", "p", 2); subnets != 2 || children != 1 || !slices.Equal(named, wantNamed[:2]) {
		t.Errorf("Users b/p limit 2: %v %d %d", named, subnets, children)
	}
	if named, subnets, children := l.Users("b", "p", 0); subnets != 2 || children != 1 || named != nil {
		t.Errorf("Users b/p limit 0: %v %d %d", named, subnets, children)
	}
	if named, _, _ := l.Users("b", "p", math.MaxInt); !slices.Equal(named, wantNamed) {
		t.Errorf("Users b/p without a limit: %v", named)
	}
	// Delete everything in a: counts map must forget a.
	l.DeleteSubnet(aw)
	l.DeletePool(movePool(childPool("c", "p", "10.0.0.0/25", 1), "a"))
	l.DeletePool(movePool(rootPool("p", "10.0.0.0/24", 25), "a"))
	l.mu.RLock()
	_, has := l.b.namespaces["a"]
	nslots := 0
	for id := range l.b.slots {
		if id.namespace() == "a" {
			nslots++
		}
	}
	l.mu.RUnlock()
	if has || nslots != 0 {
		t.Errorf("namespace a left behind: record %v, slots %d", has, nslots)
	}
	// Forget in another namespace is a no-op.
	l.Forget("a", SubnetKey("w"), w.UID, netip.MustParsePrefix("10.0.0.128/25"))
}

// The auditor's read takes the lock one namespace at a time; it still sees
// every Ready Subnet of every namespace, each with its own namespace.
func TestReadySubnetsEveryNamespace(t *testing.T) {
	l, _ := newLedger()
	var want []ReadySubnet
	for i, n := range []string{"a", "b", "c"} {
		l.ApplyPool(movePool(rootPool("p", "10.0.0.0/24", 26), n), Created, nil)
		s := moveSubnet(dynamic("s", "p", 26, i), n)
		l.ApplySubnet(s, Created, nil)
		d, ok := l.DecideSubnet(n, "s", s.UID)
		if !ok || !d.Ready() {
			t.Fatalf("%s/s: %+v", n, d)
		}
		l.ApplySubnet(ready(s, d.CIDR.String()), Updated, nil)
		want = append(want, ReadySubnet{Namespace: n, Name: "s", UID: s.UID, Pool: ipamv1.PoolReference{Namespace: n, Name: "p"}, CIDR: d.CIDR})
		// One that holds nothing is not listed.
		l.ApplySubnet(moveSubnet(dynamic("pending", "p", 26, i), n), Created, nil)
	}
	got := slices.SortedFunc(l.ReadySubnets(), func(a, b ReadySubnet) int { return strings.Compare(a.Namespace, b.Namespace) })
	if !slices.Equal(got, want) {
		t.Errorf("ReadySubnets:\n got %v\nwant %v", got, want)
	}
}

// Consent, as the arbiter applies it (admission bypassed or stale): a
// claim on a pool in another namespace is granted only if the pool allows
// the claim's namespace, whether a Subnet's or a child pool's. A namespace
// that loses the right keeps what it holds; the pool lists it. One that
// gains it is woken and granted.
func TestConsentAcrossNamespaces(t *testing.T) {
	l := New()
	l.MarkSynced()
	var events []Event
	l.Subscribe(func(e Event) { events = append(events, e) })
	l.ApplyNamespace("team-a", map[string]string{"tenant": "true"}, Created)
	l.ApplyNamespace("team-b", nil, Created)
	corp := movePool(rootPool("corp", "10.0.0.0/16", 24), "netops")
	corp.Spec.AllowedNamespaces = &ipamv1.AllowedNamespaces{From: ipamv1.FromSelector,
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "true"}}}
	l.ApplyPool(corp, Created, nil)

	claimFrom := func(namespace, name string, uid int) *ipamv1.Subnet {
		s := moveSubnet(dynamic(name, "corp", 24, uid), namespace)
		s.Spec.PoolRef.Namespace = "netops"
		l.ApplySubnet(s, Created, nil)
		return s
	}
	web := claimFrom("team-a", "web", 1)
	if d, _ := l.DecideSubnet("team-a", "web", web.UID); !d.Ready() || d.CIDR.String() != "10.0.0.0/24" {
		t.Fatalf("Subnet from an allowed namespace: %+v", d)
	}
	l.ApplySubnet(ready(web, "10.0.0.0/24"), Updated, nil)
	db := claimFrom("team-b", "db", 2)
	want := "SubnetPool netops/corp allows claims only from its own namespace netops and namespaces whose labels match its selector on the label tenant (namespace team-b has no label tenant), not from team-b"
	if d, _ := l.DecideSubnet("team-b", "db", db.UID); d.Reason != ipamv1.ReasonNotAllowed || d.Message != want || d.CIDR.IsValid() {
		t.Fatalf("Subnet from a namespace not allowed: %+v", d)
	}
	child := movePool(childPool("team", "corp", "10.0.1.0/24", 3), "team-b")
	child.Spec.ParentRef.Namespace = "netops"
	l.ApplyPool(child, Created, nil)
	if d, _ := l.DecidePool("team-b", "team", child.UID); d.Reason != ipamv1.ReasonNotAllowed || d.CIDR.IsValid() {
		t.Fatalf("child pool from a namespace not allowed: %+v", d)
	}

	// team-b gains the right: its waiting claims are woken and granted.
	events = nil
	l.ApplyNamespace("team-b", map[string]string{"tenant": "true"}, Updated)
	if len(events) != 1 || events[0].Kind != KindNamespace || len(events[0].Wake) != 2 ||
		len(events[0].Pools) != 1 || events[0].Pools[0] != (ipamv1.PoolReference{Namespace: "netops", Name: "corp"}) {
		t.Fatalf("label change published %+v", events)
	}
	if d, _ := l.DecideSubnet("team-b", "db", db.UID); !d.Ready() {
		t.Fatalf("Subnet after its namespace was allowed: %+v", d)
	}

	// team-a loses it: web keeps its range, and the pool lists it.
	l.ApplyNamespace("team-a", nil, Updated)
	if d, _ := l.DecideSubnet("team-a", "web", web.UID); !d.Ready() || d.CIDR.String() != "10.0.0.0/24" {
		t.Fatalf("a held range was taken away: %+v", d)
	}
	if f, _ := l.PoolFigures("netops", "corp"); f.NotAllowedTotal != 1 || len(f.NotAllowed) != 1 || f.NotAllowed[0].String() != "Subnet team-a/web" {
		t.Fatalf("not allowed: %v (%d)", f.NotAllowed, f.NotAllowedTotal)
	}
	// A new claim from team-a is refused.
	api := claimFrom("team-a", "api", 4)
	if d, _ := l.DecideSubnet("team-a", "api", api.UID); d.Reason != ipamv1.ReasonNotAllowed {
		t.Fatalf("new claim after the right was lost: %+v", d)
	}
	// The pool allows everyone again: nothing is listed.
	corp = corp.DeepCopy()
	corp.Spec.AllowedNamespaces = &ipamv1.AllowedNamespaces{From: ipamv1.FromAll}
	corp.Generation++
	l.ApplyPool(corp, Updated, nil)
	if f, _ := l.PoolFigures("netops", "corp"); f.NotAllowedTotal != 0 {
		t.Fatalf("still listed after All: %d", f.NotAllowedTotal)
	}
	if d, _ := l.DecideSubnet("team-a", "api", api.UID); !d.Ready() {
		t.Fatalf("claim after the pool allowed everyone: %+v", d)
	}

	beside := moveSubnet(dynamic("infra", "corp", 24, 5), "netops")
	beside.Spec.PoolRef.Namespace = "netops"
	l.ApplySubnet(beside, Created, nil)
	if d, _ := l.DecideSubnet("netops", "infra", beside.UID); !d.Ready() {
		t.Fatalf("Subnet beside its pool: %+v", d)
	}
	if !l.SharedDomain("netops", "corp") {
		t.Error("a pool that allows everyone is not a shared domain")
	}
}

// A pending explicit request from a namespace the pool does not allow is
// not granted by another claim's sweep either.
func TestSweepSkipsClaimsNotAllowed(t *testing.T) {
	l := New()
	l.MarkSynced()
	l.ApplyNamespace("team-b", nil, Created)
	l.ApplyPool(movePool(rootPool("corp", "10.0.0.0/16", 24), "netops"), Created, nil)
	stranger := moveSubnet(explicit("x", "corp", "10.0.5.0/24", 1), "team-b")
	stranger.Spec.PoolRef.Namespace = "netops"
	l.ApplySubnet(stranger, Created, nil)
	own := moveSubnet(explicit("y", "corp", "10.0.6.0/24", 2), "netops")
	own.Spec.PoolRef.Namespace = "netops"
	l.ApplySubnet(own, Created, nil)
	if d, _ := l.DecideSubnet("netops", "y", own.UID); !d.Ready() {
		t.Fatalf("own claim: %+v", d)
	}
	if d, _ := l.DecideSubnet("team-b", "x", stranger.UID); d.Reason != ipamv1.ReasonNotAllowed || d.CIDR.IsValid() {
		t.Fatalf("claim not allowed: %+v", d)
	}
	if found, _ := l.HeldOverlapping("netops", "corp", netip.MustParsePrefix("10.0.5.0/24"), 1); len(found) != 0 {
		t.Fatalf("a claim not allowed holds %v", found)
	}
}

// A claim that loses to another tenant's claim learns the range, not the
// other tenant's object; one that loses to the pool's own namespace's
// claim learns its name.
func TestOverlapsNamesOnlyVisibleWinners(t *testing.T) {
	l := New()
	l.MarkSynced()
	corp := movePool(rootPool("corp", "10.0.0.0/16", 24), "netops")
	corp.Spec.AllowedNamespaces = &ipamv1.AllowedNamespaces{From: ipamv1.FromAll}
	l.ApplyPool(corp, Created, nil)
	claim := func(namespace, name, cidr string, age int) *ipamv1.Subnet {
		s := moveSubnet(explicit(name, "corp", cidr, age), namespace)
		s.Spec.PoolRef.Namespace = "netops"
		l.ApplySubnet(s, Created, nil)
		return s
	}
	a := claim("team-a", "a", "10.0.5.0/24", 1)
	if d, _ := l.DecideSubnet("team-a", "a", a.UID); !d.Ready() {
		t.Fatalf("first claim: %+v", d)
	}
	l.ApplySubnet(ready(a, "10.0.5.0/24"), Updated, nil)
	own := claim("netops", "own", "10.0.6.0/24", 2)
	if d, _ := l.DecideSubnet("netops", "own", own.UID); !d.Ready() {
		t.Fatalf("platform claim: %+v", d)
	}
	l.ApplySubnet(ready(own, "10.0.6.0/24"), Updated, nil)

	b := claim("team-b", "b", "10.0.5.0/25", 3)
	d, _ := l.DecideSubnet("team-b", "b", b.UID)
	if want := "10.0.5.0/25 overlaps a claim in another namespace (10.0.5.0/24), which holds it; this claim is granted if that one is deleted"; d.Reason != ipamv1.ReasonOverlaps || d.Message != want {
		t.Errorf("loser to another tenant: %+v", d)
	}
	c := claim("team-b", "c", "10.0.6.0/25", 4)
	d, _ = l.DecideSubnet("team-b", "c", c.UID)
	if want := "10.0.6.0/25 overlaps Subnet netops/own (10.0.6.0/24), which holds it; this claim is granted if that one is deleted"; d.Message != want {
		t.Errorf("loser to the platform's claim: %+v", d)
	}
}

// A claim the pool refuses takes nothing from it: a tenant that names a
// platform pool before it exists, over its whole range, neither blocks the
// owners' claims at admission nor keeps the pool from being deleted.
func TestRefusedClaimsTakeNothing(t *testing.T) {
	l := New()
	l.MarkSynced()
	l.ApplyNamespace("team-x", nil, Created)
	squat := moveSubnet(explicit("all", "corp", "10.0.0.0/16", 1), "team-x")
	squat.Spec.PoolRef.Namespace = "netops"
	l.ApplySubnet(squat, Created, nil)
	l.ApplyPool(movePool(rootPool("corp", "10.0.0.0/16", 24), "netops"), Created, nil)
	if d, _ := l.DecideSubnet("team-x", "all", squat.UID); d.Reason != ipamv1.ReasonNotAllowed {
		t.Fatalf("the squatter: %+v", d)
	}
	corp := ipamv1.PoolReference{Namespace: "netops", Name: "corp"}
	if found, total := l.Overlapping(corp, netip.MustParsePrefix("10.0.1.0/24"), "netops", SubnetKey("own"), 5); total != 0 {
		t.Errorf("the owners' claim overlaps a refused claim: %v", found)
	}
	if named, subnets, children := l.Users("netops", "corp", 5); subnets+children != 0 || len(named) != 0 {
		t.Errorf("a refused claim keeps the pool in use: %v", named)
	}
	own := moveSubnet(explicit("own", "corp", "10.0.1.0/24", 2), "netops")
	own.Spec.PoolRef.Namespace = "netops"
	l.ApplySubnet(own, Created, nil)
	if d, _ := l.DecideSubnet("netops", "own", own.UID); !d.Ready() {
		t.Errorf("the owners' claim: %+v", d)
	}
	// Allowed now, it is an ordinary pending claim again: it waits for
	// the range the owners hold.
	corpAll := movePool(rootPool("corp", "10.0.0.0/16", 24), "netops")
	corpAll.Spec.AllowedNamespaces = &ipamv1.AllowedNamespaces{From: ipamv1.FromAll}
	l.ApplyPool(corpAll, Updated, nil)
	if _, total := l.Overlapping(corp, netip.MustParsePrefix("10.0.2.0/24"), "netops", SubnetKey("x"), 5); total != 1 {
		t.Errorf("an allowed request is not in the overlap answer: %d", total)
	}
}

// Until the Namespaces' informer has delivered a namespace, a Selector
// pool does not allow it, even one whose selector an empty label set
// matches; when the namespace arrives, its waiting claims are woken.
func TestUnknownNamespaceMatchesNoSelector(t *testing.T) {
	l := New()
	l.MarkSynced()
	corp := movePool(rootPool("corp", "10.0.0.0/16", 24), "netops")
	corp.Spec.AllowedNamespaces = &ipamv1.AllowedNamespaces{From: ipamv1.FromSelector, Selector: &metav1.LabelSelector{
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "quarantine", Operator: metav1.LabelSelectorOpDoesNotExist}}}}
	l.ApplyPool(corp, Created, nil)
	s := moveSubnet(dynamic("web", "corp", 24, 1), "team-new")
	s.Spec.PoolRef.Namespace = "netops"
	l.ApplySubnet(s, Created, nil)
	if d, _ := l.DecideSubnet("team-new", "web", s.UID); d.Reason != ipamv1.ReasonNotAllowed {
		t.Fatalf("a namespace not known yet: %+v", d)
	}
	if allowed, policy, _ := l.Consent(ipamv1.PoolReference{Namespace: "netops", Name: "corp"}, "team-new"); allowed || !strings.Contains(policy, "not known") {
		t.Errorf("admission's answer: %v %q", allowed, policy)
	}
	var woken []statuscalc.ClaimRef
	l.Subscribe(func(e Event) { woken = append(woken, e.Wake...) })
	l.ApplyNamespace("team-new", map[string]string{"quarantine": "true"}, Created)
	if len(woken) != 1 {
		t.Errorf("woken: %v", woken)
	}
	if d, _ := l.DecideSubnet("team-new", "web", s.UID); d.Reason != ipamv1.ReasonNotAllowed {
		t.Errorf("a quarantined namespace: %+v", d)
	}
	l.ApplyNamespace("team-new", nil, Updated)
	if d, _ := l.DecideSubnet("team-new", "web", s.UID); !d.Ready() {
		t.Errorf("a namespace the selector matches: %+v", d)
	}
}

// A child pool that asks to grow while its namespace is not allowed keeps
// its range, and is woken when the namespace is allowed again.
func TestChildResizeWokenWhenAllowedAgain(t *testing.T) {
	l := New()
	l.MarkSynced()
	l.ApplyNamespace("team-a", nil, Created)
	corp := movePool(rootPool("corp", "10.0.0.0/16", 24), "netops")
	corp.Spec.AllowedNamespaces = &ipamv1.AllowedNamespaces{From: ipamv1.FromSelector, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "true"}}}
	l.ApplyPool(corp, Created, nil)
	kid := withStatus(movePool(childPool("kid", "corp", "10.0.0.0/24", 1), "team-a"), "10.0.0.0/24")
	kid.Spec.ParentRef.Namespace = "netops"
	l.ApplyPool(kid, Created, nil) // granted while team-a was a tenant
	grown := kid.DeepCopy()
	grown.Spec.CIDR, grown.Generation = "10.0.0.0/23", 2
	l.ApplyPool(grown, Updated, nil)
	d, _ := l.DecidePool("team-a", "kid", kid.UID)
	if d.Reason != ipamv1.ReasonNotAllowed || d.CIDR.String() != "10.0.0.0/24" {
		t.Fatalf("a resize without consent: %+v", d)
	}
	var woken []statuscalc.ClaimRef
	l.Subscribe(func(e Event) { woken = append(woken, e.Wake...) })
	l.ApplyNamespace("team-a", map[string]string{"tenant": "true"}, Updated)
	if len(woken) != 1 || woken[0].Name != "kid" {
		t.Fatalf("woken: %v", woken)
	}
	if d, _ := l.DecidePool("team-a", "kid", kid.UID); !d.Ready() || d.CIDR.String() != "10.0.0.0/23" {
		t.Errorf("the resize once allowed: %+v", d)
	}
}
