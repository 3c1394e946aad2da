// Package ledger is the in-memory record of every SubnetPool and every claim
// (Subnet or child pool), fed by the manager's informers.
//
// The admission webhooks read it to answer "does this overlap anything" in
// O(log n) without listing a pool; the reconcilers use it as the arbiter
// that keeps any two Ready claims of one pool tree from overlapping:
// decisions are made under the ledger's one decision lock
// against what the informers delivered plus what the arbiter itself granted
// but the informers have not shown yet (the "assumed" ranges, as in
// kube-scheduler).
//
// Everything is keyed by namespace and name (claimID, poolID), so that a
// claim's pool, and a pool's parent, may live in another namespace: the
// overlap domain is a root pool's tree, wherever its objects live
// (docs/design/tenancy.md).
//
// It keeps facts, not objects: parsed ranges, names, timestamps. Nothing here
// deep-copies a pool.
package ledger

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/btree"
	"go4.org/netipx"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ipspace"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

// ClaimKey names a claim within a namespace: "Subnet/<name>" or
// "SubnetPool/<name>" (a child pool's claim on its parent).
type ClaimKey string

// SubnetKey is the key of a Subnet's claim.
func SubnetKey(name string) ClaimKey { return ClaimKey(statuscalc.KindSubnet + "/" + name) }

// PoolKey is the key of a child pool's claim on its parent.
func PoolKey(name string) ClaimKey { return ClaimKey(statuscalc.KindSubnetPool + "/" + name) }

// Kind returns the claim's kind.
func (k ClaimKey) Kind() string {
	for i := range len(k) {
		if k[i] == '/' {
			return string(k[:i])
		}
	}
	return ""
}

// Name returns the claimant's name.
func (k ClaimKey) Name() string {
	for i := range len(k) {
		if k[i] == '/' {
			return string(k[i+1:])
		}
	}
	return string(k)
}

// claimID names a claim in the cluster as one string,
// "<namespace>/<Kind>/<name>": the key of the ledger's maps and of its
// pools' range indexes (which need an ordered key). A namespace has no "/".
// The claim's namespace and ClaimKey are substrings of it, so a claim keeps
// one string for all three.
type claimID string

func idOf(namespace string, key ClaimKey) claimID { return claimID(namespace + "/" + string(key)) }

func (id claimID) namespace() string {
	ns, _, _ := strings.Cut(string(id), "/")
	return ns
}

func (id claimID) key() ClaimKey {
	_, key, _ := strings.Cut(string(id), "/")
	return ClaimKey(key)
}

// ref is the claim's name as the rest of the operator spells it.
func (id claimID) ref() statuscalc.ClaimRef {
	key := id.key()
	return statuscalc.ClaimRef{Kind: key.Kind(), Namespace: id.namespace(), Name: key.Name()}
}

// poolID names a pool in the cluster: "<namespace>/<name>".
type poolID string

func poolIDOf(namespace, name string) poolID { return poolID(namespace + "/" + name) }

// reference is the pool's reference as a Subnet or child pool spells it.
func (id poolID) reference() ipamv1.PoolReference {
	return ipamv1.PoolReference{Namespace: id.namespace(), Name: id.name()}
}

func (id poolID) namespace() string {
	ns, _, _ := strings.Cut(string(id), "/")
	return ns
}

func (id poolID) name() string {
	_, name, _ := strings.Cut(string(id), "/")
	return name
}

// claimID is the pool's own claim on its parent (a child pool's).
func (id poolID) claimID() claimID { return idOf(id.namespace(), PoolKey(id.name())) }

// claim is what the ledger knows of a Subnet, or of a child pool as a claim
// on its parent.
type claim struct {
	id      claimID
	pool    poolID // the pool it claims from (spec.poolRef, or a child's spec.parentRef)
	uid     types.UID
	rv      string // the resourceVersion of the object the facts come from
	created time.Time
	seen    int64 // when the ledger first saw it, Unix nanoseconds (8 bytes, not 24: one per claim)

	// requested is the explicit range asked for (a Subnet's spec.cidr, a
	// child pool's spec.cidr); invalid for a Subnet that asks for a length.
	requested netip.Prefix
	// prefixLength is a Subnet's spec.prefixLength, or -1.
	prefixLength int
	// invalidSpec: spec.cidr is set but does not parse (only when the schema
	// and the webhook were bypassed).
	invalidSpec bool

	// held is the range the API shows as held (a Ready Subnet's status.cidr,
	// a child pool's status.cidr); assumed is the range the arbiter granted
	// and is writing. The claim holds assumed if valid, else held.
	held    netip.Prefix
	assumed netip.Prefix
	// heldSince orders claims whose held ranges collide: the ledger's
	// event count when the claim was granted its range or the API first
	// showed it, 0 for a range the claim showed in the start-up list
	// (where age decides; a claim first seen later, on a relist or under
	// a new UID, is seen now). A status that
	// a restore or a hand writes over a range another claim holds is seen
	// after that claim's, and loses to it whatever the objects' ages.
	heldSince uint64
	// placed are the ranges of the claim's footprint held in its pool's
	// free-space map. A range that collides with another claim's (a
	// bypassed arbiter, a hand-written status) is not placed; the claim is
	// then in its slot's collisions, and its ranges are kept from others.
	placed []netip.Prefix
	// outside: part of the footprint breaks its pool's current rules: it
	// lies outside the range the pool serves (not placed) or on a reserved
	// range (placed, carved out of the reserved space). Only a pool edit
	// that raced the grant does that; the claim keeps its range and the pool
	// reports it (reason ClaimsOutside).
	outside bool

	// reason is the Ready condition's reason in status, for reporting.
	reason string
	// gateway is a Subnet's spec.gateway, nil if unset (most): the
	// addresses it hands to Cluster API machines (addresses.go).
	gateway *netip.Addr
	// protected: the Subnet has the finalizer that keeps it while
	// addresses of it are in use (package capi).
	protected bool

	// What the Subnet controller reads of a Subnet besides the facts above
	// (nothing else keeps Subnets in memory: the ledger is their only
	// store). Unset for a child pool's claim.
	generation int64
	deleting   bool
	// The status as the API shows it: shown when it has the form the
	// controller writes (most are), else a full copy in status; both nil
	// while the status is empty.
	shown  *shownStatus
	status *ipamv1.SubnetStatus
}

