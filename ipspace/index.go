package ipspace

import (
	"cmp"
	"net/netip"

	"github.com/google/btree"
	"go4.org/netipx"
)

// Entry is a range in an Index and who claims it.
type Entry[K cmp.Ordered] struct {
	Prefix netip.Prefix
	Owner  K
	start  u128 // Prefix's address as an integer: compares faster than netip.Addr
	probe  bool // a search key that sorts before every owner of its range
}

func newEntry[K cmp.Ordered](p netip.Prefix, owner K) Entry[K] {
	return Entry[K]{Prefix: p, Owner: owner, start: addrToU128(p.Addr())}
}

func probeEntry[K cmp.Ordered](p netip.Prefix) Entry[K] {
	return Entry[K]{Prefix: p, start: addrToU128(p.Addr()), probe: true}
}

// Index is an ordered set of claimed ranges that answers "which claims
// overlap this prefix" in O(L log n + k), where L is the number of distinct
// prefix lengths present (a handful in practice), n the number of claims and
// k the number of answers. Claims may overlap each other (the index records
// what was asked for; arbitration decides who holds it), and one range may
// have several owners.
//
// Two CIDR prefixes overlap exactly when one contains the other, so the
// answer is the union of
//   - the claims that contain p: at most one range per prefix length, found
//     by exact lookups of p's ancestors at the lengths present, and
//   - the claims inside p: a contiguous run in (address, length) order.
//
// An Index is not safe for concurrent use; its owner serialises access.
type Index[K cmp.Ordered] struct {
	tree     *btree.BTreeG[Entry[K]]
	lengths6 [129]int // number of IPv6 entries per prefix length
	lengths4 [33]int  // number of IPv4 entries per prefix length
}

// NewIndex returns an empty index.
func NewIndex[K cmp.Ordered]() *Index[K] {
	return &Index[K]{tree: btree.NewG(btreeDegree, lessEntry[K])}
}

// lessEntry orders by family (IPv4 first), address, length, then owner.
func lessEntry[K cmp.Ordered](a, b Entry[K]) bool {
	if a.start != b.start {
		return a.start.less(b.start)
	}
	if a4, b4 := a.Prefix.Addr().Is4(), b.Prefix.Addr().Is4(); a4 != b4 {
		return a4
	}
	if a.Prefix.Bits() != b.Prefix.Bits() {
		return a.Prefix.Bits() < b.Prefix.Bits()
	}
	if a.probe != b.probe {
		return a.probe
	}
	return a.Owner < b.Owner
}

// Len is the number of entries.
func (x *Index[K]) Len() int { return x.tree.Len() }

// Insert adds an entry; it reports false if the same entry was present.
// The prefix must be valid and masked.
func (x *Index[K]) Insert(p netip.Prefix, owner K) bool {
	if _, replaced := x.tree.ReplaceOrInsert(newEntry(p, owner)); replaced {
		return false
	}
	x.countLength(p, +1)
	return true
}

// Delete removes an entry; it reports false if it was absent.
func (x *Index[K]) Delete(p netip.Prefix, owner K) bool {
	if _, found := x.tree.Delete(newEntry(p, owner)); !found {
		return false
	}
	x.countLength(p, -1)
	return true
}

// Has reports whether the entry is present.
func (x *Index[K]) Has(p netip.Prefix, owner K) bool {
	return x.tree.Has(newEntry(p, owner))
}

// Overlapping calls fn for every entry that overlaps p, containers first
// (largest first), then the entries inside p in address order. fn returns
// false to stop.
func (x *Index[K]) Overlapping(p netip.Prefix, fn func(Entry[K]) bool) {
	// Containers: exact lookups of p's strict ancestors at the lengths present.
	for n := 0; n < p.Bits(); n++ {
		if !x.hasLength(p.Addr().Is4(), n) {
			continue
		}
		ancestor := netip.PrefixFrom(p.Addr(), n).Masked()
		stop := false
		x.tree.AscendGreaterOrEqual(probeEntry[K](ancestor), func(e Entry[K]) bool {
			if e.Prefix != ancestor {
				return false
			}
			stop = !fn(e)
			return !stop
		})
		if stop {
			return
		}
	}
	// Entries inside p, p itself included: addresses in [first, last] with a
	// length >= p.Bits(). Entries that start at p's first address with a
	// shorter length sort before (addr, p.Bits()) and were seen above.
	last := addrToU128(netipx.PrefixLastIP(p))
	is4 := p.Addr().Is4()
	x.tree.AscendGreaterOrEqual(probeEntry[K](p), func(e Entry[K]) bool {
		if last.less(e.start) {
			return false
		}
		if e.Prefix.Addr().Is4() != is4 {
			return true // the other family at the same integer: not inside p
		}
		return fn(e)
	})
}

// OverlappingSlice returns the entries Overlapping visits.
func (x *Index[K]) OverlappingSlice(p netip.Prefix) []Entry[K] {
	var out []Entry[K]
	x.Overlapping(p, func(e Entry[K]) bool {
		out = append(out, e)
		return true
	})
	return out
}

// Ascend calls fn for every entry in (address, length, owner) order.
func (x *Index[K]) Ascend(fn func(Entry[K]) bool) {
	x.tree.Ascend(fn)
}

func (x *Index[K]) countLength(p netip.Prefix, delta int) {
	if p.Addr().Is4() {
		x.lengths4[p.Bits()] += delta
	} else {
		x.lengths6[p.Bits()] += delta
	}
}

func (x *Index[K]) hasLength(is4 bool, n int) bool {
	if is4 {
		return x.lengths4[n] > 0
	}
	return x.lengths6[n] > 0
}
