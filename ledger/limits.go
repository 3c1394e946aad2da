package ledger

import (
	"fmt"
	"math/big"
	"net/netip"
	"slices"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ipspace"
)

// limits is spec.allowedNamespaces.perNamespace as the ledger applies it:
// what each namespace other than the pool's own may hold from the pool.
// The zero value caps nothing.
type limits struct {
	// maxClaims is the most claims (Subnets and child pools) one namespace
	// may have on the pool, when claimsCapped.
	maxClaims    int
	claimsCapped bool
	// maxAddresses is the most addresses one namespace's claims may hold
	// together; nil when uncapped.
	maxAddresses *big.Int
}

// limitsOf parses perNamespace. A maxAddresses that does not parse (the
// schema bypassed, or a v1alpha1 annotation) caps at zero: the pool's
// owners asked for a cap, and the safe reading of a broken one is "no new
// room", as a selector that does not parse matches nothing.
func limitsOf(n *ipamv1.NamespaceLimits) limits {
	var out limits
	if n == nil {
		return out
	}
	if n.MaxClaims != nil {
		out.maxClaims, out.claimsCapped = max(int(*n.MaxClaims), 0), true
	}
	if n.MaxAddresses != "" {
		out.maxAddresses = big.NewInt(0)
		if v, ok := new(big.Int).SetString(n.MaxAddresses, 10); ok && v.Sign() >= 0 {
			out.maxAddresses = v
		}
	}
	return out
}

// capped reports whether the limits cap anything.
func (l limits) capped() bool { return l.claimsCapped || l.maxAddresses != nil }

// String says the limits for consent.key, so that a change of a cap is a
// change of the pool's rules (sameRules): its waiters look again.
func (l limits) String() string {
	if !l.capped() {
		return ""
	}
	s := " perNamespace:"
	if l.claimsCapped {
		s += fmt.Sprintf("claims=%d", l.maxClaims)
	}
	if l.maxAddresses != nil {
		s += ",addresses=" + l.maxAddresses.String()
	}
	return s
}

// holdings is what one namespace's claims on one pool hold: how many hold
// a range, and the addresses of those ranges.
type holdings struct {
	claims    int
	addresses *big.Int
}

// tally adds (or removes) what c holds to its namespace's holdings on s.
// indexClaim calls it around every change of a claim's ranges, so the
// tally follows holds() without a walk of the namespace's claims.
func (s *slot) tally(c *claim, add bool) {
	ns := c.id.namespace()
	held := c.holds()
	if ns == s.id.namespace() || !held.IsValid() {
		return
	}
	if s.holdings == nil {
		s.holdings = map[string]*holdings{}
	}
	h := s.holdings[ns]
	if h == nil {
		h = &holdings{addresses: new(big.Int)}
		s.holdings[ns] = h
	}
	if add {
		h.claims++
		h.addresses.Add(h.addresses, ipspace.AddressCount(held))
		return
	}
	h.claims--
	h.addresses.Sub(h.addresses, ipspace.AddressCount(held))
	if h.claims == 0 {
		delete(s.holdings, ns)
	}
}

// usage is what one namespace has on one pool.
type usage struct {
	// claims counts the namespace's claims on the pool; holding those of
	// them that hold a range, and held their addresses.
	claims, holding int
	held            *big.Int
}

// namespaceUsage is what namespace (not the pool's own) has on slot s,
// leaving out the claim skip. O(1): the tallies are kept as claims change
// (slot.tally), so a namespace's many claims never slow a decision.
func (b *book) namespaceUsage(s *slot, namespace string, skip claimID) usage {
	u := usage{claims: len(s.foreign[namespace]), held: new(big.Int)}
	if h := s.holdings[namespace]; h != nil {
		u.holding = h.claims
		u.held.Set(h.addresses)
	}
	if _, mine := s.foreign[namespace][skip]; mine {
		u.claims--
		if c := s.claims[skip]; c != nil && c.holds().IsValid() {
			u.holding--
			u.held.Sub(u.held, ipspace.AddressCount(c.holds()))
		}
	}
	return u
}

// blockSize is the number of addresses in a block of length in the family
// of serving; nil when either is unknown.
func blockSize(serving netip.Prefix, length int) *big.Int {
	bits := serving.Addr().BitLen()
	if !serving.IsValid() || length < 0 || length > bits {
		return nil
	}
	return new(big.Int).Lsh(big.NewInt(1), uint(bits-length))
}

// slotLimits returns the caps that apply to claims from namespace on s:
// none for the pool's own namespace (its owners set the caps), for an
// address space's slot, or for a pool that caps nothing.
func slotLimits(s *slot, namespace string) (limits, bool) {
	if s == nil || s.pool == nil || s.id.isSpace() || namespace == s.id.namespace() {
		return limits{}, false
	}
	l := s.pool.consent.limits
	return l, l.capped()
}

