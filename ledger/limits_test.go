package ledger

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ipspace"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

// cappedPool is netops/corp, 10.0.0.0/16, open to every namespace, with
// the given per-namespace caps.
func cappedPool(perNamespace *ipamv1.NamespaceLimits) *ipamv1.SubnetPool {
	p := movePool(rootPool("corp", "10.0.0.0/16", 24), "netops")
	p.Spec.AllowedNamespaces = &ipamv1.AllowedNamespaces{From: ipamv1.FromAll, PerNamespace: perNamespace}
	return p
}

// subnetOn is a Subnet of namespace on netops/corp, applied to l.
func subnetOn(l *Ledger, s *ipamv1.Subnet, namespace string) *ipamv1.Subnet {
	s = moveSubnet(s, namespace)
	s.Spec.PoolRef.Namespace = "netops"
	l.ApplySubnet(s, Created, nil)
	return s
}

// checkTallies compares every slot's per-namespace holdings with a walk
// of its claims: the tallies must follow every change of what claims hold.
func checkTallies(t *testing.T, l *Ledger) {
	t.Helper()
	l.mu.RLock()
	defer l.mu.RUnlock()
	for id, s := range l.b.slots {
		want := map[string]holdings{}
		for cid, c := range s.claims {
			if ns := cid.namespace(); ns != id.namespace() && c.holds().IsValid() {
				h := want[ns]
				if h.addresses == nil {
					h.addresses = new(big.Int)
				}
				h.claims++
				h.addresses.Add(h.addresses, ipspace.AddressCount(c.holds()))
				want[ns] = h
			}
		}
		if len(want) != len(s.holdings) {
			t.Errorf("slot %s: tallies for %d namespaces, walk finds %d", id, len(s.holdings), len(want))
		}
		for ns, w := range want {
			got := s.holdings[ns]
			if got == nil || got.claims != w.claims || got.addresses.Cmp(w.addresses) != 0 {
				t.Errorf("slot %s namespace %s: tally %+v, walk %d claims %s addresses", id, ns, got, w.claims, w.addresses)
			}
		}
	}
}

func wokeClaim(events []Event, namespace, name string) bool {
	for _, e := range events {
		if slices.Contains(e.Wake, statuscalc.ClaimRef{Kind: statuscalc.KindSubnet, Namespace: namespace, Name: name}) {
			return true
		}
	}
	return false
}

