package lifecycle

import (
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// delegatedPool is a delegated root pool of ns/name with spec.cidr spec,
// status.cidr served, and its Ready and Delegated conditions.
func delegatedPool(name, spec, served string, ready, delegated metav1.Condition) obj {
	return obj{Kind: kindPool, Namespace: "ns", Name: name, UID: types.UID("uid-" + name), CIDR: spec, StatusCIDR: served,
		Delegation: fleetPlanNamespace + "/" + fleetPlanName, Conditions: []metav1.Condition{ready, delegated}}
}

func cond(typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason}
}

var (
	readyAvailable = cond(ipamv1.ConditionReady, metav1.ConditionTrue, ipamv1.ReasonAvailable)
	delegatedTrue  = cond(ipamv1.ConditionDelegated, metav1.ConditionTrue, ipamv1.ReasonDelegated)
	pendingReady   = cond(ipamv1.ConditionReady, metav1.ConditionFalse, ipamv1.ReasonDelegationPending)
	pendingDeleg   = cond(ipamv1.ConditionDelegated, metav1.ConditionFalse, ipamv1.ReasonDelegationPending)
	lostDeleg      = cond(ipamv1.ConditionDelegated, metav1.ConditionFalse, ipamv1.ReasonDelegationLost)
)

// claimOf is a hub claim of member pool ns/pool (made for its UID) holding
// held ("" : not Ready), in hub namespace hubNS for member.
func hubClaimOf(hubNS, member, pool, held string) hubClaim {
	c := hubClaim{obj: obj{Kind: kindSubnet, Namespace: hubNS, Name: member + ".ns." + pool, UID: types.UID("claim-" + member + pool),
		Ref: fleetPlanNamespace + "/" + fleetPlanName, StatusCIDR: held}, Member: member, MemberPool: "ns/" + pool, MemberPoolUID: types.UID("uid-" + pool)}
	if held != "" {
		c.Conditions = []metav1.Condition{cond(ipamv1.ConditionReady, metav1.ConditionTrue, ipamv1.ReasonAllocated)}
	}
	return c
}

func TestDelegationChecks(t *testing.T) {
	local := obj{Kind: kindPool, Namespace: "ns", Name: "p0", UID: "uid-p0", CIDR: "10.250.0.0/24", StatusCIDR: "10.250.0.0/24",
		Conditions: []metav1.Condition{readyAvailable}}
	for _, tt := range []struct {
		name string
		objs []obj
		hub  []hubClaim
		want []string // finding keys' prefixes ("D1/ns/d0/what"); none: clean
	}{
		{name: "served and held", objs: []obj{delegatedPool("d0", "10.248.0.0/24", "10.248.0.0/24", readyAvailable, delegatedTrue)},
			hub: []hubClaim{hubClaimOf(fleetHubNamespace, fleetCluster, "d0", "10.248.0.0/24")}},
		{name: "served without a claim", objs: []obj{delegatedPool("d0", "10.248.0.0/24", "10.248.0.0/24", readyAvailable, delegatedTrue)},
			want: []string{"D1/no-claim"}},
		{name: "a restored status kept, not served, over another member's claim",
			objs: []obj{delegatedPool("d0", "10.248.0.0/24", "10.248.0.0/24", pendingReady, pendingDeleg)},
			hub:  []hubClaim{hubClaimOf(fleetOtherNamespace, "other", "o1", "10.248.0.0/24")}},
		{name: "a restored status served over another member's claim",
			objs: []obj{delegatedPool("d0", "10.248.0.0/24", "10.248.0.0/24", readyAvailable, pendingDeleg)},
			hub:  []hubClaim{hubClaimOf(fleetOtherNamespace, "other", "o1", "10.248.0.0/24")}, want: []string{"D1/no-claim", "D2/overlaps-claim"}},
		{name: "served, the claim holds another range", objs: []obj{delegatedPool("d0", "10.248.0.0/24", "10.248.0.0/24", readyAvailable, delegatedTrue)},
			hub: []hubClaim{hubClaimOf(fleetHubNamespace, fleetCluster, "d0", "10.248.1.0/24")}, want: []string{"D1/claim-holds-other"}},
		{name: "served other than spec", objs: []obj{delegatedPool("d0", "10.248.1.0/24", "10.248.0.0/24", readyAvailable, delegatedTrue)},
			hub: []hubClaim{hubClaimOf(fleetHubNamespace, fleetCluster, "d0", "10.248.0.0/24")}, want: []string{"D1/served-not-spec"}},
		{name: "lost and taken by another member", objs: []obj{delegatedPool("d0", "10.248.0.0/24", "10.248.0.0/24", readyAvailable, lostDeleg)},
			hub: []hubClaim{hubClaimOf(fleetOtherNamespace, "other", "o1", "10.248.0.0/25")}, want: []string{"D2/overlaps-claim"}},
		{name: "two delegated pools overlap", objs: []obj{
			delegatedPool("d0", "10.248.0.0/24", "10.248.0.0/24", readyAvailable, delegatedTrue),
			delegatedPool("d1", "10.248.0.0/23", "10.248.0.0/23", readyAvailable, delegatedTrue)},
			hub: []hubClaim{hubClaimOf(fleetHubNamespace, fleetCluster, "d0", "10.248.0.0/24"), hubClaimOf(fleetHubNamespace, fleetCluster, "d1", "10.248.0.0/23")},
			// each pool also overlaps the other's claim in the hub
			want: []string{"D2/overlaps", "D2/overlaps-claim", "D2/overlaps-claim", "D5/overlaps"}},
		{name: "overlaps a local root", objs: []obj{local, delegatedPool("d0", "10.250.0.0/23", "10.250.0.0/23", readyAvailable, delegatedTrue)},
			hub: []hubClaim{hubClaimOf(fleetHubNamespace, fleetCluster, "d0", "10.250.0.0/23")}, want: []string{"D3/overlaps-root"}},
		{name: "waits and says why", objs: []obj{delegatedPool("d0", "", "", pendingReady, pendingDeleg)}},
		{name: "waits with another reason on Ready", objs: []obj{delegatedPool("d0", "", "", cond(ipamv1.ConditionReady, metav1.ConditionFalse, ipamv1.ReasonPending), pendingDeleg)},
			want: []string{"D4/" + ipamv1.ReasonPending}},
		{name: "still unreachable", objs: []obj{delegatedPool("d0", "", "",
			cond(ipamv1.ConditionReady, metav1.ConditionFalse, ipamv1.ReasonHubUnreachable), cond(ipamv1.ConditionDelegated, metav1.ConditionFalse, ipamv1.ReasonHubUnreachable))},
			want: []string{"D4/unreachable"}},
		{name: "granted by the hub, nothing local over it, not served", objs: []obj{delegatedPool("d0", "", "", pendingReady, pendingDeleg)},
			hub: []hubClaim{hubClaimOf(fleetHubNamespace, fleetCluster, "d0", "10.248.0.0/24")}, want: []string{"D4/grant-unserved"}},
		{name: "granted over a local root, waits", objs: []obj{local, delegatedPool("d0", "", "", pendingReady, pendingDeleg)},
			hub: []hubClaim{hubClaimOf(fleetHubNamespace, fleetCluster, "d0", "10.250.0.0/23")}},
		{name: "a claim outlives its pool", hub: []hubClaim{hubClaimOf(fleetHubNamespace, fleetCluster, "d0", "10.248.0.0/24")},
			want: []string{"D5/leaked"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var r quiescentReport
			r.checkDelegations(tt.objs, tt.hub, []string{"ns"})
			var got []string
			for _, f := range r.findings {
				parts := strings.Split(f.Key, "/")
				got = append(got, parts[0]+"/"+parts[len(parts)-1])
				if len(parts) > 2 && strings.HasPrefix(parts[len(parts)-2], "overlaps") {
					got[len(got)-1] = parts[0] + "/" + parts[len(parts)-2]
				}
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tt.want))
			if !slices.Equal(got, want) {
				t.Errorf("findings %v, want %v:\n%v", got, want, r.findings)
			}
		})
	}
}

