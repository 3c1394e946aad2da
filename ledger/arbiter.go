package ledger

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha1"
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
	// The caller must write it; if the write fails for good (the object is
	// gone or the write is invalid), it calls Forget.
	Assumed bool
	// Winner names the claim this one lost to (Reason Overlaps).
	Winner ClaimKey
	// RetryAfter is set when the decision waits for the claim to settle
	// (Reason Pending): decide again after it.
	RetryAfter time.Duration
}

// Ready reports whether the decision makes the claim Ready.
func (d Decision) Ready() bool {
	return d.Reason == ipamv1.ReasonAllocated || d.Reason == ipamv1.ReasonAvailable
}

// The arbiter's rules (design invariant 1), all applied under the
// namespace's lock:
//   - a range once held is never taken away;
//   - pending explicit requests (Subnets with spec.cidr, child pools) are
//     decided in winner order, oldest creationTimestamp first, then by name,
//     each taking its range if it is free; before any request is decided, the
//     older requests of its pool are (a "sweep"), so the winner does not
//     depend on which reconcile ran first;
//   - a Subnet that asks for a length gets the best-fit free block, after the
//     pool's pending explicit requests have been decided, so an allocation
//     never takes a range that an older explicit request asked for.
//
// A grant is recorded as assumed until the informer shows it, so the next
// decision already accounts for it.
//
// Explicit requests settle before they are decided. creationTimestamp has a
// resolution of one second, so two claims created in the same second are
// ordered by name, and a claim created later in that second may be the
// "older". An explicit request is therefore decided only once its creation
// second has ended and a margin has passed for the others of that second to
// reach the ledger (SettleMargin). Until then it waits (Pending), and
// dynamic allocations avoid its range. Claims found after a restart are long
// settled and are decided at once.

// DefaultSettleMargin is how long after a claim's creation second ends the
// arbiter waits for claims created in the same second. Informer delivery
// takes milliseconds here; the margin leaves room for a loaded API server.
const DefaultSettleMargin = 250 * time.Millisecond

// rules is the moment a decision is made and the settle margin.
type rules struct {
	now    time.Time
	margin time.Duration
}

// settledAt is when every claim created in c's creation second has had
// time to reach the ledger.
func (r rules) settledAt(c *claim) time.Time {
	return c.created.Truncate(time.Second).Add(time.Second + r.margin)
}

func (l *Ledger) rules() rules {
	l.freshMu.Lock()
	defer l.freshMu.Unlock()
	return rules{now: l.clock(), margin: l.settleMargin}
}

// DecideSubnet decides a Subnet's claim. It returns false if the ledger does
// not know the Subnet (not delivered yet, or deleted).
func (l *Ledger) DecideSubnet(namespace, name string) (Decision, bool) {
	n := l.ns(namespace, false)
	if n == nil {
		return Decision{}, false
	}
	n.mu.Lock()
	c := n.claims[SubnetKey(name)]
	if c == nil {
		n.mu.Unlock()
		return Decision{}, false
	}
	d, wake := n.decideSubnet(c, l.rules())
	n.mu.Unlock()
	l.publishWake(namespace, wake)
	return d, true
}