// Two dynamic claims of one namespace pass admission at once (neither saw
// the other) and together exceed maxClaims: the arbiter grants the one it
// decides first, the other waits with NamespaceQuotaExceeded, and is woken
// and granted when the first is deleted. Another namespace is not affected,
// nor is the pool's own namespace.
func TestNamespaceClaimCapUnderRace(t *testing.T) {
	l := New()
	l.MarkSynced()
	var events []Event
	l.Subscribe(func(e Event) { events = append(events, e) })
	l.ApplyPool(cappedPool(&ipamv1.NamespaceLimits{MaxClaims: ptr.To[int32](1)}), Created, nil)

	a := subnetOn(l, dynamic("a", "corp", 24, 1), "team-a")
	b := subnetOn(l, dynamic("b", "corp", 24, 2), "team-a")
	first, _ := l.DecideSubnet("team-a", "a", a.UID)
	second, _ := l.DecideSubnet("team-a", "b", b.UID)
	if !first.Ready() {
		t.Fatalf("first claim: %+v", first)
	}
	want := "namespace team-a holds 1 of the 1 claims SubnetPool netops/corp allows each namespace; this claim waits until the namespace frees room (deletes a claim on the pool) or the pool's owners raise spec.allowedNamespaces.perNamespace"
	if second.Reason != ipamv1.ReasonNamespaceQuotaExceeded || second.Message != want || second.CIDR.IsValid() {
		t.Fatalf("second claim: %+v", second)
	}
	// The status the controller writes, as the informer shows it back.
	waiting := b.DeepCopy()
	waiting.Status.Conditions = []metav1.Condition{{Type: ipamv1.ConditionReady, Status: "False", Reason: second.Reason, Message: second.Message}}
	l.ApplySubnet(ready(a, first.CIDR.String()), Updated, nil)
	l.ApplySubnet(waiting, Updated, nil)

	// Other namespaces, and the pool's own, are not counted against team-a.
	other := subnetOn(l, dynamic("c", "corp", 24, 3), "team-b")
	if d, _ := l.DecideSubnet("team-b", "c", other.UID); !d.Ready() {
		t.Fatalf("claim of another namespace: %+v", d)
	}
	for _, name := range []string{"own1", "own2"} {
		own := moveSubnet(dynamic(name, "corp", 24, 4), "netops")
		l.ApplySubnet(own, Created, nil)
		if d, _ := l.DecideSubnet("netops", name, own.UID); !d.Ready() {
			t.Fatalf("claim of the pool's own namespace: %+v", d)
		}
	}

	// Admission counts every claim the namespace has on the pool.
	ref := ipamv1.PoolReference{Namespace: "netops", Name: "corp"}
	if got := l.NamespaceQuota(ref, "team-a", SubnetKey("new"), nil); got != "namespace team-a has 2 of the 1 claims SubnetPool netops/corp allows each namespace" {
		t.Errorf("admission: %q", got)
	}
	if got := l.NamespaceQuota(ref, "team-c", SubnetKey("new"), nil); got != "" {
		t.Errorf("admission of an empty namespace: %q", got)
	}

	events = nil
	l.DeleteSubnet(ready(a, first.CIDR.String()))
	if !wokeClaim(events, "team-a", "b") {
		t.Fatalf("deleting team-a/a did not wake team-a/b: %+v", events)
	}
	if d, _ := l.DecideSubnet("team-a", "b", b.UID); !d.Ready() {
		t.Fatalf("after room was freed: %+v", d)
	}
	checkTallies(t, l)
}

// Two explicit claims of one namespace, admitted at once, that together
// exceed maxAddresses: the sweep grants the older only; the younger waits
// and is granted when the cap is raised.
func TestNamespaceAddressCapSweep(t *testing.T) {
	l := New()
	l.MarkSynced()
	var events []Event
	l.Subscribe(func(e Event) { events = append(events, e) })
	l.ApplyPool(cappedPool(&ipamv1.NamespaceLimits{MaxAddresses: "384"}), Created, nil)

	older := subnetOn(l, explicit("older", "corp", "10.0.1.0/24", 1), "team-a")
	younger := subnetOn(l, explicit("younger", "corp", "10.0.2.0/24", 2), "team-a")
	// The younger is decided first: the winner order still holds.
	d, _ := l.DecideSubnet("team-a", "younger", younger.UID)
	if d.Reason != ipamv1.ReasonNamespaceQuotaExceeded || !strings.Contains(d.Message, "holds 256 of the 384 addresses (this claim asks for 256 more)") {
		t.Fatalf("younger: %+v", d)
	}
	if d, _ := l.DecideSubnet("team-a", "older", older.UID); !d.Ready() || d.CIDR.String() != "10.0.1.0/24" {
		t.Fatalf("older: %+v", d)
	}
	// A /25 still fits the cap.
	small := subnetOn(l, dynamic("small", "corp", 25, 3), "team-a")
	if d, _ := l.DecideSubnet("team-a", "small", small.UID); !d.Ready() {
		t.Fatalf("a /25 within the cap: %+v", d)
	}

	events = nil
	l.ApplyPool(cappedPool(&ipamv1.NamespaceLimits{MaxAddresses: "1024"}), Updated, nil)
	if !wokeClaim(events, "team-a", "younger") {
		t.Fatalf("raising the cap did not wake the waiter: %+v", events)
	}
	if d, _ := l.DecideSubnet("team-a", "younger", younger.UID); !d.Ready() || d.CIDR.String() != "10.0.2.0/24" {
		t.Fatalf("younger after the cap was raised: %+v", d)
	}
	checkTallies(t, l)
}

