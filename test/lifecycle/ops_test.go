//go:build integration

package lifecycle

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	capiipam "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// Operation kinds.
const (
	opCreateRootPool  = "create-root-pool"
	opCreateChildPool = "create-child-pool"
	opGrowPool        = "grow-pool"
	opShrinkPool      = "shrink-pool"
	opAddReserved     = "add-reserved"
	opRemoveReserved  = "remove-reserved"
	opChangeLengths   = "change-lengths"
	opDeletePool      = "delete-pool"
	opCreateExplicit  = "create-explicit-subnet"
	opCreateDynamic   = "create-dynamic-subnet"
	opDeleteSubnet    = "delete-subnet"
	opRecreateSubnet  = "recreate-subnet"
	opDrainPool       = "drain-pool"
	opRacePoolEdit    = "race-pool-edit"
	opChildShrink     = "child-shrink"
	opFlashRecreate   = "flash-recreate"
	opBurst           = "burst"
	opRestoreSubnet   = "restore-subnet"
	opRestoreRacer    = "restore-subnet-racer" // a dynamic create racing a restore (not drawn by itself)
	opRestart         = "restart-manager"
	opHandOver        = "hand-over"
	opFlipTenant      = "flip-tenant-label"
	opSetCaps         = "set-namespace-caps"
	opCreateClaim     = "create-address-claim"
	opDeleteClaim     = "delete-address-claim"
	opClaimBurst      = "address-claim-burst"
)

// tenantLabel marks the namespaces the platform namespace's pools allow
// (spec.allowedNamespaces Selector); flip-tenant-label adds and removes it.
const tenantLabel = "lifecycle.ipam.subnet-operator.io/tenant"

// platformConsent is every platform pool's spec.allowedNamespaces.
func platformConsent() *ipamv1.AllowedNamespaces {
	return &ipamv1.AllowedNamespaces{From: ipamv1.FromSelector, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{tenantLabel: "true"}}}
}

// opMix is the operation mix: each draw picks an operation with these
// relative weights. A burst or a fault is one draw but many requests (a
// burst is 10-40 concurrent creates and deletes; a hand-over and a restart
// run a smaller burst across the fault), and the -lifecycle.ops budget
// counts requests and faults. Per 100 draws:
//
//	operation               weight  exercises
//	create-root-pool           6    small IPv4 (/22-/26) and some IPv6 pools, so they fill up; pools after their Subnets
//	create-child-pool          7    nesting; a parent that is missing, a range outside or on a sibling
//	grow-pool                  3    spec.cidr to a containing prefix (a child grows into its siblings)
//	shrink-pool                3    spec.cidr to a contained prefix (rejected below claims; races grants)
//	add-reserved               2    a reserved range (rejected over claims; races grants)
//	remove-reserved            2    space returns: waiters must be woken
//	change-lengths             3    default/min/max prefix lengths (defaulting, bounds, Exhausted)
//	delete-pool                2    refused while in use
//	drain-pool                 3    delete a pool's Subnets and child pools, then the pool (finalizer), sometimes
//	                                racing a new Subnet of it; pool names are re-used
//	create-explicit-subnet    20    spec.cidr in, near or over a pool and its claims; before the pool exists; 1 in 10
//	                                with a spec.gateway (often among the first addresses), for claims of it
//	create-dynamic-subnet     20    spec.prefixLength, or none (the pool's default); exhaustion
//	delete-subnet             12    space returns: waiters must be woken
//	recreate-subnet            8    delete and create under the same name at once, same or other spec
//	burst                      2    10-40 concurrent requests (creates, deletes, re-creates, an edit of a pool they use):
//	                                simultaneous claims reach the arbiter, pool edits race grants
//	race-pool-edit             4    a reserved range over a new pool's low end (where best fit allocates), or a
//	                                shrink to its upper half, and 1-4 dynamic creates in it while the edit is decided
//	child-shrink               1    a parent filled up with a Subnet waiting PoolExhausted, then its child pool
//	                                shrinks: the space freed in the parent must go to the waiter
//	flash-recreate             2    3-8 Subnets each created, deleted and created again under the same name
//	                                with another spec at once: a status write for the first must not land on the second
//	restore-subnet             3    a Subnet exported as a backup tool keeps it (metadata and spec, no status; once
//	                                its range is recorded, if it gets one within the wait), deleted, and created
//	                                again from the export; sometimes 1-3 dynamic creates in its pool race the
//	                                re-create for the range it left
//	restart-manager            1    SIGKILL a replica (the leader or not), maybe during a burst; restart it
//	hand-over                  1    SIGTERM the leader during a burst; the other takes the lease; restart it
//	flip-tenant-label          2    add or remove a tenant namespace's label that the platform's pools select:
//	                                its claims keep their ranges, new ones are refused, waiting ones granted
//	set-namespace-caps         2    set, lower, raise or remove a platform pool's per-namespace caps (1-4 claims,
//	                                and/or a /26-/22's worth of addresses): held claims keep their ranges, grants
//	                                past a cap wait (Q1)
//	create-address-claim       6    a Cluster API IPAddressClaim of a Subnet of its namespace (mostly one believed
//	                                to exist, Ready or not; sometimes a missing one; 1 in 20 another kind of pool)
//	delete-address-claim       3    its address is released: kept for the cool-down, then handed out again
//	address-claim-burst        3    a small Subnet (/29-/32, /125-/128; sometimes explicit with a gateway) and 4-9
//	                                claims on it at once, half deleted again 0.2-1.5 s later (2 in 5 in the
//	                                foreground; some then created again under the same name) and 0-2 more 1-4 s
//	                                later: exhaustion, release, reuse after the cool-down; sometimes the Subnet is
//	                                deleted while its addresses are in use (its finalizer holds it)
//
// and, at Cluster API's edges (ops_addresses_test.go, which has their
// table): lag-address-watch 2, delete-address-claim-foreground 2,
// delete-subnet-foreground 2, write-address-by-hand 3, restore-address 3;
// and through the deprecated API version (ops_versions_test.go, which has
// its table): v1alpha1-round-trip 3; and a restored status
// (ops_restore_test.go, which has its table): restore-status 3; and
// delegated root pools of a hub (ops_delegation_test.go, which has its
// table): create-delegated-pool 4, delete-delegated-pool 2,
// delete-hub-claim 2, create-delegated-subnet 3, other-member-claim 2,
// restore-delegated-pool 2.
//
// A delete-subnet deletes the Subnet's claims first half the time (else the
// Subnet waits for them, terminating), a drain-pool mostly; the bursts of
// burst, hand-over and restart-manager include a few claim creates and
// deletes.
//
// Across namespaces: the platform namespace's pools allow the namespaces
// labelled tenant; 3 in 10 Subnets and 1 in 4 child pools of a tenant
// namespace claim from a platform pool.
var opMix = []struct {
	kind   string
	weight int
}{
	{opCreateRootPool, 6}, {opCreateChildPool, 7}, {opGrowPool, 3}, {opShrinkPool, 3}, {opAddReserved, 2},
	{opRemoveReserved, 2}, {opChangeLengths, 3}, {opDeletePool, 2}, {opDrainPool, 3}, {opCreateExplicit, 20}, {opCreateDynamic, 20},
	{opDeleteSubnet, 12}, {opRecreateSubnet, 8}, {opBurst, 2}, {opRacePoolEdit, 4}, {opChildShrink, 1}, {opFlashRecreate, 2},
	{opRestoreSubnet, 3}, {opRestart, 1}, {opHandOver, 1}, {opFlipTenant, 2}, {opSetCaps, 2},
	{opCreateClaim, 6}, {opDeleteClaim, 3}, {opClaimBurst, 3},
	// Cluster API's edges: ops_addresses_test.go.
	{opLagAddresses, 2}, {opDeleteClaimFg, 2}, {opDeleteSubnetFg, 2}, {opWriteAddress, 3}, {opRestoreAddress, 3},
	{opV1alpha1RoundTrip, 3},
	{opRestoreStatus, 3}, // a restored status: ops_restore_test.go
	// Delegated root pools of a hub: ops_delegation_test.go.
	{opCreateDelegated, 4}, {opDeleteDelegated, 2}, {opDeleteHubClaim, 2}, {opDelegatedSubnet, 3}, {opOtherMemberClaim, 2}, {opRestoreDelegated, 2},
}