// overQuota is the arbiter's check: would granting c a range of size
// addresses take its namespace past the pool's per-namespace caps? It
// counts what the namespace's other claims hold (granted or being
// written), so of two claims admitted at once that together exceed a cap
// the one decided first is granted and the other waits. A claim that
// already holds a range is never asked (a grant is never revoked).
func (b *book) overQuota(s *slot, c *claim, size *big.Int) (Decision, bool) {
	lim, capped := slotLimits(s, c.id.namespace())
	if !capped {
		return Decision{}, true
	}
	u := b.namespaceUsage(s, c.id.namespace(), c.id)
	if why := lim.exceeded(u.holding, u.held, size, "holds"); why != "" {
		return Decision{Reason: ipamv1.ReasonNamespaceQuotaExceeded, Message: fmt.Sprintf(
			"namespace %s %s SubnetPool %s allows each namespace; this claim waits until the namespace frees room (deletes a claim on the pool) or the pool's owners raise spec.allowedNamespaces.perNamespace",
			c.id.namespace(), why, s.id)}, false
	}
	return Decision{}, true
}

// exceeded says which cap one more claim of size addresses breaks, given
// claims and addresses already counted ("holds 4 of the 4 claims"), or "".
// size may be nil (not known yet): then only the claim count is checked.
func (l limits) exceeded(claims int, addresses, size *big.Int, verb string) string {
	if l.claimsCapped && claims+1 > l.maxClaims {
		return fmt.Sprintf("%s %d of the %d claims", verb, claims, l.maxClaims)
	}
	if l.maxAddresses != nil && size != nil {
		if total := new(big.Int).Add(addresses, size); total.Cmp(l.maxAddresses) > 0 {
			return fmt.Sprintf("%s %s of the %s addresses (this claim asks for %s more) that", verb, addresses, l.maxAddresses, size)
		}
	}
	return ""
}

// quotaWaiter reports whether c waits for its namespace to free room on
// s: a release of the namespace's ranges may let it in, wherever they lie.
func (b *book) quotaWaiter(s *slot, c *claim) bool {
	_, capped := slotLimits(s, c.id.namespace())
	// A claim whose refusal the API does not show yet may wait for room too.
	return capped && (c.reason == ipamv1.ReasonNamespaceQuotaExceeded || c.reason == "" || c.reason == ipamv1.ReasonPending)
}

// NamespaceQuota answers admission: may the claim key from namespace,
// asking for size addresses (nil: not known), reference pool? It counts
// every other claim the namespace has on the pool, waiting ones too, so
// that a namespace cannot queue claims past its cap, and the addresses
// they hold (those that wait are held to the cap when the arbiter grants
// them). refusal is "" when it may, else it says the figure ("namespace
// team-a has 4 of the 4 claims SubnetPool netops/corp allows each
// namespace"). O(1).
func (l *Ledger) NamespaceQuota(pool ipamv1.PoolReference, namespace string, key ClaimKey, size *big.Int) (refusal string) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	s := l.b.slots[poolIDOf(pool.Namespace, pool.Name)]
	lim, capped := slotLimits(s, namespace)
	if !capped {
		return ""
	}
	u := l.b.namespaceUsage(s, namespace, idOf(namespace, key))
	if why := lim.exceeded(u.claims, u.held, size, "has"); why != "" {
		return fmt.Sprintf("namespace %s %s SubnetPool %s allows each namespace", namespace, why, pool)
	}
	return ""
}

// BlockSize is the number of addresses a Subnet of prefix length asks for
// from pool (its default length if length is negative); nil when the
// ledger does not know (the pool serves nothing yet, or has no default).
func (l *Ledger) BlockSize(pool ipamv1.PoolReference, length int) *big.Int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	s := l.b.slots[poolIDOf(pool.Namespace, pool.Name)]
	if s == nil || s.pool == nil {
		return nil
	}
	if length < 0 {
		length = s.pool.defaultLen
	}
	serving := s.serving
	if !serving.IsValid() {
		serving = s.pool.spec
	}
	return blockSize(serving, length)
}

// NamespacesOverLimits returns, sorted, up to limit namespaces whose
// claims on pool hold more than perNamespace would allow them (what a cap
// being lowered leaves above it), and how many there are. Those claims
// keep their ranges. O(namespaces with claims on the pool).
func (l *Ledger) NamespacesOverLimits(pool ipamv1.PoolReference, perNamespace *ipamv1.NamespaceLimits, limit int) ([]string, int) {
	lim := limitsOf(perNamespace)
	if !lim.capped() {
		return nil, 0
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	s := l.b.slots[poolIDOf(pool.Namespace, pool.Name)]
	if s == nil {
		return nil, 0
	}
	var over []string
	for ns := range s.foreign {
		u := l.b.namespaceUsage(s, ns, "")
		if (lim.claimsCapped && u.holding > lim.maxClaims) || (lim.maxAddresses != nil && u.held.Cmp(lim.maxAddresses) > 0) {
			over = append(over, ns)
		}
	}
	slices.Sort(over)
	return over[:min(len(over), limit)], len(over)
}
