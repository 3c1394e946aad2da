package ledger

import (
	"net/netip"
	"slices"

	"github.com/subnet-operator/subnet-operator/ipspace"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

// PoolView is what the webhooks need to know of a pool.
type PoolView struct {
	Name     string
	Spec     netip.Prefix // spec.cidr; invalid if it does not parse
	Parent   string
	Default  int // -1 if unset
	Min, Max int // -1 if unset
	Reserved []netip.Prefix
	Deleting bool
	// Serving is the range the pool hands out now; invalid while it serves
	// none (a child pool not granted yet).
	Serving netip.Prefix
}

// Pool returns a pool's view, or false if the pool does not exist.
func (l *Ledger) Pool(namespace, name string) (PoolView, bool) {
	n := l.ns(namespace, false)
	if n == nil {
		return PoolView{}, false
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	s := n.slots[name]
	if s == nil || s.pool == nil {
		return PoolView{}, false
	}
	p := s.pool
	return PoolView{
		Name: p.name, Spec: p.spec, Parent: p.parent, Default: p.defaultLen, Min: p.minLen, Max: p.maxLen,
		Reserved: slices.Clone(p.reserved), Deleting: p.deleting, Serving: s.serving,
	}, true
}

// Claimant is a claim found by a query: who, and which of its ranges.
type Claimant struct {
	Key   ClaimKey
	Range netip.Prefix
}

// Overlapping returns up to limit claims of a pool whose requested or held
// range overlaps p, ignoring the claim exclude (the object being updated),
// and the total number found. O(L log n + k).
func (l *Ledger) Overlapping(namespace, pool string, p netip.Prefix, exclude ClaimKey, limit int) ([]Claimant, int) {
	n := l.ns(namespace, false)
	if n == nil {
		return nil, 0
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	s := n.slots[pool]
	if s == nil {
		return nil, 0
	}
	var found []Claimant
	seen := map[ClaimKey]bool{}
	s.index.Overlapping(p, func(e ipspace.Entry[ClaimKey]) bool {
		if e.Owner == exclude || seen[e.Owner] {
			return true
		}
		seen[e.Owner] = true
		if len(found) < limit {
			found = append(found, Claimant{Key: e.Owner, Range: e.Prefix})
		}
		return true
	})
	return found, len(seen)
}

// Outside returns up to limit claims of a pool with a requested or held
// range that does not lie inside p, and how many there are: what a pool
// cannot shrink below. O(n) in the pool's claims; pools change rarely.
func (l *Ledger) Outside(namespace, pool string, p netip.Prefix, limit int) ([]Claimant, int) {
	n := l.ns(namespace, false)
	if n == nil {
		return nil, 0
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	s := n.slots[pool]
	if s == nil {
		return nil, 0
	}
	var found []Claimant
	seen := map[ClaimKey]bool{}
	s.index.Ascend(func(e ipspace.Entry[ClaimKey]) bool {
		if statuscalc.Contains(p, e.Prefix) || seen[e.Owner] {
			return true
		}
		seen[e.Owner] = true
		if len(found) < limit {
			found = append(found, Claimant{Key: e.Owner, Range: e.Prefix})
		}
		return true
	})
	return found, len(seen)
}

// Users returns up to limit of the claims that reference a pool (Subnets
// first, by name, then child pools), and how many Subnets and child pools
// there are.
func (l *Ledger) Users(namespace, pool string, limit int) (named []ClaimKey, subnets, children int) {
	n := l.ns(namespace, false)
	if n == nil {
		return nil, 0, 0
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	s := n.slots[pool]
	if s == nil {
		return nil, 0, 0
	}
	keys := make([]ClaimKey, 0, len(s.claims))
	for key := range s.claims {
		keys = append(keys, key)
	}
	slices.Sort(keys) // "Subnet/..." < "SubnetPool/...": Subnets first

	return keys[:min(limit, len(keys))], s.subnets, s.children
}

// Ancestors returns a pool's parentRef chain, nearest first, stopping at a
// pool that does not exist or at the first repeated name.
func (l *Ledger) Ancestors(namespace, pool string) []string {
	n := l.ns(namespace, false)
	if n == nil {
		return nil
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	var chain []string
	seen := map[string]bool{pool: true}
	for cur := pool; ; {
		s := n.slots[cur]
		if s == nil || s.pool == nil || s.pool.parent == "" {
			return chain
		}
		cur = s.pool.parent
		chain = append(chain, cur)
		if seen[cur] {
			return chain
		}
		seen[cur] = true
	}
}

// PoolFigures returns a pool's figures from its maintained free-space map,
// with the conflicts it must report: held ranges that collide, and explicit
// requests that lose to a held range. O(W + c log n) for c pending requests.
func (l *Ledger) PoolFigures(namespace, name string) (statuscalc.Figures, bool) {
	n := l.ns(namespace, false)
	if n == nil {
		return statuscalc.Figures{}, false
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	s := n.slots[name]
	if s == nil || s.pool == nil {
		return statuscalc.Figures{}, false
	}
	var f statuscalc.Figures
	if s.space != nil {
		f = statuscalc.Measure(s.pool.defaultLen, s.pool.maxLen, s.space)
	}
	f.Subnets, f.ChildPools = int32(s.subnets), int32(s.children)
	f.Conflicts = n.conflicts(s)
	return f, true
}

// conflicts lists, in winner order of the losers, the claims of a slot that
// do not hold their range because another claim does.
func (n *namespace) conflicts(s *slot) []statuscalc.Conflict {
	var losers []*claim
	for key := range s.collisions {
		losers = append(losers, s.claims[key])
	}
	for key := range s.waiting {
		if c := s.claims[key]; c.requested.IsValid() && c.requested != c.holds() {
			losers = append(losers, c)
		}
	}
	slices.SortFunc(losers, func(a, b *claim) int {
		return statuscalc.Older(a.statuscalcClaim(""), b.statuscalcClaim(""))
	})
	var out []statuscalc.Conflict
	for _, c := range losers {
		collided := !c.placed && c.holds().IsValid()
		r := c.requested
		if collided {
			r = c.holds()
		}
		conflict := statuscalc.Conflict{Loser: c.statuscalcClaim(n.name).Ref, LoserRange: r}
		s.index.Overlapping(r, func(e ipspace.Entry[ClaimKey]) bool {
			if w := n.claims[e.Owner]; w != nil && w != c && w.placed && w.holds().Overlaps(r) {
				conflict.Winner, conflict.WinnerRange = w.statuscalcClaim(n.name).Ref, w.holds()
				return false
			}
			return true
		})
		// A request that overlaps no held range is pending or out of range,
		// not in conflict.
		if collided || conflict.Winner != (statuscalc.ClaimRef{}) {
			out = append(out, conflict)
		}
	}
	return out
}
