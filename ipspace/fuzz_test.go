package ipspace

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
)

// opPrefix decodes two bytes into a prefix in or around a small pool:
// the first picks an offset (the pool holds 64 addresses, offsets reach past
// its end), the second a length from pool.Bits()-1 to the family's width.
func opPrefix(pool netip.Prefix, offset, length byte) netip.Prefix {
	width := pool.Addr().BitLen()
	lo := pool.Bits() - 1
	bits := lo + int(length)%(width-lo+1)
	start := addrToU128(pool.Addr())
	a := u128ToAddr(u128{hi: start.hi, lo: start.lo + uint64(offset)%128}, width)
	return netip.PrefixFrom(a, bits).Masked()
}

// FuzzIndexOps runs insert/delete/query sequences against the index and a
// brute-force list and fails on any difference.
func FuzzIndexOps(f *testing.F) {
	f.Add([]byte{0, 0, 5, 1, 0, 0, 5, 1, 2, 0, 3, 0}, false)
	f.Add([]byte{0, 10, 2, 0, 0, 10, 3, 1, 1, 10, 2, 0, 2, 0, 0, 0}, true)
	f.Add([]byte{0, 64, 7, 3, 0, 0, 0, 3, 2, 0, 1, 0, 1, 64, 7, 3}, false)
	f.Fuzz(func(t *testing.T, ops []byte, ipv6 bool) {
		pool := mp("10.7.0.0/26")
		if ipv6 {
			pool = mp("2001:db8:7::/122")
		}
		x := NewIndex[int]()
		ref := map[Entry[int]]bool{}
		for i := 0; i+3 < len(ops); i += 4 {
			p := opPrefix(pool, ops[i+1], ops[i+2])
			e := Entry[int]{Prefix: p, Owner: int(ops[i+3] % 4)}
			switch ops[i] % 3 {
			case 0:
				if got := x.Insert(e.Prefix, e.Owner); got == ref[e] {
					t.Fatalf("Insert(%v) = %v with entry present=%v", e, got, ref[e])
				}
				ref[e] = true
			case 1:
				if got := x.Delete(e.Prefix, e.Owner); got != ref[e] {
					t.Fatalf("Delete(%v) = %v with entry present=%v", e, got, ref[e])
				}
				delete(ref, e)
			default:
				got := x.OverlappingSlice(p)
				var want []Entry[int]
				for e := range ref {
					if e.Prefix.Overlaps(p) {
						want = append(want, e)
					}
				}
				sortEntries(got)
				sortEntries(want)
				if !slices.Equal(got, want) {
					t.Fatalf("Overlapping(%s) = %v, want %v", p, got, want)
				}
			}
		}
		if x.Len() != len(ref) {
			t.Fatalf("Len = %d, want %d", x.Len(), len(ref))
		}
	})
}

// FuzzSpaceOps runs allocate/claim/release sequences against the free-space
// map and the brute-force reference and fails on any difference.
func FuzzSpaceOps(f *testing.F) {
	f.Add([]byte{0, 0, 6, 1, 0, 2, 1, 0, 2, 2, 0, 0}, false)
	f.Add([]byte{1, 0, 26, 1, 32, 27, 0, 0, 28, 2, 0, 26}, true)
	f.Fuzz(func(t *testing.T, ops []byte, ipv6 bool) {
		pool := mp("10.7.0.0/26")
		if ipv6 {
			pool = mp("2001:db8:7::/122")
		}
		width := pool.Addr().BitLen()
		var reserved []netip.Prefix
		if len(ops) > 2 && ops[0]%4 == 3 {
			reserved = append(reserved, opPrefix(pool, ops[1], ops[2]))
		}
		s := NewSpace(pool, reserved)
		ref := newReference(pool, reserved)
		for i := 0; i+2 < len(ops); i += 3 {
			p := opPrefix(pool, ops[i+1], ops[i+2])
			switch ops[i] % 3 {
			case 0:
				bits := pool.Bits() + int(ops[i+2])%(width-pool.Bits()+1)
				got, gotOK := s.Allocate(bits)
				want, wantOK := ref.allocate(bits)
				if got != want || gotOK != wantOK {
					t.Fatalf("Allocate(%d) = %v %v, reference %v %v", bits, got, gotOK, want, wantOK)
				}
			case 1:
				err := s.Claim(p)
				if ok := ref.claim(p); ok != (err == nil) || (err != nil && !errors.Is(err, ErrNotFree)) {
					t.Fatalf("Claim(%s) = %v, reference ok=%v", p, err, ok)
				}
			default:
				err := s.Release(p)
				if ok := ref.release(p); ok != (err == nil) {
					t.Fatalf("Release(%s) = %v, reference ok=%v", p, err, ok)
				}
			}
			if got, want := toStrings(s.Usage(), s.AllocatableBlocks(width)), ref.usage(width); got != want {
				t.Fatalf("usage %+v, reference %+v", got, want)
			}
		}
		checkAccounting(t, s)
	})
}