// shownStatus is what a status in the form the Subnet controller writes has
// beyond the claim's facts: one Ready condition, True exactly when the
// status shows a range (held, with its address count), reason as in claim,
// both observedGenerations equal. About 60 bytes instead of ~240 for a copy.
type shownStatus struct {
	generation int64 // observedGeneration
	since      int64 // the Ready condition's lastTransitionTime, Unix seconds (its precision in the API)
	message    string
}

// compactStatus returns st as a shownStatus if it has the controller's
// form for a claim holding held, with the gateway in effect that the
// address plan gives for gateway (spec.gateway; invalid: the default).
func compactStatus(st *ipamv1.SubnetStatus, held netip.Prefix, gateway netip.Addr) (*shownStatus, bool) {
	if len(st.Conditions) != 1 || st.IPAddresses != nil {
		return nil, false
	}
	c := st.Conditions[0]
	if c.Type != ipamv1.ConditionReady || c.ObservedGeneration != st.ObservedGeneration || c.LastTransitionTime.Nanosecond() != 0 {
		return nil, false
	}
	switch c.Status {
	case metav1.ConditionTrue:
		if !held.IsValid() || st.CIDR != held.String() || st.Addresses != ipspace.AddressCount(held).String() ||
			st.Gateway != PlanAddresses(held, gateway).Gateway.String() {
			return nil, false
		}
	case metav1.ConditionFalse:
		if st.CIDR != "" || st.Addresses != "" || st.Gateway != "" {
			return nil, false
		}
	default:
		return nil, false
	}
	return &shownStatus{generation: st.ObservedGeneration, since: c.LastTransitionTime.Unix(), message: c.Message}, true
}

// subnetStatus rebuilds the status the API shows. The caller holds the lock.
func (c *claim) subnetStatus() ipamv1.SubnetStatus {
	switch {
	case c.status != nil:
		return *c.status.DeepCopy()
	case c.shown == nil:
		return ipamv1.SubnetStatus{}
	}
	st := ipamv1.SubnetStatus{ObservedGeneration: c.shown.generation}
	ready := metav1.Condition{
		Type: ipamv1.ConditionReady, Status: metav1.ConditionFalse, ObservedGeneration: c.shown.generation,
		LastTransitionTime: metav1.Unix(c.shown.since, 0), Reason: c.reason, Message: c.shown.message,
	}
	if c.held.IsValid() {
		ready.Status = metav1.ConditionTrue
		st.CIDR, st.Addresses = c.held.String(), ipspace.AddressCount(c.held).String()
		st.Gateway = PlanAddresses(c.held, c.gatewayAddr()).Gateway.String()
	}
	st.Conditions = []metav1.Condition{ready}
	return st
}

// holds is the range the claim holds, as decided: the grant being written,
// else what the API shows.
func (c *claim) holds() netip.Prefix {
	if c.assumed.IsValid() {
		return c.assumed
	}
	return c.held
}

// footprint is what the claim's pool must keep from other claims: what the
// API shows it holding and, while a grant is being written, the grant too.
// Until the API shows a child pool's new range, its old one may still hold
// claims of its own, and after a hand-over the next leader reads only what
// the API shows: so a child pool that shrinks keeps its old range, and one
// that moves keeps both, until the informer delivers the new status.
func (c *claim) footprint() []netip.Prefix {
	a, h := c.assumed, c.held
	switch {
	case !a.IsValid() && !h.IsValid():
		return nil
	case !a.IsValid() || a == h:
		return []netip.Prefix{h}
	case !h.IsValid():
		return []netip.Prefix{a}
	case statuscalc.Contains(h, a):
		return []netip.Prefix{h}
	case statuscalc.Contains(a, h):
		return []netip.Prefix{a}
	}
	return []netip.Prefix{h, a}
}

// unconfirmed reports whether the claim has a grant that the informer has
// not shown back yet. A child pool's grant does not change again until it
// has: the write may have landed, and another grant would then not cover
// what the API shows.
func (c *claim) unconfirmed() bool {
	return c.assumed.IsValid() && c.assumed != c.held
}

// serves is the part of a child pool's grant that the API already shows:
// its claims are granted only from there, so none of them lies in a range
// the child might not get once the API is read again (by a new leader).
func (c *claim) serves() netip.Prefix {
	a, h := c.assumed, c.held
	switch {
	case !a.IsValid():
		return h
	case !h.IsValid():
		return netip.Prefix{}
	case statuscalc.Contains(h, a):
		return a
	case statuscalc.Contains(a, h):
		return h
	}
	return netip.Prefix{}
}

// gatewayAddr is spec.gateway, invalid if unset.
func (c *claim) gatewayAddr() netip.Addr {
	if c.gateway == nil {
		return netip.Addr{}
	}
	return *c.gateway
}

// key is the claim's key within its namespace.
func (c *claim) key() ClaimKey { return c.id.key() }

func (c *claim) statuscalcClaim() statuscalc.Claim {
	return statuscalc.Claim{
		Ref:       c.id.ref(),
		Requested: c.requested,
		Held:      c.holds(),
		Created:   c.created,
	}
}