func (n *namespace) decideSubnet(c *claim, r rules) (Decision, []ClaimKey) {
	if held := c.holds(); held.IsValid() {
		return allocated(c), nil
	}
	if c.invalidSpec {
		return Decision{Reason: ipamv1.ReasonInvalidSpec, Message: "spec.cidr is not a canonical CIDR; delete the Subnet and create it with a valid one"}, nil
	}
	s := n.slots[c.pool]
	if d, ok := n.poolUnusable(s, c.pool); !ok {
		return d, nil
	}
	wake := n.sweep(s, r)
	if c.requested.IsValid() {
		if held := c.holds(); held.IsValid() {
			return allocated(c), wake
		}
		if d := n.whyNotGranted(s, c); d.Reason != ipamv1.ReasonPending {
			return d, wake
		}
		return pending(c, r), wake
	}

	length := c.prefixLength
	if length < 0 {
		length = s.pool.defaultLen
	}
	if length < 0 {
		return Decision{Reason: ipamv1.ReasonInvalidSpec,
			Message: fmt.Sprintf("the Subnet sets neither cidr nor prefixLength and SubnetPool %s/%s has no defaultPrefixLength", n.name, s.name)}, wake
	}
	if why := n.lengthOutOfBounds(s, length); why != "" {
		return Decision{Reason: ipamv1.ReasonOutOfRange, Message: why}, wake
	}
	p, ok := n.allocateAround(s, length, r)
	if !ok {
		msg := fmt.Sprintf("no free /%d block in SubnetPool %s/%s (%s)", length, n.name, s.name, s.serving)
		if largest := s.space.Usage().LargestFree; largest.IsValid() {
			msg += fmt.Sprintf("; the largest free block is %s", largest)
		} else {
			msg += "; the pool is full"
		}
		return Decision{Reason: ipamv1.ReasonPoolExhausted, Message: msg + "; waiting for space to be freed or the pool to grow"}, wake
	}
	n.assume(s, c, p)
	return allocated(c), wake
}

// DecidePool decides whether a pool serves its range: a root pool serves
// spec.cidr; a child pool serves what its parent granted. It returns false if
// the ledger does not know the pool.
func (l *Ledger) DecidePool(namespace, name string) (Decision, bool) {
	n := l.ns(namespace, false)
	if n == nil {
		return Decision{}, false
	}
	n.mu.Lock()
	s := n.slots[name]
	if s == nil || s.pool == nil {
		n.mu.Unlock()
		return Decision{}, false
	}
	d, wake := n.decidePool(s, l.rules())
	n.mu.Unlock()
	l.publishWake(namespace, wake)
	return d, true
}

func (n *namespace) decidePool(s *slot, r rules) (Decision, []ClaimKey) {
	p := s.pool
	if !p.spec.IsValid() {
		return Decision{Reason: ipamv1.ReasonInvalidSpec, Message: "spec.cidr is not a canonical CIDR"}, nil
	}
	if p.deleting {
		subnets, children := n.users(s)
		return Decision{Reason: ipamv1.ReasonTerminating, CIDR: s.serving,
			Message: fmt.Sprintf("being deleted; waiting for %d Subnets and %d child pools that use it to be deleted", subnets, children)}, nil
	}
	if p.parent == "" {
		return Decision{Reason: ipamv1.ReasonAvailable, CIDR: s.serving, Message: fmt.Sprintf("serving %s", s.serving)}, nil
	}
	if chain := n.cycle(p.name); chain != "" {
		return Decision{Reason: ipamv1.ReasonCycle, Message: "parentRef chain leads back to this pool: " + chain}, nil
	}
	c := n.claims[PoolKey(p.name)]
	parent := n.slots[p.parent]
	if d, ok := n.poolUnusable(parent, p.parent); !ok {
		d.CIDR = c.holds()
		return d, nil
	}
	wake := n.sweep(parent, r)
	held := c.holds()
	if held == c.requested {
		return Decision{Reason: ipamv1.ReasonAvailable, CIDR: held, Assumed: c.assumed.IsValid(),
			Message: fmt.Sprintf("serving %s, granted by parent SubnetPool %s/%s", held, n.name, p.parent)}, wake
	}
	d := n.whyNotGranted(parent, c)
	if d.Reason == ipamv1.ReasonPending {
		d = pending(c, r)
	}
	if held.IsValid() {
		d.CIDR = held
		d.Message = fmt.Sprintf("cannot change to %s: %s; still serving %s", c.requested, d.Message, held)
	}
	return d, wake
}

// poolUnusable reports why a pool cannot hand out ranges, if it cannot.
func (n *namespace) poolUnusable(s *slot, name string) (Decision, bool) {
	switch {
	case s == nil || s.pool == nil:
		return Decision{Reason: ipamv1.ReasonPoolNotFound,
			Message: fmt.Sprintf("SubnetPool %s/%s does not exist; waiting for it to be created", n.name, name)}, false
	case s.pool.deleting:
		return Decision{Reason: ipamv1.ReasonPoolNotReady,
			Message: fmt.Sprintf("SubnetPool %s/%s is being deleted", n.name, name)}, false
	case s.space == nil:
		return Decision{Reason: ipamv1.ReasonPoolNotReady,
			Message: fmt.Sprintf("SubnetPool %s/%s serves no range yet (is its parent missing, or its range taken?)", n.name, name)}, false
	}
	return Decision{}, true
}

