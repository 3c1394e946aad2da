package ledger

import (
	"net/netip"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	toolscache "k8s.io/client-go/tools/cache"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

// EventType says what happened to an object.
type EventType string

// Event types; the values are the metric label values of the seed design.
const (
	Created EventType = "create"
	Updated EventType = "update"
	Deleted EventType = "delete"
)

// Event tells subscribers that the ledger applied an informer event. It is
// delivered after the ledger's state includes the change, so a reconcile it
// triggers never reads a ledger older than the event (the reason the
// reconcilers take their events from here rather than from their own
// informer handlers, whose order relative to the ledger's is not defined).
type Event struct {
	Type EventType
	// Kind, Namespace and Name name the object the event is about; all
	// three are empty on an event that only wakes claims (after a
	// decision), whose Wake names each claim with its own namespace.
	Kind      string // statuscalc.KindSubnet or statuscalc.KindSubnetPool
	Namespace string
	Name      string
	// Object is what the informer delivered: the new object, or on delete
	// the last known state, possibly a cache.DeletedFinalStateUnknown.
	Object any
	// OldObject is the previous object of an update, when the feed has it
	// (the pools' informer; not the Subnets' reflector).
	OldObject any
	// HeldAsBefore, on a Subnet update: the Subnet held the same range in
	// the same pool before and after, is not being deleted, and its spec
	// changed at most by the record of that range. Nothing a pool's status
	// is computed from changed (the record, and the status write for its
	// generation, are two such updates per dynamic Subnet).
	HeldAsBefore bool
	// Wake lists claims whose decision may have changed: claims of a pool
	// that holds nothing yet (waiting for the pool, for space, or for a
	// winner to go) when the pool changed or space was released.
	Wake []statuscalc.ClaimRef
	// Subnet, on an IPAddress event (Kind KindAddress): the Subnet the
	// address is from, in Namespace.
	Subnet string
	// Pools, on a Namespace event (Kind KindNamespace): the pools that
	// hold claims from the namespace, whose ClaimsNotAllowed condition the
	// namespace's new labels may change.
	Pools []ipamv1.PoolReference
}

// Subscribe registers fn for every event and returns a function that
// removes it. fn runs on an informer's event goroutine and must not block.
func (l *Ledger) Subscribe(fn func(Event)) (unsubscribe func()) {
	l.listenersMu.Lock()
	defer l.listenersMu.Unlock()
	l.nextListener++
	id := l.nextListener
	l.listeners[id] = fn
	return func() {
		l.listenersMu.Lock()
		defer l.listenersMu.Unlock()
		delete(l.listeners, id)
	}
}

func (l *Ledger) publish(ev Event) {
	l.listenersMu.RLock()
	defer l.listenersMu.RUnlock()
	for _, fn := range l.listeners {
		fn(ev)
	}
}

// noteChange records the newest resourceVersion of a kind and wakes the
// waiters of the admission barrier and of CatchUp. The version only moves
// forward: a tombstone (a delete the watch missed) carries an older one.
func (l *Ledger) noteChange(kind, resourceVersion string) {
	l.freshMu.Lock()
	if last := l.lastRV[kind]; resourceVersion != "" && (last == "" || newer(resourceVersion, last)) {
		l.lastRV[kind] = resourceVersion
	}
	close(l.changed)
	l.changed = make(chan struct{})
	l.freshMu.Unlock()
}

// ApplySubnet records a Subnet as created or updated. It is the watch
// handler's work, exported for tests and the benchmark.
func (l *Ledger) ApplySubnet(s *ipamv1.Subnet, typ EventType, old any) {
	l.applySubnet(s, typ, old)
	l.noteChange(statuscalc.KindSubnet, s.ResourceVersion)
}

// applySubnet is ApplySubnet without moving the freshness mark: a relist
// moves it once, when every listed object is applied (subnetStore.Replace).
func (l *Ledger) applySubnet(s *ipamv1.Subnet, typ EventType, old any) {
	facts := subnetFacts(s)
	synced := l.Synced()
	l.mu.Lock()
	b := &l.b
	b.pastStartUp = b.pastStartUp || synced
	prev := b.claim(facts.id)
	known := prev != nil
	if !known {
		b.namespace(s.Namespace).subnets++
		b.subnets++
	} else if old == nil && prev.pool != facts.pool {
		// The feed has no old object: say where the claim was (only a
		// bypassed schema moves a Subnet), for the pool it left.
		old = &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name}, Spec: ipamv1.SubnetSpec{PoolRef: prev.pool.reference()}}
	}
	asBefore := known && heldAsBefore(prev, facts)
	released := b.upsertClaim(facts)
	wake := refs(b.wakeAfterRelease(facts.pool, released))
	if !asBefore {
		wake = append(wake, claimRefs(s.Namespace, b.addressWaiters(facts.id))...)
	}
	l.mu.Unlock()
	l.publish(Event{Type: typ, Kind: statuscalc.KindSubnet, Namespace: s.Namespace, Name: s.Name, Object: s, OldObject: old, Wake: wake, HeldAsBefore: asBefore})
}