// pool is what the ledger knows of a SubnetPool.
type pool struct {
	id         poolID
	uid        types.UID
	rv         string
	generation int64
	created    time.Time
	deleting   bool

	spec   netip.Prefix // spec.cidr; invalid if it does not parse
	parent poolID       // "" for a root pool
	// space is a root pool's address space slot (spaces.go); "" for a
	// child pool.
	space poolID
	// synthetic: the pool of an address space's slot, not an object.
	synthetic  bool
	defaultLen int // -1 if unset
	minLen     int // -1 if unset
	maxLen     int // -1 if unset
	reserved   []netip.Prefix
	statusCIDR netip.Prefix // status.cidr as the API shows it
	// awaitingHub: a delegated root pool whose spec.cidr the hub has not
	// granted (delegation.go); it asks its space for nothing.
	awaitingHub bool
	// labels are the pool's labels, for the metrics (the alert opt-out).
	labels map[string]string
	// consent is spec.allowedNamespaces: who may claim from the pool.
	consent consent
}

// claimsFrom is the slot the pool's own claim is on: its parent's, or a
// root pool's address space's.
func (p *pool) claimsFrom() poolID {
	if p.parent != "" {
		return p.parent
	}
	return p.space
}

// slot gathers everything about one pool name: the pool (nil while it does
// not exist), the claims that reference it, the index of their ranges and the
// free-space map of the range it serves.
type slot struct {
	id poolID
	// self is the pool's own claim on its parent, if it is a child pool.
	self   claimID
	pool   *pool
	claims map[claimID]*claim
	// index holds each claim's requested range and, if different, the range
	// it holds: every range a new claim must not overlap.
	index *ipspace.Index[claimID]
	// serving is the range the pool hands out: spec.cidr for a root pool,
	// the range the parent granted for a child pool. space maps it; both are
	// unset while the pool serves nothing.
	serving netip.Prefix
	space   *ipspace.Space
	// spaceReserved is the reserved list space was built with.
	spaceReserved []netip.Prefix
	// collisions holds the claims whose held range is not placed because it
	// collides (see claim.placed).
	collisions map[claimID]struct{}
	// outside holds the claims whose held range breaks the pool's current
	// rules (see claim.outside).
	outside map[claimID]struct{}
	// own and foreign hold the claims on the pool by namespace: own its
	// own namespace's (nil while it has none), foreign every other
	// namespace's. Consent applies to the foreign ones only and is a
	// property of the namespace, so a question about consent costs
	// O(namespaces) plus what it names: a namespace the pool does not allow
	// is skipped whole or read from its holders, never walked claim by
	// claim (a tenant's junk does not slow this pool's answers to others).
	own     *members
	foreign map[string]*members
	// holdings tallies, by namespace other than the pool's, the claims
	// that hold a range and their addresses, kept by indexClaim: the
	// per-namespace caps are checked in O(1) under the decision lock
	// (limits.go).
	holdings map[string]*holdings
	// opened is set once the pool was seen allowing other namespaces, and
	// stays: claims they made then may still be on their way to this
	// replica after the pool went back to Same (SharedDomain).
	opened bool
	// requests holds the explicit requests that do not hold their range: the
	// claims a sweep decides. A subset of waiting, kept apart so that a
	// dynamic allocation does not scan the dynamic claims waiting with it.
	requests map[claimID]struct{}
	// waiting holds the claims that hold nothing, or ask for a range other
	// than the one they hold: the claims to wake when the pool changes.
	waiting map[claimID]struct{}
	// subnets and children count the claims by kind; reasons counts them by
	// the Ready reason their status shows ("" before the first status).
	subnets, children int
	reasons           map[string]int
	// sweep is set when pending explicit requests must be arbitrated again:
	// a request arrived, or held space was released.
	sweep bool
}

// members are one namespace's claims on one pool, indexed for the
// questions a tenant's junk must not slow down: who uses the pool (Users),
// and which refused claims still hold a range (PoolFigures).
type members struct {
	// listed holds every claim in listing order: a claimID's order within
	// one namespace is the order of compareRefs (Subnets before child
	// pools, since "Subnet/" sorts before "SubnetPool/", then by name).
	listed *btree.BTreeG[claimID]
	// holding holds, in the same order, the claims that hold a range:
	// those a pool that no longer allows their namespace still reports.
	holding *btree.BTreeG[claimID]
	// idleSubnets and idleChildren count the claims that hold nothing, by
	// kind: in a namespace the pool does not allow, they use nothing of it.
	idleSubnets, idleChildren int
	// The claims of slot.waiting, filed by what a release must offer them
	// (afterRelease): the explicit requests, and the dynamic claims by the
	// prefixLength they ask for (-1: the pool's default), so that a release
	// skips a refused namespace whole and a length that does not fit in
	// O(1). lengthOf says where each dynamic waiter is filed.
	waitingRequests map[claimID]struct{}
	waitingByLength map[int]map[claimID]struct{}
	lengthOf        map[claimID]int
}

// membersDegree is the B-tree degree of members' indexes, as ipspace's.
const membersDegree = 16

func newMembers() *members {
	return &members{listed: btree.NewOrderedG[claimID](membersDegree), holding: btree.NewOrderedG[claimID](membersDegree),
		waitingRequests: map[claimID]struct{}{}, waitingByLength: map[int]map[claimID]struct{}{}, lengthOf: map[claimID]int{}}
}

