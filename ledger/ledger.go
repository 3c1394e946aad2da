// Package ledger is the in-memory record of every SubnetPool and every claim
// (Subnet or child pool), per namespace, fed by the manager's informers.
//
// The admission webhooks read it to answer "does this overlap anything" in
// O(log n) without listing a pool; the reconcilers use it as the arbiter of
// design invariant 1: decisions are made under the namespace's lock against
// what the informers delivered plus what the arbiter itself granted but the
// informers have not shown yet (the "assumed" ranges, as in kube-scheduler).
//
// It keeps facts, not objects: parsed ranges, names, timestamps. Nothing here
// deep-copies a pool.
package ledger

import (
	"net/netip"
	"slices"
	"sync"
	"time"

	"go4.org/netipx"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha1"
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

// claim is what the ledger knows of a Subnet, or of a child pool as a claim
// on its parent.
type claim struct {
	key     ClaimKey
	pool    string // the pool it claims from (spec.poolRef, or a child's spec.parentRef)
	uid     types.UID
	rv      string // the resourceVersion of the object the facts come from
	created time.Time
	seen    time.Time // when the ledger first saw it

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
	// placed: the held range is in its pool's free-space map. A held range
	// that collides with another (a bypassed arbiter, a hand-written status)
	// is not placed and is reported.
	placed bool
	// outside: the held range breaks its pool's current rules: it lies
	// outside the range the pool serves (not placed) or on a reserved range
	// (placed, carved out of the reserved space). Only a pool edit that raced
	// the grant does that; the claim keeps its range and the pool reports it
	// (reason ClaimsOutside).
	outside bool

	// reason is the Ready condition's reason in status, for reporting.
	reason string
}

// holds is the range the claim holds, if any.
func (c *claim) holds() netip.Prefix {
	if c.assumed.IsValid() {
		return c.assumed
	}
	return c.held
}

func (c *claim) statuscalcClaim(namespace string) statuscalc.Claim {
	return statuscalc.Claim{
		Ref:       statuscalc.ClaimRef{Kind: c.key.Kind(), Namespace: namespace, Name: c.key.Name()},
		Requested: c.requested,
		Held:      c.holds(),
		Created:   c.created,
	}
}

// pool is what the ledger knows of a SubnetPool.
type pool struct {
	name       string
	uid        types.UID
	rv         string
	generation int64
	created    time.Time
	deleting   bool

	spec       netip.Prefix // spec.cidr; invalid if it does not parse
	parent     string
	defaultLen int // -1 if unset
	minLen     int // -1 if unset
	maxLen     int // -1 if unset
	reserved   []netip.Prefix
	statusCIDR netip.Prefix // status.cidr as the API shows it
}

// slot gathers everything about one pool name: the pool (nil while it does
// not exist), the claims that reference it, the index of their ranges and the
// free-space map of the range it serves.
type slot struct {
	name   string
	pool   *pool
	claims map[ClaimKey]*claim
	// index holds each claim's requested range and, if different, the range
	// it holds: every range a new claim must not overlap.
	index *ipspace.Index[ClaimKey]
	// serving is the range the pool hands out: spec.cidr for a root pool,
	// the range the parent granted for a child pool. space maps it; both are
	// unset while the pool serves nothing.
	serving netip.Prefix
	space   *ipspace.Space
	// spaceReserved is the reserved list space was built with.
	spaceReserved []netip.Prefix
	// collisions holds the claims whose held range is not placed because it
	// collides (see claim.placed).
	collisions map[ClaimKey]struct{}
	// outside holds the claims whose held range breaks the pool's current
	// rules (see claim.outside).
	outside map[ClaimKey]struct{}
	// requests holds the explicit requests that do not hold their range: the
	// claims a sweep decides. A subset of waiting, kept apart so that a
	// dynamic allocation does not scan the dynamic claims waiting with it.
	requests map[ClaimKey]struct{}
	// waiting holds the claims that hold nothing, or ask for a range other
	// than the one they hold: the claims to wake when the pool changes.
	waiting map[ClaimKey]struct{}
	// subnets and children count the claims by kind; reasons counts them by
	// the Ready reason their status shows ("" before the first status).
	subnets, children int
	reasons           map[string]int
	// sweep is set when pending explicit requests must be arbitrated again:
	// a request arrived, or held space was released.
	sweep bool
}

// namespace holds the slots of one namespace under one lock. Pools nest only
// within a namespace, so this lock makes every decision about a pool tree
// atomic: it is the "one writer per pool" of the design.
type namespace struct {
	mu    sync.RWMutex
	name  string
	slots map[string]*slot
	// claims indexes every claim by key, whichever pool it references.
	claims map[ClaimKey]*claim

	subnets, pools int // object counts, for the admission freshness barrier
}

// Ledger is the in-memory record. Its zero value is not usable: use New.
type Ledger struct {
	mu         sync.RWMutex
	namespaces map[string]*namespace

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
		namespaces: map[string]*namespace{},
		listeners:  map[int]func(Event){},
		lastRV:     map[string]string{},
		changed:    make(chan struct{}),
		synced:     func() bool { return false },
	}
}

