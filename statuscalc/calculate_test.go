package statuscalc

import (
	"math/big"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ipspace"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func pool(cidr string, defaultLength *int32, reserved ...string) *ipamv1.SubnetPool {
	return &ipamv1.SubnetPool{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Generation: 3},
		Spec:       ipamv1.SubnetPoolSpec{CIDR: cidr, DefaultPrefixLength: defaultLength, Reserved: reserved},
	}
}

// subnet builds a Subnet created age seconds after t0; held is its
// status.cidr while Ready (empty: not Ready).
func subnet(name string, age int, requested, held string) ipamv1.Subnet {
	s := ipamv1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Second))},
		Spec:       ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: "p"}, CIDR: requested},
	}
	if requested == "" {
		s.Spec.PrefixLength = ptr.To[int32](24)
	}
	if held != "" {
		s.Status.CIDR = held
		s.Status.Conditions = []metav1.Condition{{Type: ipamv1.ConditionReady, Status: metav1.ConditionTrue, Reason: ipamv1.ReasonAllocated}}
	}
	return s
}

func child(name string, age int, cidr, held string) ipamv1.SubnetPool {
	return ipamv1.SubnetPool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Second))},
		Spec:       ipamv1.SubnetPoolSpec{CIDR: cidr, ParentRef: &ipamv1.PoolReference{Name: "p"}},
		Status:     ipamv1.SubnetPoolStatus{CIDR: held},
	}
}

var available = Readiness{Status: metav1.ConditionTrue, Reason: ipamv1.ReasonAvailable, Message: "serving"}