// fileWaiting files c among the waiting claims (waits) or takes it out.
func (m *members) fileWaiting(c *claim, waits bool) {
	delete(m.waitingRequests, c.id)
	if length, filed := m.lengthOf[c.id]; filed {
		delete(m.lengthOf, c.id)
		if delete(m.waitingByLength[length], c.id); len(m.waitingByLength[length]) == 0 {
			delete(m.waitingByLength, length)
		}
	}
	switch {
	case !waits:
	case c.requested.IsValid():
		m.waitingRequests[c.id] = struct{}{}
	default:
		if m.waitingByLength[c.prefixLength] == nil {
			m.waitingByLength[c.prefixLength] = map[claimID]struct{}{}
		}
		m.waitingByLength[c.prefixLength][c.id] = struct{}{}
		m.lengthOf[c.id] = c.prefixLength
	}
}

func (m *members) countIdle(c *claim, delta int) {
	if c.key().Kind() == statuscalc.KindSubnet {
		m.idleSubnets += delta
	} else {
		m.idleChildren += delta
	}
}

// membersOf returns a namespace's claims on the slot's pool, nil if it
// has none.
func (s *slot) membersOf(namespace string) *members {
	if namespace == s.id.namespace() {
		return s.own
	}
	return s.foreign[namespace]
}

// eachMembers calls fn for each namespace with claims on the pool.
func (s *slot) eachMembers(fn func(namespace string, m *members)) {
	if s.own != nil {
		fn(s.id.namespace(), s.own)
	}
	for ns, m := range s.foreign {
		fn(ns, m)
	}
}

// join records a new claim among its namespace's claims on the pool; it
// holds nothing until noteHolding says otherwise.
func (s *slot) join(c *claim) {
	ns := c.id.namespace()
	m := s.membersOf(ns)
	if m == nil {
		m = newMembers()
		if ns == s.id.namespace() {
			s.own = m
		} else {
			s.foreign[ns] = m
		}
	}
	m.listed.ReplaceOrInsert(c.id)
	m.countIdle(c, +1)
}

// leave forgets a claim among its namespace's claims on the pool.
func (s *slot) leave(c *claim) {
	ns := c.id.namespace()
	m := s.membersOf(ns)
	if m == nil {
		return
	}
	m.listed.Delete(c.id)
	m.fileWaiting(c, false)
	if _, held := m.holding.Delete(c.id); !held {
		m.countIdle(c, -1)
	}
	if m.listed.Len() == 0 {
		if ns == s.id.namespace() {
			s.own = nil
		} else {
			delete(s.foreign, ns)
		}
	}
}

// noteHolding keeps c's namespace's holders and idle counts current.
func (s *slot) noteHolding(c *claim) {
	m := s.membersOf(c.id.namespace())
	holds := c.holds().IsValid()
	if m == nil || m.holding.Has(c.id) == holds {
		return
	}
	if holds {
		m.holding.ReplaceOrInsert(c.id)
		m.countIdle(c, -1)
	} else {
		m.holding.Delete(c.id)
		m.countIdle(c, +1)
	}
}

// book is everything the ledger knows, guarded by Ledger.mu.
//
// One lock for every decision, not one per overlap domain: a child pool
// whose parent does not exist yet belongs to no known domain, and when the
// parent appears two domains merge; per-domain locks would need an ordering
// rule and a re-check after each re-lock. A decision takes microseconds
// (docs/benchmarks.md), so one lock serializes little that a pool's own
// lock would not (docs/architecture.md, "The decision lock").
type book struct {
	slots map[poolID]*slot
	// namespaces holds each namespace's claims and object counts (the
	// barrier's), so that a namespace that empties leaves nothing behind.
	// (Reads of everything go slot by slot: Ledger.eachSlot.)
	namespaces map[string]*namespaceRecord
	// nsLabels holds every namespace's labels (the Namespaces' metadata
	// informer), for consent: spec.allowedNamespaces' selectors.
	nsLabels map[string]labels.Set
	// terminating holds the namespaces being deleted (NamespaceTerminating).
	terminating map[string]struct{}
	// subnets and pools count every namespace's objects, for the barrier's
	// cluster-wide watermarks.
	subnets, pools int
	// addresses are the single addresses Subnets hand out (addresses.go).
	addresses addressBook
	// addressClaims indexes the books by IPAddressClaim (addresses.go).
	addressClaims addressClaims
	// goneAddresses records the UIDs of IPAddresses deleted while a
	// catch-up read is applied; nil otherwise.
	goneAddresses map[types.UID]struct{}
	// spaces holds the rules of every AddressSpace object; defaultSpace
	// the default space's while no AddressSpace named default exists.
	spaces       map[string]consent
	defaultSpace consent
	// events counts the claims' range changes, for claim.heldSince.
	events uint64
	// pastStartUp: the ledger has synced, so a claim it first sees now
	// (a relist after the watch fell behind, a new object under a known
	// name) is not part of the start-up list; a range it shows is seen now.
	pastStartUp bool
	// delegations are what the fleet's member reconciler learnt from the
	// hub about each delegated root pool, and delegatedPools the last
	// object of each (delegation.go).
	delegations    map[poolID]DelegationState
	delegatedPools map[poolID]*ipamv1.SubnetPool
}

// tick returns the next number in the order of range changes.
func (b *book) tick() uint64 {
	b.events++
	return b.events
}

type namespaceRecord struct {
	claims map[claimID]*claim
	// subnets and pools count the namespace's objects, for the admission
	// freshness barrier (a root pool is counted but is no claim).
	subnets, pools int
}

// claim returns a known claim, or nil.
func (b *book) claim(id claimID) *claim {
	if n := b.namespaces[id.namespace()]; n != nil {
		return n.claims[id]
	}
	return nil
}

// visitHook, set only by tests, is called for each claim or address book
// that a query or decision looks at one by one. The tests count the visits
// to show, without timing anything, that no namespace's junk is walked for
// another namespace's answers (docs/benchmarks.md has the timings).
var visitHook func()

func visit() {
	if visitHook != nil {
		visitHook()
	}
}

