package ledger

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ipspace"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

// Decision is the arbiter's verdict on a claim: Ready with the range it
// holds, or not Ready and why.
type Decision struct {
	// Reason is the Ready condition's reason (ipamv1.Reason*).
	Reason  string
	Message string
	// CIDR is the range the claim holds; invalid when it holds none.
	CIDR netip.Prefix
	// Assumed: the arbiter granted CIDR and the API does not show it yet.
	// The caller must write it, preconditioned on the object's UID; if the
	// write fails for good (the object is gone or the write is invalid), it
	// calls Forget.
	Assumed bool
	// Winner names the claim this one lost to (Reason Overlaps).
	Winner statuscalc.ClaimRef
	// RootOverlaps, for a root pool that serves, says which other root
	// pools of its address space overlap it (granted before the arbiter
	// kept them apart); empty when none do.
	RootOverlaps string
	// PoolVersion, for a pool, is the resourceVersion of the pool the
	// ledger decided on. A status is written from the decision only onto
	// that version: one the ledger has not applied yet may show a status
	// (a restore's) the decision would erase.
	PoolVersion string
}

// Ready reports whether the decision makes the claim Ready.
func (d Decision) Ready() bool {
	return d.Reason == ipamv1.ReasonAllocated || d.Reason == ipamv1.ReasonAvailable
}

// Serves reports whether a pool's decision serves its range: Ready, or
// ClaimsOutside (serving, while claims granted before its last change
// break its rules).
func (d Decision) Serves() bool {
	return d.Ready() || d.Reason == ipamv1.ReasonClaimsOutside
}

// The arbiter's rules, which keep any two Ready claims from overlapping,
// all applied under the ledger's decision lock:
//   - a range once held is never taken away;
//   - pending explicit requests (Subnets with spec.cidr, child pools) are
//     decided in winner order, oldest creationTimestamp first, then by name,
//     each taking its range if it is free; before any claim of a pool is
//     decided, the pool's pending requests are (a "sweep"), so among the
//     requests the arbiter sees at one decision the winner does not depend
//     on which reconcile ran first;
//   - a Subnet that asks for a length gets the best-fit free block, after the
//     sweep;
//   - a pool's rules (range, reserved ranges, length bounds) apply to every
//     decision made after the ledger sees them; a claim granted before keeps
//     its range and its pool reports it (ClaimsOutside).
//
// There is no waiting on the clock: back-to-back creates are rejected at
// admission (design invariant 2), so only truly simultaneous creates reach
// the arbiter, and the first grant stands.
//
// A grant is recorded as assumed until the informer shows it, so the next
// decision already accounts for it.

// DecideSubnet decides the claim of the Subnet with this name and UID. It
// returns false if the ledger does not know that object (not delivered yet,
// deleted, or replaced by a new object under the same name): a decision is
// only ever made for, and written to, the object it was made for.
func (l *Ledger) DecideSubnet(namespace, name string, uid types.UID) (Decision, bool) {
	l.mu.Lock()
	c := l.b.claim(idOf(namespace, SubnetKey(name)))
	if c == nil || c.uid != uid {
		l.mu.Unlock()
		return Decision{}, false
	}
	d, wake := l.b.decideSubnet(c)
	l.mu.Unlock()
	l.publishWake(wake)
	return d, true
}

