package ipspace

import (
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// reference is a brute-force model of a small pool: one state per address.
type reference struct {
	pool  netip.Prefix
	width int
	state []byte // 0 free, 1 reserved, 2 held
	held  map[netip.Prefix]bool
}

const (
	refFree = iota
	refReserved
	refHeld
)

func newReference(pool netip.Prefix, reserved []netip.Prefix) *reference {
	r := &reference{pool: pool, width: pool.Addr().BitLen(), held: map[netip.Prefix]bool{}}
	r.state = make([]byte, 1<<(r.width-pool.Bits()))
	for _, res := range reserved {
		for i := range r.state {
			if res.Contains(r.addr(i)) {
				r.state[i] = refReserved
			}
		}
	}
	return r
}

func (r *reference) addr(i int) netip.Addr {
	start := addrToU128(r.pool.Addr())
	return u128ToAddr(u128{hi: start.hi, lo: start.lo + uint64(i)}, r.width)
}

func (r *reference) offset(a netip.Addr) int {
	return int(addrToU128(a).lo - addrToU128(r.pool.Addr()).lo)
}

func (r *reference) span(p netip.Prefix) (int, int, bool) {
	if p.Addr().BitLen() != r.width || p.Bits() < r.pool.Bits() || !r.pool.Contains(p.Addr()) {
		return 0, 0, false
	}
	first := r.offset(p.Addr())
	return first, first + 1<<(r.width-p.Bits()), true
}

func (r *reference) allFree(p netip.Prefix) bool {
	first, end, ok := r.span(p)
	if !ok {
		return false
	}
	for i := first; i < end; i++ {
		if r.state[i] != refFree {
			return false
		}
	}
	return true
}

func (r *reference) set(p netip.Prefix, v byte) {
	first, end, _ := r.span(p)
	for i := first; i < end; i++ {
		r.state[i] = v
	}
}

// maximalFree lists the maximal free aligned blocks, by length then address.
func (r *reference) maximalFree() []netip.Prefix {
	var out []netip.Prefix
	for n := r.pool.Bits(); n <= r.width; n++ {
		size := 1 << (r.width - n)
		for i := 0; i < len(r.state); i += size {
			p := netip.PrefixFrom(r.addr(i), n)
			if !r.allFree(p) {
				continue
			}
			if n > r.pool.Bits() && r.allFree(netip.PrefixFrom(p.Addr(), n-1).Masked()) {
				continue
			}
			out = append(out, p)
		}
	}
	return out
}

func (r *reference) claim(p netip.Prefix) bool {
	if !r.allFree(p) {
		return false
	}
	r.set(p, refHeld)
	r.held[p] = true
	return true
}

func (r *reference) release(p netip.Prefix) bool {
	if !r.held[p] {
		return false
	}
	delete(r.held, p)
	r.set(p, refFree)
	return true
}

func (r *reference) allocate(bits int) (netip.Prefix, bool) {
	var best netip.Prefix
	for _, b := range r.maximalFree() { // by length, then address
		if b.Bits() <= bits {
			best = b // the last block of the longest fitting length wins...
		}
	}
	if !best.IsValid() {
		return netip.Prefix{}, false
	}
	// ...but among that length, the lowest address.
	for _, b := range r.maximalFree() {
		if b.Bits() == best.Bits() {
			best = b
			break
		}
	}
	p := netip.PrefixFrom(best.Addr(), bits)
	r.claim(p)
	return p, true
}

func (r *reference) usage(defaultBits int) usageStrings {
	count := func(v byte) *big.Int {
		n := 0
		for _, s := range r.state {
			if s == v {
				n++
			}
		}
		return big.NewInt(int64(n))
	}
	u := usageStrings{
		Capacity: fmt.Sprint(len(r.state)), Reserved: count(refReserved).String(),
		Held: count(refHeld).String(), Free: count(refFree).String(), HeldBlocks: len(r.held),
	}
	allocatable := 0
	for _, b := range r.maximalFree() {
		if u.LargestFree == "" {
			u.LargestFree = b.String()
		}
		if b.Bits() <= defaultBits {
			allocatable += 1 << (defaultBits - b.Bits())
		}
	}
	u.Allocatable = fmt.Sprint(allocatable)
	return u
}

// randomPrefix returns a prefix in or around the pool.
func randomPrefix(rng *rand.Rand, pool netip.Prefix) netip.Prefix {
	width := pool.Addr().BitLen()
	lo := max(pool.Bits()-1, 0)
	bits := lo + rng.IntN(width-lo+1)
	start := addrToU128(pool.Addr())
	span := uint64(1) << (width - pool.Bits())
	offset := rng.Uint64N(span * 2) // half the time past the pool's end
	a := u128ToAddr(u128{hi: start.hi, lo: start.lo + offset}, width)
	return netip.PrefixFrom(a, bits).Masked()
}

func TestSpaceMatchesBruteForce(t *testing.T) {
	pools := []string{"10.20.30.0/24", "10.20.30.64/26", "192.168.7.0/28", "2001:db8::ff00/120", "2001:db8:5::/124"}
	for seed := range uint64(40) {
		poolText := pools[seed%uint64(len(pools))]
		t.Run(fmt.Sprintf("seed%d-%s", seed, poolText), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0x5eed))
			pool := mp(poolText)
			var reserved []netip.Prefix
			for range rng.IntN(3) {
				reserved = append(reserved, randomPrefix(rng, pool))
			}
			s := NewSpace(pool, reserved)
			ref := newReference(pool, reserved)
			width := pool.Addr().BitLen()
			for step := range 400 {
				switch op := rng.IntN(10); {
				case op < 4:
					bits := pool.Bits() + rng.IntN(width-pool.Bits()+1)
					got, gotOK := s.Allocate(bits)
					want, wantOK := ref.allocate(bits)
					if got != want || gotOK != wantOK {
						t.Fatalf("step %d: Allocate(%d) = %v %v, reference %v %v", step, bits, got, gotOK, want, wantOK)
					}
				case op < 7:
					p := randomPrefix(rng, pool)
					err := s.Claim(p)
					if ok := ref.claim(p); ok != (err == nil) {
						t.Fatalf("step %d: Claim(%s) = %v, reference ok=%v", step, p, err, ok)
					}
					if err != nil && !errors.Is(err, ErrNotFree) {
						t.Fatalf("step %d: Claim(%s) = %v", step, p, err)
					}
				default:
					p := randomPrefix(rng, pool)
					if len(ref.held) > 0 && rng.IntN(3) > 0 {
						held := make([]netip.Prefix, 0, len(ref.held))
						for h := range ref.held {
							held = append(held, h)
						}
						slices.SortFunc(held, netip.Prefix.Compare)
						p = held[rng.IntN(len(held))]
					}
					err := s.Release(p)
					if ok := ref.release(p); ok != (err == nil) {
						t.Fatalf("step %d: Release(%s) = %v, reference ok=%v", step, p, err, ok)
					}
				}
				defaultBits := pool.Bits() + rng.IntN(width-pool.Bits()+1)
				if got, want := toStrings(s.Usage(), s.AllocatableBlocks(defaultBits)), ref.usage(defaultBits); got != want {
					t.Fatalf("step %d: usage %+v, reference %+v", step, got, want)
				}
				probe := randomPrefix(rng, pool)
				if got, want := s.IsFree(probe), ref.allFree(probe); got != want {
					t.Fatalf("step %d: IsFree(%s) = %v, reference %v", step, probe, got, want)
				}
			}
			checkAccounting(t, s)

			// A rebuild from the held ranges is the same map.
			var held []netip.Prefix
			for h := range ref.held {
				held = append(held, h)
			}
			rebuilt, err := NewSpaceHolding(pool, reserved, shuffled(held, seed))
			if err != nil {
				t.Fatalf("NewSpaceHolding: %v", err)
			}
			if diff := cmp.Diff(freeBlocks(s), freeBlocks(rebuilt)); diff != "" {
				t.Fatalf("rebuilt free blocks differ (-incremental +rebuilt):\n%s", diff)
			}
			if got, want := toStrings(rebuilt.Usage(), rebuilt.AllocatableBlocks(width)), toStrings(s.Usage(), s.AllocatableBlocks(width)); got != want {
				t.Fatalf("rebuilt usage %+v, incremental %+v", got, want)
			}
		})
	}
}

