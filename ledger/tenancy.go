package ledger

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

// KindNamespace is the Kind of the events a Namespace's label change
// publishes (Event.Pools names the pools whose consent it may change).
const KindNamespace = "Namespace"

// consent is a pool's spec.allowedNamespaces as the ledger applies it. The
// zero value is Same: the pool's own namespace only.
type consent struct {
	from ipamv1.FromNamespaces
	// selector is nil unless from is Selector; a selector that does not
	// parse (the webhooks bypassed) matches nothing.
	selector labels.Selector
	// key says the policy in one comparable string, for sameRules and for
	// messages.
	key string
	// limits caps what each namespace but the pool's own holds (limits.go).
	limits limits
}

func consentOf(a *ipamv1.AllowedNamespaces) consent {
	c := consentFrom(a)
	if a != nil {
		c.limits = limitsOf(a.PerNamespace)
		c.key += c.limits.String()
	}
	return c
}

// consentFrom is consentOf without the per-namespace caps.
func consentFrom(a *ipamv1.AllowedNamespaces) consent {
	if a == nil || a.From == "" || a.From == ipamv1.FromSame {
		return consent{from: ipamv1.FromSame, key: string(ipamv1.FromSame)}
	}
	if a.From == ipamv1.FromAll {
		return consent{from: ipamv1.FromAll, key: string(ipamv1.FromAll)}
	}
	sel := labels.Nothing()
	if a.Selector != nil {
		if parsed, err := metav1.LabelSelectorAsSelector(a.Selector); err == nil {
			sel = parsed
		}
	}
	return consent{from: ipamv1.FromSelector, selector: sel, key: string(ipamv1.FromSelector) + ":" + sel.String()}
}

// allows reports whether a claim from namespace may claim from a pool in
// poolNamespace with this consent, given the namespace's labels; known is
// false when the Namespaces' informer has not delivered the namespace
// (yet): a selector is then not matched at all, since an empty label set
// would match a negative one (`quarantine DoesNotExist`).
func (c consent) allows(poolNamespace, namespace string, nsLabels labels.Set, known bool) bool {
	switch {
	case namespace == poolNamespace:
		return true
	case c.from == ipamv1.FromAll:
		return true
	case c.from == ipamv1.FromSelector:
		return known && c.selector.Matches(nsLabels)
	}
	return false
}

// describeTo says the policy in a refusal read by a claimant from
// namespace, whose labels are nsLabels (known: delivered by the informer):
// "allows claims only from ...". A tenant learns what concerns its own
// namespace and nothing of the others: for a selector, the label keys it
// looks at and the namespace's own values for them, never the selector's
// values, which may name other tenants (kubernetes.io/metadata.name in
// (team-a, team-b)). The pool's owners read the whole policy on the pool.
func (c consent) describeTo(poolNamespace, namespace string, nsLabels labels.Set, known bool) string {
	switch c.from {
	case ipamv1.FromAll:
		return "allows claims from every namespace"
	case ipamv1.FromSelector:
		keys := selectorKeys(c.selector)
		if len(keys) == 0 {
			return fmt.Sprintf("allows claims only from its own namespace %s (its selector matches no other namespace)", poolNamespace)
		}
		on := "the label " + keys[0]
		if len(keys) > 1 {
			on = "the labels " + strings.Join(keys[:len(keys)-1], ", ") + " and " + keys[len(keys)-1]
		}
		if !known {
			return fmt.Sprintf("allows claims only from its own namespace %s and namespaces whose labels match its selector on %s (the labels of namespace %s are not known to the operator yet: if it was just created, retry)",
				poolNamespace, on, namespace)
		}
		has := make([]string, len(keys))
		for i, k := range keys {
			if v, ok := nsLabels[k]; ok {
				has[i] = k + "=" + v
			} else {
				has[i] = "no label " + k
			}
		}
		return fmt.Sprintf("allows claims only from its own namespace %s and namespaces whose labels match its selector on %s (namespace %s has %s)",
			poolNamespace, on, namespace, strings.Join(has, ", "))
	}
	return fmt.Sprintf("allows claims only from its own namespace %s (spec.allowedNamespaces.from: Same)", poolNamespace)
}