// heldAsBefore compares a Subnet's facts before and after an update (see
// Event.HeldAsBefore).
func heldAsBefore(prev, next *claim) bool {
	if prev.uid != next.uid || prev.pool != next.pool || prev.deleting || next.deleting || next.invalidSpec ||
		!next.held.IsValid() || prev.held != next.held || prev.reason != next.reason || prev.prefixLength != next.prefixLength {
		return false
	}
	recorded := !prev.requested.IsValid() && next.requested == next.held
	return prev.requested == next.requested || recorded
}

// DeleteSubnet records a Subnet's deletion. obj may be a tombstone.
func (l *Ledger) DeleteSubnet(obj any) {
	if s := l.deleteSubnet(obj); s != nil {
		l.noteChange(statuscalc.KindSubnet, s.ResourceVersion)
	}
}

// deleteSubnet is DeleteSubnet without moving the freshness mark. It
// returns the deleted object, nil if obj is not a Subnet.
func (l *Ledger) deleteSubnet(obj any) *ipamv1.Subnet {
	s, ok := unwrap[*ipamv1.Subnet](obj)
	if !ok {
		return nil
	}
	var wake []statuscalc.ClaimRef
	id := idOf(s.Namespace, SubnetKey(s.Name))
	l.mu.Lock()
	b := &l.b
	if c := b.claim(id); c != nil {
		b.namespace(s.Namespace).subnets--
		b.subnets--
		b.forgetNamespace(s.Namespace)
		pool := c.pool
		released := b.removeClaim(id)
		wake = refs(b.wakeAfterRelease(pool, released))
	}
	b.dropAssumedAddresses(id)
	wake = append(wake, claimRefs(s.Namespace, b.addressWaiters(id))...)
	l.mu.Unlock()
	l.publish(Event{Type: Deleted, Kind: statuscalc.KindSubnet, Namespace: s.Namespace, Name: s.Name, Object: obj, Wake: wake})
	return s
}

// ApplyPool records a SubnetPool as created or updated.
func (l *Ledger) ApplyPool(p *ipamv1.SubnetPool, typ EventType, old any) {
	synced := l.Synced()
	l.mu.Lock()
	l.b.pastStartUp = l.b.pastStartUp || synced
	wake := l.b.applyPool(p)
	l.mu.Unlock()
	// Listeners first, as for Subnets: an admission that waited for the
	// ledger to catch up then also finds what they keep (PoolHints).
	l.publish(Event{Type: typ, Kind: statuscalc.KindSubnetPool, Namespace: p.Namespace, Name: p.Name, Object: p, OldObject: old, Wake: refs(wake)})
	l.noteChange(statuscalc.KindSubnetPool, p.ResourceVersion)
}

// applyPool records a pool's facts and returns the claims to wake. The
// caller holds the decision lock.
func (b *book) applyPool(p *ipamv1.SubnetPool) []claimID {
	facts, asClaim := poolFacts(p)
	b.gateDelegation(p, facts, asClaim)
	s := b.slot(facts.id)
	if s.pool == nil {
		b.namespace(p.Namespace).pools++
		b.pools++
	}
	previous := s.pool
	s.pool = facts
	s.opened = s.opened || facts.consent.from != ipamv1.FromSame
	var wake []claimID
	if asClaim != nil {
		var moved *slot // the slot its claim was on, if that changes
		if c := b.claim(asClaim.id); c != nil && c.pool != asClaim.pool {
			moved = b.slots[c.pool]
		}
		released := b.upsertClaim(asClaim)
		wake = append(wake, b.wakeAfterRelease(asClaim.pool, released)...)
		if moved != nil {
			moved.sweep = true
			wake = append(wake, b.waiters(moved)...)
		}
	} else if stale := b.claim(s.self); stale != nil {
		// Only a bypassed schema removes a parentRef.
		released := b.removeClaim(stale.id)
		wake = append(wake, b.wakeAfterRelease(stale.pool, released)...)
	}
	rebuilt := b.rebuildSpace(s)
	// Claims waiting on this pool look again when it may now serve them: it
	// appeared, changed what it hands out or how, or is terminating. Not on
	// a status-only update (our own writes), which changes none of that.
	// Its pending requests are arbitrated again under the new rules.
	if previous == nil || rebuilt || !sameRules(previous, facts) {
		s.sweep = true
		wake = append(wake, b.waiters(s)...)
	}
	return wake
}

// DeletePool records a SubnetPool's deletion. obj may be a tombstone.
func (l *Ledger) DeletePool(obj any) {
	p, ok := unwrap[*ipamv1.SubnetPool](obj)
	if !ok {
		return
	}
	var wake []claimID
	l.mu.Lock()
	b := &l.b
	if s := b.slots[poolIDOf(p.Namespace, p.Name)]; s != nil && s.pool != nil {
		b.namespace(p.Namespace).pools--
		b.pools--
		b.forgetNamespace(p.Namespace)
		if c := b.claim(s.self); c != nil {
			pool := c.pool
			released := b.removeClaim(c.id)
			wake = append(wake, b.wakeAfterRelease(pool, released)...)
		}
		s.pool = nil
		b.forgetDelegation(s.id)
		b.rebuildSpace(s)
		wake = append(wake, b.waiters(s)...)
		b.dropIfEmpty(s)
	}
	l.mu.Unlock()
	l.publish(Event{Type: Deleted, Kind: statuscalc.KindSubnetPool, Namespace: p.Namespace, Name: p.Name, Object: obj, Wake: refs(wake)})
	l.noteChange(statuscalc.KindSubnetPool, p.ResourceVersion)
}

