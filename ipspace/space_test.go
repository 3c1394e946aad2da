package ipspace

import (
	"errors"
	"math/big"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func mp(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func mps(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = mp(s)
	}
	return out
}

func TestSpaceAllocateBestFit(t *testing.T) {
	tests := []struct {
		name     string
		pool     string
		reserved []string
		claims   []string
		requests []int
		want     []string // "" where nothing fits
	}{
		{
			name:     "empty pool hands out from the lowest address",
			pool:     "10.0.0.0/16",
			requests: []int{24, 24, 25},
			want:     []string{"10.0.0.0/24", "10.0.1.0/24", "10.0.2.0/25"},
		},
		{
			name:     "best fit takes the smallest block that holds the request",
			pool:     "10.0.0.0/24",
			claims:   []string{"10.0.0.0/26", "10.0.0.128/27"},
			requests: []int{27, 26},
			// free: 10.0.0.64/26, 10.0.0.160/27, 10.0.0.192/26; the /27 goes in the /27 hole.
			want: []string{"10.0.0.160/27", "10.0.0.64/26"},
		},
		{
			name:     "lowest address among equal blocks",
			pool:     "10.0.0.0/24",
			claims:   []string{"10.0.0.64/26"},
			requests: []int{26, 26, 26},
			want:     []string{"10.0.0.0/26", "10.0.0.128/26", "10.0.0.192/26"},
		},
		{
			name:     "reserved ranges are never handed out",
			pool:     "192.168.0.0/24",
			reserved: []string{"192.168.0.0/30", "192.168.0.252/30"},
			requests: []int{25, 26, 26},
			want:     []string{"", "192.168.0.64/26", "192.168.0.128/26"},
		},
		{
			name:     "pool of one address",
			pool:     "10.9.9.9/32",
			requests: []int{32, 32},
			want:     []string{"10.9.9.9/32", ""},
		},
		{
			name:     "claim equal to the pool",
			pool:     "10.0.0.0/24",
			claims:   []string{"10.0.0.0/24"},
			requests: []int{32},
			want:     []string{""},
		},
		{
			name:     "request larger than the pool",
			pool:     "10.0.0.0/24",
			requests: []int{23, 33},
			want:     []string{"", ""},
		},
		{
			name:     "IPv4 /0 pool",
			pool:     "0.0.0.0/0",
			requests: []int{1, 8, 1},
			want:     []string{"0.0.0.0/1", "128.0.0.0/8", ""},
		},
		{
			name:     "IPv6 /0 pool",
			pool:     "::/0",
			requests: []int{64, 1},
			want:     []string{"::/64", "8000::/1"},
		},
		{
			name:     "IPv6 /48 pool with /64 claims",
			pool:     "2001:db8:1::/48",
			claims:   []string{"2001:db8:1::/64"},
			requests: []int{64, 56},
			want:     []string{"2001:db8:1:1::/64", "2001:db8:1:100::/56"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSpace(mp(tt.pool), mps(tt.reserved...))
			for _, c := range tt.claims {
				if err := s.Claim(mp(c)); err != nil {
					t.Fatalf("Claim(%s): %v", c, err)
				}
			}
			var got []string
			for _, bits := range tt.requests {
				p, ok := s.Allocate(bits)
				if !ok {
					got = append(got, "")
					continue
				}
				got = append(got, p.String())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("allocations (-want +got):\n%s", diff)
			}
			checkAccounting(t, s)
		})
	}
}

func TestSpaceClaimAndRelease(t *testing.T) {
	s := NewSpace(mp("10.0.0.0/24"), mps("10.0.0.0/28"))
	for _, tc := range []struct {
		p    string
		want error
	}{
		{"10.0.0.0/28", ErrNotFree},   // reserved
		{"10.0.0.0/27", ErrNotFree},   // contains reserved
		{"10.0.1.0/28", ErrNotFree},   // outside the pool
		{"10.0.0.0/23", ErrNotFree},   // larger than the pool
		{"2001:db8::/64", ErrNotFree}, // other family
		{"10.0.0.16/28", nil},         // adjacent to reserved: fine
		{"10.0.0.32/27", nil},         // adjacent to the claim above: fine
		{"10.0.0.32/28", ErrNotFree},  // inside a claim
		{"10.0.0.128/25", nil},        //
		{"10.0.0.128/26", ErrNotFree}, // inside a claim
	} {
		if err := s.Claim(mp(tc.p)); !errors.Is(err, tc.want) {
			t.Errorf("Claim(%s) = %v, want %v", tc.p, err, tc.want)
		}
	}
	checkAccounting(t, s)

	if err := s.Release(mp("10.0.0.0/28")); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Release(reserved) = %v, want ErrNotHeld", err)
	}
	if err := s.Release(mp("10.0.0.128/26")); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Release(part of a claim) = %v, want ErrNotHeld", err)
	}
	for _, p := range []string{"10.0.0.16/28", "10.0.0.32/27", "10.0.0.128/25"} {
		if err := s.Release(mp(p)); err != nil {
			t.Fatalf("Release(%s): %v", p, err)
		}
	}
	// All claims gone: free space merges back to the maximal blocks around
	// the reserved /28.
	var free []string
	s.FreeBlocks(func(p netip.Prefix) bool { free = append(free, p.String()); return true })
	want := []string{"10.0.0.128/25", "10.0.0.64/26", "10.0.0.32/27", "10.0.0.16/28"}
	if diff := cmp.Diff(want, free); diff != "" {
		t.Errorf("free blocks (-want +got):\n%s", diff)
	}
	checkAccounting(t, s)
}