func (b *book) decideSubnet(c *claim) (Decision, []claimID) {
	if held := c.holds(); held.IsValid() {
		if d, lost := b.lostToSubnet(c); lost {
			return d, nil
		}
		return allocated(c), nil
	}
	if c.invalidSpec {
		return Decision{Reason: ipamv1.ReasonInvalidSpec, Message: "spec.cidr is not a canonical CIDR; delete the Subnet and create it with a valid one"}, nil
	}
	if d, ok := b.notAllowed(c); !ok {
		return d, nil
	}
	s := b.slots[c.pool]
	if d, ok := b.poolUnusable(s, c.pool); !ok {
		return d, nil
	}
	wake := b.sweep(s)
	if c.requested.IsValid() {
		d, more := b.decideRequest(s, c)
		return d, append(wake, more...)
	}

	length := c.prefixLength
	if length < 0 {
		length = s.pool.defaultLen
	}
	if length < 0 {
		return Decision{Reason: ipamv1.ReasonInvalidSpec,
			Message: fmt.Sprintf("the Subnet sets neither cidr nor prefixLength and SubnetPool %s has no defaultPrefixLength", s.id)}, wake
	}
	if why := b.lengthOutOfBounds(s, length); why != "" {
		return Decision{Reason: ipamv1.ReasonOutOfRange, Message: why}, wake
	}
	if d, ok := b.overQuota(s, c, blockSize(s.serving, length)); !ok {
		return d, wake
	}
	p, ok := s.space.Allocate(length)
	if !ok {
		// The message names no figure that changes with other claims (such
		// as the largest free block, which the pool's status shows), so a
		// waiter woken by a release that does not fit it writes nothing.
		return Decision{Reason: ipamv1.ReasonPoolExhausted,
			Message: fmt.Sprintf("no free /%d block in SubnetPool %s (%s); waiting for space to be freed or the pool to grow", length, s.id, s.serving)}, wake
	}
	b.assume(s, c, p)
	return allocated(c), wake
}

// lostToSubnet reports whether c's held range collides with a range another
// Subnet held first (heldFirst), and the decision that takes it back: c is
// not Ready and its status drops the range, after which it is judged as any
// request (a prefixLength is allocated elsewhere, a spec.cidr waits
// Overlaps). Only a restored or hand-written status gets here; a range the
// arbiter grants never collides.
//
// A collision with child pools' ranges only keeps the Subnet as it is
// (reported only): child pools and Subnets come through two informers, and
// one may lag behind the other after a hand-over, so the collision may not
// be real. Two Subnets come through one informer, in the order the API
// wrote them: a collision with a Subnet that held first takes the range
// back, whatever child pools it also covers.
func (b *book) lostToSubnet(c *claim) (Decision, bool) {
	s := b.slots[c.pool]
	if _, collided := s.collisions[c.id]; !collided {
		return Decision{}, false
	}
	held := c.held
	var winner *claim
	s.index.Overlapping(held, func(e ipspace.Entry[claimID]) bool {
		other := b.claim(e.Owner)
		if other == nil || other == c || !slices.ContainsFunc(other.placed, func(q netip.Prefix) bool { return q.Overlaps(held) }) {
			return true
		}
		if other.key().Kind() == statuscalc.KindSubnet {
			winner = other // a child pool's collision alone is not taken as real; a Subnet's is
			return false
		}
		return true
	})
	if winner == nil {
		return Decision{}, false
	}
	holder := "a claim in another namespace"
	if ns := winner.id.namespace(); ns == c.id.namespace() || ns == c.pool.namespace() {
		holder = winner.id.ref().String()
	}
	return Decision{Reason: ipamv1.ReasonOverlaps, Winner: winner.id.ref(),
		Message: fmt.Sprintf("the status showed %s, which the arbiter did not grant to this Subnet (a restored or hand-written status): %s holds it; the range is dropped and this claim decided again",
			held, holder)}, true
}

// DecidePool decides whether the pool with this name and UID serves a range:
// a root pool serves spec.cidr; a child pool serves what its parent granted.
// It returns false if the ledger does not know that pool.
func (l *Ledger) DecidePool(namespace, name string, uid types.UID) (Decision, bool) {
	l.mu.Lock()
	s := l.b.slots[poolIDOf(namespace, name)]
	if s == nil || s.pool == nil || s.pool.uid != uid {
		l.mu.Unlock()
		return Decision{}, false
	}
	d, wake := l.b.decidePool(s)
	d.PoolVersion = s.pool.rv
	l.mu.Unlock()
	l.publishWake(wake)
	return d, true
}