// Lowering a cap below what a namespace holds takes nothing away: its
// claims keep their ranges, new ones wait, and the pool's owners can list
// the namespaces above the cap.
func TestLoweredCapKeepsGrants(t *testing.T) {
	l := New()
	l.MarkSynced()
	l.ApplyPool(cappedPool(nil), Created, nil)
	var held []*ipamv1.Subnet
	for i, name := range []string{"a", "b", "c"} {
		s := subnetOn(l, dynamic(name, "corp", 24, i), "team-a")
		d, _ := l.DecideSubnet("team-a", name, s.UID)
		if !d.Ready() {
			t.Fatalf("%s: %+v", name, d)
		}
		held = append(held, ready(s, d.CIDR.String()))
		l.ApplySubnet(held[i], Updated, nil)
	}
	lowered := &ipamv1.NamespaceLimits{MaxClaims: ptr.To[int32](2)}
	l.ApplyPool(cappedPool(lowered), Updated, nil)
	for _, s := range held {
		if d, _ := l.DecideSubnet("team-a", s.Name, s.UID); !d.Ready() || d.CIDR.String() != s.Status.CIDR {
			t.Fatalf("%s lost its range: %+v", s.Name, d)
		}
	}
	if over, total := l.NamespacesOverLimits(ipamv1.PoolReference{Namespace: "netops", Name: "corp"}, lowered, 3); total != 1 || !slices.Equal(over, []string{"team-a"}) {
		t.Errorf("over the cap: %v %d", over, total)
	}
	d := subnetOn(l, dynamic("d", "corp", 24, 5), "team-a")
	if got, _ := l.DecideSubnet("team-a", "d", d.UID); got.Reason != ipamv1.ReasonNamespaceQuotaExceeded || !strings.Contains(got.Message, "holds 3 of the 2 claims") {
		t.Fatalf("new claim above a lowered cap: %+v", got)
	}
	checkTallies(t, l)
}

// An IPv6 cap larger than any integer field: one /64 per namespace.
func TestNamespaceAddressCapIPv6(t *testing.T) {
	l := New()
	l.MarkSynced()
	p := movePool(rootPool("corp", "2001:db8::/48", 64), "netops")
	p.Spec.AllowedNamespaces = &ipamv1.AllowedNamespaces{From: ipamv1.FromAll, PerNamespace: &ipamv1.NamespaceLimits{MaxAddresses: "18446744073709551616"}}
	l.ApplyPool(p, Created, nil)
	a := subnetOn(l, dynamic("a", "corp", 64, 1), "team-a")
	if d, _ := l.DecideSubnet("team-a", "a", a.UID); !d.Ready() {
		t.Fatalf("one /64: %+v", d)
	}
	b := subnetOn(l, dynamic("b", "corp", 127, 2), "team-a")
	if d, _ := l.DecideSubnet("team-a", "b", b.UID); d.Reason != ipamv1.ReasonNamespaceQuotaExceeded {
		t.Fatalf("a /127 beyond one /64: %+v", d)
	}
	size := l.BlockSize(ipamv1.PoolReference{Namespace: "netops", Name: "corp"}, -1)
	if want, _ := new(big.Int).SetString("18446744073709551616", 10); size == nil || size.Cmp(want) != 0 {
		t.Errorf("BlockSize of the default length: %v", size)
	}
}