// whyNotGranted explains why an explicit request does not hold its range.
func (n *namespace) whyNotGranted(s *slot, c *claim) Decision {
	if why := n.outOfRange(s, c); why != "" {
		return Decision{Reason: ipamv1.ReasonOutOfRange, Message: why}
	}
	var winner *claim
	s.index.Overlapping(c.requested, func(e ipspace.Entry[ClaimKey]) bool {
		other := n.claims[e.Owner]
		if e.Owner != c.key && other != nil && other.placed && other.holds().Overlaps(c.requested) {
			winner = other
			return false
		}
		return true
	})
	if winner == nil {
		return Decision{Reason: ipamv1.ReasonPending, Message: "waiting for arbitration"}
	}
	return Decision{Reason: ipamv1.ReasonOverlaps, Winner: winner.key,
		Message: fmt.Sprintf("%s overlaps %s %s/%s (%s), which holds it; this claim is granted if that one is deleted",
			c.requested, winner.key.Kind(), n.name, winner.key.Name(), winner.holds())}
}

// rules are what the slot's pool allows, in the words the webhooks use.
func (n *namespace) rules(s *slot) ipspace.Rules {
	return ipspace.Rules{
		Name: fmt.Sprintf("SubnetPool %s/%s", n.name, s.name), Pool: s.serving,
		Reserved: s.pool.reserved, MinLength: s.pool.minLen, MaxLength: s.pool.maxLen,
	}
}

// outOfRange explains why an explicit request can never be granted from the
// pool as it is, or returns "". Length bounds apply to Subnets only.
func (n *namespace) outOfRange(s *slot, c *claim) string {
	if v := n.rules(s).CheckRange(c.requested, c.key.Kind() == statuscalc.KindSubnet); v != nil {
		return c.requested.String() + ": " + v.Detail
	}
	return ""
}

// lengthOutOfBounds explains why a Subnet of this prefix length cannot come
// from the pool, or returns "".
func (n *namespace) lengthOutOfBounds(s *slot, length int) string {
	if v := n.rules(s).CheckLength(length); v != nil {
		return v.Detail
	}
	return ""
}

// pending is the decision for an explicit request that has not settled.
func pending(c *claim, r rules) Decision {
	wait := r.settledAt(c).Sub(r.now)
	return Decision{Reason: ipamv1.ReasonPending, RetryAfter: max(wait, time.Millisecond),
		Message: "waiting for claims created in the same second before arbitration"}
}

// pendingRequests returns the slot's explicit requests that hold nothing (or,
// child pools, something else), in winner order.
func (n *namespace) pendingRequests(s *slot) []*claim {
	out := make([]*claim, 0, len(s.requests))
	for key := range s.requests {
		out = append(out, s.claims[key])
	}
	slices.SortFunc(out, func(a, b *claim) int {
		return statuscalc.Older(a.statuscalcClaim(""), b.statuscalcClaim(""))
	})
	return out
}

// sweep decides the slot's settled pending explicit requests in winner
// order. Settling follows creation order, so the settled requests are
// always the oldest ones. It returns the claims it granted and the waiters of
// child pools whose range it granted or moved, to be woken.
func (n *namespace) sweep(s *slot, r rules) []ClaimKey {
	if !s.sweep || s.space == nil {
		return nil
	}
	s.sweep = false
	var wake []ClaimKey
	for _, c := range n.pendingRequests(s) {
		if r.now.Before(r.settledAt(c)) {
			s.sweep = true // decide it, and the younger ones, once it settles
			break
		}
		if n.outOfRange(s, c) != "" {
			continue
		}
		old := c.holds()
		if old.IsValid() && !n.resizeFits(c) {
			continue
		}
		if old.IsValid() && c.placed {
			_ = s.space.Release(old) // placed, so held
		}
		if s.space.Claim(c.requested) != nil {
			if old.IsValid() && c.placed {
				_ = s.space.Claim(old) // just released: free
			}
			continue
		}
		n.assume(s, c, c.requested)
		wake = append(wake, c.key)
		if c.key.Kind() == statuscalc.KindSubnetPool {
			if child := n.slots[c.key.Name()]; child != nil && n.rebuildSpace(child) {
				wake = append(wake, n.waiters(child)...)
			}
		}
	}
	return wake
}