func (b *book) decidePool(s *slot) (Decision, []claimID) {
	p := s.pool
	c := b.claim(s.self)
	if c == nil {
		// Not reached: every pool is a claim, on its parent or its space.
		return Decision{Reason: ipamv1.ReasonPending, Message: "waiting for arbitration"}, nil
	}
	// Every decision carries the range the pool was granted, so that no
	// status write erases a grant its claims depend on.
	granted := c.holds()
	if p.deleting {
		// First, a delegated pool waiting for the hub included: what a
		// pool being deleted waits for is its users.
		subnets, children := b.users(s)
		return Decision{Reason: ipamv1.ReasonTerminating, CIDR: granted,
			Message: fmt.Sprintf("being deleted; waiting for %d Subnets and %d child pools that use it to be deleted", subnets, children)}, nil
	}
	if p.awaitingHub {
		return b.awaitingHub(p, granted), nil
	}
	if !p.spec.IsValid() {
		return Decision{Reason: ipamv1.ReasonInvalidSpec, CIDR: granted, Message: "spec.cidr is not a canonical CIDR"}, nil
	}
	if p.parent != "" {
		if chain := b.cycle(p.id); chain != "" {
			return Decision{Reason: ipamv1.ReasonCycle, CIDR: granted, Message: "parentRef chain leads back to this pool: " + chain}, nil
		}
	}
	if d, ok := b.notAllowed(c); !ok && !granted.IsValid() {
		return d, nil
	}
	from := b.slots[p.claimsFrom()]
	if d, ok := b.poolUnusable(from, p.claimsFrom()); !ok {
		if p.parent == "" && granted == c.requested {
			// A root pool keeps what it holds when its AddressSpace is
			// deleted: a grant is never revoked.
			return b.serving(s, granted, b.servingMessage(p, granted)), nil
		}
		d.CIDR = granted
		return d, nil
	}
	wake := b.sweep(from)
	d, more := b.decideRequest(from, c)
	wake = append(wake, more...)
	held := c.holds()
	if held == c.requested {
		d := b.serving(s, held, b.servingMessage(p, held))
		d.Assumed = c.assumed.IsValid()
		if p.parent == "" {
			d.RootOverlaps, _ = b.rootOverlaps(from, c)
		}
		return d, wake
	}
	if held.IsValid() {
		d.CIDR = held
		d.Message = fmt.Sprintf("cannot change to %s: %s; still serving %s", c.requested, d.Message, held)
	}
	return d, wake
}

// servingMessage says what a pool serves and who granted it.
func (b *book) servingMessage(p *pool, held netip.Prefix) string {
	if p.parent == "" {
		return fmt.Sprintf("serving %s in address space %s", held, p.space.spaceName())
	}
	return fmt.Sprintf("serving %s, granted by parent SubnetPool %s", held, p.parent)
}

// serving is the decision for a pool that serves (or, a child pool, was
// granted) cidr: Available, or ClaimsOutside while claims granted before its
// last change break its rules.
func (b *book) serving(s *slot, cidr netip.Prefix, message string) Decision {
	if len(s.outside) == 0 {
		return Decision{Reason: ipamv1.ReasonAvailable, CIDR: cidr, Message: message}
	}
	return Decision{Reason: ipamv1.ReasonClaimsOutside, CIDR: cidr,
		Message: fmt.Sprintf("%s; %s outside it or on a reserved range: %s; they were granted before the pool's last change and keep their ranges: delete them to complete the change",
			message, claimsLie(len(s.outside)), b.describeClaims(s, s.outside))}
}

// claimsLie reads "1 claim lies" or "3 claims lie".
func claimsLie(count int) string {
	if count == 1 {
		return "1 claim lies"
	}
	return fmt.Sprintf("%d claims lie", count)
}

