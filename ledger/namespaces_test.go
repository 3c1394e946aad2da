package ledger

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"
	"testing"

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

// A claim on a pool in another namespace (admission was bypassed) is not
// granted, whether a Subnet's or a child pool's: until pools say who may
// claim from them, each allows only its own namespace. A claim in the
// pool's namespace with the namespace written out is an ordinary claim.
func TestClaimsAcrossNamespacesAreNotAllowed(t *testing.T) {
	l := New()
	l.MarkSynced()
	l.ApplyPool(movePool(rootPool("corp", "10.0.0.0/16", 24), "netops"), Created, nil)

	across := moveSubnet(dynamic("web", "corp", 24, 1), "team-a")
	across.Spec.PoolRef.Namespace = "netops"
	l.ApplySubnet(across, Created, nil)
	d, ok := l.DecideSubnet("team-a", "web", across.UID)
	want := "SubnetPool netops/corp allows claims only from its own namespace netops, not from team-a: references across namespaces are not served yet"
	if !ok || d.Reason != ipamv1.ReasonNotAllowed || d.Message != want || d.CIDR.IsValid() {
		t.Fatalf("Subnet across namespaces: %+v", d)
	}
	child := movePool(childPool("team", "corp", "10.0.1.0/24", 1), "team-a")
	child.Spec.ParentRef.Namespace = "netops"
	l.ApplyPool(child, Created, nil)
	if d, _ := l.DecidePool("team-a", "team", child.UID); d.Reason != ipamv1.ReasonNotAllowed || d.CIDR.IsValid() {
		t.Fatalf("child pool across namespaces: %+v", d)
	}

	beside := moveSubnet(dynamic("db", "corp", 24, 2), "netops")
	beside.Spec.PoolRef.Namespace = "netops"
	l.ApplySubnet(beside, Created, nil)
	if d, _ := l.DecideSubnet("netops", "db", beside.UID); !d.Ready() || d.CIDR.String() != "10.0.0.0/24" {
		t.Fatalf("Subnet beside its pool: %+v", d)
	}
}