// Names come from small pools, so that objects are re-created under a name
// that was used before and Subnets name pools that do not exist (yet).
const (
	poolNames   = 8
	subnetNames = 40
	claimNames  = 16
)

// ---- the generator ----

// generator draws operations from the seed. It keeps its own belief of
// what exists, updated from the outcomes of its sequential requests and
// the intent of its concurrent ones (never from the controllers' work), so
// a replay with the same seed sends the same requests as long as
// admission answers the sequential ones the same.
type generator struct {
	rng *rand.Rand
	nss []*nsPlan
	// platform is the namespace whose pools allow the tenant namespaces
	// (nil: none).
	platform *nsPlan
	// fleet: the hub (ops_delegation_test.go).
	fleet fleetBelief
}

type nsPlan struct {
	name    string
	index   int
	pools   map[string]*poolPlan
	subnets map[string]*subnetPlan
	claims  map[string]*claimPlan
	// written: the claim names the test wrote an IPAddress for (by hand
	// or restored) and has not removed yet.
	written map[string]bool
	// platform: its pools allow namespaces labelled tenant; tenant: it is
	// labelled so (as believed).
	platform, tenant bool
	// delegated: its delegated root pools (ops_delegation_test.go); the
	// explicit ones are in pools too.
	delegated map[string]*delegationPlan
}

type poolPlan struct {
	cidr netip.Prefix
	// parent is the parent's name, or "namespace/name" for a parent in
	// another namespace.
	parent        string
	reserved      []netip.Prefix
	def, min, max *int32
}

type subnetPlan struct {
	pool   string // a name, or "namespace/name" for a pool in another namespace
	cidr   netip.Prefix
	length *int32
}

// claimPlan is an IPAddressClaim: of a Subnet of its namespace, or ("") of
// another kind of pool.
type claimPlan struct {
	subnet string
}

// operation is one draw: requests run in order, except the last
// concurrent ones, which run all at once (a burst). Once after of those
// have returned, the fault strikes.
type operation struct {
	kind       string
	requests   []*request
	concurrent int
	after      int
	fault      *fault
	// lag: an IPAddress informer lag from the start of the operation
	// (ops_addresses_test.go).
	lag *lagFault
}

type fault struct {
	handOver bool // else a SIGKILL restart
	leader   bool // restart: kill the leader (else the other replica)
}

// request is one API call and what it does to the generator's belief if
// it succeeds; then is a request sent right after it (a re-create).
type request struct {
	rec    opRecord // what is logged: Op, Verb, Kind, Namespace, Name, Ref, CIDR, PrefixLength
	create client.Object
	patch  []byte
	apply  func(*opRecord)
	then   *request
	delay  time.Duration // before it is sent, to shape a race
	// export (verb "export") keeps what it reads; restore (a create)
	// sends what an export kept instead of create.
	export, restore *exported
	// foreground: a delete with propagationPolicy Foreground; addr: a
	// request on an IPAddress (ops_addresses_test.go).
	foreground bool
	addr       *addressOp
	// v1alpha1: a round trip through the deprecated version (ops_versions_test.go).
	v1alpha1 *v1alpha1Op
	// status: a status written as a backup tool restores it (ops_restore_test.go).
	status *statusRestoreOp
	// delegation: a delegated pool's restore (ops_delegation_test.go).
	delegation *delegationOp
	out        *opRecord // the outcome, once sent
}

// newGenerator draws from seed over namespaces; platform (one of them, or
// "") is the platform namespace, and tenants are the namespaces labelled
// tenant at the start.
func newGenerator(seed uint64, namespaces []string, platform string, tenants []string) *generator {
	g := &generator{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), fleet: fleetBelief{otherClaims: map[string]bool{}}}
	for i, ns := range namespaces {
		plan := &nsPlan{name: ns, index: i, pools: map[string]*poolPlan{}, subnets: map[string]*subnetPlan{}, claims: map[string]*claimPlan{}, written: map[string]bool{},
			delegated: map[string]*delegationPlan{}, platform: ns == platform, tenant: slices.Contains(tenants, ns)}
		g.nss = append(g.nss, plan)
		if plan.platform {
			g.platform = plan
		}
	}
	return g
}

// qualify is a reference made from ns as the checks name pools:
// "namespace/name".
func qualify(ns *nsPlan, ref string) string {
	if ref == "" || strings.Contains(ref, "/") {
		return ref
	}
	return ns.name + "/" + ref
}

// shared reports whether a claim from ns on ref is on a pool that claims
// from several namespaces can reach (a platform pool, or any pool in
// another namespace): its admission reads freshness cluster-wide.
func shared(ns *nsPlan, ref string) bool {
	return ns.platform || strings.Contains(ref, "/")
}

// claimSource picks where a new claim of ns goes: mostly its own
// namespace, sometimes (with probability p) a platform pool.
func (g *generator) claimSource(ns *nsPlan, p float64) *nsPlan {
	if g.platform != nil && ns != g.platform && g.chance(p) {
		return g.platform
	}
	return ns
}

// refIn names pool of src as ns references it.
func refIn(ns, src *nsPlan, pool string) string {
	if src == ns {
		return pool
	}
	return src.name + "/" + pool
}

func (g *generator) chance(p float64) bool { return g.rng.Float64() < p }

func (g *generator) pick(names []string) string { return names[g.rng.IntN(len(names))] }

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func poolName(i int) string   { return fmt.Sprintf("p%d", i) }
func subnetName(i int) string { return fmt.Sprintf("s%d", i) }
func claimName(i int) string  { return fmt.Sprintf("m%d", i) } // a machine's

// next draws an operation.
func (g *generator) next() *operation {
	total := 0
	for _, m := range opMix {
		total += m.weight
	}
	n := g.rng.IntN(total)
	kind := opMix[len(opMix)-1].kind
	for _, m := range opMix {
		if n < m.weight {
			kind = m.kind
			break
		}
		n -= m.weight
	}
	return g.make(kind)
}