func TestSpaceUsage(t *testing.T) {
	tests := []struct {
		name          string
		pool          string
		reserved      []string
		claims        []string
		defaultLength int
		want          usageStrings
	}{
		{
			name: "IPv4 with reserved and claims", pool: "10.0.0.0/24",
			reserved: []string{"10.0.0.0/30", "10.0.0.2/31"}, // overlapping reserved ranges count once
			claims:   []string{"10.0.0.128/25", "10.0.0.64/27"}, defaultLength: 27,
			want: usageStrings{Capacity: "256", Reserved: "4", Held: "160", Free: "92",
				LargestFree: "10.0.0.32/27", HeldBlocks: 2, Allocatable: "2"},
		},
		{
			name: "reserved outside the pool is clipped", pool: "10.0.0.0/24",
			reserved: []string{"10.0.0.0/16", "2001:db8::/64"}, defaultLength: 24,
			want: usageStrings{Capacity: "256", Reserved: "256", Held: "0", Free: "0", Allocatable: "0"},
		},
		{
			name: "IPv6 /48 with /64 claims, counts beyond 2^64", pool: "2001:db8::/48",
			claims: []string{"2001:db8::/64", "2001:db8:0:1::/64", "2001:db8:0:ffff::/64"}, defaultLength: 64,
			want: usageStrings{
				Capacity:    "1208925819614629174706176",
				Reserved:    "0",
				Held:        "55340232221128654848",
				Free:        "1208870479382408046051328",
				LargestFree: "2001:db8:0:4000::/50",
				HeldBlocks:  3,
				Allocatable: "65533",
			},
		},
		{
			name: "IPv6 /0", pool: "::/0", claims: []string{"::/1"}, defaultLength: 128,
			want: usageStrings{
				Capacity:    "340282366920938463463374607431768211456",
				Reserved:    "0",
				Held:        "170141183460469231731687303715884105728",
				Free:        "170141183460469231731687303715884105728",
				LargestFree: "8000::/1",
				HeldBlocks:  1,
				Allocatable: "170141183460469231731687303715884105728",
			},
		},
		{
			name: "pool of one address, held", pool: "10.0.0.7/32", claims: []string{"10.0.0.7/32"}, defaultLength: 32,
			want: usageStrings{Capacity: "1", Reserved: "0", Held: "1", Free: "0", HeldBlocks: 1, Allocatable: "0"},
		},
		{
			name: "default length shorter than every free block", pool: "10.0.0.0/24",
			claims: []string{"10.0.0.0/25"}, defaultLength: 24,
			want: usageStrings{Capacity: "256", Reserved: "0", Held: "128", Free: "128",
				LargestFree: "10.0.0.128/25", HeldBlocks: 1, Allocatable: "0"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSpace(mp(tt.pool), mps(tt.reserved...))
			for _, c := range tt.claims {
				if err := s.Claim(mp(c)); err != nil {
					t.Fatalf("Claim(%s): %v", c, err)
				}
			}
			got := toStrings(s.Usage(), s.AllocatableBlocks(tt.defaultLength))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("usage (-want +got):\n%s", diff)
			}
			checkAccounting(t, s)
		})
	}
}