// Ledger is the in-memory record. Its zero value is not usable: use New.
type Ledger struct {
	// mu is the decision lock: held for writing while an event is applied
	// or a decision made, for reading by every query.
	mu sync.RWMutex
	b  book

	// Freshness, for the admission barrier: the newest resourceVersion seen
	// per kind, and a channel closed (and replaced) on every change.
	freshMu sync.Mutex
	lastRV  map[string]string
	changed chan struct{}

	listenersMu  sync.RWMutex
	listeners    map[int]func(Event)
	nextListener int

	synced func() bool

	// catchUpMu serialises CatchUp; caughtUp is set once it succeeded.
	catchUpMu sync.Mutex
	caughtUp  bool
}

// New returns an empty ledger. It reports itself synced only once informers
// registered with Feed have delivered their initial lists.
func New() *Ledger {
	return &Ledger{
		b: book{slots: map[poolID]*slot{}, namespaces: map[string]*namespaceRecord{}, nsLabels: map[string]labels.Set{}, terminating: map[string]struct{}{}, addresses: addressBook{}, addressClaims: addressClaims{},
			spaces: map[string]consent{}, defaultSpace: everyNamespace,
			delegations: map[poolID]DelegationState{}, delegatedPools: map[poolID]*ipamv1.SubnetPool{}},
		listeners: map[int]func(Event){},
		lastRV:    map[string]string{},
		changed:   make(chan struct{}),
		synced:    func() bool { return false },
	}
}

// namespace returns a namespace's record, creating it.
func (b *book) namespace(name string) *namespaceRecord {
	n := b.namespaces[name]
	if n == nil {
		n = &namespaceRecord{claims: map[claimID]*claim{}}
		b.namespaces[name] = n
	}
	return n
}

// forgetNamespace drops a namespace's record once nothing is left in it.
func (b *book) forgetNamespace(name string) {
	if n := b.namespaces[name]; n != nil && n.subnets == 0 && n.pools == 0 && len(n.claims) == 0 {
		delete(b.namespaces, name)
	}
}

func (b *book) slot(id poolID) *slot {
	s := b.slots[id]
	if s == nil {
		s = &slot{id: id, self: id.claimID(), claims: map[claimID]*claim{}, waiting: map[claimID]struct{}{}, requests: map[claimID]struct{}{},
			collisions: map[claimID]struct{}{}, outside: map[claimID]struct{}{}, foreign: map[string]*members{}, reasons: map[string]int{}, index: ipspace.NewIndex[claimID]()}
		b.slots[id] = s
		if id.isSpace() {
			b.attachSpace(s)
		}
	}
	return s
}

// dropIfEmpty forgets a slot with no pool and no claims.
func (b *book) dropIfEmpty(s *slot) {
	if s.pool == nil && len(s.claims) == 0 {
		delete(b.slots, s.id)
	}
}

// childSlot returns the slot of the child pool whose claim on its parent c
// is, or nil (c is a Subnet's claim, or the child pool is unknown).
func (b *book) childSlot(c *claim) *slot {
	key := c.key()
	if key.Kind() != statuscalc.KindSubnetPool {
		return nil
	}
	return b.slots[poolIDOf(c.id.namespace(), key.Name())]
}

// subnetFacts extracts a Subnet's claim.
func subnetFacts(s *ipamv1.Subnet) *claim {
	c := &claim{
		id:           idOf(s.Namespace, SubnetKey(s.Name)),
		pool:         poolIDOf(s.Spec.PoolRef.In(s.Namespace), s.Spec.PoolRef.Name),
		uid:          s.UID,
		rv:           s.ResourceVersion,
		created:      s.CreationTimestamp.Time,
		prefixLength: -1,
		generation:   s.Generation,
		deleting:     s.DeletionTimestamp != nil,
	}
	if s.Spec.CIDR != "" {
		p, err := ipspace.ParsePrefix(s.Spec.CIDR)
		c.requested, c.invalidSpec = p, err != nil
	}
	if s.Spec.PrefixLength != nil {
		c.prefixLength = int(*s.Spec.PrefixLength)
	}
	if gw, err := netip.ParseAddr(s.Spec.Gateway); err == nil {
		c.gateway = &gw
	}
	c.protected = slices.Contains(s.Finalizers, ipamv1.FinalizerAddressProtection)
	if ready := meta.FindStatusCondition(s.Status.Conditions, ipamv1.ConditionReady); ready != nil {
		c.reason = ready.Reason
		if ready.Status == "True" && s.Status.CIDR != "" {
			c.held, _ = ipspace.ParsePrefix(s.Status.CIDR)
		}
	}
	if st := &s.Status; st.CIDR != "" || st.Addresses != "" || st.ObservedGeneration != 0 || len(st.Conditions) > 0 {
		var ok bool
		if c.shown, ok = compactStatus(st, c.held, c.gatewayAddr()); !ok {
			// A copy, so that the decoded object it came from is not kept.
			c.status = st.DeepCopy()
		}
	}
	return c
}

