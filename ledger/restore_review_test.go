package ledger

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// A Subnet deleted and re-created under the same name while the watch was
// down, its old status restored over a range this ledger granted since: the
// relist shows the new object (a new UID) Ready on that range. It is not in
// the start-up list, so it is seen after the holder and loses to it.
func TestARestoreUnderANewUIDLosesToTheHolder(t *testing.T) {
	l, _ := newLedger()
	l.ApplyPool(rootPool("p", "10.0.0.0/22", 24), Created, nil)
	web := dynamic("web", "p", 24, 1)
	l.ApplySubnet(web, Created, nil)
	db := dynamic("db", "p", 24, 2)
	l.ApplySubnet(db, Created, nil)
	holding(t, l, "web", "10.0.0.0/24")
	l.ApplySubnet(ready(web, "10.0.0.0/24"), Updated, web)
	l.ApplySubnet(ready(db, "10.0.0.0/24"), Updated, db) // a restore over a range web holds
	demoted(t, l, "db")

	// Deleted, re-created and restored while the watch was down: the relist
	// shows the new object as an update of the old name.
	recreated := ready(db, "10.0.0.0/24")
	recreated.UID = types.UID("uid-db-2")
	l.ApplySubnet(recreated, Updated, nil)
	holding(t, l, "web", "10.0.0.0/24")
	if d, ok := l.DecideSubnet(ns, "db", recreated.UID); !ok || d.Ready() {
		t.Errorf("re-created db: %+v, want not Ready", d)
	}
}

// A Subnet created and restored while the watch was down, first seen on a
// relist (a create event showing a Ready status), loses to the claim this
// ledger granted the range to, even one whose grant is not confirmed yet.
func TestARestoreFirstSeenOnARelistLosesToTheHolder(t *testing.T) {
	l, _ := newLedger()
	l.ApplyPool(rootPool("p", "10.0.0.0/22", 24), Created, nil)
	web := dynamic("web", "p", 24, 5)
	l.ApplySubnet(web, Created, nil)
	if d := decide(t, l, "web"); !d.Assumed || d.CIDR.String() != "10.0.0.0/24" {
		t.Fatalf("web: %+v, want an assumed grant of 10.0.0.0/24", d)
	}
	l.ApplySubnet(ready(dynamic("db", "p", 24, 1), "10.0.0.0/24"), Created, nil) // older, but seen later
	holding(t, l, "web", "10.0.0.0/24")
	demoted(t, l, "db")
	if l.Contested(ns, "web") {
		t.Error("web's own grant is Contested")
	}
}

// A restored status over a Subnet's range and a child pool's at once: the
// Subnet held first, through the same informer, so the collision is real
// and the restored Subnet is taken back; the child pool does not excuse it.
func TestARestoreOverASubnetAndAChildPoolIsTakenBack(t *testing.T) {
	l, _ := newLedger()
	l.ApplyPool(rootPool("p", "10.0.0.0/22", 24), Created, nil)
	web := dynamic("web", "p", 24, 1)
	l.ApplySubnet(web, Created, nil)
	holding(t, l, "web", "10.0.0.0/24")
	l.ApplySubnet(ready(web, "10.0.0.0/24"), Updated, web)
	child := childPool("child", "p", "10.0.1.0/24", 2)
	l.ApplyPool(child, Created, nil)
	if d := decidePool(t, l, "child"); !d.Ready() {
		t.Fatalf("child: %+v", d)
	}
	l.ApplyPool(withStatus(child, "10.0.1.0/24"), Updated, child)
	wide := dynamic("wide", "p", 23, 3)
	l.ApplySubnet(wide, Created, nil)
	l.ApplySubnet(ready(wide, "10.0.0.0/23"), Updated, wide) // over web and the child
	holding(t, l, "web", "10.0.0.0/24")
	demoted(t, l, "wide")
}

// Three restores in one IPv6 pool: one over a held range and a free one
// at once, one over a free range only. The held range stays its holder's,
// the restore that covers it is taken back, and the restore on the range
// nobody was granted stands (nothing collides with a grant there).
func TestThreeRestoredStatusesIPv6(t *testing.T) {
	l, _ := newLedger()
	l.ApplyPool(rootPool("p", "fd00::/62", 64), Created, nil)
	a := dynamic("a", "p", 64, 1)
	l.ApplySubnet(a, Created, nil)
	holding(t, l, "a", "fd00::/64")
	l.ApplySubnet(ready(a, "fd00::/64"), Updated, a)
	wide := dynamic("wide", "p", 63, 2)
	l.ApplySubnet(wide, Created, nil)
	l.ApplySubnet(ready(wide, "fd00::/63"), Updated, wide)
	c := dynamic("c", "p", 64, 3)
	l.ApplySubnet(c, Created, nil)
	l.ApplySubnet(ready(c, "fd00:0:0:1::/64"), Updated, c)

	holding(t, l, "a", "fd00::/64")
	demoted(t, l, "wide")
	holding(t, l, "c", "fd00:0:0:1::/64")
	if l.Contested(ns, "a") || !l.Contested(ns, "wide") || l.Contested(ns, "c") {
		t.Errorf("Contested: a %v, wide %v, c %v; want false, true, false", l.Contested(ns, "a"), l.Contested(ns, "wide"), l.Contested(ns, "c"))
	}
}
