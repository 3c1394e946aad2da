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
}

// item is an Entry as the tree stores it: the address as an integer, which
// compares faster than netip.Addr and, at half an Entry's size, keeps more of
// a large index in cache.
type item[K cmp.Ordered] struct {
	start u128
	bits  uint8
	is4   bool
	probe bool // a search key that sorts before every owner of its range
	owner K
}

func itemOf[K cmp.Ordered](p netip.Prefix, owner K) item[K] {
	return item[K]{start: addrToU128(p.Addr()), bits: uint8(p.Bits()), is4: p.Addr().Is4(), owner: owner}
}

func probeOf[K cmp.Ordered](p netip.Prefix) item[K] {
	return item[K]{start: addrToU128(p.Addr()), bits: uint8(p.Bits()), is4: p.Addr().Is4(), probe: true}
}

func (it item[K]) entry() Entry[K] {
	width := 128
	if it.is4 {
		width = 32
	}
	return Entry[K]{Prefix: netip.PrefixFrom(u128ToAddr(it.start, width), int(it.bits)), Owner: it.owner}
}

// lessItem orders by address, family (IPv4 first), length, then owner.
func lessItem[K cmp.Ordered](a, b item[K]) bool {
	if a.start != b.start {
		return a.start.less(b.start)
	}
	if a.is4 != b.is4 {
		return a.is4
	}
	if a.bits != b.bits {
		return a.bits < b.bits
	}
	if a.probe != b.probe {
		return a.probe
	}
	return a.owner < b.owner
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
	tree     *btree.BTreeG[item[K]]
	lengths6 [129]int // number of IPv6 entries per prefix length
	lengths4 [33]int  // number of IPv4 entries per prefix length
}

// indexDegree: wider nodes than the free-space map's, since an index query
// is one descent and its cost at 100k claims is cache misses per level
// (BenchmarkIndexOverlap: 64 beat 16 and 32 at 100k, no worse at 1k).
const indexDegree = 64

// NewIndex returns an empty index.
func NewIndex[K cmp.Ordered]() *Index[K] {
	return &Index[K]{tree: btree.NewG(indexDegree, lessItem[K])}
}

// Len is the number of entries.
func (x *Index[K]) Len() int { return x.tree.Len() }

// Insert adds an entry; it reports false if the same entry was present.
// The prefix must be valid and masked.
func (x *Index[K]) Insert(p netip.Prefix, owner K) bool {
	if _, replaced := x.tree.ReplaceOrInsert(itemOf(p, owner)); replaced {
		return false
	}
	x.countLength(p, +1)
	return true
}

// Delete removes an entry; it reports false if it was absent.
func (x *Index[K]) Delete(p netip.Prefix, owner K) bool {
	if _, found := x.tree.Delete(itemOf(p, owner)); !found {
		return false
	}
	x.countLength(p, -1)
	return true
}

// Has reports whether the entry is present.
func (x *Index[K]) Has(p netip.Prefix, owner K) bool {
	return x.tree.Has(itemOf(p, owner))
}

// Overlapping calls fn for every entry that overlaps p, containers first
// (largest first), then the entries inside p in address order. fn returns
// false to stop.
func (x *Index[K]) Overlapping(p netip.Prefix, fn func(Entry[K]) bool) {
	is4 := p.Addr().Is4()
	// Containers: exact lookups of p's strict ancestors at the lengths present.
	for n := 0; n < p.Bits(); n++ {
		if !x.hasLength(is4, n) {
			continue
		}
		ancestor := probeOf[K](netip.PrefixFrom(p.Addr(), n).Masked())
		stop := false
		x.tree.AscendGreaterOrEqual(ancestor, func(it item[K]) bool {
			if it.start != ancestor.start || it.is4 != is4 || it.bits != ancestor.bits {
				return false
			}
			stop = !fn(it.entry())
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
	x.tree.AscendGreaterOrEqual(probeOf[K](p), func(it item[K]) bool {
		if last.less(it.start) {
			return false
		}
		if it.is4 != is4 {
			return true // the other family at the same integer: not inside p
		}
		return fn(it.entry())
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
	x.tree.Ascend(func(it item[K]) bool { return fn(it.entry()) })
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