// selectorKeys returns the label keys a selector looks at, sorted, each
// once; none for a selector that matches nothing.
func selectorKeys(sel labels.Selector) []string {
	if sel == nil {
		return nil
	}
	reqs, selectable := sel.Requirements()
	if !selectable {
		return nil
	}
	keys := make([]string, 0, len(reqs))
	for _, r := range reqs {
		keys = append(keys, r.Key())
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// allowed reports whether c's namespace may claim from c's pool. A pool
// that does not exist allows nothing yet, but the claim waits for it
// (poolUnusable answers PoolNotFound first).
func (b *book) allowed(c *claim) bool {
	if c.id.namespace() == c.pool.namespace() {
		return true
	}
	return b.allowsNamespace(b.slots[c.pool], c.id.namespace())
}

// allowsNamespace reports whether the pool of slot s allows claims from
// namespace (one that is not the pool's own).
func (b *book) allowsNamespace(s *slot, namespace string) bool {
	if s == nil || s.pool == nil {
		return false
	}
	nsLabels, known := b.nsLabels[namespace]
	return s.pool.consent.allows(s.id.namespace(), namespace, nsLabels, known)
}

// notAllowed refuses a claim from a namespace the pool does not allow.
// Admission refuses such references first; this holds when it was bypassed
// or its view was stale. A range already held is never taken away, so
// callers ask only for claims that hold nothing.
func (b *book) notAllowed(c *claim) (Decision, bool) {
	if b.allowed(c) {
		return Decision{}, true
	}
	s := b.slots[c.pool]
	if s == nil || s.pool == nil {
		return Decision{}, true // poolUnusable: PoolNotFound
	}
	if c.pool.isSpace() {
		nsLabels, known := b.nsLabels[c.id.namespace()]
		why := "its labels are not known to the operator yet"
		if known {
			why = "it lacks " + strings.Join(missingRequirements(s.pool.consent, nsLabels), ", ")
		}
		return Decision{Reason: ipamv1.ReasonNotAllowed, Message: fmt.Sprintf(
			"address space %s does not take root pools from namespace %s: %s; ask the platform team, or carve this pool from an existing one with spec.parentRef",
			c.pool.spaceName(), c.id.namespace(), why)}, false
	}
	nsLabels, known := b.nsLabels[c.id.namespace()]
	return Decision{Reason: ipamv1.ReasonNotAllowed, Message: fmt.Sprintf(
		"SubnetPool %s %s, not from %s", c.pool, s.pool.consent.describeTo(c.pool.namespace(), c.id.namespace(), nsLabels, known), c.id.namespace())}, false
}

// Consent answers admission: may a claim from namespace reference pool?
// found is false if the ledger does not know the pool; then allowed is
// false and policy empty. policy says the pool's rule for a refusal, as
// namespace may read it (consent.describeTo).
func (l *Ledger) Consent(pool ipamv1.PoolReference, namespace string) (allowed bool, policy string, found bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	s := l.b.slots[poolIDOf(pool.Namespace, pool.Name)]
	if s == nil || s.pool == nil {
		return false, "", false
	}
	c := s.pool.consent
	nsLabels, known := l.b.nsLabels[namespace]
	policy = c.describeTo(pool.Namespace, namespace, nsLabels, known)
	return c.allows(pool.Namespace, namespace, nsLabels, known), policy, true
}

// SharedDomain reports whether claims from more than one namespace may
// reach the pool: it allows other namespaces or did (slot.opened), or
// claims from another namespace reference it (consent lost, webhooks
// bypassed, or made before the pool existed). Admission then takes its
// freshness watermarks cluster-wide, not in one namespace.
func (l *Ledger) SharedDomain(namespace, name string) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	s := l.b.slots[poolIDOf(namespace, name)]
	if s == nil {
		return false
	}
	return len(s.foreign) > 0 || s.opened || (s.pool != nil && s.pool.consent.from != ipamv1.FromSame)
}

// NamespaceLabels returns a copy of a namespace's labels as the ledger
// knows them, and whether it knows the namespace (its informer may not
// have delivered it yet).
func (l *Ledger) NamespaceLabels(namespace string) (map[string]string, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	set, ok := l.b.nsLabels[namespace]
	return maps.Clone(map[string]string(set)), ok
}

// notAllowedClaims returns up to limit claims of a pool that hold a range
// although the pool no longer allows their namespace, sorted, and how many
// there are (PoolFigures' NotAllowed). O(namespaces with claims on the
// pool), plus the claims of those it does not allow.
func (b *book) notAllowedClaims(s *slot, limit int) ([]statuscalc.ClaimRef, int) {
	var ids []claimID
	for _, c := range b.refusedClaims(s, func(c *claim) bool { return c.holds().IsValid() }) {
		ids = append(ids, c.id)
	}
	if len(ids) == 0 {
		return nil, 0
	}
	slices.Sort(ids)
	total := len(ids)
	if len(ids) > limit {
		ids = ids[:limit]
	}
	out := make([]statuscalc.ClaimRef, len(ids))
	for i, id := range ids {
		out[i] = id.ref()
	}
	return out, total
}

// ApplyNamespace records a namespace's labels, from the Namespaces'
// metadata informer. A change wakes what consent may have changed for:
// the namespace's waiting claims on pools of other namespaces, and those
// pools (Event.Pools), whose status lists the claims no longer allowed.
func (l *Ledger) ApplyNamespace(name string, nsLabels map[string]string, typ EventType) {
	l.mu.Lock()
	old, known := l.b.nsLabels[name]
	if known && maps.Equal(old, labels.Set(nsLabels)) {
		l.mu.Unlock()
		return
	}
	l.b.nsLabels[name] = labels.Set(maps.Clone(nsLabels))
	wake, pools := l.b.consentChanged(name)
	l.mu.Unlock()
	l.publish(Event{Type: typ, Kind: KindNamespace, Name: name, Wake: refs(wake), Pools: pools})
}

// markTerminating records whether a namespace is being deleted.
func (l *Ledger) markTerminating(name string, terminating bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if terminating {
		l.b.terminating[name] = struct{}{}
	} else {
		delete(l.b.terminating, name)
	}
}

// NamespaceTerminating reports whether the Namespaces' informer shows the
// namespace being deleted. The namespace controller then deletes its
// objects in an order of its own and retries what is refused, so the
// delete webhooks stand aside there and leave the order to the finalizers:
// a refused parent pool, retried before its child, would keep the
// namespace Terminating forever.
func (l *Ledger) NamespaceTerminating(name string) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	_, ok := l.b.terminating[name]
	return ok
}

