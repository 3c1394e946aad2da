package ipspace

import (
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"slices"

	"github.com/google/btree"
	"go4.org/netipx"
)

// Errors of the free-space map.
var (
	// ErrNotFree: the range is not entirely free (held, reserved, or outside
	// the pool).
	ErrNotFree = errors.New("range is not free")
	// ErrNotHeld: Release of a range that was not claimed.
	ErrNotHeld = errors.New("range is not held")
	// ErrOutOfBounds: a prefix length that no block of the pool can have.
	ErrOutOfBounds = errors.New("prefix length out of the pool's bounds")
)

// btreeDegree keeps nodes around a few cache lines; measured in
// BenchmarkSpace*, 16 to 64 differ by less than 10%.
const btreeDegree = 32

// Space is the free-space map of one pool: which parts of the pool are free,
// held (claimed) or reserved.
//
// Free space is kept as its unique decomposition into maximal aligned blocks
// (a block is free, its buddy-parent is not), bucketed by prefix length and
// ordered by address. That makes every operation O(W log n) for W = 32 or 128
// address bits and n free blocks:
//   - Allocate(L) takes the lowest free block of the longest length <= L
//     (best fit: the smallest block that holds the request) and splits it;
//   - Claim(p) finds the one free block that contains p and splits it;
//   - Release(p) re-inserts p and merges it with its buddy while possible;
//   - the figures (free, allocated, largest free block, allocatable blocks
//     of a length) come from per-length counters in O(W).
//
// A Space is not safe for concurrent use; its owner serialises access.
type Space struct {
	pool     netip.Prefix
	width    int
	free     [129]*btree.BTreeG[u128] // free blocks by prefix length, lazily made
	nFree    [129]int
	nHeld    [129]int
	nReserve [129]int
	held     map[block]struct{}
}

// NewSpace returns the map of a pool with everything free except the
// reserved ranges (clipped to the pool; they may overlap each other).
func NewSpace(pool netip.Prefix, reserved []netip.Prefix) *Space {
	s, _ := NewSpaceHolding(pool, reserved, nil)
	return s
}

// NewSpaceHolding returns the map of a pool whose held ranges are all known
// up front, as in a rebuild. It sorts them and decomposes the gaps between
// them into free blocks, which is several times faster than a Claim per
// range. If a range lies outside the pool, on a reserved range or on another
// held range, it returns ErrNotFree and a map holding nothing: Claim the
// ranges one by one, in the order that decides who wins, to learn which.
func NewSpaceHolding(pool netip.Prefix, reserved, held []netip.Prefix) (*Space, error) {
	pool = pool.Masked()
	s := &Space{pool: pool, width: pool.Addr().BitLen(), held: make(map[block]struct{}, len(held))}

	type taken struct {
		p        netip.Prefix
		reserved bool
	}
	blockers := make([]taken, 0, len(held)+len(reserved))
	for _, r := range s.clipReserved(reserved) {
		blockers = append(blockers, taken{p: r, reserved: true})
	}
	for _, h := range held {
		if !s.inPool(h) {
			return NewSpace(pool, reserved), fmt.Errorf("%s: %w (outside pool %s)", h, ErrNotFree, pool)
		}
		blockers = append(blockers, taken{p: h})
	}
	slices.SortFunc(blockers, func(a, b taken) int { return a.p.Addr().Compare(b.p.Addr()) })

	var gaps []netip.Prefix // scratch for the free blocks of one gap
	next := pool.Addr()     // first address not yet accounted for
	for i, b := range blockers {
		if i > 0 && b.p.Addr().Less(next) {
			return NewSpace(pool, reserved), fmt.Errorf("%s: %w", b.p, ErrNotFree)
		}
		if next.Less(b.p.Addr()) {
			gaps = netipx.IPRangeFrom(next, b.p.Addr().Prev()).AppendPrefixes(gaps[:0])
			for _, g := range gaps {
				s.insertFree(blockOf(g))
			}
		}
		blk := blockOf(b.p)
		if b.reserved {
			s.nReserve[blk.bits]++
		} else {
			s.held[blk] = struct{}{}
			s.nHeld[blk.bits]++
		}
		next = netipx.PrefixLastIP(b.p).Next() // invalid past the end of the address space
		if !next.IsValid() || !pool.Contains(next) {
			if i+1 < len(blockers) { // a later range starts inside this one
				return NewSpace(pool, reserved), fmt.Errorf("%s: %w", blockers[i+1].p, ErrNotFree)
			}
			return s, nil
		}
	}
	gaps = netipx.IPRangeFrom(next, netipx.PrefixLastIP(pool)).AppendPrefixes(gaps[:0])
	for _, g := range gaps {
		s.insertFree(blockOf(g))
	}
	return s, nil
}

