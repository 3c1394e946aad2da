package ledger

// Adversarial review of address spaces (commit 2d6d32b): each test here
// fails on that commit, and names the violation it proves.

import (
	"slices"
	"testing"

	"k8s.io/utils/ptr"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// A root pool that holds 10.0.0.0/16 and has a Subnet in it is edited to an
// IPv6 range (the webhook's HeldLeftOutside check races the Subnet's grant,
// or the pool had no Subnet yet and gets one before its new grant is
// written). Its claim moves to the v6 slot of the space and the v4 slot
// forgets it, while the pool still serves 10.0.0.0/16 (status.cidr) and its
// Subnet holds 10.0.0.0/24. Another root pool is then granted 10.0.0.0/16,
// and a Subnet carved from it the same /24: two Ready Subnets overlap.
func TestRootFamilyChangeReleasesTheRangeItStillServes(t *testing.T) {
	l, _ := newLedger()
	a := rootPool("a", "10.0.0.0/16", 24) // granted, status.cidr written
	l.ApplyPool(a, Created, nil)
	l.ApplySubnet(ready(explicit("web", "a", "10.0.0.0/24", 1), "10.0.0.0/24"), Created, nil)

	moved := a.DeepCopy()
	moved.Generation++
	moved.Spec.CIDR = "fd00::/48"
	moved.Spec.DefaultPrefixLength = ptr.To(int32(64))
	l.ApplyPool(moved, Updated, a)
	da := decideRoot(t, l, moved)
	if da.CIDR.String() != "10.0.0.0/16" {
		t.Fatalf("a after the edit still serves its v4 range (a Subnet lies in it): %+v", da)
	}

	b := newRoot("team-b", "b", "10.0.0.0/16", 5)
	l.ApplyPool(b, Created, nil)
	db := decideRoot(t, l, b)
	if db.Ready() {
		t.Errorf("root b granted %s while root a still serves 10.0.0.0/16 and Subnet team-a/web holds 10.0.0.0/24: %+v", db.CIDR, db)
	}
	l.ApplyPool(shown(b, db), Updated, b)
	web2 := explicit("web2", "b", "10.0.0.0/24", 6)
	web2.Namespace, web2.Spec.PoolRef.Namespace = "team-b", "team-b"
	l.ApplySubnet(web2, Created, nil)
	if d, ok := l.DecideSubnet("team-b", "web2", web2.UID); ok && d.Ready() {
		t.Errorf("two Ready Subnets overlap: team-a/web holds 10.0.0.0/24 and team-b/web2 was granted %s", d.CIDR)
	}
}

// A root pool that holds an IPv4 range and is edited to IPv6 (the schema
// refuses that; here it was bypassed) keeps its IPv4 range from other
// roots and says why: a root's slot follows the family it holds. The root
// waiting behind it keeps waiting; it is woken when the holder goes.
func TestRootEditedToAnotherFamilyKeepsItsRangeFromOthers(t *testing.T) {
	l, rec := newLedger()
	a := rootPool("a", "10.0.0.0/16", 24)
	l.ApplyPool(a, Created, nil)
	b := newRoot(ns, "b", "10.0.0.0/24", 5)
	l.ApplyPool(b, Created, nil)
	if d := decideRoot(t, l, b); d.Reason != ipamv1.ReasonOverlaps {
		t.Fatalf("b waits behind a: %+v", d)
	}
	moved := a.DeepCopy()
	moved.Generation++
	moved.Spec.CIDR = "fd00::/48"
	moved.Spec.DefaultPrefixLength = ptr.To(int32(64))
	l.ApplyPool(moved, Updated, a)
	da := decideRoot(t, l, moved)
	if da.CIDR.String() != "10.0.0.0/16" || da.Reason != ipamv1.ReasonOutOfRange {
		t.Fatalf("a keeps its IPv4 range and says why: %+v", da)
	}
	if d := decideRoot(t, l, b); d.Ready() {
		t.Errorf("b granted inside a's range: %+v", d)
	}
	rec.woken()
	l.DeletePool(moved)
	if woken := rec.woken(); !slices.Contains(woken, PoolKey("b")) {
		t.Errorf("a went, but root b was not woken (woken: %v)", woken)
	}
	if d := decideRoot(t, l, b); !d.Ready() {
		t.Errorf("b once a went: %+v", d)
	}
}

// An IPv6 root pool whose spec.cidr stops parsing (schema and webhook
// bypassed, which the arbiter is meant to survive) is filed under the v4
// slot (the zero Addr of an invalid prefix is not Is6), so the v6 slot
// forgets the range its status.cidr shows and its Subnet holds. Another
// root is granted the range and a Subnet of it the same /64.
func TestInvalidSpecOnAnIPv6RootReleasesItsRange(t *testing.T) {
	l, _ := newLedger()
	a := rootPool("a", "2001:db8::/48", 64)
	l.ApplyPool(a, Created, nil)
	l.ApplySubnet(ready(explicit("web", "a", "2001:db8::/64", 1), "2001:db8::/64"), Created, nil)
	broken := a.DeepCopy()
	broken.Generation++
	broken.Spec.CIDR = "2001:db8::/xx"
	l.ApplyPool(broken, Updated, a)
	if d := decideRoot(t, l, broken); d.Reason != ipamv1.ReasonInvalidSpec || d.CIDR.String() != "2001:db8::/48" {
		t.Fatalf("a with an invalid spec keeps its grant: %+v", d)
	}

	b := newRoot("team-b", "b", "2001:db8::/48", 5)
	l.ApplyPool(b, Created, nil)
	db := decideRoot(t, l, b)
	if db.Ready() {
		t.Errorf("root b granted %s, which root a's status.cidr still shows and Subnet team-a/web uses: %+v", db.CIDR, db)
	}
}

// A namespace's label change publishes the pools its claims use, for the
// pool controller to requeue. A root pool's claim is on its space's
// synthetic slot, so the event names "@space/default.v4", a pool no object
// is: the controller gets a request for a SubnetPool in namespace "@space".
func TestNamespaceEventListsTheSyntheticSpaceSlotAsAPool(t *testing.T) {
	l, rec := newLedger()
	l.ApplyPool(rootPool("corp", "10.0.0.0/16", 24), Created, nil)
	rec.events = nil
	l.ApplyNamespace(ns, map[string]string{"team": "a"}, Created)
	for _, e := range rec.events {
		for _, p := range e.Pools {
			if p.Namespace == spaceNamespace {
				t.Errorf("namespace event names the synthetic pool %s/%s", p.Namespace, p.Name)
			}
		}
	}
}

// The same without any stale view: a dynamic Subnet of root pool a is
// admitted (against a's v4 spec) and waits to be decided; a's edit to IPv6
// is admitted (the Subnet holds nothing yet, so HeldLeftOutside finds
// nothing). The ledger applies the edit and wakes a's waiters; the Subnet
// controller decides the Subnet before the pool controller decides a, and
// a still serves its v4 status.cidr: the Subnet gets 10.0.0.0/24. a's move
// now waits for it, so a serves 10.0.0.0/16 indefinitely, yet the v4 slot
// of the space grants the range to another root.
func TestRootFamilyChangeWithAPendingSubnetLetsAnotherRootOverlap(t *testing.T) {
	l, _ := newLedger()
	a := rootPool("a", "10.0.0.0/16", 24)
	l.ApplyPool(a, Created, nil)
	l.ApplySubnet(dynamic("web", "a", 24, 1), Created, nil) // admitted, not decided yet

	moved := a.DeepCopy()
	moved.Generation++
	moved.Spec.CIDR = "fd00::/48"
	moved.Spec.DefaultPrefixLength = ptr.To(int32(64))
	l.ApplyPool(moved, Updated, a)
	d := decide(t, l, "web")
	if !d.Ready() {
		t.Fatalf("setup: %+v", d)
	}
	l.ApplySubnet(ready(dynamic("web", "a", 24, 1), d.CIDR.String()), Updated, nil)
	if da := decideRoot(t, l, moved); da.CIDR.String() != "10.0.0.0/16" {
		t.Fatalf("setup: a keeps serving its v4 range: %+v", da)
	}

	b := newRoot("team-b", "b", "10.0.0.0/16", 5)
	l.ApplyPool(b, Created, nil)
	if db := decideRoot(t, l, b); db.Ready() {
		t.Errorf("root b granted %s while root a serves 10.0.0.0/16 and Subnet team-a/web holds %s", db.CIDR, d.CIDR)
	}
}