// A refusal for consent tells the tenant which of its own labels matter,
// never the selector's values, which may name other tenants.
func TestNotAllowedHidesOtherTenants(t *testing.T) {
	l := New()
	l.MarkSynced()
	l.ApplyNamespace("team-c", map[string]string{"env": "dev"}, Created)
	corp := movePool(rootPool("corp", "10.0.0.0/16", 24), "netops")
	corp.Spec.AllowedNamespaces = &ipamv1.AllowedNamespaces{From: ipamv1.FromSelector, Selector: &metav1.LabelSelector{
		MatchLabels: map[string]string{"env": "prod"},
		MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "kubernetes.io/metadata.name", Operator: "In", Values: []string{"team-a", "team-b"}},
		}}}
	l.ApplyPool(corp, Created, nil)
	s := subnetOn(l, dynamic("web", "corp", 24, 1), "team-c")
	d, _ := l.DecideSubnet("team-c", "web", s.UID)
	want := "SubnetPool netops/corp allows claims only from its own namespace netops and namespaces whose labels match its selector on the labels env and kubernetes.io/metadata.name (namespace team-c has env=dev, no label kubernetes.io/metadata.name), not from team-c"
	if d.Reason != ipamv1.ReasonNotAllowed || d.Message != want {
		t.Fatalf("got %+v\nwant %s", d, want)
	}
	allowed, policy, _ := l.Consent(ipamv1.PoolReference{Namespace: "netops", Name: "corp"}, "team-c")
	for _, leak := range []string{"team-a", "team-b", "prod"} {
		if allowed || strings.Contains(policy, leak) || strings.Contains(d.Message, leak) {
			t.Errorf("refusal names %q: %q / %q", leak, policy, d.Message)
		}
	}
}

// An explicit claim waiting for its namespace's cap is woken by the
// release of any range of that namespace on the pool, not only of one it
// overlaps.
func TestQuotaWaiterWokenByAnyRelease(t *testing.T) {
	l := New()
	l.MarkSynced()
	var events []Event
	l.Subscribe(func(e Event) { events = append(events, e) })
	l.ApplyPool(cappedPool(&ipamv1.NamespaceLimits{MaxClaims: ptr.To[int32](1)}), Created, nil)
	held := subnetOn(l, explicit("held", "corp", "10.0.1.0/24", 1), "team-a")
	d, _ := l.DecideSubnet("team-a", "held", held.UID)
	l.ApplySubnet(ready(held, d.CIDR.String()), Updated, nil)
	waiter := subnetOn(l, explicit("waiter", "corp", "10.0.200.0/24", 2), "team-a")
	got, _ := l.DecideSubnet("team-a", "waiter", waiter.UID)
	if got.Reason != ipamv1.ReasonNamespaceQuotaExceeded {
		t.Fatalf("waiter: %+v", got)
	}
	shown := waiter.DeepCopy()
	shown.Status.Conditions = []metav1.Condition{{Type: ipamv1.ConditionReady, Status: "False", Reason: got.Reason, Message: got.Message}}
	l.ApplySubnet(shown, Updated, nil)

	events = nil
	l.DeleteSubnet(ready(held, "10.0.1.0/24"))
	if !wokeClaim(events, "team-a", "waiter") {
		t.Fatalf("the release did not wake the waiter: %+v", events)
	}
	if d, _ := l.DecideSubnet("team-a", "waiter", waiter.UID); !d.Ready() || d.CIDR.String() != "10.0.200.0/24" {
		t.Fatalf("waiter after the release: %+v", d)
	}
	checkTallies(t, l)
}

// The cost of a capped decision grows with the claiming namespace's own
// claims on the pool (slot.foreign), never with other namespaces'.
func BenchmarkNamespaceQuota(b *testing.B) {
	for _, held := range []int{10, 1000, 10000} {
		b.Run(strconv.Itoa(held), func(b *testing.B) {
			l := New()
			l.MarkSynced()
			p := movePool(rootPool("corp", "10.0.0.0/8", 28), "netops")
			p.Spec.AllowedNamespaces = &ipamv1.AllowedNamespaces{From: ipamv1.FromAll, PerNamespace: &ipamv1.NamespaceLimits{MaxAddresses: "1000000000"}}
			l.ApplyPool(p, Created, nil)
			for i := range held {
				s := subnetOn(l, dynamic("s"+strconv.Itoa(i), "corp", 28, i), "team-a")
				d, _ := l.DecideSubnet("team-a", s.Name, s.UID)
				l.ApplySubnet(ready(s, d.CIDR.String()), Updated, nil)
			}
			ref := ipamv1.PoolReference{Namespace: "netops", Name: "corp"}
			size := big.NewInt(16)
			b.ResetTimer()
			for b.Loop() {
				if l.NamespaceQuota(ref, "team-a", SubnetKey("new"), size) != "" {
					b.Fatal("refused")
				}
			}
		})
	}
}