func TestCalculateStatus(t *testing.T) {
	tests := []struct {
		name     string
		pool     *ipamv1.SubnetPool
		subnets  []ipamv1.Subnet
		children []ipamv1.SubnetPool
		want     ipamv1.SubnetPoolStatus
	}{
		{
			name: "empty IPv4 pool",
			pool: pool("10.0.0.0/16", ptr.To[int32](24)),
			want: ipamv1.SubnetPoolStatus{CIDR: "10.0.0.0/16", Capacity: "65536", Reserved: "0", Allocated: "0", Free: "65536", FreeReadable: "65536",
				Utilization: "0.00%", UtilizationPercent: ptr.To[int32](0), LargestFreeBlock: "10.0.0.0/16",
				FreeBlocks: []string{"10.0.0.0/16"}, AllocatableBlocks: "256"},
		},
		{
			name: "Subnets and child pools are allocated space; pending ones are not",
			pool: pool("10.0.0.0/16", ptr.To[int32](24), "10.0.127.0/24"),
			subnets: []ipamv1.Subnet{
				subnet("a", 0, "10.0.0.0/24", "10.0.0.0/24"),
				subnet("b", 1, "", "10.0.1.0/24"),
				subnet("pending", 2, "", ""),
			},
			children: []ipamv1.SubnetPool{child("team", 0, "10.0.128.0/17", "10.0.128.0/17")},
			want: ipamv1.SubnetPoolStatus{CIDR: "10.0.0.0/16", Capacity: "65536", Reserved: "256", Allocated: "33280", Free: "32000", FreeReadable: "32000",
				Utilization: "50.98%", UtilizationPercent: ptr.To[int32](50), LargestFreeBlock: "10.0.32.0/19",
				// Largest first, lowest address first among equals: the gaps
				// around a, b and the reserved 10.0.127.0/24.
				FreeBlocks: []string{"10.0.32.0/19", "10.0.64.0/19", "10.0.16.0/20", "10.0.96.0/20",
					"10.0.8.0/21", "10.0.112.0/21", "10.0.4.0/22", "10.0.120.0/22"},
				AllocatableBlocks: "125", Subnets: 3, ChildPools: 1},
		},
		{
			name: "adjacent claims do not overlap, a claim equal to the pool fills it",
			pool: pool("10.0.0.0/24", ptr.To[int32](25)),
			subnets: []ipamv1.Subnet{
				subnet("low", 0, "10.0.0.0/25", "10.0.0.0/25"),
				subnet("high", 0, "10.0.0.128/25", "10.0.0.128/25"),
			},
			want: ipamv1.SubnetPoolStatus{CIDR: "10.0.0.0/24", Capacity: "256", Reserved: "0", Allocated: "256", Free: "0", FreeReadable: "0",
				Utilization: "100.00%", UtilizationPercent: ptr.To[int32](100), AllocatableBlocks: "0", Subnets: 2},
		},
		{
			name:    "pool of one address",
			pool:    pool("10.1.1.1/32", ptr.To[int32](32)),
			subnets: []ipamv1.Subnet{subnet("only", 0, "10.1.1.1/32", "10.1.1.1/32")},
			want: ipamv1.SubnetPoolStatus{CIDR: "10.1.1.1/32", Capacity: "1", Reserved: "0", Allocated: "1", Free: "0", FreeReadable: "0",
				Utilization: "100.00%", UtilizationPercent: ptr.To[int32](100), AllocatableBlocks: "0", Subnets: 1},
		},
		{
			name:    "IPv6 /48 with /64 claims: counts beyond 2^64",
			pool:    pool("2001:db8::/48", ptr.To[int32](64)),
			subnets: []ipamv1.Subnet{subnet("a", 0, "", "2001:db8::/64"), subnet("b", 0, "", "2001:db8:0:1::/64")},
			want: ipamv1.SubnetPoolStatus{CIDR: "2001:db8::/48", Capacity: "1208925819614629174706176", Reserved: "0",
				Allocated: "36893488147419103232", Free: "1208888926126481755602944", FreeReadable: "≈2^80",
				Utilization: "0.00%", UtilizationPercent: ptr.To[int32](0), LargestFreeBlock: "2001:db8:0:8000::/49",
				FreeBlocks: []string{"2001:db8:0:8000::/49", "2001:db8:0:4000::/50", "2001:db8:0:2000::/51", "2001:db8:0:1000::/52",
					"2001:db8:0:800::/53", "2001:db8:0:400::/54", "2001:db8:0:200::/55", "2001:db8:0:100::/56"},
				AllocatableBlocks: "65534", Subnets: 2},
		},
		{
			name:    "IPv6 /0",
			pool:    pool("::/0", ptr.To[int32](1)),
			subnets: []ipamv1.Subnet{subnet("half", 0, "::/1", "::/1")},
			want: ipamv1.SubnetPoolStatus{CIDR: "::/0", Capacity: "340282366920938463463374607431768211456", Reserved: "0",
				Allocated: "170141183460469231731687303715884105728", Free: "170141183460469231731687303715884105728", FreeReadable: "2^127",
				Utilization: "50.00%", UtilizationPercent: ptr.To[int32](50), LargestFreeBlock: "8000::/1",
				FreeBlocks: []string{"8000::/1"}, AllocatableBlocks: "1", Subnets: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			serving := netip.MustParsePrefix(tt.pool.Spec.CIDR)
			ready := available
			ready.CIDR = serving
			got := Status(tt.pool, Calculate(serving, tt.pool, tt.subnets, tt.children), ready)
			tt.want.ObservedGeneration = 3
			if diff := cmp.Diff(tt.want, got, cmpopts.IgnoreFields(ipamv1.SubnetPoolStatus{}, "Conditions")); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCalculateConflicts(t *testing.T) {
	p := pool("10.0.0.0/16", ptr.To[int32](24))
	subnets := []ipamv1.Subnet{
		subnet("held", 5, "10.0.0.0/24", "10.0.0.0/24"),
		// Pending requests, decided in winner order: oldest first, then name.
		subnet("contains-held", 1, "10.0.0.0/23", ""),
		subnet("zeta", 2, "10.0.8.0/24", ""),
		subnet("alpha", 2, "10.0.8.0/25", ""), // same age as zeta, smaller name: wins
		subnet("young", 9, "10.0.8.128/25", ""),
		subnet("reserved-elsewhere", 3, "10.1.0.0/24", ""), // outside the pool: out of range, no conflict
	}
	children := []ipamv1.SubnetPool{child("team", 4, "10.0.0.128/25", "")}
	f := Calculate(netip.MustParsePrefix(p.Spec.CIDR), p, subnets, children)

	var got []string
	for _, c := range f.Conflicts {
		got = append(got, c.String())
	}
	want := []string{
		"Subnet ns/contains-held (10.0.0.0/23) overlaps Subnet ns/held (10.0.0.0/24)",
		"Subnet ns/zeta (10.0.8.0/24) overlaps Subnet ns/alpha (10.0.8.0/25)",
		"SubnetPool ns/team (10.0.0.128/25) overlaps Subnet ns/held (10.0.0.0/24)",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("conflicts (-want +got):\n%s", diff)
	}
	// young (10.0.8.128/25) is adjacent to alpha, and zeta lost: young wins.
	// Only the held Subnet counts as allocated.
	if f.Usage.Held.Cmp(big.NewInt(256)) != 0 {
		t.Errorf("allocated %s, want 256", f.Usage.Held)
	}

	st := Status(p, f, available)
	overlapping := findCondition(st.Conditions, ipamv1.ConditionOverlapping)
	wantMsg := "3 claims lose to overlapping claims: " + want[0] + "; " + want[1] + "; " + want[2] +
		"; delete the losing claims or pick free ranges"
	if overlapping.Status != metav1.ConditionTrue || overlapping.Message != wantMsg {
		t.Errorf("Overlapping = %s %q\nwant message %q", overlapping.Status, overlapping.Message, wantMsg)
	}
}

func TestCalculateHeldCollision(t *testing.T) {
	// Two Ready Subnets that overlap: only a bypassed arbiter (or a status
	// written by hand) can cause it. The younger is reported, the older counts.
	p := pool("10.0.0.0/24", nil)
	subnets := []ipamv1.Subnet{
		subnet("younger", 2, "", "10.0.0.0/25"),
		subnet("older", 1, "", "10.0.0.0/24"),
		subnet("stray", 3, "", "10.9.0.0/24"),
	}
	f := Calculate(netip.MustParsePrefix(p.Spec.CIDR), p, subnets, nil)
	var got []string
	for _, c := range f.Conflicts {
		got = append(got, c.String())
	}
	// "stray" holds a range outside the pool (the pool shrank while it was
	// granted): it keeps it, and it is no conflict.
	want := []string{
		"Subnet ns/younger (10.0.0.0/25) overlaps Subnet ns/older (10.0.0.0/24)",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("conflicts (-want +got):\n%s", diff)
	}
	if f.Usage.Held.String() != "256" {
		t.Errorf("allocated %s, want 256", f.Usage.Held)
	}
}

// A range granted before it was reserved stays held: the reserved space is
// what is left of the reserved range around it.
func TestCalculateHeldOnAReservedRange(t *testing.T) {
	p := pool("10.0.0.0/24", ptr.To[int32](26), "10.0.0.0/25")
	f := Calculate(netip.MustParsePrefix(p.Spec.CIDR), p, []ipamv1.Subnet{subnet("raced", 1, "", "10.0.0.0/26")}, nil)
	u := f.Usage
	if len(f.Conflicts) != 0 || u.Held.Int64() != 64 || u.Reserved.Int64() != 64 || u.Free.Int64() != 128 || f.Allocatable.Int64() != 2 {
		t.Errorf("conflicts %v, held %s reserved %s free %s allocatable %s", f.Conflicts, u.Held, u.Reserved, u.Free, f.Allocatable)
	}
}

func TestStatusConditions(t *testing.T) {
	p := pool("10.0.0.0/24", ptr.To[int32](25))
	serving := netip.MustParsePrefix(p.Spec.CIDR)

	full := Calculate(serving, p, []ipamv1.Subnet{subnet("a", 0, "", "10.0.0.0/25"), subnet("b", 0, "", "10.0.0.128/26")}, nil)
	st := Status(p, full, available)
	want := []metav1.Condition{
		{Type: ipamv1.ConditionReady, Status: metav1.ConditionTrue, Reason: ipamv1.ReasonAvailable, Message: "serving", ObservedGeneration: 3},
		{Type: ipamv1.ConditionExhausted, Status: metav1.ConditionTrue, Reason: ipamv1.ReasonNoFreeBlock, ObservedGeneration: 3,
			Message: "no free /25 block left (largest free block: 10.0.0.192/26); grow spec.cidr or release Subnets"},
		{Type: ipamv1.ConditionOverlapping, Status: metav1.ConditionFalse, Reason: ipamv1.ReasonNoOverlap, Message: "no claims overlap", ObservedGeneration: 3},
		{Type: ipamv1.ConditionClaimsNotAllowed, Status: metav1.ConditionFalse, Reason: ipamv1.ReasonAllAllowed, ObservedGeneration: 3,
			Message: "every claim's namespace is allowed by spec.allowedNamespaces"},
	}
	if diff := cmp.Diff(want, st.Conditions, cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime")); diff != "" {
		t.Errorf("conditions (-want +got):\n%s", diff)
	}

	// Recomputing with the same inputs keeps every lastTransitionTime, so an
	// unchanged status compares equal and is not written.
	p.Status = st
	again := Status(p, full, available)
	if diff := cmp.Diff(st, again); diff != "" {
		t.Errorf("recomputed status differs (-first +second):\n%s", diff)
	}

	// Without a default length, Exhausted is measured at maxPrefixLength or
	// at single addresses.
	noDefault := pool("10.0.0.0/30", nil)
	f := Calculate(netip.MustParsePrefix("10.0.0.0/30"), noDefault, []ipamv1.Subnet{subnet("a", 0, "", "10.0.0.0/31")}, nil)
	if got := findCondition(Status(noDefault, f, available).Conditions, ipamv1.ConditionExhausted); got.Message != "2 free /32 blocks left" {
		t.Errorf("Exhausted message %q", got.Message)
	}

	// A pool that serves nothing yet has no figures.
	notServing := Status(p, Calculate(netip.Prefix{}, p, nil, nil),
		Readiness{Status: metav1.ConditionFalse, Reason: ipamv1.ReasonPoolNotFound, Message: "parent pool ns/x not found"})
	if notServing.CIDR != "" || notServing.Capacity != "" {
		t.Errorf("figures for a pool that serves nothing: %+v", notServing)
	}
	if got := findCondition(notServing.Conditions, ipamv1.ConditionExhausted); got.Status != metav1.ConditionUnknown {
		t.Errorf("Exhausted = %s, want Unknown", got.Status)
	}
}

func TestFormatPercent(t *testing.T) {
	for _, tt := range []struct {
		part, whole int64
		want        string
		whole100    int32
	}{
		{0, 100, "0.00%", 0}, {1, 3, "33.33%", 33}, {2, 3, "66.66%", 66}, {99999, 100000, "99.99%", 99},
		{5, 5, "100.00%", 100}, {0, 0, "100.00%", 100},
	} {
		if got := FormatPercent(big.NewInt(tt.part), big.NewInt(tt.whole)); got != tt.want {
			t.Errorf("FormatPercent(%d, %d) = %s, want %s", tt.part, tt.whole, got, tt.want)
		}
		if got := WholePercent(big.NewInt(tt.part), big.NewInt(tt.whole)); got != tt.whole100 {
			t.Errorf("WholePercent(%d, %d) = %d, want %d", tt.part, tt.whole, got, tt.whole100)
		}
	}
}

func findCondition(conds []metav1.Condition, typ string) metav1.Condition {
	for _, c := range conds {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}

// A child pool whose grant is not written yet serves nothing (its figures
// are empty) but its status shows the grant, so that the write happens.
func TestStatusShowsAGrantBeforeItServes(t *testing.T) {
	p := pool("10.0.1.0/24", nil)
	ready := available
	ready.CIDR = netip.MustParsePrefix("10.0.1.0/24")
	st := Status(p, Figures{}, ready)
	if st.CIDR != "10.0.1.0/24" || st.Capacity != "" {
		t.Errorf("status.cidr %q capacity %q", st.CIDR, st.Capacity)
	}
}

func TestCount(t *testing.T) {
	for _, tt := range []struct {
		n    int
		want string
	}{{0, "0 claims lose"}, {1, "1 claim loses"}, {2, "2 claims lose"}, {11, "11 claims lose"}} {
		if got := Count(tt.n, "claim loses", "claims lose"); got != tt.want {
			t.Errorf("Count(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
	huge, _ := new(big.Int).SetString("18446744073709551616", 10)
	for _, tt := range []struct {
		n    *big.Int
		want string
	}{{big.NewInt(1), "1 block"}, {big.NewInt(0), "0 blocks"}, {huge, "18446744073709551616 blocks"}} {
		if got := CountBig(tt.n, "block", "blocks"); got != tt.want {
			t.Errorf("CountBig(%s) = %q, want %q", tt.n, got, tt.want)
		}
	}
}

// A condition that counts one thing says so in the singular.
func TestStatusMessagesCountOneInTheSingular(t *testing.T) {
	p := pool("10.0.0.0/24", nil)
	serving := netip.MustParsePrefix(p.Spec.CIDR)

	oneLoser := Calculate(serving, p, []ipamv1.Subnet{subnet("held", 1, "", "10.0.0.0/25"), subnet("late", 2, "10.0.0.0/26", "")}, nil)
	want := "1 claim loses to overlapping claims: Subnet ns/late (10.0.0.0/26) overlaps Subnet ns/held (10.0.0.0/25); delete the losing claims or pick free ranges"
	if got := findCondition(Status(p, oneLoser, available).Conditions, ipamv1.ConditionOverlapping).Message; got != want {
		t.Errorf("Overlapping message\n got %q\nwant %q", got, want)
	}

	oneNotAllowed := oneLoser
	oneNotAllowed.NotAllowed = []ClaimRef{{Kind: KindSubnet, Namespace: "team-b", Name: "old"}}
	oneNotAllowed.NotAllowedTotal = 1
	want = "1 claim holds ranges from namespaces that spec.allowedNamespaces no longer allows: Subnet team-b/old; they keep their ranges, new claims from those namespaces are refused"
	if got := findCondition(Status(p, oneNotAllowed, available).Conditions, ipamv1.ConditionClaimsNotAllowed).Message; got != want {
		t.Errorf("ClaimsNotAllowed message\n got %q\nwant %q", got, want)
	}

	oneBlock := pool("10.0.0.0/30", nil)
	f := Calculate(netip.MustParsePrefix("10.0.0.0/30"), oneBlock, []ipamv1.Subnet{subnet("a", 0, "", "10.0.0.0/31"), subnet("b", 0, "", "10.0.0.2/32")}, nil)
	if got := findCondition(Status(oneBlock, f, available).Conditions, ipamv1.ConditionExhausted).Message; got != "1 free /32 block left" {
		t.Errorf("Exhausted message %q, want %q", got, "1 free /32 block left")
	}
}

// A root carved into team pools leaves its Subnets only what is not
// carved; the split never goes below zero when the children's figures run
// ahead of the parent's.
func TestSplitCarved(t *testing.T) {
	usage := func(capacity, reserved, held int64) ipspace.Usage {
		return ipspace.Usage{Capacity: big.NewInt(capacity), Reserved: big.NewInt(reserved), Held: big.NewInt(held)}
	}
	for _, tt := range []struct {
		name                      string
		u                         ipspace.Usage
		carved                    int64
		wantHeld, wantAllocatable int64
	}{
		{"carved whole into child pools", usage(65536, 0, 65536), 65536, 0, 0},
		{"no child pools", usage(256, 16, 200), 0, 200, 240},
		{"half carved, Subnets in the rest", usage(1024, 0, 612), 512, 100, 512},
		{"a child counted before the parent holds it", usage(256, 0, 0), 128, 0, 128},
		{"children larger than what is allocatable", usage(256, 192, 64), 128, 0, 0},
	} {
		got := SplitCarved(tt.u, big.NewInt(tt.carved))
		if got.Carved.Int64() != tt.carved || got.Held.Int64() != tt.wantHeld || got.Allocatable.Int64() != tt.wantAllocatable {
			t.Errorf("%s: carved %s held %s allocatable %s, want %d %d %d", tt.name, got.Carved, got.Held, got.Allocatable, tt.carved, tt.wantHeld, tt.wantAllocatable)
		}
	}
}

// An IPv6 pool's free count is a 25-digit number; the FREE column shows it
// as IPv6 sizes are spoken.
func TestReadableCount(t *testing.T) {
	for in, want := range map[string]string{"256": "256", "4294967296": "4294967296", "1208925819614629174706176": "2^80", "1208925819614629174705920": "≈2^80", "": "", "x": "x"} {
		if got := ReadableCount(in); got != want {
			t.Errorf("ReadableCount(%q) = %q, want %q", in, got, want)
		}
	}
}
