package ledger

import (
	"net/netip"
	"testing"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// demoted fails the test unless the Subnet is decided as not Ready with
// reason Overlaps, its range dropped.
func demoted(t *testing.T, l *Ledger, name string) {
	t.Helper()
	if d := decide(t, l, name); d.Ready() || d.CIDR.IsValid() || d.Reason != ipamv1.ReasonOverlaps {
		t.Errorf("%s: %+v, want not Ready, reason Overlaps, no range", name, d)
	}
}

func holding(t *testing.T, l *Ledger, name, cidr string) {
	t.Helper()
	if d := decide(t, l, name); !d.Ready() || d.CIDR.String() != cidr {
		t.Errorf("%s: %+v, want Ready holding %s", name, d, cidr)
	}
}

// A backup tool restores a Subnet and then its status, Ready with a range
// that another claim holds since (a stale backup, or a forged one): the
// arbiter did not grant it, and the restored claim does not keep it. Once
// its status drops the range, it is decided as any claim.
func TestARestoredStatusOverAHeldRangeIsTakenBack(t *testing.T) {
	l, _ := newLedger()
	l.ApplyPool(rootPool("p", "10.0.0.0/23", 24), Created, nil)
	db := ready(explicit("db", "p", "10.0.1.0/24", 1), "10.0.1.0/24")
	l.ApplySubnet(db, Created, nil)
	web := dynamic("web", "p", 24, 2)
	l.ApplySubnet(web, Created, nil)
	restored := ready(web, "10.0.1.0/24")
	l.ApplySubnet(restored, Updated, web)

	demoted(t, l, "web")
	holding(t, l, "db", "10.0.1.0/24")
	if !l.Contested(ns, "web") || l.Contested(ns, "db") {
		t.Errorf("Contested: web %v, db %v; want true, false", l.Contested(ns, "web"), l.Contested(ns, "db"))
	}
	// The controller writes the decision: no range, not Ready.
	dropped := restored.DeepCopy()
	dropped.Status.CIDR = ""
	dropped.Status.Conditions[0].Status, dropped.Status.Conditions[0].Reason = "False", ipamv1.ReasonOverlaps
	l.ApplySubnet(dropped, Updated, restored)
	holding(t, l, "web", "10.0.0.0/24")
	holding(t, l, "db", "10.0.1.0/24")
}

// The same restore over an older claim that already held another range (a
// restore that updates existing objects): the first holder keeps the range
// whatever the objects' ages.
func TestARestoredStatusLosesToTheFirstHolderEvenIfOlder(t *testing.T) {
	l, _ := newLedger()
	l.ApplyPool(rootPool("p", "10.0.0.0/22", 24), Created, nil)
	x := ready(dynamic("x", "p", 24, 1), "10.0.0.0/24")
	l.ApplySubnet(x, Created, nil)
	y := dynamic("y", "p", 24, 2)
	l.ApplySubnet(y, Created, nil)
	holding(t, l, "y", "10.0.1.0/24") // granted by this ledger
	l.ApplySubnet(ready(y, "10.0.1.0/24"), Updated, y)

	l.ApplySubnet(ready(x, "10.0.1.0/24"), Updated, x) // x's backed-up status names y's range
	holding(t, l, "y", "10.0.1.0/24")
	demoted(t, l, "x")
}

// A status written by another leader (this replica's ledger did not grant
// it) on a free range is a grant like any: nothing collides, nothing moves.
func TestAStatusThisLedgerDidNotGrantIsKeptWhenFree(t *testing.T) {
	l, _ := newLedger()
	l.ApplyPool(rootPool("p", "10.0.0.0/22", 24), Created, nil)
	a := dynamic("a", "p", 24, 1)
	l.ApplySubnet(a, Created, nil)
	l.ApplySubnet(ready(a, "10.0.2.0/24"), Updated, a)
	holding(t, l, "a", "10.0.2.0/24")
	l.ApplySubnet(dynamic("b", "p", 24, 2), Created, nil)
	if d := decide(t, l, "b"); !d.Ready() || d.CIDR.Overlaps(netip.MustParsePrefix("10.0.2.0/24")) {
		t.Errorf("b: %+v", d)
	}
}

// Ranges that collided before the ledger started (both in the start-up
// list): the older Subnet keeps its range, the younger is taken back.
func TestCollidingStatusesAtStartUpTheOlderKeeps(t *testing.T) {
	l := New() // not synced yet: what it is fed is the start-up list
	l.ApplyPool(rootPool("p", "10.0.0.0/16", 24), Created, nil)
	l.ApplySubnet(ready(explicit("younger", "p", "10.0.1.0/24", 2), "10.0.1.0/24"), Created, nil)
	l.ApplySubnet(ready(explicit("older", "p", "10.0.0.0/23", 1), "10.0.0.0/23"), Created, nil)
	holding(t, l, "older", "10.0.0.0/23")
	demoted(t, l, "younger")
}