// clipReserved merges overlapping reserved ranges and clips them to the pool.
func (s *Space) clipReserved(reserved []netip.Prefix) []netip.Prefix {
	if len(reserved) == 0 {
		return nil
	}
	var poolOnly, b netipx.IPSetBuilder
	poolOnly.AddPrefix(s.pool)
	poolSet, _ := poolOnly.IPSet() // errors only on invalid prefixes
	for _, r := range reserved {
		if r.IsValid() && r.Addr().BitLen() == s.width {
			b.AddPrefix(r.Masked())
		}
	}
	b.Intersect(poolSet)
	set, _ := b.IPSet()
	return set.Prefixes()
}

// Pool returns the pool's range.
func (s *Space) Pool() netip.Prefix { return s.pool }

// Claim marks p as held. It fails with ErrNotFree unless all of p is free.
func (s *Space) Claim(p netip.Prefix) error {
	if !s.inPool(p) {
		return fmt.Errorf("%s: %w (outside pool %s)", p, ErrNotFree, s.pool)
	}
	blk := blockOf(p)
	if !s.take(blk) {
		return fmt.Errorf("%s: %w", p, ErrNotFree)
	}
	s.held[blk] = struct{}{}
	s.nHeld[blk.bits]++
	return nil
}

// Reserve marks p, which must be entirely free, as reserved: it is never
// handed out and counts as reserved in Usage. It undoes what Release did to
// the reserved part of a range that was held on a reserved range (a claim
// granted before the range was reserved keeps it until it is released).
func (s *Space) Reserve(p netip.Prefix) error {
	if !s.inPool(p) {
		return fmt.Errorf("%s: %w (outside pool %s)", p, ErrNotFree, s.pool)
	}
	blk := blockOf(p)
	if !s.take(blk) {
		return fmt.Errorf("%s: %w", p, ErrNotFree)
	}
	s.nReserve[blk.bits]++
	return nil
}

// IsFree reports whether all of p is free.
func (s *Space) IsFree(p netip.Prefix) bool {
	if !s.inPool(p) {
		return false
	}
	_, ok := s.freeContainer(blockOf(p))
	return ok
}

// Release returns a held range to the free space.
func (s *Space) Release(p netip.Prefix) error {
	blk := blockOf(p)
	if _, ok := s.held[blk]; !ok || p.Addr().BitLen() != s.width {
		return fmt.Errorf("%s: %w", p, ErrNotHeld)
	}
	delete(s.held, blk)
	s.nHeld[blk.bits]--
	// Merge with the buddy while the buddy is free as a whole.
	for blk.bits > s.pool.Bits() {
		sib := blk.sibling(s.width)
		if !s.hasFree(sib) {
			break
		}
		s.deleteFree(sib)
		blk = blk.parent(s.width)
	}
	s.insertFree(blk)
	return nil
}

// Allocate holds and returns a free prefix of length bits: the lowest block
// of the smallest free block size that fits (best fit), which keeps large
// blocks whole for large requests. It returns false when nothing fits.
func (s *Space) Allocate(bits int) (netip.Prefix, bool) {
	if bits < s.pool.Bits() || bits > s.width {
		return netip.Prefix{}, false
	}
	for n := bits; n >= s.pool.Bits(); n-- {
		if s.nFree[n] == 0 {
			continue
		}
		start, _ := s.free[n].Min()
		parent := block{start: start, bits: n}
		s.deleteFree(parent)
		// Keep the lower half at each split, free the upper half.
		for b := parent; b.bits < bits; {
			s.insertFree(b.upperHalf(s.width))
			b = block{start: b.start, bits: b.bits + 1}
		}
		got := block{start: start, bits: bits}
		s.held[got] = struct{}{}
		s.nHeld[bits]++
		return got.prefix(s.width), true
	}
	return netip.Prefix{}, false
}

