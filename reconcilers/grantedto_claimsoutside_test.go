package reconcilers

import (
	"net/netip"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

// A delegated pool that the ledger serves on the hub's grant but
// whose decision is ClaimsOutside (Ready=False, still serving: new Subnets
// are carved from it) never gets status.grantedToUID. So the hold is not
// proven, and a restart while the hub is unreachable stops serving a range
// the pool holds. Reached by a pool served by a manager from before
// grantedToUID (the documented upgrade cost says it is proven once the hub
// grants it again: not while ClaimsOutside), or a restored pool with its
// Subnets, whose spec.reserved covers one of them.
func TestServedOnTheHubsGrantWhileClaimsOutsideIsProven(t *testing.T) {
	const cidr = "10.7.0.0/16"
	ready := func(reason string) []metav1.Condition {
		return []metav1.Condition{{Type: ipamv1.ConditionReady, Status: metav1.ConditionTrue, Reason: reason}}
	}
	pool := &ipamv1.SubnetPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "network", Name: "pods", UID: "uid-pods", Generation: 2},
		Spec: ipamv1.SubnetPoolSpec{CIDR: cidr, DefaultPrefixLength: ptr.To[int32](24),
			// A tenant reserved a range a Subnet already holds.
			Reserved: []string{"10.7.0.0/24"},
			Delegation: &ipamv1.PoolDelegation{PoolRef: ipamv1.PoolReference{Namespace: "platform", Name: "plan"},
				PrefixLength: ptr.To[int32](16)}},
		// Served by a manager from before grantedToUID: no proof yet.
		Status: ipamv1.SubnetPoolStatus{CIDR: cidr, Conditions: ready(ipamv1.ReasonAvailable)},
	}
	subnet := func(name string, uid types.UID) *ipamv1.Subnet {
		return &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: "network", Name: name, UID: uid},
			Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Namespace: "network", Name: "pods"}, PrefixLength: ptr.To[int32](24)}}
	}
	web := subnet("web", "uid-web")
	web.Status.CIDR, web.Status.Conditions = "10.7.0.0/24", ready(ipamv1.ReasonAllocated)

	l := ledger.New()
	l.MarkSynced()
	l.ApplyPool(pool, ledger.Created, nil)
	l.ApplySubnet(web, ledger.Created, nil)
	// The hub grants the pool its range again (after the upgrade).
	l.SetDelegation("network", "pods", ledger.DelegationState{UID: pool.UID, Granted: netip.MustParsePrefix(cidr), Reason: ipamv1.ReasonDelegated})
	d, _ := l.DecidePool("network", "pods", pool.UID)
	if d.CIDR.String() != cidr {
		t.Fatalf("the hub's grant is not served: %+v", d)
	}
	// It serves: a new Subnet is carved from it.
	l.ApplySubnet(subnet("db", "uid-db"), ledger.Created, nil)
	if dd, _ := l.DecideSubnet("network", "db", "uid-db"); !dd.Ready() {
		t.Fatalf("the pool does not serve on the hub's grant: %+v (pool: %+v)", dd, d)
	}

	// What the pool status reconciler writes for that decision.
	figures, _ := l.PoolFigures("network", "pods")
	written := pool.DeepCopy()
	written.Status = statuscalc.Status(pool, figures, statuscalc.Readiness{Status: metav1.ConditionFalse, Reason: d.Reason,
		Message: d.Message, CIDR: d.CIDR, Root: true, GrantedTo: grantedTo(pool, d)})
	if !ledger.HoldsGrant(written) {
		t.Errorf("the pool serves %s on the hub's grant to this object (decision %s), but the status written does not prove it: grantedToUID %q",
			cidr, d.Reason, written.Status.GrantedToUID)
	}

	// A restart while the hub is unreachable: it stops serving what it holds.
	restarted := ledger.New()
	restarted.MarkSynced()
	restarted.ApplyPool(written, ledger.Created, nil)
	restarted.ApplySubnet(web, ledger.Created, nil)
	restarted.SetDelegation("network", "pods", ledger.DelegationState{UID: pool.UID, Reason: ipamv1.ReasonHubUnreachable, Message: "dial tcp: refused"})
	restarted.ApplySubnet(subnet("cache", "uid-cache"), ledger.Created, nil)
	if dc, _ := restarted.DecideSubnet("network", "cache", "uid-cache"); !dc.Ready() {
		t.Errorf("after a restart with the hub unreachable the pool no longer serves the range it holds: new Subnet %s: %s", dc.Reason, dc.Message)
	}
}