type usageStrings struct {
	Capacity, Reserved, Held, Free, LargestFree string
	HeldBlocks                                  int
	Allocatable                                 string
}

func toStrings(u Usage, allocatable *big.Int) usageStrings {
	out := usageStrings{
		Capacity: u.Capacity.String(), Reserved: u.Reserved.String(), Held: u.Held.String(),
		Free: u.Free.String(), HeldBlocks: u.HeldBlocks, Allocatable: allocatable.String(),
	}
	if u.LargestFree.IsValid() {
		out.LargestFree = u.LargestFree.String()
	}
	return out
}

// checkAccounting asserts capacity = reserved + held + free and that the free
// blocks are maximal (no two buddies both free).
func checkAccounting(t *testing.T, s *Space) {
	t.Helper()
	u := s.Usage()
	sum := new(big.Int).Add(u.Reserved, u.Held)
	sum.Add(sum, u.Free)
	if sum.Cmp(u.Capacity) != 0 {
		t.Fatalf("reserved %s + held %s + free %s != capacity %s", u.Reserved, u.Held, u.Free, u.Capacity)
	}
	free := map[block]bool{}
	s.FreeBlocks(func(p netip.Prefix) bool { free[blockOf(p)] = true; return true })
	for b := range free {
		if b.bits > s.pool.Bits() && free[b.sibling(s.width)] {
			t.Fatalf("free block %s and its buddy are both free: not merged", b.prefix(s.width))
		}
	}
}

func TestNewSpaceHoldingRejects(t *testing.T) {
	pool := mp("10.0.0.0/24")
	reserved := mps("10.0.0.0/28")
	for _, held := range [][]string{
		{"10.0.0.128/25", "10.0.0.192/26"}, // nested
		{"10.0.0.64/26", "10.0.0.64/26"},   // equal
		{"10.0.0.0/29"},                    // on a reserved range
		{"10.0.1.0/28"},                    // outside the pool
		{"10.0.0.128/25", "10.0.0.255/32"}, // nested at the pool's end
		{"2001:db8::/64"},                  // other family
	} {
		s, err := NewSpaceHolding(pool, reserved, mps(held...))
		if !errors.Is(err, ErrNotFree) {
			t.Errorf("NewSpaceHolding(%v) error %v, want ErrNotFree", held, err)
			continue
		}
		// It then holds nothing, and its reserved ranges stay reserved.
		if u := s.Usage(); u.Held.Sign() != 0 || u.Reserved.Int64() != 16 || u.Free.Int64() != 240 {
			t.Errorf("NewSpaceHolding(%v) after error: %+v", held, u)
		}
	}
	s, err := NewSpaceHolding(mp("::/0"), nil, mps("ffff::/16", "::/1"))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Usage().LargestFree.String(); got != "8000::/2" {
		t.Errorf("largest free %s, want 8000::/2", got)
	}
	checkAccounting(t, s)
}

// A range released from a held claim on a reserved range goes back to being
// reserved, not free.
func TestSpaceReserveAfterRelease(t *testing.T) {
	s, err := NewSpaceHolding(mp("10.0.0.0/24"), nil, mps("10.0.0.0/26"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(mp("10.0.0.0/26")); err != nil {
		t.Fatal(err)
	}
	if err := s.Reserve(mp("10.0.0.0/27")); err != nil {
		t.Fatal(err)
	}
	u := s.Usage()
	if u.Reserved.Int64() != 32 || u.Free.Int64() != 224 || u.Held.Int64() != 0 {
		t.Errorf("usage: reserved %s free %s held %s", u.Reserved, u.Free, u.Held)
	}
	if got, _ := s.Allocate(27); got != mp("10.0.0.32/27") {
		t.Errorf("allocated %s, want the free half 10.0.0.32/27", got)
	}
	if err := s.Reserve(mp("10.0.0.32/27")); !errors.Is(err, ErrNotFree) {
		t.Errorf("reserving a held range: %v", err)
	}
	if err := s.Reserve(mp("10.0.1.0/27")); !errors.Is(err, ErrNotFree) {
		t.Errorf("reserving outside the pool: %v", err)
	}
}