// Usage is the pool's address accounting. Capacity = Reserved + Held + Free.
type Usage struct {
	Capacity *big.Int
	Reserved *big.Int
	Held     *big.Int
	Free     *big.Int
	// LargestFree is the largest free aligned block (lowest address among
	// equals); invalid (zero Prefix) when nothing is free.
	LargestFree netip.Prefix
	// HeldBlocks is the number of held ranges.
	HeldBlocks int
}

// Usage returns the accounting in O(W).
func (s *Space) Usage() Usage {
	u := Usage{
		Capacity:   AddressCount(s.pool),
		Reserved:   s.sumBlocks(&s.nReserve),
		Held:       s.sumBlocks(&s.nHeld),
		Free:       s.sumBlocks(&s.nFree),
		HeldBlocks: len(s.held),
	}
	for n := s.pool.Bits(); n <= s.width; n++ {
		if s.nFree[n] > 0 {
			start, _ := s.free[n].Min()
			u.LargestFree = block{start: start, bits: n}.prefix(s.width)
			break
		}
	}
	return u
}

// AllocatableBlocks is how many prefixes of length bits could still be
// allocated: every free block of length n <= bits holds 2^(bits-n) of them,
// shorter free blocks hold none. Fragmentation-aware, unlike Free / size.
func (s *Space) AllocatableBlocks(bits int) *big.Int {
	total := new(big.Int)
	if bits < s.pool.Bits() || bits > s.width {
		return total
	}
	var term big.Int
	for n := s.pool.Bits(); n <= bits; n++ {
		if s.nFree[n] == 0 {
			continue
		}
		term.Lsh(big.NewInt(int64(s.nFree[n])), uint(bits-n))
		total.Add(total, &term)
	}
	return total
}

// FreeBlocks calls fn for each maximal free block, in address order per
// length (longest blocks last). For tests and diagnostics.
func (s *Space) FreeBlocks(fn func(netip.Prefix) bool) {
	for n := s.pool.Bits(); n <= s.width; n++ {
		if s.free[n] == nil {
			continue
		}
		stop := false
		s.free[n].Ascend(func(start u128) bool {
			stop = !fn(block{start: start, bits: n}.prefix(s.width))
			return !stop
		})
		if stop {
			return
		}
	}
}

// take removes blk from the free space, splitting the free block that
// contains it. It reports false (and changes nothing) unless blk is free.
func (s *Space) take(blk block) bool {
	container, ok := s.freeContainer(blk)
	if !ok {
		return false
	}
	s.deleteFree(container)
	// Walk down from the container to blk, freeing the half not taken.
	for b := container; b.bits < blk.bits; {
		child := blk.ancestor(b.bits+1, s.width)
		s.insertFree(child.sibling(s.width))
		b = child
	}
	return true
}

// freeContainer finds the free block that contains blk, if any. Free blocks
// are disjoint, so at most one does: probe blk's ancestors at the lengths
// that have free blocks.
func (s *Space) freeContainer(blk block) (block, bool) {
	for n := blk.bits; n >= s.pool.Bits(); n-- {
		if s.nFree[n] == 0 {
			continue
		}
		candidate := blk.ancestor(n, s.width)
		if s.free[n].Has(candidate.start) {
			return candidate, true
		}
	}
	return block{}, false
}

func (s *Space) inPool(p netip.Prefix) bool {
	return p.IsValid() && p.Addr().BitLen() == s.width && p.Bits() >= s.pool.Bits() && s.pool.Contains(p.Addr())
}

func (s *Space) hasFree(b block) bool {
	return s.nFree[b.bits] > 0 && s.free[b.bits].Has(b.start)
}

func (s *Space) insertFree(b block) {
	if s.free[b.bits] == nil {
		s.free[b.bits] = btree.NewG(btreeDegree, u128.less)
	}
	s.free[b.bits].ReplaceOrInsert(b.start)
	s.nFree[b.bits]++
}

func (s *Space) deleteFree(b block) {
	s.free[b.bits].Delete(b.start)
	s.nFree[b.bits]--
}

func (s *Space) sumBlocks(counts *[129]int) *big.Int {
	total := new(big.Int)
	var term big.Int
	for n := s.pool.Bits(); n <= s.width; n++ {
		if counts[n] == 0 {
			continue
		}
		term.Lsh(big.NewInt(int64(counts[n])), uint(s.width-n))
		total.Add(total, &term)
	}
	return total
}