// DeleteNamespace forgets a namespace's labels. obj may be a tombstone.
func (l *Ledger) DeleteNamespace(name string) {
	l.mu.Lock()
	delete(l.b.terminating, name)
	if _, known := l.b.nsLabels[name]; !known {
		l.mu.Unlock()
		return
	}
	delete(l.b.nsLabels, name)
	wake, pools := l.b.consentChanged(name)
	l.mu.Unlock()
	l.publish(Event{Type: Deleted, Kind: KindNamespace, Name: name, Wake: refs(wake), Pools: pools})
}

// consentChanged returns, after namespace's labels changed, its waiting
// claims on other namespaces' pools (they may now be granted, or refused:
// those that hold nothing, and child pools asking for another range) and
// those pools. O(claims in the namespace).
func (b *book) consentChanged(namespace string) ([]claimID, []ipamv1.PoolReference) {
	n := b.namespaces[namespace]
	if n == nil {
		return nil, nil
	}
	var wake []claimID
	pools := map[poolID]struct{}{}
	for id, c := range n.claims {
		if c.pool.namespace() == namespace {
			continue
		}
		if !c.pool.isSpace() { // a space is no SubnetPool to reconcile
			pools[c.pool] = struct{}{}
		}
		if s := b.slots[c.pool]; s != nil {
			if _, waiting := s.waiting[id]; waiting {
				wake = append(wake, id)
			}
		}
	}
	slices.Sort(wake)
	out := make([]ipamv1.PoolReference, 0, len(pools))
	for id := range pools {
		out = append(out, id.reference())
	}
	slices.SortFunc(out, func(a, b ipamv1.PoolReference) int { return strings.Compare(a.String(), b.String()) })
	return wake, out
}

// UsersIn returns, for a refusal read by namespace (a DELETE of the pool
// names the pool's namespace), up to limit of the pool's users in that
// namespace, sorted, and how many it has there. The others are the
// business of their own namespaces: a refusal only counts them. Claims
// refused for consent that hold nothing are not users (book.outsiders),
// and those are all in other namespaces. O(the viewer's claims on the pool).
func (l *Ledger) UsersIn(namespace, pool, viewer string, limit int) (named []statuscalc.ClaimRef, total int) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	s := l.b.slots[poolIDOf(namespace, pool)]
	if s == nil {
		return nil, 0
	}
	// The first few in order, kept in a slice of at most limit+1, not a
	// sort of every claim (as Users does).
	keep := func(id claimID) {
		total++
		ref := id.ref()
		if limit <= 0 || (len(named) == limit && compareRefs(ref, named[limit-1]) >= 0) {
			return
		}
		i, _ := slices.BinarySearchFunc(named, ref, compareRefs)
		named = slices.Insert(named, i, ref)
		named = named[:min(len(named), limit)]
	}
	m := s.membersOf(viewer)
	if m == nil {
		return nil, 0
	}
	// The pool's own namespace, or one it allows: every claim; one it
	// does not allow: those that hold a range (book.outsiders).
	ids := m.listed
	if viewer != namespace && !l.b.allowsNamespace(s, viewer) {
		ids = m.holding
	}
	ids.Ascend(func(id claimID) bool {
		keep(id)
		return true
	})
	return named, total
}