// ns returns the namespace, creating it when create is set.
func (l *Ledger) ns(name string, create bool) *namespace {
	l.mu.RLock()
	n := l.namespaces[name]
	l.mu.RUnlock()
	if n != nil || !create {
		return n
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if n = l.namespaces[name]; n == nil {
		n = &namespace{name: name, slots: map[string]*slot{}, claims: map[ClaimKey]*claim{}}
		l.namespaces[name] = n
	}
	return n
}

func (n *namespace) slot(name string) *slot {
	s := n.slots[name]
	if s == nil {
		s = &slot{name: name, claims: map[ClaimKey]*claim{}, waiting: map[ClaimKey]struct{}{}, requests: map[ClaimKey]struct{}{},
			collisions: map[ClaimKey]struct{}{}, outside: map[ClaimKey]struct{}{}, reasons: map[string]int{}, index: ipspace.NewIndex[ClaimKey]()}
		n.slots[name] = s
	}
	return s
}

// dropIfEmpty forgets a slot with no pool and no claims.
func (n *namespace) dropIfEmpty(s *slot) {
	if s.pool == nil && len(s.claims) == 0 {
		delete(n.slots, s.name)
	}
}

// subnetFacts extracts a Subnet's claim.
func subnetFacts(s *ipamv1.Subnet) *claim {
	c := &claim{
		key:          SubnetKey(s.Name),
		pool:         s.Spec.PoolRef,
		uid:          s.UID,
		rv:           s.ResourceVersion,
		created:      s.CreationTimestamp.Time,
		prefixLength: -1,
	}
	if s.Spec.CIDR != "" {
		p, err := ipspace.ParsePrefix(s.Spec.CIDR)
		c.requested, c.invalidSpec = p, err != nil
	}
	if s.Spec.PrefixLength != nil {
		c.prefixLength = int(*s.Spec.PrefixLength)
	}
	if ready := meta.FindStatusCondition(s.Status.Conditions, ipamv1.ConditionReady); ready != nil {
		c.reason = ready.Reason
		if ready.Status == "True" && s.Status.CIDR != "" {
			c.held, _ = ipspace.ParsePrefix(s.Status.CIDR)
		}
	}
	return c
}

// poolFacts extracts a pool and, for a child pool, its claim on the parent.
func poolFacts(p *ipamv1.SubnetPool) (*pool, *claim) {
	pl := &pool{
		name:       p.Name,
		uid:        p.UID,
		rv:         p.ResourceVersion,
		generation: p.Generation,
		created:    p.CreationTimestamp.Time,
		deleting:   p.DeletionTimestamp != nil,
		parent:     p.Spec.ParentRef,
		defaultLen: statuscalc.Length(p.Spec.DefaultPrefixLength),
		minLen:     statuscalc.Length(p.Spec.MinPrefixLength),
		maxLen:     statuscalc.Length(p.Spec.MaxPrefixLength),
		reserved:   statuscalc.ParseReserved(p.Spec.Reserved),
	}
	pl.spec, _ = ipspace.ParsePrefix(p.Spec.CIDR)
	pl.statusCIDR, _ = ipspace.ParsePrefix(p.Status.CIDR)
	if p.Spec.ParentRef == "" {
		return pl, nil
	}
	c := &claim{
		key:          PoolKey(p.Name),
		pool:         p.Spec.ParentRef,
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

// upsertClaim records a claim's new facts, keeping the arbiter's assumption
// until the API shows it. It returns the range it released, if any.
func (n *namespace) upsertClaim(next *claim) (released netip.Prefix) {
	old := n.claims[next.key]
	if old != nil && old.uid != next.uid {
		// Same name, new object: the old one was deleted and we missed it.
		released = n.removeClaim(old.key)
		old = nil
	}
	if old != nil && old.pool != next.pool {
		// poolRef is immutable; only a bypassed schema gets here.
		released = n.removeClaim(old.key)
		old = nil
	}
	if old == nil {
		next.seen = time.Now()
		n.claims[next.key] = next
		s := n.slot(next.pool)
		s.claims[next.key] = next
		s.count(next.key, next.reason, +1)
		n.indexClaim(s, next, true)
		if next.requested.IsValid() && !next.holds().IsValid() {
			s.sweep = true
		}
		n.place(s, next)
		s.noteWaiting(next)
		return released
	}

	s := n.slot(old.pool)
	n.indexClaim(s, old, false)
	oldHolds := old.holds()
	// The assumption stands until the API shows what it holds.
	if old.assumed.IsValid() && next.held == old.assumed {
		old.assumed = netip.Prefix{}
	}
	requestChanged := old.requested != next.requested
	old.requested, old.prefixLength, old.invalidSpec = next.requested, next.prefixLength, next.invalidSpec
	if old.reason != next.reason {
		s.count(old.key, old.reason, -1)
		s.count(old.key, next.reason, +1)
	}
	old.held, old.reason, old.created, old.rv = next.held, next.reason, next.created, next.rv
	if requestChanged && old.requested.IsValid() {
		s.sweep = true // a child pool asks for a new range
	}
	if old.holds() != oldHolds {
		if old.placed {
			n.release(s, old, oldHolds)
			released = oldHolds
		}
		n.unplace(s, old)
		n.place(s, old)
	}
	n.indexClaim(s, old, true)
	s.noteWaiting(old)
	return released
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

// noteWaiting keeps the slot's waiting and requests sets current for c.
func (s *slot) noteWaiting(c *claim) {
	if !c.holds().IsValid() || (c.requested.IsValid() && c.requested != c.holds()) {
		s.waiting[c.key] = struct{}{}
	} else {
		delete(s.waiting, c.key)
	}
	if c.requested.IsValid() && !c.invalidSpec && c.requested != c.holds() {
		s.requests[c.key] = struct{}{}
	} else {
		delete(s.requests, c.key)
	}
}

// removeClaim forgets a claim and returns the range it released, if any.
func (n *namespace) removeClaim(key ClaimKey) (released netip.Prefix) {
	c := n.claims[key]
	if c == nil {
		return netip.Prefix{}
	}
	delete(n.claims, key)
	s := n.slots[c.pool]
	n.indexClaim(s, c, false)
	delete(s.claims, key)
	s.count(key, c.reason, -1)
	delete(s.waiting, key)
	delete(s.requests, key)
	if c.placed {
		n.release(s, c, c.holds())
		released = c.holds()
	}
	n.unplace(s, c)
	n.replaceCollisions(s)
	n.dropIfEmpty(s)
	return released
}

// indexClaim adds (or removes) a claim's ranges in its slot's index.
func (n *namespace) indexClaim(s *slot, c *claim, add bool) {
	for _, p := range []netip.Prefix{c.requested, c.holds()} {
		if !p.IsValid() {
			continue
		}
		if add {
			s.index.Insert(p, c.key)
		} else {
			s.index.Delete(p, c.key)
		}
	}
}

// place puts a claim's held range into its pool's map. A range outside the
// served range is marked outside; one that collides with another held range
// is left unplaced (reported, and retried when space is released); one on a
// reserved range (a pool edit raced its grant) is carved out of the reserved
// space by rebuilding the map around it.
func (n *namespace) place(s *slot, c *claim) {
	h := c.holds()
	if c.placed || s.space == nil || !h.IsValid() {
		return
	}
	if !statuscalc.Contains(s.serving, h) {
		c.outside = true
		s.outside[c.key] = struct{}{}
		return
	}
	if s.space.Claim(h) == nil {
		c.placed = true
		return
	}
	if n.placedOverlapping(s, c, h) != nil {
		s.collisions[c.key] = struct{}{}
		return
	}
	n.buildSpace(s)
}

// unplace clears what place recorded of c (its range is released already).
func (n *namespace) unplace(s *slot, c *claim) {
	c.placed, c.outside = false, false
	delete(s.collisions, c.key)
	delete(s.outside, c.key)
}

// release returns c's placed range p to its pool's free space; the part of
// p on a reserved range becomes reserved again.
func (n *namespace) release(s *slot, c *claim, p netip.Prefix) {
	_ = s.space.Release(p) // placed ranges are held by construction
	s.sweep = true
	if !c.outside {
		return
	}
	for _, r := range intersect(s.pool.reserved, p) {
		_ = s.space.Reserve(r) // just released: free
	}
}

// placedOverlapping returns a placed claim other than c whose range
// overlaps p, or nil.
func (n *namespace) placedOverlapping(s *slot, c *claim, p netip.Prefix) *claim {
	var found *claim
	s.index.Overlapping(p, func(e ipspace.Entry[ClaimKey]) bool {
		if other := n.claims[e.Owner]; other != nil && other != c && other.placed && other.holds().Overlaps(p) {
			found = other
			return false
		}
		return true
	})
	return found
}

// replaceCollisions retries, oldest first, the held ranges that collided.
func (n *namespace) replaceCollisions(s *slot) {
	if len(s.collisions) == 0 || s.space == nil {
		return
	}
	unplaced := make([]*claim, 0, len(s.collisions))
	for key := range s.collisions {
		unplaced = append(unplaced, s.claims[key])
	}
	slices.SortFunc(unplaced, olderClaim)
	for _, c := range unplaced {
		delete(s.collisions, c.key)
		n.place(s, c)
	}
}

func olderClaim(a, b *claim) int {
	return statuscalc.Older(a.statuscalcClaim(""), b.statuscalcClaim(""))
}

// servingRange is the range a slot's pool hands out: spec.cidr for a root
// pool, the range its parent granted for a child pool; invalid when it
// serves nothing (no pool, an unparseable spec, a child not granted yet).
func (n *namespace) servingRange(s *slot) netip.Prefix {
	if s.pool == nil || !s.pool.spec.IsValid() {
		return netip.Prefix{}
	}
	if s.pool.parent == "" {
		return s.pool.spec
	}
	if c := n.claims[PoolKey(s.name)]; c != nil {
		return c.holds()
	}
	return netip.Prefix{}
}

// rebuildSpace recomputes the range the slot's pool serves and, if it or
// the reserved ranges changed, rebuilds the free-space map. It reports
// whether the map was rebuilt.
func (n *namespace) rebuildSpace(s *slot) bool {
	serving := n.servingRange(s)
	var reserved []netip.Prefix
	if s.pool != nil {
		reserved = s.pool.reserved
	}
	if serving == s.serving && (s.space != nil) == serving.IsValid() && slices.Equal(reserved, s.spaceReserved) {
		return false
	}
	s.serving = serving
	n.buildSpace(s)
	return true
}

// buildSpace builds the slot's free-space map for the range it serves from
// the claims that hold ranges. Pool rules apply to decisions made after the
// ledger sees them; a range granted before is never taken away. So a held
// range outside the served range is marked outside and not placed, and a
// held range on a reserved range is placed and carved out of the reserved
// space (both are reported as ClaimsOutside). Held ranges that collide with
// each other are placed oldest first; the younger are reported.
func (n *namespace) buildSpace(s *slot) {
	for _, c := range s.claims {
		c.placed, c.outside = false, false
	}
	clear(s.collisions)
	clear(s.outside)
	s.space, s.spaceReserved = nil, nil
	if !s.serving.IsValid() {
		return
	}
	var inside []*claim
	for _, c := range s.claims {
		switch h := c.holds(); {
		case !h.IsValid():
		case !statuscalc.Contains(s.serving, h):
			c.outside = true
			s.outside[c.key] = struct{}{}
		default:
			inside = append(inside, c)
		}
	}
	reserved := s.pool.reserved
	effective, onReserved := n.carveReserved(s, reserved, inside)
	space, err := ipspace.NewSpaceHolding(s.serving, effective, heldRanges(inside))
	if err != nil {
		// Some held ranges collide (only a bypassed arbiter or a
		// hand-written status does that): the older keeps its range, and
		// the reserved space is carved for the winners only.
		var winners []*claim
		slices.SortFunc(inside, olderClaim)
		probe := ipspace.NewSpace(s.serving, nil)
		for _, c := range inside {
			if probe.Claim(c.holds()) == nil {
				winners = append(winners, c)
			} else {
				s.collisions[c.key] = struct{}{}
			}
		}
		inside = winners
		effective, onReserved = n.carveReserved(s, reserved, inside)
		space, _ = ipspace.NewSpaceHolding(s.serving, effective, heldRanges(inside)) // disjoint by construction
	}
	for _, c := range inside {
		c.placed = true
	}
	for _, c := range onReserved {
		c.outside = true
		s.outside[c.key] = struct{}{}
	}
	s.space, s.spaceReserved, s.sweep = space, slices.Clone(reserved), true
}

// carveReserved returns the reserved ranges minus the held ranges of holders
// that lie on them, and those holders.
func (n *namespace) carveReserved(s *slot, reserved []netip.Prefix, holders []*claim) ([]netip.Prefix, []*claim) {
	if len(reserved) == 0 {
		return nil, nil
	}
	isHolder := make(map[*claim]bool, len(holders))
	for _, c := range holders {
		isHolder[c] = true
	}
	var on []*claim
	seen := map[*claim]bool{}
	for _, r := range reserved {
		s.index.Overlapping(r, func(e ipspace.Entry[ClaimKey]) bool {
			if c := n.claims[e.Owner]; c != nil && isHolder[c] && !seen[c] && c.holds().Overlaps(r) {
				seen[c] = true
				on = append(on, c)
			}
			return true
		})
	}
	if len(on) == 0 {
		return reserved, nil
	}
	var b netipx.IPSetBuilder
	for _, r := range reserved {
		b.AddPrefix(r)
	}
	for _, c := range on {
		b.RemovePrefix(c.holds())
	}
	set, _ := b.IPSet() // errors only on invalid prefixes
	return set.Prefixes(), on
}

func heldRanges(claims []*claim) []netip.Prefix {
	out := make([]netip.Prefix, len(claims))
	for i, c := range claims {
		out[i] = c.holds()
	}
	return out
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
