package lifecycle

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// ---- delegated root pools (spec.delegation, docs/fleet.md) ----
//
// The checker's managers are fleet members whose hub is the same API
// server (ops_delegation_test.go): their claims are Subnets in the hub
// namespace lifecycle-hub, of a plan pool in an address space of its own;
// a second member identity's claims, made by the test, are in
// lifecycle-hub-other. On the settled state:
//
//	D1  a delegated pool serves (Ready, status.cidr; a range shown while
//	    not Ready is kept, not served) only its spec.cidr, and only
//	    the range its claim in the hub holds (Ready, status.cidr), a claim
//	    made for that pool (its UID annotation), while it says Delegated;
//	    or it says DelegationLost (its claim was deleted in the hub and the
//	    hub does not grant the range again), the one state in which the
//	    documentation lets it serve a range the hub does not hold for it.
//	D2  no two delegated pools serve overlapping ranges, and no range a
//	    delegated pool serves overlaps a Ready claim in the hub of another
//	    member identity or another pool (the hub holds one claim per
//	    range), DelegationLost included: a finding names it either way.
//	D3  a delegated pool never overlaps another root pool of its address
//	    space (held ranges; the default space takes every test namespace).
//	D4  a delegated pool that serves nothing says why: Ready False with its
//	    Delegated condition's reason (DelegationPending), or Overlaps when
//	    the grant is recorded and a local root holds an overlapping range;
//	    never HubUnreachable once settled (the hub is this API server); and
//	    a grant the hub made (its claim Ready) that nothing local keeps from
//	    the pool is served. A served pool's Delegated condition is True
//	    (or DelegationLost, D1) once its claim holds its range again.
//	D5  in the hub: no two Ready claims of one pool hold overlapping ranges
//	    (any member identity), and no claim of this member outlives its
//	    pool (released once the pool is gone).
//
// And on the history, at every version (the hub is this API server, so
// one resourceVersion orders the member's pools and the hub's claims):
//
//	D6  a delegated pool serves a range (Ready, status.cidr) only after a
//	    claim in the hub made for that pool object (its UID annotation)
//	    was Ready with that range: no range is served before the hub
//	    granted it, whatever the settled state comes to. Statuses the test
//	    wrote (a restore) are masked; versions inside a gap or a relist are
//	    not judged.

// The hub side (ops_delegation_test.go sets it up).
const (
	// fleetHubNamespace is the members' namespace in the hub, named by
	// their hub kubeconfig's context; their --cluster-name differs, so
	// that a manager taking the cluster name for it fails every claim (a
	// finding of this checker, fixed in fleet.hubNamespace).
	fleetHubNamespace   = "lifecycle-hub"
	fleetCluster        = "lifecycle"           // the members' --cluster-name
	fleetOtherNamespace = "lifecycle-hub-other" // the other member identity's
	fleetPlanName       = "plan"
)

// fleetPlanNamespace is the current run's plan namespace (setupFleetRun).
var fleetPlanNamespace = "lifecycle1-plan"

// hubClaim is a Subnet in a hub namespace, with the member's labels and
// annotations.
type hubClaim struct {
	obj
	Member, MemberPool string
	MemberPoolUID      types.UID
}

// hubClaimName is the name of a member pool's claim in the hub, as
// fleet/hub.go names it: what the checker computes independently.
func hubClaimName(namespace, pool string) string {
	return fleetCluster + "." + namespace + "." + pool
}

// delegationSummary counts what the delegation checks saw.
type delegationSummary struct {
	pools, serving, lost, waiting int
	reasons                       map[string]int
}