func freeBlocks(s *Space) []string {
	var out []string
	s.FreeBlocks(func(p netip.Prefix) bool { out = append(out, p.String()); return true })
	return out
}

func TestIndexMatchesBruteForce(t *testing.T) {
	for seed := range uint64(10) {
		pool := mp([]string{"10.1.0.0/22", "2001:db8::/118"}[seed%2])
		t.Run(fmt.Sprintf("seed%d-%s", seed, pool), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0x1d))
			x := NewIndex[int]()
			ref := map[Entry[int]]bool{}
			for step := range 1500 {
				p := randomPrefix(rng, pool)
				owner := rng.IntN(8) - 3 // negative owners too: no owner value is special
				e := Entry[int]{Prefix: p, Owner: owner}
				if rng.IntN(3) > 0 {
					if got, want := x.Insert(p, owner), !ref[e]; got != want {
						t.Fatalf("step %d: Insert(%v) = %v, want %v", step, e, got, want)
					}
					ref[e] = true
				} else {
					if got, want := x.Delete(p, owner), ref[e]; got != want {
						t.Fatalf("step %d: Delete(%v) = %v, want %v", step, e, got, want)
					}
					delete(ref, e)
				}
				if x.Len() != len(ref) {
					t.Fatalf("step %d: Len %d, want %d", step, x.Len(), len(ref))
				}
				q := randomPrefix(rng, pool)
				got := x.OverlappingSlice(q)
				var want []Entry[int]
				for e := range ref {
					if e.Prefix.Overlaps(q) {
						want = append(want, e)
					}
				}
				sortEntries(got)
				sortEntries(want)
				if !slices.Equal(got, want) {
					t.Fatalf("step %d: Overlapping(%s)\n got %v\nwant %v", step, q, got, want)
				}
			}
		})
	}
}

func sortEntries(es []Entry[int]) {
	slices.SortFunc(es, func(a, b Entry[int]) int {
		if c := a.Prefix.Compare(b.Prefix); c != 0 {
			return c
		}
		return a.Owner - b.Owner
	})
}