// sameRules reports whether two versions of a pool hand out ranges alike.
func sameRules(a, b *pool) bool {
	return a.spec == b.spec && a.parent == b.parent && a.space == b.space && a.deleting == b.deleting && a.consent.key == b.consent.key &&
		a.defaultLen == b.defaultLen && a.minLen == b.minLen && a.maxLen == b.maxLen &&
		slices.Equal(a.reserved, b.reserved)
}

// wakeAfterRelease returns the claims to wake after a change to the free
// space of the pool poolName.
func (b *book) wakeAfterRelease(pool poolID, ch change) []claimID {
	s := b.slots[pool]
	if s == nil {
		return nil
	}
	return b.wakeAfter(s, ch)
}

// wakeAfter returns the claims a change to a slot's free space may let in:
// after a rebuild, every waiter; after releases, afterRelease's.
func (b *book) wakeAfter(s *slot, ch change) []claimID {
	if ch.rebuilt {
		wake := b.waiters(s)
		if s.pool != nil && s.pool.claimsFrom() != "" {
			wake = append(wake, b.afterRelease(s, netip.Prefix{})...) // a pool waiting to change its range
		}
		return wake
	}
	var wake []claimID
	for _, p := range ch.released {
		wake = append(wake, b.afterRelease(s, p)...)
	}
	return wake
}

// afterRelease returns the claims that released may let in: waiting
// requests that overlap it, waiting dynamic claims that a free block now
// fits, and, when the pool is a child pool waiting to change its range
// until its claims fit, that child pool (its parent sweeps again). Waking
// only these keeps a release in a pool with many waiters from reconciling
// them all. Waiters from a namespace the pool does not allow are skipped
// whole (a release changes nothing for them: they are refused), and
// dynamic waiters by the length they ask for, so the cost is
// O(namespaces × lengths) plus the waiting requests of allowed namespaces
// and the claims woken, not O(every waiter).
func (b *book) afterRelease(s *slot, released netip.Prefix) []claimID {
	var wake []claimID
	if s.space != nil {
		largest := s.space.Usage().LargestFree
		s.eachMembers(func(ns string, m *members) {
			if ns != s.id.namespace() && !b.allowsNamespace(s, ns) {
				return
			}
			// A claim waiting for its namespace's cap (limits.go) may fit
			// after any release of that namespace's ranges.
			_, capped := slotLimits(s, ns)
			if released.IsValid() {
				for key := range m.waitingRequests {
					visit()
					if c := s.claims[key]; c.requested.Overlaps(released) || (capped && b.quotaWaiter(s, c)) {
						wake = append(wake, key)
					}
				}
			}
			if !largest.IsValid() {
				return
			}
			for length, keys := range m.waitingByLength {
				if length < 0 {
					length = s.pool.defaultLen
				}
				if length < largest.Bits() && !capped {
					continue
				}
				for key := range keys {
					if length >= largest.Bits() || b.quotaWaiter(s, s.claims[key]) {
						visit()
						wake = append(wake, key)
					}
				}
			}
		})
	}
	if s.pool != nil && s.pool.claimsFrom() != "" {
		if c := b.claim(s.self); c != nil && c.requested.IsValid() && c.requested != c.holds() {
			if parent := b.slots[s.pool.claimsFrom()]; parent != nil {
				parent.sweep = true
			}
			wake = append(wake, c.id)
		}
	}
	return wake
}

// waiters are the claims of a slot that hold nothing, or (child pools) ask
// for a range other than the one they hold. O(w log w) in their number.
func (b *book) waiters(s *slot) []claimID {
	out := make([]claimID, 0, len(s.waiting))
	for key := range s.waiting {
		out = append(out, key)
	}
	slices.Sort(out)
	return out
}

// refs returns the claims to wake, each once, as the rest of the operator
// names them.
func refs(ids []claimID) []statuscalc.ClaimRef {
	if len(ids) == 0 {
		return nil
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	out := make([]statuscalc.ClaimRef, len(ids))
	for i, id := range ids {
		out[i] = id.ref()
	}
	return out
}

// newer reports whether resourceVersion a is later than b.
func newer(a, b string) bool {
	cmp, err := resourceversion.CompareResourceVersion(a, b)
	return err == nil && cmp > 0
}

// unwrap returns the object of an informer delete event, which may be a
// tombstone when the watch missed the deletion.
func unwrap[T any](obj any) (T, bool) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	t, ok := obj.(T)
	return t, ok
}