// Random creates, decisions, status writes, forgotten grants, deletes and
// cap changes across three tenant namespaces and the pool's own: after
// every step the tallies match a walk of the claims, and no grant takes a
// tenant past the caps in force when it was made (grants made before a
// lowering are kept, and are not counted as breaking it).
func TestNamespaceCapsRandomized(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0))
		l := New()
		l.MarkSynced()
		caps := &ipamv1.NamespaceLimits{MaxClaims: ptr.To[int32](3), MaxAddresses: "1024"}
		l.ApplyPool(cappedPool(caps), Created, nil)
		namespaces := []string{"team-a", "team-b", "team-c", "netops"}
		live := map[string]*ipamv1.Subnet{} // by namespace/name
		for step := range 300 {
			ns := namespaces[rng.IntN(len(namespaces))]
			name := fmt.Sprintf("s%d", rng.IntN(12))
			key := ns + "/" + name
			s := live[key]
			switch op := rng.IntN(10); {
			case op < 4 && s == nil: // create
				var sub *ipamv1.Subnet
				if rng.IntN(2) == 0 {
					sub = dynamic(name, "corp", int32(22+rng.IntN(5)), step)
				} else {
					sub = explicit(name, "corp", fmt.Sprintf("10.0.%d.0/24", rng.IntN(64)), step)
				}
				live[key] = subnetOn(l, sub, ns)
			case op < 7 && s != nil: // decide, and write the status
				usage := func() (usage, limits, bool) {
					l.mu.RLock()
					defer l.mu.RUnlock()
					slot := l.b.slots[poolIDOf("netops", "corp")]
					id := idOf(ns, SubnetKey(name))
					return l.b.namespaceUsage(slot, ns, id), slot.pool.consent.limits, slot.claims[id].holds().IsValid()
				}
				before, lim, held := usage()
				d, _ := l.DecideSubnet(ns, name, s.UID)
				// A new grant to a tenant. (A sweep during another claim's
				// decision may have granted this one already: checked by
				// the same rule, but not seen here.)
				if d.Ready() && !held && ns != "netops" {
					total := new(big.Int).Add(before.held, ipspace.AddressCount(d.CIDR))
					if (lim.claimsCapped && before.holding+1 > lim.maxClaims) || (lim.maxAddresses != nil && total.Cmp(lim.maxAddresses) > 0) {
						t.Fatalf("seed %d step %d: granted %s %s with %s holding %d claims, %s addresses, caps %+v", seed, step, key, d.CIDR, ns, before.holding, before.held, lim)
					}
				}
				next := s.DeepCopy()
				if d.Ready() {
					next = ready(s, d.CIDR.String())
				} else {
					next.Status.Conditions = []metav1.Condition{{Type: ipamv1.ConditionReady, Status: "False", Reason: d.Reason, Message: d.Message}}
				}
				if rng.IntN(5) == 0 && d.Assumed { // the write fails for good
					l.Forget(ns, SubnetKey(name), s.UID, d.CIDR)
				} else {
					l.ApplySubnet(next, Updated, nil)
					live[key] = next
				}
			case op < 9 && s != nil: // delete
				l.DeleteSubnet(s)
				delete(live, key)
			case op == 9: // change the caps
				caps = &ipamv1.NamespaceLimits{MaxClaims: ptr.To(int32(rng.IntN(5))), MaxAddresses: strconv.Itoa(256 * rng.IntN(8))}
				l.ApplyPool(cappedPool(caps), Updated, nil)
			}
			checkTallies(t, l)
			if t.Failed() {
				t.Fatalf("seed %d step %d", seed, step)
			}
		}
	}
}