// poolFacts extracts a pool and, for a child pool, its claim on the parent.
func poolFacts(p *ipamv1.SubnetPool) (*pool, *claim) {
	pl := &pool{
		id:         poolIDOf(p.Namespace, p.Name),
		uid:        p.UID,
		rv:         p.ResourceVersion,
		generation: p.Generation,
		created:    p.CreationTimestamp.Time,
		deleting:   p.DeletionTimestamp != nil,
		defaultLen: statuscalc.Length(p.Spec.DefaultPrefixLength),
		minLen:     statuscalc.Length(p.Spec.MinPrefixLength),
		maxLen:     statuscalc.Length(p.Spec.MaxPrefixLength),
		reserved:   statuscalc.ParseReserved(p.Spec.Reserved),
		labels:     p.Labels, // the cache's object is never modified
		consent:    consentOf(p.Spec.AllowedNamespaces),
	}
	pl.spec, _ = ipspace.ParsePrefix(p.Spec.CIDR)
	pl.statusCIDR, _ = ipspace.ParsePrefix(p.Status.CIDR)
	if p.Spec.ParentRef == nil {
		// A root pool claims its range from its address space (spaces.go),
		// in the slot of the family it holds (a spec edited to another
		// family asks for a range the slot cannot grant, and keeps what it
		// holds from other roots), else of its spec. An unparseable spec
		// has no family; it asks for nothing.
		family := pl.statusCIDR
		if !family.IsValid() {
			family = pl.spec
		}
		pl.space = spaceID(spaceOf(p), family.Addr().Is6())
	} else {
		pl.parent = poolIDOf(p.Spec.ParentRef.In(p.Namespace), p.Spec.ParentRef.Name)
	}
	c := &claim{
		id:           pl.id.claimID(),
		pool:         pl.claimsFrom(),
		uid:          p.UID,
		rv:           p.ResourceVersion,
		created:      pl.created,
		requested:    pl.spec,
		invalidSpec:  !pl.spec.IsValid(),
		prefixLength: -1,
		held:         pl.statusCIDR,
	}
	if ready := meta.FindStatusCondition(p.Status.Conditions, ipamv1.ConditionReady); ready != nil {
		c.reason = ready.Reason
	}
	return pl, c
}

// change is what an update of the claims did to a slot's free space: the
// ranges a claim no longer keeps from others, or a rebuilt map (after which
// anything may fit).
type change struct {
	released []netip.Prefix
	rebuilt  bool
}

func (a change) merge(b change) change {
	return change{released: append(a.released, b.released...), rebuilt: a.rebuilt || b.rebuilt}
}

// upsertClaim records a claim's new facts, keeping the arbiter's assumption
// until the API shows it, and what that did to its pool's free space.
func (b *book) upsertClaim(next *claim) change {
	var ch change
	old := b.claim(next.id)
	if old != nil && old.uid != next.uid {
		// Same name, new object: the old one was deleted and we missed it.
		ch = b.removeClaim(old.id)
		old = nil
	}
	if old != nil && old.pool != next.pool {
		// poolRef is immutable; only a bypassed schema gets here.
		ch = b.removeClaim(old.id)
		old = nil
	}
	if old == nil {
		next.seen = time.Now().UnixNano()
		if b.pastStartUp && next.held.IsValid() {
			next.heldSince = b.tick()
		}
		b.namespace(next.id.namespace()).claims[next.id] = next
		s := b.slot(next.pool)
		next.pool = s.id // one string per pool, not one per claim
		s.claims[next.id] = next
		s.join(next)
		s.count(next.key(), next.reason, +1)
		b.indexClaim(s, next, true)
		if next.requested.IsValid() && next.requested != next.holds() {
			s.sweep = true
		}
		b.place(s, next)
		s.noteWaiting(next)
		return ch
	}

	s := b.slot(old.pool)
	b.indexClaim(s, old, false)
	// The assumption stands until the API shows what it holds; then a
	// request it held up is arbitrated again.
	if old.assumed.IsValid() && next.held == old.assumed {
		old.assumed = netip.Prefix{}
		s.sweep = true
	} else if next.held.IsValid() && next.held != old.held {
		// A range this ledger did not grant: another leader's grant, or a
		// status restored or written by hand.
		old.heldSince = b.tick()
	}
	if old.requested != next.requested && next.requested.IsValid() {
		s.sweep = true // a child pool asks for a new range
	}
	old.requested, old.prefixLength, old.invalidSpec = next.requested, next.prefixLength, next.invalidSpec
	if old.reason != next.reason {
		s.count(old.key(), old.reason, -1)
		s.count(old.key(), next.reason, +1)
	}
	old.held, old.reason, old.created, old.rv = next.held, next.reason, next.created, next.rv
	old.generation, old.deleting, old.shown, old.status = next.generation, next.deleting, next.shown, next.status
	old.gateway, old.protected = next.gateway, next.protected
	b.indexClaim(s, old, true)
	ch = ch.merge(b.refit(s, old))
	s.noteWaiting(old)
	return ch
}

// count adds delta to the slot's counts for a claim of key's kind with the
// given reason.
func (s *slot) count(key ClaimKey, reason string, delta int) {
	if key.Kind() == statuscalc.KindSubnet {
		s.subnets += delta
		s.reasons[reason] += delta
		if s.reasons[reason] == 0 {
			delete(s.reasons, reason)
		}
	} else {
		s.children += delta
	}
}

// noteWaiting keeps the slot's waiting and requests sets, and its
// namespace's holders, current for c. Every change of what c holds ends
// here.
func (s *slot) noteWaiting(c *claim) {
	s.noteHolding(c)
	waits := !c.holds().IsValid() || (c.requested.IsValid() && c.requested != c.holds())
	if waits {
		s.waiting[c.id] = struct{}{}
	} else {
		delete(s.waiting, c.id)
	}
	if m := s.membersOf(c.id.namespace()); m != nil {
		m.fileWaiting(c, waits)
	}
	if c.requested.IsValid() && !c.invalidSpec && c.requested != c.holds() {
		s.requests[c.id] = struct{}{}
	} else {
		delete(s.requests, c.id)
	}
}

