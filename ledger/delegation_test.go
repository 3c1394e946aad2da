package ledger

import (
	"net/netip"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"k8s.io/utils/ptr"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// delegatedRoot is a member's root pool delegated from the hub, with cidr
// as written (empty: not granted yet).
func delegatedRoot(name, cidr string, age int) *ipamv1.SubnetPool {
	p := newRoot("member", name, cidr, age)
	p.Spec.Delegation = &ipamv1.PoolDelegation{PoolRef: ipamv1.PoolReference{Namespace: "fleet", Name: "plan"}, PrefixLength: ptr.To[int32](16)}
	return p
}

// A delegated pool serves only what the hub granted: without a grant it
// asks for nothing, whatever spec.cidr says (a tenant's write, a restore),
// and holds nothing; the member reconciler's reason is its Ready reason.
// Once granted it is a root like any other: a local root over the range
// keeps it, and the delegated one waits Overlaps. What it holds it keeps
// when the hub's word is gone (a restart, the hub unreachable).
func TestDelegatedPoolServesOnlyWhatTheHubGranted(t *testing.T) {
	l, _ := newLedger()

	empty := delegatedRoot("pods", "", 1)
	l.ApplyPool(empty, Created, nil)
	if d := decideRoot(t, l, empty); d.Reason != ipamv1.ReasonDelegationPending || d.CIDR.IsValid() {
		t.Fatalf("delegated pool without cidr: %+v", d)
	}

	// A cidr the hub did not grant is not served.
	chosen := delegatedRoot("chosen", "10.7.0.0/16", 2)
	l.ApplyPool(chosen, Created, nil)
	l.SetDelegation("member", "chosen", DelegationState{UID: chosen.UID, Reason: ipamv1.ReasonHubUnreachable, Message: "dial tcp: refused"})
	if d := decideRoot(t, l, chosen); d.Reason != ipamv1.ReasonHubUnreachable || d.Message != "dial tcp: refused" || d.CIDR.IsValid() {
		t.Fatalf("cidr the hub did not grant: %+v", d)
	}
	l.SetDelegation("member", "chosen", DelegationState{UID: chosen.UID, Granted: netip.MustParsePrefix("10.8.0.0/16")})
	if d := decideRoot(t, l, chosen); d.Ready() {
		t.Fatalf("served a cidr the hub granted another range for: %+v", d)
	}
	// A grant for another object of that name does not count either.
	l.SetDelegation("member", "chosen", DelegationState{UID: "another", Granted: netip.MustParsePrefix("10.7.0.0/16")})
	if d := decideRoot(t, l, chosen); d.Ready() {
		t.Fatalf("served on another object's grant: %+v", d)
	}
	// The hub's grant of that range: served.
	l.SetDelegation("member", "chosen", DelegationState{UID: chosen.UID, Granted: netip.MustParsePrefix("10.7.0.0/16")})
	d := decideRoot(t, l, chosen)
	if !d.Ready() || d.CIDR.String() != "10.7.0.0/16" {
		t.Fatalf("granted by the hub: %+v", d)
	}

	// A local root over a granted range keeps it: the member's space
	// decides as for any root.
	local := newRoot("netops", "lab", "10.9.0.0/16", 0)
	l.ApplyPool(local, Created, nil)
	l.ApplyPool(shown(local, decideRoot(t, l, local)), Updated, nil)
	over := delegatedRoot("over", "10.9.0.0/16", 3)
	l.ApplyPool(over, Created, nil)
	l.SetDelegation("member", "over", DelegationState{UID: over.UID, Granted: netip.MustParsePrefix("10.9.0.0/16")})
	if d := decideRoot(t, l, over); d.Ready() || d.Reason != ipamv1.ReasonOverlaps {
		t.Fatalf("hub grant over a local root: %+v", d)
	}

	// What it holds it keeps without the hub's word: a new ledger (a
	// restart) that sees the grant written in status, for this object.
	restarted, _ := newLedger()
	held := shown(chosen, d)
	held.Status.GrantedToUID = held.UID
	restarted.ApplyPool(held, Created, nil)
	if d := decideRoot(t, restarted, held); !d.Ready() || d.CIDR.String() != "10.7.0.0/16" {
		t.Fatalf("held range after a restart, hub not asked yet: %+v", d)
	}
	// And a pool of another range that holds nothing is not served there.
	other := delegatedRoot("other", "10.10.0.0/16", 4)
	restarted.ApplyPool(other, Created, nil)
	if d := decideRoot(t, restarted, other); d.Ready() {
		t.Fatalf("not granted after a restart: %+v", d)
	}
}

// A status is not a grant: a delegated pool restored by a backup tool with
// its status (spec.cidr and status.cidr alike, status.grantedToUID naming
// the backed-up object), or shown by a manager from before grantedToUID,
// is served only once the hub grants it that range again. Meanwhile the
// range stays held in the member's space, so that no local root takes the
// range of Subnets carved from it before, and the decision says so.
func TestDelegatedPoolRestoredWithItsStatusWaitsForTheHub(t *testing.T) {
	for name, grantedTo := range map[string]types.UID{
		"restored: the status names the backed-up object": "uid-of-the-backed-up-object",
		"no proof: shown by an older manager":             "",
	} {
		t.Run(name, func(t *testing.T) {
			l, _ := newLedger()
			restored := delegatedRoot("restored", "10.7.0.0/16", 1)
			restored.Status.CIDR, restored.Status.GrantedToUID = "10.7.0.0/16", grantedTo
			l.ApplyPool(restored, Created, nil)
			d := decideRoot(t, l, restored)
			if d.Ready() || d.Reason != ipamv1.ReasonDelegationPending || !strings.Contains(d.Message, "not served") {
				t.Fatalf("served on its status alone, the hub not asked: %+v", d)
			}
			// The hub granted the range to another member meanwhile.
			l.SetDelegation("member", "restored", DelegationState{UID: restored.UID, Reason: ipamv1.ReasonHubUnreachable, Message: "dial tcp: refused"})
			if d := decideRoot(t, l, restored); d.Ready() || d.Reason != ipamv1.ReasonHubUnreachable {
				t.Fatalf("served a range the hub has not granted it: %+v", d)
			}
			// Kept from this cluster's other roots meanwhile.
			local := newRoot("netops", "lab", "10.7.0.0/16", 0)
			l.ApplyPool(local, Created, nil)
			if d := decideRoot(t, l, local); d.Ready() {
				t.Fatalf("a local root over the range a restored delegated pool shows: %+v", d)
			}
			l.ApplyPool(local, Deleted, nil)
			// The hub grants it back: served.
			l.SetDelegation("member", "restored", DelegationState{UID: restored.UID, Granted: netip.MustParsePrefix("10.7.0.0/16")})
			if d := decideRoot(t, l, restored); !d.Ready() || d.CIDR.String() != "10.7.0.0/16" {
				t.Fatalf("granted again by the hub: %+v", d)
			}
		})
	}
}

// An IPv6 grant: the pool, created without a range (no family yet),
// serves the v6 range the hub granted once it is recorded, and holds
// nothing in the IPv4 slot it waited in.
func TestDelegatedPoolServesAnIPv6Grant(t *testing.T) {
	l, _ := newLedger()
	p := delegatedRoot("pods6", "", 1)
	p.Spec.Delegation.PrefixLength = ptr.To[int32](56)
	l.ApplyPool(p, Created, nil)
	grant := netip.MustParsePrefix("2001:db8:100::/56")
	l.SetDelegation("member", "pods6", DelegationState{UID: p.UID, Granted: grant})
	if d := decideRoot(t, l, p); d.Ready() {
		t.Fatalf("served before the grant is recorded: %+v", d)
	}
	recorded := p.DeepCopy()
	recorded.Spec.CIDR = grant.String()
	l.ApplyPool(recorded, Updated, p)
	d := decideRoot(t, l, recorded)
	if !d.Ready() || d.CIDR != grant {
		t.Fatalf("recorded IPv6 grant: %+v", d)
	}
	// A local IPv4 root the size of the whole family is not in its way.
	local := newRoot("netops", "all4", "0.0.0.0/0", 0)
	l.ApplyPool(local, Created, nil)
	if d := decideRoot(t, l, local); !d.Ready() {
		t.Fatalf("an IPv4 root after a delegated IPv6 pool: %+v", d)
	}
}

// A delegated pool the hub has not granted, deleted while a Subnet still
// names it (created as the delete was admitted), says it is Terminating and
// what it waits for, not the hub's state (found by the lifecycle checker,
// L4).
func TestADelegatedPoolBeingDeletedSaysTerminating(t *testing.T) {
	l, _ := newLedger()
	p := delegatedRoot("pods", "10.7.0.0/16", 1)
	l.ApplyPool(p, Created, nil)
	l.ApplySubnet(memberSubnetOf("web", "pods"), Created, nil)
	deleting := p.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	l.ApplyPool(deleting, Updated, p)
	if d := decideRoot(t, l, deleting); d.Reason != ipamv1.ReasonTerminating || !strings.Contains(d.Message, "1 Subnets") {
		t.Fatalf("a delegated pool being deleted, used by a Subnet: %+v", d)
	}
}

// memberSubnetOf is a Subnet of the member namespace asking pool for a /24.
func memberSubnetOf(name, pool string) *ipamv1.Subnet {
	return &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: "member", Name: name, UID: types.UID("uid-member-" + name), CreationTimestamp: metav1.NewTime(t0)},
		Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: pool}, PrefixLength: ptr.To[int32](24)}}
}