// D6 on histories: a delegated pool's status shows a range only after a
// hub claim made for that pool object was Ready with it.
func TestDelegatedPoolServedOnlyAfterTheHubGranted(t *testing.T) {
	waiting := delegatedPool("d0", "10.248.0.0/24", "", pendingReady, pendingDeleg)
	served := delegatedPool("d0", "10.248.0.0/24", "10.248.0.0/24", readyAvailable, delegatedTrue)
	claim := hubClaimOf(fleetHubNamespace, fleetCluster, "d0", "").obj
	claim.MemberPoolUID = served.UID
	granted := claim
	granted.StatusCIDR, granted.Conditions = "10.248.0.0/24", []metav1.Condition{cond(ipamv1.ConditionReady, metav1.ConditionTrue, ipamv1.ReasonAllocated)}
	forAnother := granted
	forAnother.MemberPoolUID = "uid-of-an-earlier-object"
	otherRange := granted
	otherRange.StatusCIDR = "10.248.1.0/24"
	for _, tt := range []struct {
		name   string
		events []event
		want   []string
	}{
		{name: "granted, then served", events: []event{added(waiting.at(1)), added(claim.at(2)), modified(granted.at(3)), modified(served.at(4))}},
		{name: "served before the grant", events: []event{added(waiting.at(1)), added(claim.at(2)), modified(served.at(3)), modified(granted.at(4))},
			want: []string{"D6"}},
		{name: "served on a claim made for another object", events: []event{added(forAnother.at(1)), added(waiting.at(2)), modified(served.at(3))},
			want: []string{"D6"}},
		{name: "served on a grant of another range", events: []event{added(otherRange.at(1)), added(waiting.at(2)), modified(served.at(3))},
			want: []string{"D6"}},
		{name: "served without a claim", events: []event{added(served.at(1))}, want: []string{"D6"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := replay(tt.events...)
			var got []string
			for _, c := range checksOf(r.findings) {
				if strings.HasPrefix(c, "D") {
					got = append(got, c)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("checks %v, want %v; findings %v", got, tt.want, r.findings)
			}
		})
	}
}

// S2 on a delegated pool: a range its status shows before it ever served
// it (a restored status, kept but not served) is no grant, and dropping it
// is no withdrawal; a range it served is one.
func TestAKeptRangeIsNoGrant(t *testing.T) {
	kept := delegatedPool("d0", "10.248.0.0/24", "10.248.0.0/24", pendingReady, pendingDeleg)
	dropped := delegatedPool("d0", "10.248.0.0/24", "", pendingReady, pendingDeleg)
	served := delegatedPool("d0", "10.248.0.0/24", "10.248.0.0/24", readyAvailable, delegatedTrue)
	claim := hubClaimOf(fleetHubNamespace, fleetCluster, "d0", "10.248.0.0/24").obj
	claim.MemberPoolUID = served.UID
	for _, tt := range []struct {
		name   string
		events []event
		want   []string
	}{
		{name: "kept, then dropped", events: []event{added(kept.at(1)), modified(dropped.at(2))}},
		{name: "served, then dropped", events: []event{added(claim.at(1)), added(served.at(2)), modified(dropped.at(3))}, want: []string{"S2"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := checksOf(replay(tt.events...).findings); !slices.Equal(got, tt.want) {
				t.Errorf("checks %v, want %v", got, tt.want)
			}
		})
	}
}