func (g *generator) make(kind string) *operation {
	ns := g.nss[g.rng.IntN(len(g.nss))]
	if op := g.makeAddressOp(kind, ns); op != nil {
		return op
	}
	if op := g.makeDelegationOp(kind, ns); op != nil {
		return op
	}
	switch kind {
	case opBurst:
		reqs := g.burst(10 + g.rng.IntN(31))
		return &operation{kind: kind, requests: reqs, concurrent: len(reqs)}
	case opHandOver:
		reqs := g.burst(10 + g.rng.IntN(21))
		return &operation{kind: kind, requests: reqs, concurrent: len(reqs), after: g.rng.IntN(len(reqs)/2 + 1), fault: &fault{handOver: true}}
	case opRestart:
		op := &operation{kind: kind, fault: &fault{leader: g.chance(0.5)}}
		if g.chance(0.5) {
			op.requests = g.burst(5 + g.rng.IntN(11))
			op.concurrent, op.after = len(op.requests), g.rng.IntN(len(op.requests)/2+1)
		}
		return op
	case opRacePoolEdit:
		return g.racePoolEdit(ns)
	case opChildShrink:
		return g.childShrink(ns)
	case opFlashRecreate:
		return g.flashRecreate(ns)
	case opRestoreSubnet:
		return g.restoreSubnet(ns)
	case opDrainPool:
		return g.drainPool(ns)
	case opFlipTenant:
		return g.flipTenant()
	case opV1alpha1RoundTrip:
		return g.v1alpha1RoundTrip(ns)
	case opRestoreStatus:
		return g.restoreStatus(ns)
	case opSetCaps:
		return g.setCaps()
	case opClaimBurst:
		return g.claimBurst(ns)
	case opRecreateSubnet:
		names := sortedKeys(ns.subnets)
		if len(names) == 0 {
			return g.make(opCreateDynamic)
		}
		name := g.pick(names)
		del := g.deleteSubnet(ns, name)
		del.rec.Op = kind
		var create *request
		if old := ns.subnets[name]; g.chance(0.5) {
			create = g.subnetRequest(ns, name, old.pool, old.cidr, old.length)
		} else {
			create = g.newSubnet(ns, name, g.chance(0.5))
		}
		create.rec.Op = kind
		del.then = create
		return &operation{kind: kind, requests: []*request{del}}
	}
	var r *request
	switch kind {
	case opCreateRootPool:
		r = g.createRootPool(ns)
	case opCreateChildPool:
		r = g.createChildPool(ns)
	case opGrowPool, opShrinkPool, opAddReserved, opRemoveReserved, opChangeLengths:
		r = g.editPool(ns, kind)
	case opDeletePool:
		r = g.deletePool(ns)
	case opCreateExplicit, opCreateDynamic:
		name, ok := g.freeSubnetName(ns, nil)
		if !ok {
			return g.make(opDeleteSubnet)
		}
		r = g.newSubnet(ns, name, kind == opCreateExplicit)
	case opDeleteSubnet:
		names := sortedKeys(ns.subnets)
		name := subnetName(g.rng.IntN(subnetNames))
		if len(names) > 0 && g.chance(0.9) {
			name = g.pick(names)
		}
		r = g.deleteSubnet(ns, name)
		// Half the time its claims go first, as a cluster's machines would;
		// otherwise the Subnet waits for them, terminating.
		if claims := g.claimsOf(ns, name); len(claims) > 0 && g.chance(0.5) {
			op := &operation{kind: kind}
			for _, c := range claims {
				d := g.deleteClaim(ns, c)
				d.rec.Op = kind
				op.requests = append(op.requests, d)
			}
			op.requests = append(op.requests, r)
			return op
		}
	case opCreateClaim:
		name, ok := g.freeClaimName(ns, nil)
		if !ok {
			return g.make(opDeleteClaim)
		}
		r = g.newClaim(ns, name)
	case opDeleteClaim:
		names := sortedKeys(ns.claims)
		name := claimName(g.rng.IntN(claimNames))
		if len(names) > 0 && g.chance(0.9) {
			name = g.pick(names)
		}
		r = g.deleteClaim(ns, name)
	}
	return &operation{kind: kind, requests: []*request{r}}
}

// flipTenant adds or removes the tenant label of a namespace other than
// the platform's.
func (g *generator) flipTenant() *operation {
	var tenants []*nsPlan
	for _, ns := range g.nss {
		if !ns.platform {
			tenants = append(tenants, ns)
		}
	}
	if g.platform == nil || len(tenants) == 0 {
		return g.make(opCreateDynamic)
	}
	ns := tenants[g.rng.IntN(len(tenants))]
	next := !ns.tenant
	var value any // null removes the label
	if next {
		value = "true"
	}
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{tenantLabel: value}}})
	return &operation{kind: opFlipTenant, requests: []*request{{
		rec:   opRecord{Op: opFlipTenant, Verb: "patch", Kind: kindNamespace, Name: ns.name},
		patch: body,
		apply: func(rec *opRecord) {
			if rec.Outcome == outcomeUpdated {
				ns.tenant = next
			}
		},
	}}}
}

// setCaps sets, changes or removes a platform pool's per-namespace caps
// (merge patch: the pool's consent otherwise stays).
func (g *generator) setCaps() *operation {
	if g.platform == nil || len(g.platform.pools) == 0 {
		return g.make(opCreateDynamic)
	}
	name := g.pick(sortedKeys(g.platform.pools))
	var caps any // null removes them
	if g.chance(0.75) {
		c := map[string]any{}
		if g.chance(0.7) {
			c["maxClaims"] = 1 + g.rng.IntN(4)
		}
		if len(c) == 0 || g.chance(0.5) {
			c["maxAddresses"] = strconv.Itoa(1 << (6 + g.rng.IntN(5))) // a /26 to a /22 of IPv4
		}
		caps = c
	}
	body, _ := json.Marshal(map[string]any{"spec": map[string]any{"allowedNamespaces": map[string]any{"perNamespace": caps}}})
	return &operation{kind: opSetCaps, requests: []*request{{
		rec:   opRecord{Op: opSetCaps, Verb: "patch", Kind: kindPool, Namespace: g.platform.name, Name: name},
		patch: body,
	}}}
}

// drainPool deletes a pool's Subnets and child pools (as the generator
// believes them; a child pool drained first), then the pool; sometimes the
// pool's delete races a create of a Subnet in it (the pool may then stay
// Terminating with a user).
func (g *generator) drainPool(ns *nsPlan) *operation {
	names := sortedKeys(ns.pools)
	if len(names) == 0 {
		return g.make(opCreateRootPool)
	}
	pool := g.pick(names)
	op := &operation{kind: opDrainPool, requests: g.drain(ns, pool, map[string]bool{})}
	if name, ok := g.freeSubnetName(ns, nil); ok && g.chance(0.4) {
		var cidr netip.Prefix
		if pc := ns.pools[pool].cidr; g.chance(0.5) {
			cidr = g.within(pc, min(pc.Bits()+2, pc.Addr().BitLen()))
		}
		r := g.subnetRequest(ns, name, pool, cidr, nil)
		r.rec.Op = opDrainPool
		op.requests = append(op.requests, r)
		op.concurrent = 2
	}
	return op
}

// drain returns the requests that delete a pool and everything in it,
// deepest first.
func (g *generator) drain(ns *nsPlan, pool string, seen map[string]bool) []*request {
	if seen[pool] { // a cycle in the belief: stop
		return nil
	}
	seen[pool] = true
	var out []*request
	for _, child := range sortedKeys(ns.pools) {
		if ns.pools[child].parent == pool {
			out = append(out, g.drain(ns, child, seen)...)
		}
	}
	for _, name := range sortedKeys(ns.subnets) {
		if ns.subnets[name].pool == pool {
			if g.chance(0.8) { // its claims first, mostly: else it waits for them
				for _, c := range g.claimsOf(ns, name) {
					d := g.deleteClaim(ns, c)
					d.rec.Op = opDrainPool
					out = append(out, d)
				}
			}
			r := g.deleteSubnet(ns, name)
			r.rec.Op = opDrainPool
			out = append(out, r)
		}
	}
	del := g.deletePoolNamed(ns, pool)
	del.rec.Op = opDrainPool
	return append(out, del)
}