// describeClaims names up to three of the keys with their held ranges, by name, plus
// a count of the rest: stable, so the message does not flap.
func (b *book) describeClaims(s *slot, keys map[claimID]struct{}) string {
	sorted := make([]claimID, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	slices.Sort(sorted)
	var parts []string
	for _, k := range sorted[:min(len(sorted), maxNamed)] {
		parts = append(parts, fmt.Sprintf("%s (%s)", k.ref(), s.claims[k].holds()))
	}
	out := strings.Join(parts, ", ")
	if extra := len(sorted) - maxNamed; extra > 0 {
		out += fmt.Sprintf(" and %d more", extra)
	}
	return out
}

// maxNamed bounds how many claims a message names.
const maxNamed = 3

// poolUnusable reports why a pool cannot hand out ranges, if it cannot.
func (b *book) poolUnusable(s *slot, id poolID) (Decision, bool) {
	switch {
	case id.isSpace() && (s == nil || s.pool == nil):
		return Decision{Reason: ipamv1.ReasonAddressSpaceNotFound,
			Message: fmt.Sprintf("AddressSpace %s does not exist; waiting for it to be created (or create the pool without spec.addressSpace, in the default space)", id.spaceName())}, false
	case s == nil || s.pool == nil:
		return Decision{Reason: ipamv1.ReasonPoolNotFound,
			Message: fmt.Sprintf("SubnetPool %s does not exist; waiting for it to be created", id)}, false
	case s.pool.deleting:
		return Decision{Reason: ipamv1.ReasonPoolNotReady,
			Message: fmt.Sprintf("SubnetPool %s is being deleted", id)}, false
	case s.space == nil:
		return Decision{Reason: ipamv1.ReasonPoolNotReady,
			Message: fmt.Sprintf("SubnetPool %s serves no range yet (its parent has not granted it one, or the grant is still being written)", id)}, false
	}
	return Decision{}, true
}

// decideRequest returns the decision on an explicit request after a sweep:
// Allocated if it holds its range, else why not. A request that the sweep
// would grant never waits for a missed change: the sweep runs again. (The
// changes that can let a request in set the sweep flag; this keeps a missed
// one from leaving a claim waiting with nothing to wake it.)
func (b *book) decideRequest(s *slot, c *claim) (Decision, []claimID) {
	if c.holds() == c.requested {
		return allocated(c), nil
	}
	if c.unconfirmed() {
		return Decision{Reason: ipamv1.ReasonPending,
			Message: fmt.Sprintf("waiting for its grant of %s to be written before it changes", c.assumed)}, nil
	}
	d := b.whyNotGranted(s, c)
	if d.Reason != ipamv1.ReasonPending {
		return d, nil
	}
	s.sweep = true
	wake := b.sweep(s)
	if c.holds() == c.requested {
		return allocated(c), wake
	}
	return b.whyNotGranted(s, c), wake
}

// whyNotGranted explains why an explicit request does not hold its range,
// after a sweep: it lies outside the pool's rules, a child pool's own claims
// lie outside the range it asks for, or a held range overlaps it.
func (b *book) whyNotGranted(s *slot, c *claim) Decision {
	if d, ok := b.notAllowed(c); !ok {
		return d
	}
	if why := b.outOfRange(s, c); why != "" {
		return Decision{Reason: ipamv1.ReasonOutOfRange, Message: why}
	}
	if d, ok := b.overQuota(s, c, ipspace.AddressCount(c.requested)); !ok {
		return d
	}
	if outside := b.outsideResize(c); len(outside) > 0 {
		child := b.childSlot(c)
		return Decision{Reason: ipamv1.ReasonClaimsOutside,
			Message: fmt.Sprintf("%s outside it: %s", claimsLie(len(outside)), b.describeClaims(child, outside))}
	}
	winner := b.holderOverlapping(s, c, c.requested)
	if winner == nil {
		// The sweep grants a free request in range, so this is not reached;
		// say what is known rather than guess.
		return Decision{Reason: ipamv1.ReasonPending, Message: "waiting for arbitration"}
	}
	// The status is the claimant's to read: it names the winner only in
	// the claimant's or the pool's namespace, as admission does
	// (docs/design/tenancy.md, "What a tenant may learn").
	holder := "a claim in another namespace"
	if c.pool.isSpace() {
		holder = "a root pool in another namespace"
	}
	if ns := winner.id.namespace(); ns == c.id.namespace() || ns == c.pool.namespace() {
		holder = winner.id.ref().String()
	}
	if c.pool.isSpace() {
		return Decision{Reason: ipamv1.ReasonOverlaps, Winner: winner.id.ref(),
			Message: fmt.Sprintf("%s overlaps %s (%s) in address space %s, which holds it; this pool is granted its range if that one is deleted, or use another address space for a deliberate overlap",
				c.requested, holder, winner.holds(), c.pool.spaceName())}
	}
	return Decision{Reason: ipamv1.ReasonOverlaps, Winner: winner.id.ref(),
		Message: fmt.Sprintf("%s overlaps %s (%s), which holds it; this claim is granted if that one is deleted",
			c.requested, holder, winner.holds())}
}

// rules are what the slot's pool allows, in the words the webhooks use.
func (b *book) rules(s *slot) ipspace.Rules {
	name := "SubnetPool " + string(s.id)
	if s.id.isSpace() {
		name = "address space " + s.id.spaceName()
	}
	return ipspace.Rules{
		Name: name, Pool: s.serving,
		Reserved: s.pool.reserved, MinLength: s.pool.minLen, MaxLength: s.pool.maxLen,
	}
}

// outOfRange explains why an explicit request can never be granted from the
// pool as it is, or returns "". Length bounds apply to Subnets only.
func (b *book) outOfRange(s *slot, c *claim) string {
	if v := b.rules(s).CheckRange(c.requested, c.key().Kind() == statuscalc.KindSubnet); v != nil {
		return c.requested.String() + ": " + v.Detail
	}
	return ""
}

// lengthOutOfBounds explains why a Subnet of this prefix length cannot come
// from the pool, or returns "".
func (b *book) lengthOutOfBounds(s *slot, length int) string {
	if v := b.rules(s).CheckLength(length); v != nil {
		return v.Detail
	}
	return ""
}

// pendingRequests returns the slot's explicit requests that hold nothing (or,
// child pools, something else), in winner order.
func (b *book) pendingRequests(s *slot) []*claim {
	out := make([]*claim, 0, len(s.requests))
	for key := range s.requests {
		out = append(out, s.claims[key])
	}
	slices.SortFunc(out, olderClaim)
	return out
}

// sweep decides the slot's pending explicit requests in winner order, each
// taking its range if the pool's rules allow it and no other claim keeps an
// overlapping range. A child pool also needs its own claims to fit the range
// it asks for. It returns the claims to wake: the ones it granted, the
// waiters of child pools whose range it changed, and the waiters a change
// made room for.
func (b *book) sweep(s *slot) []claimID {
	if !s.sweep || s.space == nil {
		return nil
	}
	s.sweep = false
	var wake []claimID
	for _, c := range b.pendingRequests(s) {
		// A claim whose namespace the pool does not allow gets no new
		// range (it keeps one it holds), nor one whose namespace holds
		// what the pool allows each namespace: the requests granted
		// earlier in this sweep count, so of two that together exceed a
		// cap only the first in winner order is granted.
		if c.unconfirmed() || !b.allowed(c) || b.outOfRange(s, c) != "" || b.holderOverlapping(s, c, c.requested) != nil || len(b.outsideResize(c)) > 0 {
			continue
		}
		if _, ok := b.overQuota(s, c, ipspace.AddressCount(c.requested)); !ok {
			continue
		}
		// The request is inside the pool, off its reserved ranges and no
		// other claim keeps any of it: with the claim's own ranges it is
		// placeable. A child pool keeps its old range too until the API
		// shows the new one (claim.footprint).
		b.indexClaim(s, c, false)
		c.assumed = c.requested
		b.indexClaim(s, c, true)
		ch := b.refit(s, c)
		if _, collided := s.collisions[c.id]; collided || !slices.ContainsFunc(c.placed, func(q netip.Prefix) bool { return statuscalc.Contains(q, c.requested) }) {
			// Not reached: the checks above say the map can take it. Should
			// it not, the grant is withdrawn rather than forced.
			b.indexClaim(s, c, false)
			c.assumed = netip.Prefix{}
			b.indexClaim(s, c, true)
			b.refit(s, c)
			continue
		}
		s.noteWaiting(c)
		wake = append(wake, c.id)
		wake = append(wake, b.wakeAfter(s, ch)...)
		if c.key().Kind() == statuscalc.KindSubnetPool {
			if child := b.childSlot(c); child != nil && b.rebuildSpace(child) {
				wake = append(wake, b.waiters(child)...)
			}
		}
	}
	return wake
}

// outsideResize returns the claims of a child pool that keep a range
// outside the range it asks for: what blocks the change, or the first
// grant (claims of a child can outlive a grant that was never written).
func (b *book) outsideResize(c *claim) map[claimID]struct{} {
	child := b.childSlot(c)
	if child == nil {
		return nil
	}
	var out map[claimID]struct{}
	for key, cc := range child.claims {
		for _, h := range cc.footprint() {
			if !statuscalc.Contains(c.requested, h) {
				if out == nil {
					out = map[claimID]struct{}{}
				}
				out[key] = struct{}{}
			}
		}
	}
	return out
}

// assume records that the arbiter granted p to c; p is already held in the
// slot's map.
func (b *book) assume(s *slot, c *claim, p netip.Prefix) {
	b.indexClaim(s, c, false)
	c.assumed, c.placed = p, []netip.Prefix{p}
	c.heldSince = b.tick()
	delete(s.collisions, c.id)
	b.indexClaim(s, c, true)
	s.noteWaiting(c)
}

// Forget withdraws the assumed grant p of the claim key of the object with
// this UID, whose write failed for good (the object is gone or replaced, or
// the API refused the status). The range is free again. A claim of another
// object under the same name is left alone, and the claim itself is not
// woken: it would be granted again and fail again until the informer shows
// why; its own next event decides it.
func (l *Ledger) Forget(namespace string, key ClaimKey, uid types.UID, p netip.Prefix) {
	id := idOf(namespace, key)
	l.mu.Lock()
	b := &l.b
	c := b.claim(id)
	if c == nil || c.uid != uid || c.assumed != p {
		l.mu.Unlock()
		return
	}
	s := b.slots[c.pool]
	b.indexClaim(s, c, false)
	c.assumed = netip.Prefix{}
	b.indexClaim(s, c, true)
	ch := b.refit(s, c)
	s.noteWaiting(c)
	s.sweep = true
	var wake []claimID
	for _, k := range b.wakeAfter(s, ch) {
		if k != id {
			wake = append(wake, k)
		}
	}
	l.mu.Unlock()
	l.publishWake(wake)
}

// publishWake tells subscribers to look again at claims whose decision may
// have changed outside an informer event.
func (l *Ledger) publishWake(wake []claimID) {
	if len(wake) == 0 {
		return
	}
	l.publish(Event{Type: Updated, Wake: refs(wake)})
}

func allocated(c *claim) Decision {
	return Decision{Reason: ipamv1.ReasonAllocated, CIDR: c.holds(), Assumed: c.assumed.IsValid(),
		Message: fmt.Sprintf("holds %s", c.holds())}
}

// cycle returns the parentRef chain if it leads back to the pool, else "".
// A pool in another namespace than the first is named with its namespace.
func (b *book) cycle(id poolID) string {
	chain := []string{id.name()}
	seen := map[poolID]bool{id: true}
	for cur := id; ; {
		s := b.slots[cur]
		if s == nil || s.pool == nil || s.pool.parent == "" {
			return ""
		}
		cur = s.pool.parent
		if cur.namespace() == id.namespace() {
			chain = append(chain, cur.name())
		} else {
			chain = append(chain, string(cur))
		}
		if cur == id {
			return strings.Join(chain, " -> ")
		}
		if seen[cur] {
			return "" // a cycle further up; the pools on it report it
		}
		seen[cur] = true
	}
}