// checkDelegations is D1-D5 on one settled listing: objs of the test's
// namespaces and the claims of the hub namespaces; namespaces are the
// run's (claims of pools of earlier runs' namespaces are not judged).
func (r *quiescentReport) checkDelegations(objs []obj, hub []hubClaim, namespaces []string) delegationSummary {
	sum := delegationSummary{reasons: map[string]int{}}
	claims := map[string]*hubClaim{} // "namespace/name"
	for i := range hub {
		claims[hub[i].path()] = &hub[i]
	}
	var delegated, roots []*obj
	for i := range objs {
		o := &objs[i]
		if o.Kind != kindPool || o.Ref != "" {
			continue
		}
		roots = append(roots, o)
		if o.Delegation != "" {
			delegated = append(delegated, o)
		}
	}
	slices.SortFunc(delegated, func(a, b *obj) int { return strings.Compare(a.key(), b.key()) })
	for _, p := range delegated {
		sum.pools++
		r.checks++
		claim := claims[fleetHubNamespace+"/"+hubClaimName(p.Namespace, p.Name)]
		del := findCondition(p, ipamv1.ConditionDelegated)
		if del != nil {
			sum.reasons[del.Reason]++
		}
		if p.Deleting {
			continue // L1: it waits for its users, then its claim is released
		}
		if p.delegatedServes().IsValid() {
			sum.serving++
			r.checkServing(p, claim, del, &sum)
		} else {
			sum.waiting++
			r.checkWaiting(p, claim, del, roots)
		}
	}
	r.checkDelegatedOverlaps(delegated, roots, hub)
	r.checkHub(hub, delegated, namespaces)
	return sum
}

// claimHolds is the range a hub claim holds (Ready), invalid if none.
func claimHolds(c *hubClaim) string {
	if c == nil || c.Deleting || !c.isReady() {
		return ""
	}
	return c.StatusCIDR
}

// delegatedServes is the range a delegated pool serves: the one its status
// shows while it is Ready (or ClaimsOutside, which serves). A range shown
// otherwise is kept from the member's other roots but not served (an
// unproven status, a restore: ledger/delegation.go).
func (o *obj) delegatedServes() netip.Prefix {
	if !o.isReady() && o.readyReason() != ipamv1.ReasonClaimsOutside {
		return netip.Prefix{}
	}
	return o.rootHeld()
}

// checkServing is D1 and D4 for a delegated pool that serves a range.
func (r *quiescentReport) checkServing(p *obj, claim *hubClaim, del *metav1.Condition, sum *delegationSummary) {
	served := p.rootHeld()
	if served != p.requested() {
		r.add("D1", id(p, "served-not-spec"), "delegated pool serves %s, not its spec.cidr %q: %s", served, p.CIDR, p)
	}
	holds := claimHolds(claim)
	if del != nil && del.Reason == ipamv1.ReasonDelegationLost && del.Status == metav1.ConditionFalse {
		sum.lost++
		// A claim deleted in the hub keeps its range (the member's
		// finalizer) while it is Terminating: DelegationLost is right then.
		if holds == served.String() && claim.MemberPoolUID == p.UID && !claim.Deleting {
			r.add("D4", id(p, "lost-but-held"), "delegated pool says DelegationLost (%s) though its claim in the hub holds %s again: %s\n\tclaim %s", conditionString(del), served, p, &claim.obj)
		}
		return
	}
	switch {
	case claim == nil:
		r.add("D1", id(p, "no-claim"), "delegated pool serves %s but has no claim in the hub (Subnet %s/%s) and does not say DelegationLost: %s",
			served, fleetHubNamespace, hubClaimName(p.Namespace, p.Name), p)
	case holds != served.String():
		r.add("D1", id(p, "claim-holds-other"), "delegated pool serves %s but its claim in the hub holds %q (Ready %s) and it does not say DelegationLost: %s\n\tclaim %s",
			served, holds, claim.readyReason(), p, &claim.obj)
	case claim.MemberPoolUID != p.UID:
		r.add("D1", id(p, "claim-of-other-uid"), "delegated pool serves %s from a claim made for another object of its name (uid %s): %s\n\tclaim %s",
			served, claim.MemberPoolUID, p, &claim.obj)
	case del == nil || del.Status != metav1.ConditionTrue || del.Reason != ipamv1.ReasonDelegated:
		r.add("D4", id(p, "served-not-delegated"), "delegated pool serves %s, held by its claim in the hub, but its Delegated condition is %s: %s",
			served, conditionString(del), p)
	}
}