// racePoolEdit creates Subnets in a pool and edits the pool while they are
// being granted: the webhook may admit the edit before it sees a grant,
// and the arbiter may grant on a view without the edit. Either way a claim
// held outside the range or on a reserved range must be reported
// (ClaimsOutside), never lost.
func (g *generator) racePoolEdit(ns *nsPlan) *operation {
	op := &operation{kind: opRacePoolEdit}
	var pool string
	var plan *poolPlan
	k, fresh := g.unusedPoolName(ns)
	if fresh = fresh && g.chance(0.85); fresh {
		// Mostly a new pool: its low end is free, so the edit is admitted
		// unless the replica answering has seen a grant there.
		pool = poolName(k)
		bits := 23 + g.rng.IntN(3)
		plan = &poolPlan{cidr: g.within(g.home(ns, k, false), bits), def: ptr.To(int32(bits + 3))}
		r := g.poolCreate(ns, opRacePoolEdit, pool, plan)
		op.requests = append(op.requests, r)
	} else {
		pools := sortedKeys(ns.pools)
		if len(pools) == 0 {
			return g.make(opCreateRootPool)
		}
		pool = g.pick(pools)
		plan = ns.pools[pool]
	}
	taken := map[string]bool{}
	for range 1 + g.rng.IntN(4) {
		name, ok := g.freeSubnetName(ns, taken)
		if !ok {
			break
		}
		taken[ns.name+"/"+name] = true
		var length *int32
		if plan.def == nil || g.chance(0.3) {
			length = ptr.To(int32(min(plan.cidr.Bits()+2+g.rng.IntN(3), plan.cidr.Addr().BitLen())))
		}
		r := g.subnetRequest(ns, name, pool, netip.Prefix{}, length)
		r.rec.Op = opRacePoolEdit
		op.requests = append(op.requests, r)
	}
	next := *plan
	next.reserved = slices.Clone(plan.reserved)
	kind := opAddReserved
	if g.chance(0.3) && plan.cidr.Bits() < plan.cidr.Addr().BitLen()-1 {
		kind = opShrinkPool
		next.cidr = blockAt(plan.cidr, plan.cidr.Bits()+1, 1) // the upper half
	} else {
		low := netip.PrefixFrom(plan.cidr.Addr(), min(plan.cidr.Bits()+1+g.rng.IntN(2), plan.cidr.Addr().BitLen()))
		if !slices.Contains(next.reserved, low) {
			next.reserved = append(next.reserved, low)
		}
	}
	edit := g.patchPool(ns, pool, kind, &next)
	edit.rec.Op = opRacePoolEdit
	// The edit goes first and the creates follow it by 0-160 ms. Its
	// admission takes 15-150 ms (the freshness read may wait for the API
	// server's watch cache) and decides at its end: a grant before that is
	// seen and the edit rejected; a grant decided between the webhook's
	// decision and the arbiter seeing the edit is the race. A few creates
	// spread over the admission hit that window now and then. These delays
	// shape the traffic; they wait for nothing.
	creates := op.requests[len(op.requests)-len(taken):]
	for _, r := range creates {
		r.delay = time.Duration(g.rng.IntN(160)) * time.Millisecond
	}
	op.requests = slices.Insert(op.requests, len(op.requests)-len(creates), edit)
	op.concurrent = len(creates) + 1
	return op
}

// childShrink sets up a parent pool that is full and has a Subnet waiting
// (PoolExhausted), then shrinks its child pool, which frees space in the
// parent: the waiter must get it. Sequential, with waits on the waiter's
// state, so that the shrink comes after the wait began.
func (g *generator) childShrink(ns *nsPlan) *operation {
	var freePools []string
	for i := range poolNames {
		if ns.pools[poolName(i)] == nil {
			freePools = append(freePools, poolName(i))
		}
	}
	taken := map[string]bool{}
	var names []string
	for range 3 {
		if name, ok := g.freeSubnetName(ns, taken); ok {
			taken[ns.name+"/"+name] = true
			names = append(names, name)
		}
	}
	if len(freePools) < 2 || len(names) < 3 {
		return g.make(opDeleteSubnet)
	}
	i := g.rng.IntN(len(freePools) - 1)
	parentName, childName := freePools[i], freePools[i+1]
	k := int(parentName[1] - '0')
	parent := &poolPlan{cidr: g.within(g.home(ns, k, false), 26), def: ptr.To[int32](28)}
	child := &poolPlan{cidr: blockAt(parent.cidr, 27, 1), parent: parentName, def: ptr.To[int32](29)}
	op := &operation{kind: opChildShrink}
	add := func(r *request) {
		r.rec.Op = opChildShrink
		op.requests = append(op.requests, r)
	}
	add(g.poolCreate(ns, opChildShrink, parentName, parent))
	add(g.poolCreate(ns, opChildShrink, childName, child))
	// The parent's lower /27 holds two /28s; the third waits.
	for _, name := range names {
		add(g.subnetRequest(ns, name, parentName, netip.Prefix{}, ptr.To[int32](28)))
	}
	add(&request{rec: opRecord{Verb: "await", Kind: kindSubnet, Namespace: ns.name, Name: names[2],
		Message: ipamv1.ReasonPoolExhausted}})
	shrunk := *child
	shrunk.cidr = netip.PrefixFrom(child.cidr.Addr(), 28)
	add(g.patchPool(ns, childName, opShrinkPool, &shrunk))
	return op
}

// flashRecreate creates Subnets and at once deletes and re-creates each
// under the same name with another spec, while the controller is still
// deciding the first: a decision for the first object must not be written
// onto the second.
func (g *generator) flashRecreate(ns *nsPlan) *operation {
	pools := sortedKeys(ns.pools)
	if len(pools) == 0 {
		return g.make(opCreateRootPool)
	}
	op := &operation{kind: opFlashRecreate}
	taken := map[string]bool{}
	for range 3 + g.rng.IntN(6) {
		name, ok := g.freeSubnetName(ns, taken)
		if !ok {
			break
		}
		taken[ns.name+"/"+name] = true
		pool := g.pick(pools)
		plan := ns.pools[pool]
		first := g.subnetRequest(ns, name, pool, netip.Prefix{}, ptr.To(int32(min(plan.cidr.Bits()+2, plan.cidr.Addr().BitLen()))))
		second := g.newSubnet(ns, name, true)
		for _, r := range []*request{first, second} {
			r.rec.Op = opFlashRecreate
		}
		del := g.deleteSubnet(ns, name)
		del.rec.Op = opFlashRecreate
		first.then, del.then = del, second
		op.requests = append(op.requests, first)
	}
	op.concurrent = len(op.requests)
	return op
}

// restoreSubnet exports a Subnet the generator believes exists, deletes
// it and creates it again from the export: a restore from a backup without
// status. A dynamic Subnet whose range was recorded asks for that range
// again, as an explicit claim. With racers, dynamic creates of the same
// pool are sent together with the re-create: one of them may take the
// range first, and the restored Subnet must then wait, holding nothing
// that overlaps it.
func (g *generator) restoreSubnet(ns *nsPlan) *operation {
	names := sortedKeys(ns.subnets)
	if len(names) == 0 {
		return g.make(opCreateDynamic)
	}
	name := g.pick(names)
	plan := ns.subnets[name]
	box := &exported{}
	op := &operation{kind: opRestoreSubnet}
	export := &request{rec: opRecord{Op: opRestoreSubnet, Verb: "export", Kind: kindSubnet, Namespace: ns.name, Name: name}, export: box}
	del := g.deleteSubnet(ns, name)
	del.rec.Op = opRestoreSubnet
	restore := &request{
		rec:     opRecord{Op: opRestoreSubnet, Verb: "create", Kind: kindSubnet, Namespace: ns.name, Name: name, Ref: qualify(ns, plan.pool), Shared: shared(ns, plan.pool)},
		restore: box,
		apply: func(rec *opRecord) {
			if rec.Outcome == outcomeCreated {
				// The generator's belief stays what it asked for at first:
				// the recorded range is the controllers' work.
				ns.subnets[name] = plan
			}
		},
	}
	op.requests = []*request{export, del, restore}
	taken := map[string]bool{ns.name + "/" + name: true}
	for range g.rng.IntN(4) {
		racer, ok := g.freeSubnetName(ns, taken)
		if !ok {
			break
		}
		taken[ns.name+"/"+racer] = true
		r := g.subnetRequest(ns, racer, plan.pool, netip.Prefix{}, plan.length)
		r.rec.Op = opRestoreRacer
		op.requests = append(op.requests, r)
	}
	if len(op.requests) > 3 {
		op.concurrent = len(op.requests) - 2 // the re-create and its racers
	}
	return op
}