// removeClaim forgets a claim and returns what that did to its pool's free
// space.
func (b *book) removeClaim(key claimID) change {
	c := b.claim(key)
	if c == nil {
		return change{}
	}
	delete(b.namespaces[key.namespace()].claims, key)
	b.forgetNamespace(key.namespace())
	s := b.slots[c.pool]
	b.indexClaim(s, c, false)
	delete(s.claims, key)
	s.leave(c)
	s.count(key.key(), c.reason, -1)
	delete(s.waiting, key)
	delete(s.requests, key)
	_, collided := s.collisions[key]
	rebuild := c.outside || collided
	ch := change{released: b.releaseAll(s, c)}
	b.unplace(s, c)
	if rebuild && s.space != nil {
		// What it kept from others was not (only) its placed ranges.
		b.buildSpace(s)
		ch.rebuilt = true
	}
	if len(ch.released) > 0 {
		s.sweep = true
		b.replaceCollisions(s)
	}
	b.dropIfEmpty(s)
	return ch
}

// indexClaim adds (or removes) a claim's ranges in its slot's index: what
// it asks for, what the API shows it holding and what it is being granted.
func (b *book) indexClaim(s *slot, c *claim, add bool) {
	ranges := [3]netip.Prefix{c.requested, c.held, c.assumed}
	for i, p := range ranges {
		if !p.IsValid() || slices.Contains(ranges[:i], p) {
			continue
		}
		if add {
			s.index.Insert(p, c.id)
		} else {
			s.index.Delete(p, c.id)
		}
	}
	s.tally(c, add)
}

// refit brings the pool's map in line with c's footprint after c's facts
// changed, and returns what that did to the free space.
func (b *book) refit(s *slot, c *claim) change {
	_, collided := s.collisions[c.id]
	if slices.Equal(c.footprint(), c.placed) && !c.outside && !collided {
		return change{}
	}
	before := slices.Clone(c.placed)
	b.releaseAll(s, c)
	b.unplace(s, c)
	var ch change
	if c.outside || collided {
		// unplace cleared the flags; what it kept from others was not (only)
		// its placed ranges.
		if s.space != nil {
			b.buildSpace(s)
			ch.rebuilt = true
		}
	} else {
		b.place(s, c)
	}
	for _, p := range before {
		if !slices.Contains(c.placed, p) {
			ch.released = append(ch.released, p)
		}
	}
	if len(ch.released) > 0 {
		s.sweep = true
		b.replaceCollisions(s)
	}
	return ch
}

// place puts a claim's footprint into its pool's map. A range outside the
// served range is marked outside and not placed; anything else that does
// not simply fit (a collision with another held range, a reserved range, a
// range that covers the served range) is placed by building the map around
// it, which keeps every held range from other claims.
func (b *book) place(s *slot, c *claim) {
	if len(c.placed) > 0 || s.space == nil {
		return
	}
	fp := c.footprint()
	for _, p := range fp {
		if !statuscalc.Contains(s.serving, p) && p.Overlaps(s.serving) {
			b.buildSpace(s) // it covers the served range: nothing of it is free
			return
		}
	}
	var got []netip.Prefix
	for _, p := range fp {
		if !statuscalc.Contains(s.serving, p) {
			c.outside = true
			s.outside[c.id] = struct{}{}
			continue
		}
		if s.space.Claim(p) != nil {
			b.buildSpace(s)
			return
		}
		got = append(got, p)
	}
	c.placed = got
}

// unplace clears what place recorded of c (its ranges are released already).
func (b *book) unplace(s *slot, c *claim) {
	c.placed, c.outside = nil, false
	delete(s.collisions, c.id)
	delete(s.outside, c.id)
}

// releaseAll returns c's placed ranges to its pool's free space and
// returns them; the parts on a reserved range become reserved again.
func (b *book) releaseAll(s *slot, c *claim) []netip.Prefix {
	released := c.placed
	for _, p := range released {
		_ = s.space.Release(p) // placed ranges are held by construction
		if c.outside {
			for _, r := range intersect(s.pool.reserved, p) {
				_ = s.space.Reserve(r) // just released: free
			}
		}
	}
	c.placed = nil
	return released
}

// holderOverlapping returns a claim other than c whose footprint (what it
// holds, as the API shows or as being granted) overlaps p, or nil. Every
// held range is kept from other claims, whether it is placed in the map,
// collides with another, or lies outside the pool's current rules.
func (b *book) holderOverlapping(s *slot, c *claim, p netip.Prefix) *claim {
	var found *claim
	s.index.Overlapping(p, func(e ipspace.Entry[claimID]) bool {
		other := b.claim(e.Owner)
		if other != nil && other != c && slices.Contains(other.footprint(), e.Prefix) {
			found = other
			return false
		}
		return true
	})
	return found
}

// replaceCollisions retries, first holder first, the held ranges that collided.
func (b *book) replaceCollisions(s *slot) {
	if len(s.collisions) == 0 || s.space == nil {
		return
	}
	unplaced := make([]*claim, 0, len(s.collisions))
	for key := range s.collisions {
		unplaced = append(unplaced, s.claims[key])
	}
	slices.SortFunc(unplaced, heldFirst)
	for _, c := range unplaced {
		if _, still := s.collisions[c.id]; !still {
			continue // a rebuild placed it
		}
		delete(s.collisions, c.id)
		b.place(s, c)
	}
}

// heldFirst orders claims whose held ranges collide: the one that held its
// range first, in the ledger's order of events; among ranges the start-up
// list showed, the older claim.
func heldFirst(a, b *claim) int {
	if c := cmp.Compare(a.heldSince, b.heldSince); c != 0 {
		return c
	}
	return olderClaim(a, b)
}

func olderClaim(a, b *claim) int {
	return statuscalc.Older(a.statuscalcClaim(), b.statuscalcClaim())
}