// checkWaiting is D4 for a delegated pool that serves nothing.
func (r *quiescentReport) checkWaiting(p *obj, claim *hubClaim, del *metav1.Condition, roots []*obj) {
	ready := p.ready()
	switch {
	case del == nil:
		r.add("D4", id(p, "no-delegated"), "delegated pool serves nothing and has no Delegated condition: %s", p)
		return
	case del.Reason == ipamv1.ReasonHubUnreachable:
		r.add("D4", id(p, "unreachable"), "delegated pool still says HubUnreachable once settled, though the hub is this API server: %s (%s)", p, conditionString(del))
	case del.Reason == ipamv1.ReasonDelegationLost:
		r.add("D4", id(p, "lost-unserved"), "delegated pool says DelegationLost though it serves nothing: %s (%s)", p, conditionString(del))
	}
	if ready == nil || ready.Status == metav1.ConditionTrue {
		r.add("D4", id(p, "ready-unserved"), "delegated pool serves nothing but is not Ready=False: %s", p)
		return
	}
	var local []*obj
	if x := p.requested(); x.IsValid() {
		for _, o := range roots {
			if o != p && o.rootHeld().Overlaps(x) {
				local = append(local, o)
			}
		}
	}
	if del.Status == metav1.ConditionTrue {
		// Granted and recorded: only the member's own space keeps it.
		if ready.Reason != ipamv1.ReasonOverlaps || len(local) == 0 {
			r.add("D4", id(p, "granted-unserved"), "the hub granted delegated pool its spec.cidr (Delegated True) but it serves nothing: Ready %s, local root pools over it: %s: %s",
				ready.Reason, keys(local), p)
		}
		return
	}
	if ready.Reason != del.Reason && !(ready.Reason == ipamv1.ReasonOverlaps && len(local) > 0) {
		r.add("D4", id(p, "reason/"+ready.Reason), "delegated pool waits with Ready reason %s, but its Delegated condition says %s: %s", ready.Reason, conditionString(del), p)
	}
	// The hub granted a range to this pool's claim that the pool may take:
	// no local root over it, and its spec asks for it or for nothing yet.
	if holds := parsePrefix(claimHolds(claim)); holds.IsValid() && claim.MemberPoolUID == p.UID && (p.CIDR == "" || p.requested() == holds) {
		var over []*obj
		for _, o := range roots {
			if o != p && o.rootHeld().Overlaps(holds) {
				over = append(over, o)
			}
		}
		if len(over) == 0 {
			r.add("D4", id(p, "grant-unserved"), "the hub grants %s to delegated pool's claim and no local root pool overlaps it, but the pool serves nothing (%s): %s\n\tclaim %s",
				holds, conditionString(del), p, &claim.obj)
		}
	}
}

// checkDelegatedOverlaps is D2 and D3.
func (r *quiescentReport) checkDelegatedOverlaps(delegated, roots []*obj, hub []hubClaim) {
	for i, a := range delegated {
		ha := a.rootHeld()
		if !ha.IsValid() {
			continue
		}
		for _, b := range delegated[i+1:] {
			if b.rootHeld().Overlaps(ha) {
				r.add("D2", id(a, "overlaps/"+string(b.UID)), "two delegated pools serve overlapping ranges:\n\t%s\n\t%s", a, b)
			}
		}
		for _, o := range roots {
			if o.Delegation == "" && o.rootHeld().Overlaps(ha) {
				r.add("D3", id(a, "overlaps-root/"+string(o.UID)), "delegated pool overlaps a root pool of its address space:\n\t%s\n\t%s", a, o)
			}
		}
		served := a.delegatedServes()
		if !served.IsValid() {
			continue // a range kept, not served (an unproven status): D3 above
		}
		own := fleetHubNamespace + "/" + hubClaimName(a.Namespace, a.Name)
		for j := range hub {
			c := &hub[j]
			if c.path() == own || c.Ref != fleetPlanNamespace+"/"+fleetPlanName || !parsePrefix(claimHolds(c)).Overlaps(served) {
				continue
			}
			r.add("D2", id(a, "overlaps-claim/"+string(c.UID)), "delegated pool serves %s, which a Ready claim in the hub of member %q (pool %q) holds (%s):\n\t%s\n\tclaim %s",
				ha, c.Member, c.MemberPool, conditionString(findCondition(a, ipamv1.ConditionDelegated)), a, &c.obj)
		}
	}
}