// exported is what a backup tool kept of a Subnet: filled when the export
// request is sent, read when the re-create is.
type exported struct {
	subnet *ipamv1.Subnet
}

// burst draws n requests for distinct names across the namespaces:
// creates of explicit and dynamic Subnets, deletes, re-creates under the
// same name, and a few edits of the pools they use (at most one per pool,
// so that the generator knows which edit came last).
func (g *generator) burst(n int) []*request {
	taken := map[string]bool{}
	var out []*request
	for range n {
		ns := g.nss[g.rng.IntN(len(g.nss))]
		existing := sortedKeys(ns.subnets)
		var r *request
		switch x := g.rng.Float64(); {
		case x < 0.06:
			// A claim created or deleted: faults strike claims in flight.
			claims := sortedKeys(ns.claims)
			if len(claims) > 0 && g.chance(0.4) {
				name := g.pick(claims)
				if taken[ns.name+"/claim/"+name] {
					continue
				}
				taken[ns.name+"/claim/"+name] = true
				r = g.deleteClaim(ns, name)
				break
			}
			name, ok := g.freeClaimName(ns, taken)
			if !ok {
				continue
			}
			taken[ns.name+"/claim/"+name] = true
			r = g.newClaim(ns, name)
		case x < 0.13:
			pools := sortedKeys(ns.pools)
			if len(pools) == 0 {
				continue
			}
			pool := g.pick(pools)
			if taken[ns.name+"/pool/"+pool] {
				continue
			}
			taken[ns.name+"/pool/"+pool] = true
			kinds := []string{opAddReserved, opAddReserved, opShrinkPool, opGrowPool, opRemoveReserved}
			r = g.editPoolNamed(ns, pool, kinds[g.rng.IntN(len(kinds))])
		case x < 0.23 && len(existing) > 0:
			name := g.pick(existing)
			if taken[ns.name+"/"+name] {
				continue
			}
			taken[ns.name+"/"+name] = true
			r = g.deleteSubnet(ns, name)
			if g.chance(0.5) { // and at once again, with another spec
				r.then = g.newSubnet(ns, name, g.chance(0.45))
				r.then.rec.Op = opBurst
			}
		default:
			name, ok := g.freeSubnetName(ns, taken)
			if !ok {
				continue
			}
			taken[ns.name+"/"+name] = true
			r = g.newSubnet(ns, name, g.chance(0.45))
		}
		r.rec.Op = opBurst
		out = append(out, r)
	}
	return out
}

func (g *generator) freeSubnetName(ns *nsPlan, taken map[string]bool) (string, bool) {
	var free []string
	for i := range subnetNames {
		if name := subnetName(i); ns.subnets[name] == nil && !taken[ns.name+"/"+name] {
			free = append(free, name)
		}
	}
	if len(free) == 0 {
		return "", false
	}
	return g.pick(free), true
}

// ---- address plan ----

// home is where pool pk of a namespace lives when it is a root pool: the
// first /21 of its own /16 (of 4 per namespace, so root pools of a
// namespace compete for ranges in the one address space), one of two /21s
// every namespace competes for (root pools across namespaces racing in the
// space), or a small IPv6 range.
func (g *generator) home(ns *nsPlan, k int, v6 bool) netip.Prefix {
	if v6 {
		return netip.MustParsePrefix(fmt.Sprintf("fd00:0:%x:%x::/117", ns.index, k%4))
	}
	if g.chance(0.2) {
		return netip.MustParsePrefix(fmt.Sprintf("10.250.%d.0/21", 8*(k%2)))
	}
	return netip.MustParsePrefix(fmt.Sprintf("10.%d.0.0/21", 16*ns.index+k%4))
}

// within returns a random aligned block of this length inside p.
func (g *generator) within(p netip.Prefix, length int) netip.Prefix {
	length = min(max(length, p.Bits()), p.Addr().BitLen())
	n := length - p.Bits()
	idx := uint64(0)
	if n > 0 {
		idx = g.rng.Uint64N(uint64(1) << min(n, 62))
	}
	return blockAt(p, length, idx)
}

// blockAt is the idx-th block of this length inside p.
func blockAt(p netip.Prefix, length int, idx uint64) netip.Prefix {
	a := new(big.Int).SetBytes(p.Addr().AsSlice())
	a.Add(a, new(big.Int).Lsh(new(big.Int).SetUint64(idx), uint(p.Addr().BitLen()-length)))
	addr, _ := netip.AddrFromSlice(a.FillBytes(make([]byte, p.Addr().BitLen()/8)))
	return netip.PrefixFrom(addr, length).Masked()
}

// lengths draws default/min/max prefix lengths for a pool of bits in a
// family of width w: mostly consistent, sometimes not (the schema rejects).
func (g *generator) lengths(bits, w int) (def, minLen, maxLen *int32) {
	clamp := func(n int) *int32 { return ptr.To(int32(min(max(n, bits), w))) }
	if g.chance(0.75) {
		def = clamp(bits + 2 + g.rng.IntN(4))
	}
	if g.chance(0.25) {
		minLen = clamp(bits + g.rng.IntN(3))
		if def != nil && *minLen > *def {
			minLen = ptr.To(*def)
		}
	}
	if g.chance(0.25) {
		base := bits + 3
		if def != nil {
			base = int(*def)
		}
		maxLen = clamp(base + g.rng.IntN(4))
		if minLen != nil && *maxLen < *minLen {
			maxLen = ptr.To(*minLen)
		}
	}
	if g.chance(0.04) {
		minLen, maxLen = clamp(bits+4), clamp(bits+2) // min > max: rejected
	}
	return def, minLen, maxLen
}

func (g *generator) reservedBlock(cidr netip.Prefix) netip.Prefix {
	length := min(cidr.Bits()+3+g.rng.IntN(3), cidr.Addr().BitLen())
	switch g.rng.IntN(3) {
	case 0: // the first block, as a gateway range
		return netip.PrefixFrom(cidr.Addr(), length)
	case 1: // the last block
		return blockAt(cidr, length, uint64(1)<<min(length-cidr.Bits(), 62)-1)
	}
	return g.within(cidr, length)
}

// ---- pool requests ----

func poolObject(ns, name string, p *poolPlan) *ipamv1.SubnetPool {
	o := &ipamv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: ipamv1.SubnetPoolSpec{
		CIDR: p.cidr.String(), ParentRef: referenceTo(p.parent), DefaultPrefixLength: p.def, MinPrefixLength: p.min, MaxPrefixLength: p.max,
	}}
	for _, r := range p.reserved {
		o.Spec.Reserved = append(o.Spec.Reserved, r.String())
	}
	return o
}

func (g *generator) freePoolName(ns *nsPlan) (int, bool) {
	var free []int
	for i := range poolNames {
		if ns.pools[poolName(i)] == nil {
			free = append(free, i)
		}
	}
	if len(free) == 0 || g.chance(0.05) { // sometimes one that exists: AlreadyExists
		return g.rng.IntN(poolNames), len(free) > 0
	}
	return free[g.rng.IntN(len(free))], true
}