// servingRange is the range a slot's pool hands out: the part of its
// grant (from its parent, or a root pool's from its address space) that
// the API shows (claim.serves); a space's synthetic pool serves its whole
// family; invalid when it serves nothing (no pool, an unparseable spec,
// not granted yet).
func (b *book) servingRange(s *slot) netip.Prefix {
	if s.pool == nil || !s.pool.spec.IsValid() {
		return netip.Prefix{}
	}
	if s.pool.synthetic {
		return s.pool.spec
	}
	if c := b.claim(s.self); c != nil {
		return c.serves()
	}
	return netip.Prefix{}
}

// rebuildSpace recomputes the range the slot's pool serves and, if it or
// the reserved ranges changed, rebuilds the free-space map. It reports
// whether the map was rebuilt.
func (b *book) rebuildSpace(s *slot) bool {
	serving := b.servingRange(s)
	var reserved []netip.Prefix
	if s.pool != nil {
		reserved = s.pool.reserved
	}
	if serving == s.serving && (s.space != nil) == serving.IsValid() && slices.Equal(reserved, s.spaceReserved) {
		return false
	}
	s.serving = serving
	b.buildSpace(s)
	return true
}

// buildSpace builds the slot's free-space map for the range it serves from
// the claims' footprints. Pool rules apply to decisions made after the
// ledger sees them, and a range granted before is never taken away, so:
//   - a held range outside the served range is marked outside and not
//     placed; if it covers the served range (a pool shrunk below it), the
//     whole served range is kept from other claims;
//   - a held range on a reserved range is placed and carved out of the
//     reserved space, and marked outside;
//   - held ranges that collide (only a bypassed arbiter or a restored or
//     hand-written status does that) are placed in heldFirst order; the
//     others are reported and their ranges kept from other claims too
//     (a Subnet among them is not Ready: decideSubnet).
//
// Both outside cases are reported as ClaimsOutside.
func (b *book) buildSpace(s *slot) {
	for _, c := range s.claims {
		c.placed, c.outside = nil, false
	}
	clear(s.collisions)
	clear(s.outside)
	s.space, s.spaceReserved = nil, nil
	if !s.serving.IsValid() {
		return
	}
	// inside: the claims with ranges to place, and those ranges.
	var inside []*claim
	ranges := map[*claim][]netip.Prefix{}
	var kept []netip.Prefix // parts of the served range kept from claims besides the reserved ranges
	for _, c := range s.claims {
		for _, p := range c.footprint() {
			if statuscalc.Contains(s.serving, p) {
				ranges[c] = append(ranges[c], p)
				continue
			}
			c.outside = true
			s.outside[c.id] = struct{}{}
			if p.Overlaps(s.serving) {
				kept = append(kept, s.serving)
			}
		}
		if len(ranges[c]) > 0 {
			inside = append(inside, c)
		}
	}
	reserved := s.pool.reserved
	all := func(claims []*claim) []netip.Prefix {
		var out []netip.Prefix
		for _, c := range claims {
			out = append(out, ranges[c]...)
		}
		return out
	}
	space, err := ipspace.NewSpaceHolding(s.serving, keptAround(reserved, kept, all(inside)), all(inside))
	if err != nil {
		// Some held ranges collide: the first to hold keeps its range.
		slices.SortFunc(inside, heldFirst)
		probe := ipspace.NewSpace(s.serving, nil)
		var winners []*claim
		for _, c := range inside {
			var got []netip.Prefix
			for _, p := range ranges[c] {
				if probe.Claim(p) != nil {
					break
				}
				got = append(got, p)
			}
			if len(got) == len(ranges[c]) {
				winners = append(winners, c)
				continue
			}
			for _, p := range got {
				_ = probe.Release(p)
			}
			s.collisions[c.id] = struct{}{}
			kept = append(kept, ranges[c]...)
		}
		inside = winners
		space = ipspace.NewSpace(s.serving, keptAround(reserved, kept, all(inside)))
		for _, c := range inside {
			for _, p := range ranges[c] {
				_ = space.Claim(p) // disjoint from each other and from what is kept, by construction
			}
		}
	}
	resSet := prefixSet(reserved)
	for _, c := range inside {
		c.placed = ranges[c]
		for _, p := range c.placed {
			if resSet.OverlapsPrefix(p) {
				c.outside = true
				s.outside[c.id] = struct{}{}
			}
		}
	}
	s.space, s.spaceReserved, s.sweep = space, slices.Clone(reserved), true
}

// keptAround returns the ranges to keep out of a map: the reserved ranges
// and the other kept ranges, minus the held ranges placed in it.
func keptAround(reserved, kept, held []netip.Prefix) []netip.Prefix {
	if len(kept) == 0 {
		resSet := prefixSet(reserved)
		on := false
		for _, h := range held {
			if resSet.OverlapsPrefix(h) {
				on = true
				break
			}
		}
		if !on {
			return reserved
		}
	}
	var b netipx.IPSetBuilder
	for _, r := range reserved {
		b.AddPrefix(r)
	}
	for _, k := range kept {
		b.AddPrefix(k)
	}
	for _, h := range held {
		b.RemovePrefix(h)
	}
	set, _ := b.IPSet() // errors only on invalid prefixes
	return set.Prefixes()
}

// prefixSet is the set of addresses of the ranges.
func prefixSet(ranges []netip.Prefix) *netipx.IPSet {
	var b netipx.IPSetBuilder
	for _, r := range ranges {
		b.AddPrefix(r)
	}
	set, _ := b.IPSet() // errors only on invalid prefixes
	return set
}

// intersect returns the parts of p that lie on any of the ranges.
func intersect(ranges []netip.Prefix, p netip.Prefix) []netip.Prefix {
	var b, only netipx.IPSetBuilder
	for _, r := range ranges {
		b.AddPrefix(r)
	}
	only.AddPrefix(p)
	pSet, _ := only.IPSet()
	b.Intersect(pSet)
	set, _ := b.IPSet()
	return set.Prefixes()
}
