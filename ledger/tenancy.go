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
}

func consentOf(a *ipamv1.AllowedNamespaces) consent {
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

// describe says the policy for a refusal: "allows claims only from ...".
func (c consent) describe(poolNamespace string) string {
	switch c.from {
	case ipamv1.FromAll:
		return "allows claims from every namespace"
	case ipamv1.FromSelector:
		sel := c.selector.String()
		if sel == "" {
			sel = "<nothing: the selector does not parse>"
		}
		return fmt.Sprintf("allows claims only from its own namespace %s and namespaces matching %s", poolNamespace, sel)
	}
	return fmt.Sprintf("allows claims only from its own namespace %s (spec.allowedNamespaces.from: Same)", poolNamespace)
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
	return Decision{Reason: ipamv1.ReasonNotAllowed, Message: fmt.Sprintf(
		"SubnetPool %s %s, not from %s", c.pool, s.pool.consent.describe(c.pool.namespace()), c.id.namespace())}, false
}

// Consent answers admission: may a claim from namespace reference pool?
// found is false if the ledger does not know the pool; then allowed is
// false and policy empty. policy says the pool's rule for a refusal.
func (l *Ledger) Consent(pool ipamv1.PoolReference, namespace string) (allowed bool, policy string, found bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	s := l.b.slots[poolIDOf(pool.Namespace, pool.Name)]
	if s == nil || s.pool == nil {
		return false, "", false
	}
	c := s.pool.consent
	nsLabels, known := l.b.nsLabels[namespace]
	policy = c.describe(pool.Namespace)
	if !known && c.from == ipamv1.FromSelector {
		policy += fmt.Sprintf(" (the labels of namespace %s are not known to the operator yet: if it was just created, retry)", namespace)
	}
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

// DeleteNamespace forgets a namespace's labels. obj may be a tombstone.
func (l *Ledger) DeleteNamespace(name string) {
	l.mu.Lock()
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