// unusedPoolName picks a pool name that neither a pool nor a Subnet (as
// believed) uses: a pool created under it starts empty.
func (g *generator) unusedPoolName(ns *nsPlan) (int, bool) {
	used := map[string]bool{}
	for _, s := range ns.subnets {
		used[s.pool] = true
	}
	var free []int
	for i := range poolNames {
		if ns.pools[poolName(i)] == nil && !used[poolName(i)] {
			free = append(free, i)
		}
	}
	if len(free) == 0 {
		return 0, false
	}
	return free[g.rng.IntN(len(free))], true
}

func (g *generator) createRootPool(ns *nsPlan) *request {
	k, ok := g.freePoolName(ns)
	if !ok {
		return g.deletePool(ns)
	}
	v6 := g.chance(0.08)
	home := g.home(ns, k, v6)
	bits := 22 + g.rng.IntN(5)
	if v6 {
		bits = 118 + g.rng.IntN(5)
	}
	p := &poolPlan{cidr: g.within(home, bits)}
	p.def, p.min, p.max = g.lengths(bits, home.Addr().BitLen())
	if g.chance(0.3) {
		p.reserved = []netip.Prefix{g.reservedBlock(p.cidr)}
	}
	return g.poolCreate(ns, opCreateRootPool, poolName(k), p)
}

func (g *generator) createChildPool(ns *nsPlan) *request {
	k, ok := g.freePoolName(ns)
	if !ok {
		return g.deletePool(ns)
	}
	src := g.claimSource(ns, 0.25)
	parents := sortedKeys(src.pools)
	if len(parents) == 0 || g.chance(0.1) {
		// A parent that may not exist: rejected unless it does.
		parent := poolName(g.rng.IntN(poolNames))
		p := &poolPlan{parent: refIn(ns, src, parent), cidr: g.within(g.home(src, k, false), 24+g.rng.IntN(3))}
		return g.poolCreate(ns, opCreateChildPool, poolName(k), p)
	}
	parent := g.pick(parents)
	pc := src.pools[parent].cidr
	w := pc.Addr().BitLen()
	var cidr netip.Prefix
	switch {
	case pc.Bits() >= w-2:
		cidr = pc
	case g.chance(0.1): // over the parent's edge: out of range
		cidr = g.within(netip.PrefixFrom(pc.Addr(), pc.Bits()-1).Masked(), pc.Bits()+g.rng.IntN(2))
	case g.chance(0.5): // in the upper half, which best fit fills last
		cidr = g.within(blockAt(pc, pc.Bits()+1, 1), min(pc.Bits()+1+g.rng.IntN(3), w-2))
	default:
		cidr = g.within(pc, min(pc.Bits()+1+g.rng.IntN(3), w-2))
	}
	p := &poolPlan{parent: refIn(ns, src, parent), cidr: cidr}
	p.def, p.min, p.max = g.lengths(cidr.Bits(), w)
	if g.chance(0.15) {
		p.reserved = []netip.Prefix{g.reservedBlock(cidr)}
	}
	return g.poolCreate(ns, opCreateChildPool, poolName(k), p)
}

func (g *generator) poolCreate(ns *nsPlan, op, name string, p *poolPlan) *request {
	o := poolObject(ns.name, name, p)
	if o.Spec.ParentRef != nil && o.Spec.ParentRef.Namespace == "" && g.chance(0.3) {
		o.Spec.ParentRef.Namespace = ns.name
	}
	if ns.platform {
		o.Spec.AllowedNamespaces = platformConsent()
	}
	return &request{
		rec:    opRecord{Op: op, Verb: "create", Kind: kindPool, Namespace: ns.name, Name: name, Ref: qualify(ns, p.parent), CIDR: p.cidr.String()},
		create: o,
		apply: func(rec *opRecord) {
			if rec.Outcome == outcomeCreated {
				ns.pools[name] = p
			}
		},
	}
}

// editPool patches a believed pool's spec: cidr, lengths and reserved
// ranges together, each kept valid against the new cidr (the schema's
// rules), so the request tests the change it names.
func (g *generator) editPool(ns *nsPlan, kind string) *request {
	names := sortedKeys(ns.pools)
	if len(names) == 0 {
		return g.createRootPool(ns)
	}
	name := g.pick(names)
	if kind == opShrinkPool && g.chance(0.5) { // a child pool's shrink frees space in its parent
		var children []string
		for _, n := range names {
			if ns.pools[n].parent != "" {
				children = append(children, n)
			}
		}
		if len(children) > 0 {
			name = g.pick(children)
		}
	}
	return g.editPoolNamed(ns, name, kind)
}

func (g *generator) editPoolNamed(ns *nsPlan, name, kind string) *request {
	old := ns.pools[name]
	next := *old
	next.reserved = slices.Clone(old.reserved)
	w := old.cidr.Addr().BitLen()
	floor := 16
	if w == 128 {
		floor = 112
	}
	switch kind {
	case opGrowPool:
		bits := max(old.cidr.Bits()-1-g.rng.IntN(2), floor)
		next.cidr = netip.PrefixFrom(old.cidr.Addr(), bits).Masked()
	case opShrinkPool:
		bits := min(old.cidr.Bits()+1+g.rng.IntN(2), w-1)
		if g.chance(0.6) {
			next.cidr = netip.PrefixFrom(old.cidr.Addr(), bits) // the lower part, where best fit allocates
		} else {
			next.cidr = g.within(old.cidr, bits)
		}
	case opAddReserved:
		r := g.within(old.cidr, min(old.cidr.Bits()+2+g.rng.IntN(3), w))
		if !slices.Contains(next.reserved, r) {
			next.reserved = append(next.reserved, r)
		}
	case opRemoveReserved:
		if len(next.reserved) == 0 {
			return g.editPoolNamed(ns, name, opAddReserved)
		}
		i := g.rng.IntN(len(next.reserved))
		next.reserved = slices.Delete(next.reserved, i, i+1)
	case opChangeLengths:
		next.def, next.min, next.max = g.lengths(old.cidr.Bits(), w)
	}
	return g.patchPool(ns, name, kind, &next)
}

// patchPool sets a pool's spec to next (cidr, lengths and reserved ranges
// together), keeping it valid for the schema: lengths not shorter than the
// cidr, reserved ranges inside it.
func (g *generator) patchPool(ns *nsPlan, name, kind string, next *poolPlan) *request {
	bits := next.cidr.Bits()
	for _, l := range []**int32{&next.def, &next.min, &next.max} {
		if *l != nil && int(**l) < bits {
			*l = ptr.To(int32(bits))
		}
	}
	next.reserved = slices.DeleteFunc(next.reserved, func(r netip.Prefix) bool { return !inside(next.cidr, r) })
	spec := map[string]any{"cidr": next.cidr.String(), "defaultPrefixLength": next.def, "minPrefixLength": next.min, "maxPrefixLength": next.max}
	var reserved []string
	for _, r := range next.reserved {
		reserved = append(reserved, r.String())
	}
	spec["reserved"] = reserved // null when empty: removes the field
	body, _ := json.Marshal(map[string]any{"spec": spec})
	return &request{
		rec:   opRecord{Op: kind, Verb: "patch", Kind: kindPool, Namespace: ns.name, Name: name, Ref: qualify(ns, next.parent), CIDR: next.cidr.String()},
		patch: body,
		apply: func(rec *opRecord) {
			if rec.Outcome == outcomeUpdated {
				ns.pools[name] = next
			}
		},
	}
}

func (g *generator) deletePool(ns *nsPlan) *request {
	names := sortedKeys(ns.pools)
	name := poolName(g.rng.IntN(poolNames))
	if len(names) > 0 && g.chance(0.9) {
		name = g.pick(names)
	}
	return g.deletePoolNamed(ns, name)
}

