package ipspace

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// benchSizes are the claim counts of docs/benchmarks.md.
var benchSizes = []int{1_000, 10_000, 100_000}

// benchPool describes a pool that holds 100k claims with room to spare:
// IPv4 /26s in a /8 (a quarter of it at 100k), IPv6 /64s in a /32.
type benchPool struct {
	name   string
	pool   netip.Prefix
	length int
}

var benchPools = []benchPool{
	{"ipv4", netip.MustParsePrefix("10.0.0.0/8"), 26},
	{"ipv6", netip.MustParsePrefix("2001:db8::/32"), 64},
}

// benchClaims returns n claims of bp.length in bp.pool: consecutive slots
// with one in five skipped at random, so free space is fragmented as in a
// pool with churn. Deterministic.
func benchClaims(bp benchPool, n int) []netip.Prefix {
	rng := rand.New(rand.NewPCG(uint64(n), 42))
	width := bp.pool.Addr().BitLen()
	cursor := blockOf(bp.pool).start
	out := make([]netip.Prefix, 0, n)
	for len(out) < n {
		if rng.IntN(5) > 0 {
			out = append(out, block{start: cursor, bits: bp.length}.prefix(width))
		}
		cursor = cursor.addBit(width - bp.length)
	}
	return out
}

func shuffled(ps []netip.Prefix, seed uint64) []netip.Prefix {
	out := append([]netip.Prefix(nil), ps...)
	rand.New(rand.NewPCG(seed, 7)).Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func BenchmarkIndexBuild(b *testing.B) {
	for _, bp := range benchPools {
		for _, n := range benchSizes {
			claims := shuffled(benchClaims(bp, n), 1)
			b.Run(fmt.Sprintf("%s/n=%d", bp.name, n), func(b *testing.B) {
				for b.Loop() {
					x := NewIndex[int]()
					for i, p := range claims {
						x.Insert(p, i)
					}
				}
			})
		}
	}
}

// BenchmarkIndexOverlap queries a mix of ranges: an existing claim, a free
// slot, and a block of 16 slots that contains several claims (stopping at
// the first answer, as an admission check does).
func BenchmarkIndexOverlap(b *testing.B) {
	for _, bp := range benchPools {
		for _, n := range benchSizes {
			claims := benchClaims(bp, n)
			x := NewIndex[int]()
			for i, p := range claims {
				x.Insert(p, i)
			}
			width := bp.pool.Addr().BitLen()
			last := blockOf(claims[len(claims)-1])
			free := block{start: last.start.addBit(width - bp.length), bits: bp.length}.prefix(width)
			queries := make([]netip.Prefix, 0, 3*1024)
			rng := rand.New(rand.NewPCG(3, 3))
			for range 1024 {
				c := claims[rng.IntN(len(claims))]
				queries = append(queries, c, netip.PrefixFrom(c.Addr(), bp.length-4).Masked(), free)
			}
			b.Run(fmt.Sprintf("%s/n=%d", bp.name, n), func(b *testing.B) {
				i := 0
				for b.Loop() {
					q := queries[i%len(queries)]
					i++
					x.Overlapping(q, func(Entry[int]) bool { return false })
				}
			})
		}
	}
}

func BenchmarkSpaceBuild(b *testing.B) {
	for _, bp := range benchPools {
		for _, n := range benchSizes {
			claims := shuffled(benchClaims(bp, n), 2)
			b.Run(fmt.Sprintf("%s/n=%d", bp.name, n), func(b *testing.B) {
				for b.Loop() {
					s := NewSpace(bp.pool, nil)
					for _, p := range claims {
						if err := s.Claim(p); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}

// BenchmarkSpaceAllocate allocates a block of the pool's claim length and
// releases it again, so every iteration sees the same fragmented pool.
func BenchmarkSpaceAllocate(b *testing.B) {
	for _, bp := range benchPools {
		for _, n := range benchSizes {
			s := NewSpace(bp.pool, nil)
			for _, p := range benchClaims(bp, n) {
				if err := s.Claim(p); err != nil {
					b.Fatal(err)
				}
			}
			b.Run(fmt.Sprintf("%s/n=%d", bp.name, n), func(b *testing.B) {
				for b.Loop() {
					p, ok := s.Allocate(bp.length)
					if !ok {
						b.Fatal("pool full")
					}
					if err := s.Release(p); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkSpaceUsage is the free-space part of a pool status computed from
// a maintained map.
func BenchmarkSpaceUsage(b *testing.B) {
	for _, bp := range benchPools {
		for _, n := range benchSizes {
			s := NewSpace(bp.pool, nil)
			for _, p := range benchClaims(bp, n) {
				if err := s.Claim(p); err != nil {
					b.Fatal(err)
				}
			}
			b.Run(fmt.Sprintf("%s/n=%d", bp.name, n), func(b *testing.B) {
				for b.Loop() {
					_ = s.Usage()
					_ = s.AllocatableBlocks(bp.length)
				}
			})
		}
	}
}