// checkHub is D5.
func (r *quiescentReport) checkHub(hub []hubClaim, delegated []*obj, namespaces []string) {
	byPool := map[string][]*hubClaim{}
	for i := range hub {
		if c := &hub[i]; claimHolds(c) != "" {
			byPool[c.Ref] = append(byPool[c.Ref], c)
		}
	}
	for _, pool := range slices.Sorted(maps.Keys(byPool)) {
		cs := byPool[pool]
		slices.SortFunc(cs, func(a, b *hubClaim) int { return strings.Compare(a.key(), b.key()) })
		for i, a := range cs {
			for _, b := range cs[i+1:] {
				if parsePrefix(a.StatusCIDR).Overlaps(parsePrefix(b.StatusCIDR)) {
					r.add("D5", id(&a.obj, "overlaps/"+string(b.UID)), "two Ready claims of hub pool %s hold overlapping ranges:\n\t%s\n\t%s", pool, &a.obj, &b.obj)
				}
			}
		}
	}
	pools := map[string]bool{}
	for _, p := range delegated {
		pools[p.path()] = true
	}
	for i := range hub {
		c := &hub[i]
		ns, _, _ := strings.Cut(c.MemberPool, "/")
		if c.Namespace != fleetHubNamespace || c.Member != fleetCluster || c.Deleting || !slices.Contains(namespaces, ns) {
			continue
		}
		r.checks++
		if !pools[c.MemberPool] {
			r.add("D5", id(&c.obj, "leaked"), "claim in the hub outlives its member pool %s (not released): %s", c.MemberPool, &c.obj)
		}
	}
}

func conditionString(c *metav1.Condition) string {
	if c == nil {
		return "absent"
	}
	return fmt.Sprintf("%s/%s %q", c.Status, c.Reason, c.Message)
}

func (s delegationSummary) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(s.reasons)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, s.reasons[k]))
	}
	return fmt.Sprintf("%d delegated pools at the last phase end: %d serving (%d DelegationLost), %d waiting; Delegated reasons: %s",
		s.pools, s.serving, s.lost, s.waiting, strings.Join(parts, ", "))
}

// delegationOf is a pool's spec.delegation as the model keeps it.
func delegationOf(p *ipamv1.SubnetPool) string {
	if p.Spec.Delegation == nil {
		return ""
	}
	return p.Spec.Delegation.PoolRef.Namespace + "/" + p.Spec.Delegation.PoolRef.Name
}

// isHubClaim reports whether v is a Subnet of a hub namespace: a member's
// claim, recorded for D6 only.
func isHubClaim(v *obj) bool {
	return v.Kind == kindSubnet && (v.Namespace == fleetHubNamespace || v.Namespace == fleetOtherNamespace)
}

// noteHubGrant records the range a claim in the hub is Ready with, for the
// member pool it was made for (D6).
func (r *replayer) noteHubGrant(v *obj) {
	if v.MemberPoolUID == "" || v.StatusCIDR == "" || !v.isReady() {
		return
	}
	if r.hubGrants[v.MemberPoolUID] == nil {
		r.hubGrants[v.MemberPoolUID] = map[string]bool{}
	}
	r.hubGrants[v.MemberPoolUID][v.StatusCIDR] = true
}

// checkServedAfterGrant is D6 on a delegated pool's version that serves a
// range its previous version did not.
func (r *replayer) checkServedAfterGrant(tl *timeline, v *obj) {
	served := v.delegatedServes()
	if v.Kind != kindPool || v.Delegation == "" || !served.IsValid() {
		return
	}
	if n := len(tl.versions); n >= 2 && tl.versions[n-2].delegatedServes() == served {
		return
	}
	r.d6Checks++
	if !r.hubGrants[v.UID][v.StatusCIDR] {
		r.add("D6", string(v.UID)+"/"+v.StatusCIDR, "delegated pool shows %s at rv %d, before any claim in the hub made for it was Ready with that range: %s", v.StatusCIDR, v.RV, v)
	}
}