func (g *generator) deletePoolNamed(ns *nsPlan, name string) *request {
	return &request{
		rec: opRecord{Op: opDeletePool, Verb: "delete", Kind: kindPool, Namespace: ns.name, Name: name},
		apply: func(rec *opRecord) {
			if rec.Outcome == outcomeDeleted || rec.Outcome == outcomeNotFound {
				delete(ns.pools, name)
			}
		},
	}
}

// ---- Subnet requests ----

// newSubnet draws a Subnet: its pool (mostly one believed to exist,
// sometimes any name: Subnets before pools) and its range or length.
func (g *generator) newSubnet(ns *nsPlan, name string, explicit bool) *request {
	src := g.claimSource(ns, 0.3)
	pools := sortedKeys(src.pools)
	var bare string
	if len(pools) > 0 && g.chance(0.8) {
		bare = g.pick(pools)
	} else {
		bare = poolName(g.rng.IntN(poolNames))
	}
	plan := src.pools[bare]
	pool := refIn(ns, src, bare)
	if !explicit {
		var length *int32
		switch {
		case g.chance(0.3): // the pool's default
		case plan == nil:
			length = ptr.To(int32(24 + g.rng.IntN(5)))
		case g.chance(0.05): // out of bounds
			length = ptr.To(int32(max(plan.cidr.Bits()-1, 0)))
		default:
			w := plan.cidr.Addr().BitLen()
			length = ptr.To(int32(min(plan.cidr.Bits()+1+g.rng.IntN(6), w)))
		}
		return g.subnetRequest(ns, name, pool, netip.Prefix{}, length)
	}
	var cidr netip.Prefix
	k := int(bare[1] - '0')
	switch {
	case plan == nil: // before its pool: somewhere a root pool of that name would be
		cidr = g.within(netip.PrefixFrom(g.home(src, k, false).Addr(), 22), 24+g.rng.IntN(5))
	case g.chance(0.12): // over a claim believed to exist: its range, or one around or inside it
		var same []netip.Prefix
		for _, sn := range sortedKeys(ns.subnets) {
			if s := ns.subnets[sn]; s.pool == pool && s.cidr.IsValid() {
				same = append(same, s.cidr)
			}
		}
		if len(same) > 0 {
			c := same[g.rng.IntN(len(same))]
			switch g.rng.IntN(3) {
			case 0:
				cidr = c
			case 1:
				cidr = netip.PrefixFrom(c.Addr(), max(c.Bits()-1, plan.cidr.Bits())).Masked()
			default:
				cidr = g.within(c, min(c.Bits()+1, c.Addr().BitLen()))
			}
			break
		}
		fallthrough
	default:
		w := plan.cidr.Addr().BitLen()
		length := min(plan.cidr.Bits()+1+g.rng.IntN(6), w)
		area := plan.cidr
		if g.chance(0.1) && area.Bits() > 8 { // near: maybe outside
			area = netip.PrefixFrom(area.Addr(), area.Bits()-1).Masked()
		}
		cidr = g.within(area, length)
	}
	r := g.subnetRequest(ns, name, pool, cidr, nil)
	if g.chance(0.1) { // a gateway, for the addresses claims get from it
		r.create.(*ipamv1.Subnet).Spec.Gateway = g.gatewayIn(cidr).String()
	}
	return r
}

func (g *generator) subnetRequest(ns *nsPlan, name, pool string, cidr netip.Prefix, length *int32) *request {
	s := &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: ns.name, Name: name}, Spec: ipamv1.SubnetSpec{PoolRef: *referenceTo(pool), PrefixLength: length}}
	op := opCreateDynamic
	if cidr.IsValid() {
		s.Spec.CIDR = cidr.String()
		op = opCreateExplicit
	}
	// Clients write the pool's namespace out, or leave it to admission to
	// fill (the defaulting webhook's match condition skips the former).
	if s.Spec.PoolRef.Namespace == "" && g.chance(0.3) {
		s.Spec.PoolRef.Namespace = ns.name
	}
	plan := &subnetPlan{pool: pool, cidr: cidr, length: length}
	return &request{
		rec: opRecord{Op: op, Verb: "create", Kind: kindSubnet, Namespace: ns.name, Name: name, Ref: qualify(ns, pool), Shared: shared(ns, pool),
			CIDR: s.Spec.CIDR, PrefixLength: length},
		create: s,
		apply: func(rec *opRecord) {
			if rec.Outcome == outcomeCreated {
				ns.subnets[name] = plan
			}
		},
	}
}

func (g *generator) deleteSubnet(ns *nsPlan, name string) *request {
	return &request{
		rec: opRecord{Op: opDeleteSubnet, Verb: "delete", Kind: kindSubnet, Namespace: ns.name, Name: name},
		apply: func(rec *opRecord) {
			if rec.Outcome == outcomeDeleted || rec.Outcome == outcomeNotFound {
				delete(ns.subnets, name)
			}
		},
	}
}

// ---- IPAddressClaim requests ----

// claimsOf are the claims the generator believes ask Subnet name for an
// address.
func (g *generator) claimsOf(ns *nsPlan, name string) []string {
	var out []string
	for _, c := range sortedKeys(ns.claims) {
		if ns.claims[c].subnet == name {
			out = append(out, c)
		}
	}
	return out
}

func (g *generator) freeClaimName(ns *nsPlan, taken map[string]bool) (string, bool) {
	var free []string
	for i := range claimNames {
		if name := claimName(i); ns.claims[name] == nil && !taken[ns.name+"/claim/"+name] {
			free = append(free, name)
		}
	}
	if len(free) == 0 {
		return "", false
	}
	return g.pick(free), true
}

// newClaim draws a claim: mostly of a Subnet believed to exist (Ready or
// not), preferably one whose pool is believed to exist too (more likely
// Ready); sometimes of any Subnet name (PoolNotReady until it exists); and
// 1 in 20 of another kind of pool, which the operator must leave alone.
func (g *generator) newClaim(ns *nsPlan, name string) *request {
	subnets := sortedKeys(ns.subnets)
	var pooled []string
	for _, sn := range subnets {
		if g.poolBelieved(ns, ns.subnets[sn].pool) {
			pooled = append(pooled, sn)
		}
	}
	var subnet string
	switch x := g.rng.Float64(); {
	case x < 0.05:
	case x < 0.15 || len(subnets) == 0:
		subnet = subnetName(g.rng.IntN(subnetNames))
	case x < 0.85 && len(pooled) > 0:
		subnet = g.pick(pooled)
	default:
		subnet = g.pick(subnets)
	}
	return g.claimRequest(ns, opCreateClaim, name, subnet)
}

// poolBelieved reports whether the pool a claim of ns references (a name,
// or "namespace/name") is believed to exist.
func (g *generator) poolBelieved(ns *nsPlan, ref string) bool {
	if other, name, ok := strings.Cut(ref, "/"); ok {
		for _, o := range g.nss {
			if o.name == other {
				return o.pools[name] != nil
			}
		}
		return false
	}
	return ns.pools[ref] != nil
}

// claimRequest creates claim name of Subnet subnet ("": of another kind of
// pool). Its Ref is the Subnet's "namespace/name" (references are local).
func (g *generator) claimRequest(ns *nsPlan, op, name, subnet string) *request {
	ref := capiipam.IPPoolReference{APIGroup: ipamv1.GroupVersion.Group, Kind: kindSubnet, Name: subnet}
	qualified := ns.name + "/" + subnet
	if subnet == "" {
		ref = capiipam.IPPoolReference{APIGroup: capiipam.GroupVersion.Group, Kind: "InClusterIPPool", Name: "elsewhere"}
		qualified = ""
	}
	plan := &claimPlan{subnet: subnet}
	return &request{
		rec:    opRecord{Op: op, Verb: "create", Kind: kindClaim, Namespace: ns.name, Name: name, Ref: qualified},
		create: &capiipam.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns.name, Name: name}, Spec: capiipam.IPAddressClaimSpec{PoolRef: ref}},
		apply: func(rec *opRecord) {
			if rec.Outcome == outcomeCreated {
				ns.claims[name] = plan
			}
		},
	}
}