// allocateAround allocates a block of length from the slot's map around the
// ranges of unsettled explicit requests, which are held for the duration so
// that an allocation does not take a range an older request will win.
func (n *namespace) allocateAround(s *slot, length int, r rules) (netip.Prefix, bool) {
	var held []netip.Prefix
	for _, c := range n.pendingRequests(s) {
		if !c.holds().IsValid() && r.now.Before(r.settledAt(c)) && n.outOfRange(s, c) == "" && s.space.Claim(c.requested) == nil {
			held = append(held, c.requested)
		}
	}
	p, ok := s.space.Allocate(length)
	for _, h := range held {
		_ = s.space.Release(h) // claimed just above
	}
	return p, ok
}

// resizeFits reports whether a child pool's own held claims fit the range
// it now asks for.
func (n *namespace) resizeFits(c *claim) bool {
	child := n.slots[c.key.Name()]
	if child == nil {
		return true
	}
	for _, cc := range child.claims {
		if h := cc.holds(); h.IsValid() && !statuscalc.Contains(c.requested, h) {
			return false
		}
	}
	return true
}

// assume records that the arbiter granted p to c; p is already held in the
// slot's map.
func (n *namespace) assume(s *slot, c *claim, p netip.Prefix) {
	n.indexClaim(s, c, false)
	c.assumed, c.placed = p, true
	delete(s.collisions, c.key)
	n.indexClaim(s, c, true)
	s.noteWaiting(c)
}

// Forget withdraws an assumed grant whose write failed for good (the object
// is gone, or the API refused the status). The range is free again.
func (l *Ledger) Forget(namespace string, key ClaimKey, p netip.Prefix) {
	n := l.ns(namespace, false)
	if n == nil {
		return
	}
	n.mu.Lock()
	c := n.claims[key]
	if c == nil || c.assumed != p {
		n.mu.Unlock()
		return
	}
	s := n.slots[c.pool]
	n.indexClaim(s, c, false)
	if c.placed && s.space != nil {
		_ = s.space.Release(p)
	}
	c.assumed, c.placed = netip.Prefix{}, false
	n.place(s, c) // the API's view, if it holds something
	n.indexClaim(s, c, true)
	s.noteWaiting(c)
	s.sweep = true
	wake := n.waiters(s)
	n.mu.Unlock()
	l.publishWake(namespace, wake)
}

// publishWake tells subscribers to look again at claims whose decision may
// have changed outside an informer event.
func (l *Ledger) publishWake(namespace string, wake []ClaimKey) {
	if len(wake) == 0 {
		return
	}
	l.publish(Event{Type: Updated, Namespace: namespace, Wake: dedupe(wake)})
}

func allocated(c *claim) Decision {
	return Decision{Reason: ipamv1.ReasonAllocated, CIDR: c.holds(), Assumed: c.assumed.IsValid(),
		Message: fmt.Sprintf("holds %s", c.holds())}
}

// cycle returns the parentRef chain if it leads back to name, else "".
func (n *namespace) cycle(name string) string {
	chain := []string{name}
	seen := map[string]bool{name: true}
	for cur := name; ; {
		s := n.slots[cur]
		if s == nil || s.pool == nil || s.pool.parent == "" {
			return ""
		}
		cur = s.pool.parent
		chain = append(chain, cur)
		if cur == name {
			return strings.Join(chain, " -> ")
		}
		if seen[cur] {
			return "" // a cycle further up; the pools on it report it
		}
		seen[cur] = true
	}
}

// users counts the Subnets and child pools that reference a pool.
func (n *namespace) users(s *slot) (subnets, children int) {
	return s.subnets, s.children
}