func (g *generator) deleteClaim(ns *nsPlan, name string) *request {
	r := &request{
		rec: opRecord{Op: opDeleteClaim, Verb: "delete", Kind: kindClaim, Namespace: ns.name, Name: name},
		apply: func(rec *opRecord) {
			if rec.Outcome == outcomeDeleted || rec.Outcome == outcomeNotFound {
				delete(ns.claims, name)
			}
		},
	}
	if ns.written[name] {
		// The test wrote an IPAddress of this name: once the claim is
		// gone, it removes it if no one adopted it.
		r.then = g.tidyAddress(ns, name)
	}
	return r
}

// claimBurst makes a small Subnet and sends claims on it at once: a /29
// has 5 usable addresses, a /125 6, a /30 1, a /126 2, a /31 or /127 1, a
// /32 or /128 none (the gateway takes it). Some claims are deleted again a
// moment later and a few more arrive later still: the Subnet runs out
// (PoolExhausted), and a released address comes back only after the
// cool-down. Sometimes the Subnet is deleted while its addresses are in
// use: its finalizer must hold it until they are released.
func (g *generator) claimBurst(ns *nsPlan) *operation {
	host := []int{3, 3, 3, 2, 2, 1, 0}[g.rng.IntN(7)]
	// A pool whose maximum length admits the Subnet.
	var pools []string
	for _, pn := range sortedKeys(ns.pools) {
		pp := ns.pools[pn]
		if pp.max == nil || int(*pp.max) >= pp.cidr.Addr().BitLen()-host {
			pools = append(pools, pn)
		}
	}
	name, ok := g.freeSubnetName(ns, nil)
	if len(pools) == 0 || !ok {
		return g.make(opCreateClaim)
	}
	pool := g.pick(pools)
	pc := ns.pools[pool].cidr
	length := max(pc.Addr().BitLen()-host, pc.Bits())
	var subnet *request
	if g.chance(0.5) {
		area := pc
		if pc.Bits() < length && g.chance(0.5) {
			area = blockAt(pc, pc.Bits()+1, 1) // the upper half, which best fit fills last
		}
		cidr := g.within(area, length)
		subnet = g.subnetRequest(ns, name, pool, cidr, nil)
		if g.chance(0.7) {
			subnet.create.(*ipamv1.Subnet).Spec.Gateway = g.gatewayIn(cidr).String()
		}
	} else {
		subnet = g.subnetRequest(ns, name, pool, netip.Prefix{}, ptr.To(int32(length)))
	}
	subnet.rec.Op = opClaimBurst
	op := &operation{kind: opClaimBurst, requests: []*request{subnet}}
	ms := func(from, to int) time.Duration { return time.Duration(from+g.rng.IntN(to-from)) * time.Millisecond }
	taken := map[string]bool{}
	claim := func(delay time.Duration) *request {
		cn, ok := g.freeClaimName(ns, taken)
		if !ok {
			return nil
		}
		taken[ns.name+"/claim/"+cn] = true
		c := g.claimRequest(ns, opClaimBurst, cn, name)
		c.delay = delay
		return c
	}
	var claims []*request
	for range 4 + g.rng.IntN(6) {
		c := claim(0)
		if c == nil {
			break
		}
		if g.chance(0.5) { // released a moment later: its address cools down
			d := g.deleteClaim(ns, c.rec.Name)
			d.rec.Op, d.delay, d.foreground = opClaimBurst, ms(200, 1500), g.chance(0.4)
			c.then = d
			if g.chance(0.3) {
				// And a new claim under the same name at once: the old
				// IPAddress keeps the name until its cool-down ends
				// (AllocationFailed), then the new claim gets its own.
				again := g.claimRequest(ns, opClaimBurst, c.rec.Name, name)
				again.delay = ms(0, 500)
				d.then = again
			}
		}
		claims = append(claims, c)
	}
	for range g.rng.IntN(3) { // later: maybe into the cool-down of a released address
		if c := claim(ms(1000, 4000)); c != nil {
			claims = append(claims, c)
		}
	}
	if g.chance(0.15) {
		del := g.deleteSubnet(ns, name)
		del.rec.Op, del.delay, del.foreground = opClaimBurst, ms(500, 2500), g.chance(0.3)
		claims = append(claims, del)
	}
	op.requests = append(op.requests, claims...)
	op.concurrent = len(claims)
	return op
}

// gatewayIn draws a gateway address inside p that admission accepts: not
// the network or the IPv4 broadcast address of a range with two host bits
// or more. Half the time one of the first few, where the lowest free
// address is handed out: the allocation must step over it.
func (g *generator) gatewayIn(p netip.Prefix) netip.Addr {
	host := p.Addr().BitLen() - p.Bits()
	size := uint64(1) << min(host, 62)
	lo, hi := uint64(0), size // [lo, hi)
	if host >= 2 {
		lo = 1
		if p.Addr().Is4() {
			hi = size - 1
		}
	}
	if g.chance(0.5) {
		hi = min(hi, lo+4)
	}
	return blockAt(p, p.Addr().BitLen(), lo+g.rng.Uint64N(hi-lo)).Addr()
}

// The same seed draws the same requests, given the same outcomes: what
// makes -lifecycle.seed replay a run.
func TestGeneratorReplays(t *testing.T) {
	draw := func(seed uint64) []string {
		g := newGenerator(seed, []string{"a", "b", "p"}, "p", []string{"a"})
		var out []string
		for range 300 {
			op := g.next()
			for _, r := range op.requests {
				for ; r != nil; r = r.then {
					rec := r.rec
					switch rec.Verb {
					case "create":
						rec.Outcome = outcomeCreated
					case "patch":
						rec.Outcome = outcomeUpdated
					default:
						rec.Outcome = outcomeDeleted
					}
					if r.apply != nil {
						r.apply(&rec)
					}
					out = append(out, fmt.Sprintf("%s %s %s %s/%s %s %s %s", op.kind, rec.Verb, rec.Kind, rec.Namespace, rec.Name, rec.CIDR, r.patch, r.delay))
				}
			}
		}
		return out
	}
	a, b := draw(7), draw(7)
	if !slices.Equal(a, b) {
		t.Fatal("the same seed drew different requests")
	}
	if slices.Equal(a, draw(8)) {
		t.Fatal("different seeds drew the same requests")
	}
}

func TestBlockAt(t *testing.T) {
	for _, tt := range []struct {
		p      string
		length int
		idx    uint64
		want   string
	}{
		{"10.0.0.0/24", 26, 3, "10.0.0.192/26"},
		{"10.0.0.0/24", 24, 0, "10.0.0.0/24"},
		{"10.0.0.0/22", 32, 1023, "10.0.3.255/32"},
		{"fd00::/117", 120, 5, "fd00::500/120"},
	} {
		if got := blockAt(netip.MustParsePrefix(tt.p), tt.length, tt.idx); got.String() != tt.want {
			t.Errorf("blockAt(%s, %d, %d) = %s, want %s", tt.p, tt.length, tt.idx, got, tt.want)
		}
	}
}

// referenceTo is the reference a generator's name stands for: a pool of
// the object's own namespace ("name"), or of another ("namespace/name");
// none for "".
func referenceTo(ref string) *ipamv1.PoolReference {
	if ref == "" {
		return nil
	}
	if ns, name, ok := strings.Cut(ref, "/"); ok {
		return &ipamv1.PoolReference{Name: name, Namespace: ns}
	}
	return &ipamv1.PoolReference{Name: ref}
}
