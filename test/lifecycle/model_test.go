package lifecycle

import (
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ss))
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func TestComputeFigures(t *testing.T) {
	tests := []struct {
		name           string
		served         string
		reserved, held []string
		def, max       *int32
		want           figures
	}{{
		name:   "reserved, held, default length",
		served: "10.0.0.0/24", reserved: []string{"10.0.0.0/28"}, held: []string{"10.0.0.16/28", "10.0.0.128/25"}, def: ptr.To[int32](27),
		// free: 10.0.0.32/27, 10.0.0.64/26
		want: figures{Capacity: count(256), Reserved: count(16), Allocated: count(144), Free: count(96), Utilization: "60.00%",
			LargestFreeBlock: "10.0.0.64/26", AllocatableBlocks: "3", ExhaustionLength: 27},
	}, {
		name:   "a claim held on a reserved range counts once, as allocated",
		served: "10.0.0.0/24", reserved: []string{"10.0.0.0/26"}, held: []string{"10.0.0.0/27"},
		want: figures{Capacity: count(256), Reserved: count(32), Allocated: count(32), Free: count(192), Utilization: "14.28%",
			LargestFreeBlock: "10.0.0.128/25", ExhaustionLength: 32},
	}, {
		name:   "held outside the served range is not allocated",
		served: "10.0.0.0/25", held: []string{"10.0.0.128/26", "10.0.0.0/26"},
		want: figures{Capacity: count(128), Reserved: count(0), Allocated: count(64), Free: count(64), Utilization: "50.00%",
			LargestFreeBlock: "10.0.0.64/26", ExhaustionLength: 32},
	}, {
		name:   "full",
		served: "10.0.0.0/26", held: []string{"10.0.0.0/26"}, def: ptr.To[int32](28),
		want: figures{Capacity: count(64), Reserved: count(0), Allocated: count(64), Free: count(0), Utilization: "100.00%",
			AllocatableBlocks: "0", Exhausted: true, ExhaustionLength: 28},
	}, {
		name:   "everything reserved",
		served: "10.0.0.0/26", reserved: []string{"10.0.0.0/26"},
		want: figures{Capacity: count(64), Reserved: count(64), Allocated: count(0), Free: count(0), Utilization: "100.00%",
			Exhausted: true, ExhaustionLength: 32},
	}, {
		name:   "truncated, not rounded",
		served: "10.0.0.0/30", reserved: []string{"10.0.0.3/32"}, held: []string{"10.0.0.0/31"},
		want: figures{Capacity: count(4), Reserved: count(1), Allocated: count(2), Free: count(1), Utilization: "66.66%",
			LargestFreeBlock: "10.0.0.2/32", ExhaustionLength: 32},
	}, {
		name:   "exhausted at the maximum length when there is no default",
		served: "10.0.0.0/28", held: []string{"10.0.0.0/29", "10.0.0.8/30", "10.0.0.12/31"}, max: ptr.To[int32](30),
		want: figures{Capacity: count(16), Reserved: count(0), Allocated: count(14), Free: count(2), Utilization: "87.50%",
			LargestFreeBlock: "10.0.0.14/31", Exhausted: true, ExhaustionLength: 30},
	}, {
		name:   "IPv6 at scale",
		served: "2001:db8::/48", held: []string{"2001:db8::/64"}, def: ptr.To[int32](64),
		want: figures{Capacity: pow2(80), Reserved: count(0), Allocated: pow2(64), Free: sub(pow2(80), pow2(64)), Utilization: "0.00%",
			LargestFreeBlock: "2001:db8:0:8000::/49", AllocatableBlocks: "65535", ExhaustionLength: 64},
	}, {
		name:   "equal blocks: the lowest address",
		served: "10.0.0.0/24", held: []string{"10.0.0.64/26", "10.0.0.128/26"},
		want: figures{Capacity: count(256), Reserved: count(0), Allocated: count(128), Free: count(128), Utilization: "50.00%",
			LargestFreeBlock: "10.0.0.0/26", ExhaustionLength: 32},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := computeFigures(netip.MustParsePrefix(tt.served), prefixes(tt.reserved...), prefixes(tt.held...), tt.def, tt.max)
			if d := cmp.Diff(fmt.Sprintf("%+v", tt.want), fmt.Sprintf("%+v", got)); d != "" {
				t.Errorf("figures (-want +got):\n%s", d)
			}
		})
	}
}

func count(n int64) *big.Int     { return big.NewInt(n) }
func pow2(n uint) *big.Int       { return new(big.Int).Lsh(big.NewInt(1), n) }
func sub(a, b *big.Int) *big.Int { return new(big.Int).Sub(a, b) }

// ---- synthetic objects ----

var uids int

func newUID() types.UID {
	uids++
	return types.UID(fmt.Sprintf("uid-%04d-xxxx", uids))
}

// qualified is a reference to a pool of namespace ns, as the model keeps it.
func qualified(name string) string {
	if name == "" || strings.Contains(name, "/") {
		return name
	}
	return "ns/" + name
}

func subnet(name, pool, cidr string, length int32) obj {
	o := obj{Kind: kindSubnet, Namespace: "ns", Name: name, UID: newUID(), Generation: 1, ObservedGeneration: 1, Ref: qualified(pool), CIDR: cidr}
	if length > 0 {
		o.PrefixLength = ptr.To(length)
	}
	return o
}

func pool(name, parent, cidr string) obj {
	return obj{Kind: kindPool, Namespace: "ns", Name: name, UID: newUID(), Generation: 1, ObservedGeneration: 1, Ref: qualified(parent), CIDR: cidr,
		Figures: &ipamv1.SubnetPoolStatus{}}
}

func (o obj) granted(cidr string) obj {
	o.StatusCIDR = cidr
	o.Conditions = []metav1.Condition{{Type: ipamv1.ConditionReady, Status: metav1.ConditionTrue, Reason: ipamv1.ReasonAllocated, ObservedGeneration: o.Generation}}
	return o
}

// recorded returns objs with every Ready Subnet's range recorded in its
// spec, as the controller leaves them by quiescence (the first Ready
// version, which the synthetic histories show, has it in status only).
func recorded(objs []obj) []obj {
	out := slices.Clone(objs)
	for i := range out {
		if o := &out[i]; o.Kind == kindSubnet && o.CIDR == "" && o.PrefixLength != nil && o.StatusCIDR != "" {
			o.CIDR = o.StatusCIDR
		}
	}
	return out
}

func (o obj) waiting(reason, message string) obj {
	o.StatusCIDR = ""
	o.Conditions = []metav1.Condition{{Type: ipamv1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason, Message: message, ObservedGeneration: o.Generation}}
	return o.allAllowed()
}

func (o obj) serving(statusCIDR string) obj {
	o.StatusCIDR = statusCIDR
	o.Conditions = []metav1.Condition{{Type: ipamv1.ConditionReady, Status: metav1.ConditionTrue, Reason: ipamv1.ReasonAvailable, ObservedGeneration: o.Generation}}
	return o.allAllowed()
}

// allAllowed gives a pool the ClaimsNotAllowed condition of a pool whose
// claims are all allowed.
func (o obj) allAllowed() obj {
	if o.Kind == kindPool {
		o.Conditions = append(o.Conditions, metav1.Condition{Type: ipamv1.ConditionClaimsNotAllowed, Status: metav1.ConditionFalse, Reason: ipamv1.ReasonAllAllowed})
	}
	return o
}

func (o obj) at(rv uint64) obj {
	o.RV = rv
	return o
}

func checksOf(fs []finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Check)
	}
	return out
}

func replay(events ...event) *replayer {
	r := newReplayer()
	for _, e := range events {
		r.apply(e)
	}
	return r
}

func added(o obj) event    { return event{Type: "ADDED", Obj: o} }
func modified(o obj) event { return event{Type: "MODIFIED", Obj: o} }
func deleted(o obj) event  { return event{Type: "DELETED", Obj: o} }

func TestSafetyOnSyntheticHistories(t *testing.T) {
	p := pool("p", "", "10.0.0.0/24").serving("10.0.0.0/24")
	a := subnet("a", "p", "", 26)
	b := subnet("b", "p", "10.0.0.0/25", 0)
	b2 := subnet("b", "p", "10.0.0.128/26", 0) // same name, new object
	child := pool("c", "p", "10.0.0.0/26")
	tests := []struct {
		name   string
		events []event
		want   []string
	}{{
		name: "disjoint grants",
		events: []event{added(p.at(1)), added(a.at(2)), modified(a.granted("10.0.0.128/26").at(3)),
			added(b.at(4)), modified(b.granted("10.0.0.0/25").at(5))},
	}, {
		name: "two Ready claims overlap: one finding however long it lasts",
		events: []event{added(p.at(1)), added(a.at(2)), modified(a.granted("10.0.0.0/26").at(3)),
			added(b.at(4)), modified(b.granted("10.0.0.0/25").at(5)), modified(b.granted("10.0.0.0/25").at(6))},
		want: []string{"S1"},
	}, {
		name: "a child pool's grant overlaps a Subnet, whatever the child's Ready",
		events: []event{added(p.at(1)), added(a.at(2)), modified(a.granted("10.0.0.0/26").at(3)),
			added(child.at(4)), modified(child.waiting(ipamv1.ReasonOverlaps, "").at(5)), func() event {
				c := child.waiting(ipamv1.ReasonOverlaps, "")
				c.StatusCIDR = "10.0.0.0/26"
				return modified(c.at(6))
			}()},
		want: []string{"S1"},
	}, {
		name: "deleted, then its range taken by a new object under the same name",
		events: []event{added(p.at(1)), added(b.at(2)), modified(b.granted("10.0.0.0/25").at(3)), deleted(b.granted("10.0.0.0/25").at(4)),
			added(a.at(5)), modified(a.granted("10.0.0.0/26").at(6)), added(b2.at(7)), modified(b2.granted("10.0.0.128/26").at(8))},
	}, {
		name: "revoked",
		events: []event{added(p.at(1)), added(a.at(2)), modified(a.granted("10.0.0.0/26").at(3)),
			modified(a.waiting(ipamv1.ReasonPoolNotReady, "").at(4))},
		want: []string{"S2"},
	}, {
		name:   "moved",
		events: []event{added(p.at(1)), added(a.at(2)), modified(a.granted("10.0.0.0/26").at(3)), modified(a.granted("10.0.0.64/26").at(4))},
		want:   []string{"S2"},
	}, {
		name:   "explicit claim granted another range",
		events: []event{added(p.at(1)), added(b.at(2)), modified(b.granted("10.0.0.0/26").at(3))},
		want:   []string{"S3"},
	}, {
		name:   "dynamic claim granted another length",
		events: []event{added(p.at(1)), added(a.at(2)), modified(a.granted("10.0.0.0/27").at(3))},
		want:   []string{"S3"},
	}, {
		name:   "granted outside anything the pool served",
		events: []event{added(p.at(1)), added(a.at(2)), modified(a.granted("10.0.1.0/26").at(3))},
		want:   []string{"S3"},
	}, {
		name: "granted from the range the pool served a moment before it shrank",
		events: []event{added(p.at(1)), added(a.at(2)), modified(func() obj { q := p; q.CIDR = "10.0.0.0/25"; return q.serving("10.0.0.0/25") }().at(3)),
			modified(a.granted("10.0.0.128/26").at(4))},
	}, {
		name: "without prefixLength: the pool's default",
		events: []event{added(func() obj { q := p; q.Default = ptr.To[int32](27); return q }().at(1)),
			added(subnet("d", "p", "", 0).at(2)), modified(subnet("d", "p", "", 0).granted("10.0.0.0/26").at(3))},
		want: []string{"S3"},
	}, {
		name: "a pool's grant withdrawn",
		events: []event{added(p.at(1)), added(child.serving("10.0.0.0/26").at(2)),
			modified(child.waiting(ipamv1.ReasonPoolNotReady, "").at(3))},
		want: []string{"S2"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := replay(tt.events...)
			if d := cmp.Diff(tt.want, checksOf(r.findings)); d != "" {
				t.Errorf("checks (-want +got):\n%s\nfindings: %v", d, r.findings)
			}
		})
	}
}

func TestGapHidesThenFindsOverlap(t *testing.T) {
	p := pool("p", "", "10.0.0.0/24").serving("10.0.0.0/24")
	a := subnet("a", "p", "", 26)
	b := subnet("b", "p", "10.0.0.0/25", 0)
	r := newReplayer()
	r.noteGap(gap{Kind: kindSubnet, From: 2, To: 10})
	for _, e := range []event{added(p.at(1)), added(a.granted("10.0.0.0/26").at(5)), added(b.granted("10.0.0.0/25").at(6))} {
		r.apply(e)
	}
	if len(r.findings) != 0 || r.s1Skipped != 2 {
		t.Fatalf("inside the gap: findings %v, skipped %d", r.findings, r.s1Skipped)
	}
	r.apply(added(pool("q", "", "10.1.0.0/24").at(11)))
	if d := cmp.Diff([]string{"S1"}, checksOf(r.findings)); d != "" {
		t.Errorf("after the gap (-want +got):\n%s", d)
	}
}

func TestStateAt(t *testing.T) {
	a := subnet("a", "p", "", 26)
	a2 := subnet("a", "p", "10.0.0.0/26", 0)
	r := replay(added(a.at(2)), modified(a.granted("10.0.0.0/26").at(4)), deleted(a.granted("10.0.0.0/26").at(6)), added(a2.at(7)))
	for rv, want := range map[uint64]string{1: "", 2: "2", 5: "4", 6: "", 7: "7"} {
		got := ""
		if v := r.stateAt(kindSubnet, rv)["Subnet ns/a"]; v != nil {
			got = fmt.Sprint(v.RV)
		}
		if got != want {
			t.Errorf("at %d: %q, want %q", rv, got, want)
		}
	}
}

// A Ready Subnet whose range is not in its spec at quiescence is an L1
// finding: a restore without status would not ask for it again.
func TestQuiescentSubnetRangeRecorded(t *testing.T) {
	p := pool("p", "", "10.0.0.0/24").serving("10.0.0.0/24")
	s := subnet("a", "p", "", 26).granted("10.0.0.0/26")
	var checks []string
	for _, f := range checkQuiescent([]obj{p, s}, nil).findings {
		if strings.Contains(f.Detail, "spec.cidr is") {
			checks = append(checks, f.Check)
		}
	}
	if !slices.Equal(checks, []string{"L1"}) {
		t.Errorf("an unrecorded Ready Subnet: findings %v, want one L1", checkQuiescent([]obj{p, s}, nil).findings)
	}
	if r := checkQuiescent(recorded([]obj{p, s}), nil); slices.ContainsFunc(r.findings, func(f finding) bool { return strings.Contains(f.Detail, "spec.cidr is") }) {
		t.Errorf("a recorded Ready Subnet: %v", r.findings)
	}
	// Named neither field (created before its pool): recorded at the
	// recorder's pace; not a finding before.
	bare := subnet("b", "p", "", 0).granted("10.0.0.64/26")
	if r := checkQuiescent([]obj{p, bare}, nil); slices.ContainsFunc(r.findings, func(f finding) bool { return strings.Contains(f.Detail, "spec.cidr is") }) {
		t.Errorf("an unrecorded Subnet without prefixLength: %v", r.findings)
	}
}

func TestQuiescentSubnets(t *testing.T) {
	p := pool("p", "", "10.0.0.0/24").serving("10.0.0.0/24")
	p.Default = ptr.To[int32](26)
	held := subnet("h", "p", "10.0.0.0/25", 0).granted("10.0.0.0/25")
	tests := []struct {
		name string
		objs []obj
		want []string
	}{{
		name: "waiting for a missing pool",
		objs: []obj{subnet("a", "q", "", 26).waiting(ipamv1.ReasonPoolNotFound, "")},
	}, {
		name: "PoolNotFound while the pool exists",
		objs: []obj{p, subnet("a", "p", "", 26).waiting(ipamv1.ReasonPoolNotFound, "")},
		want: []string{"L2"},
	}, {
		name: "exhausted while a block is free",
		objs: []obj{p, held, subnet("a", "p", "", 26).waiting(ipamv1.ReasonPoolExhausted, "")},
		want: []string{"L2"},
	}, {
		name: "exhausted, truly",
		objs: []obj{p, held, subnet("a", "p", "", 23).waiting(ipamv1.ReasonOutOfRange, ""), subnet("b", "p", "", 25).waiting(ipamv1.ReasonPoolExhausted, ""),
			subnet("c", "p", "", 0).granted("10.0.0.128/26"), subnet("d", "p", "", 0).granted("10.0.0.192/26"), subnet("e", "p", "", 0).waiting(ipamv1.ReasonPoolExhausted, "")},
	}, {
		name: "loses to the claim it names",
		objs: []obj{p, held, subnet("a", "p", "10.0.0.0/26", 0).waiting(ipamv1.ReasonOverlaps, "10.0.0.0/26 overlaps Subnet ns/h (10.0.0.0/25)")},
	}, {
		name: "loses, naming another claim",
		objs: []obj{p, held, subnet("a", "p", "10.0.0.0/26", 0).waiting(ipamv1.ReasonOverlaps, "10.0.0.0/26 overlaps Subnet ns/x")},
		want: []string{"L2"},
	}, {
		name: "Overlaps while nothing holds its range",
		objs: []obj{p, held, subnet("a", "p", "10.0.0.128/26", 0).waiting(ipamv1.ReasonOverlaps, "ns/h")},
		want: []string{"L2"},
	}, {
		name: "on a reserved range",
		objs: []obj{func() obj { q := p; q.Reserved = []string{"10.0.0.192/26"}; return q }(), subnet("a", "p", "10.0.0.192/27", 0).waiting(ipamv1.ReasonOutOfRange, "")},
	}, {
		name: "still Pending, no Ready at all, stale generation",
		objs: []obj{p, subnet("a", "p", "10.0.0.128/26", 0).waiting(ipamv1.ReasonPending, ""), subnet("b", "p", "", 26),
			func() obj { s := subnet("c", "p", "", 26).granted("10.0.0.128/26"); s.Generation = 2; return s }()},
		want: []string{"L1", "L2", "L1", "L1"},
	}, {
		name: "a child pool never granted serves nothing",
		objs: []obj{p, pool("c", "p", "10.0.0.0/26").waiting(ipamv1.ReasonOverlaps, "ns/h"), held, subnet("a", "c", "", 28).waiting(ipamv1.ReasonPoolNotReady, "")},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := checkQuiescent(recorded(tt.objs), nil)
			var got []string
			for _, f := range r.findings {
				if f.Check != "L3" && f.Check != "L4" {
					got = append(got, f.Check)
				}
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("checks (-want +got):\n%s\nfindings: %v", d, r.findings)
			}
		})
	}
}

// poolWithStatus fills a serving pool's figures as the model computes them.
func poolWithStatus(o obj, subnets, children int32, held []string) obj {
	f := computeFigures(parsePrefix(o.StatusCIDR), o.reserved(), prefixes(held...), o.Default, o.Max)
	o.Figures = &ipamv1.SubnetPoolStatus{
		Capacity: f.Capacity.String(), Reserved: f.Reserved.String(), Allocated: f.Allocated.String(), Free: f.Free.String(),
		Utilization: f.Utilization, LargestFreeBlock: f.LargestFreeBlock, AllocatableBlocks: f.AllocatableBlocks,
		Subnets: subnets, ChildPools: children,
	}
	o.Conditions = append(o.Conditions,
		metav1.Condition{Type: ipamv1.ConditionExhausted, Status: boolStatus(f.Exhausted)},
		metav1.Condition{Type: ipamv1.ConditionOverlapping, Status: metav1.ConditionFalse})
	return o
}

func TestQuiescentPools(t *testing.T) {
	root := pool("p", "", "10.0.0.0/24").serving("10.0.0.0/24")
	a := subnet("a", "p", "", 26).granted("10.0.0.0/26")
	tests := []struct {
		name          string
		objs          []obj
		want          []string
		grandfathered int
	}{{
		name: "healthy root",
		objs: []obj{poolWithStatus(root, 1, 0, []string{"10.0.0.0/26"}), a},
	}, {
		name: "figures wrong",
		objs: []obj{poolWithStatus(root, 0, 0, nil), a},
		want: []string{"L3"},
	}, {
		name: "a claim on a reserved range, unreported",
		objs: []obj{poolWithStatus(func() obj { q := root; q.Reserved = []string{"10.0.0.0/27"}; return q }(), 1, 0, []string{"10.0.0.0/26"}), a},
		want: []string{"L4"}, grandfathered: 1,
	}, {
		name: "a claim on a reserved range, reported",
		objs: []obj{poolWithStatus(func() obj {
			q := root.waiting(ipamv1.ReasonClaimsOutside, "1 claim lies outside the range or on reserved ranges")
			q.StatusCIDR, q.Reserved = "10.0.0.0/24", []string{"10.0.0.0/27"}
			return q
		}(), 1, 0, []string{"10.0.0.0/26"}), a},
		grandfathered: 1,
	}, {
		name: "reported with the wrong count",
		objs: []obj{poolWithStatus(func() obj {
			q := root.waiting(ipamv1.ReasonClaimsOutside, "2 claims lie outside")
			q.StatusCIDR, q.Reserved = "10.0.0.0/24", []string{"10.0.0.0/27"}
			return q
		}(), 1, 0, []string{"10.0.0.0/26"}), a},
		want: []string{"L4"}, grandfathered: 1,
	}, {
		name: "a child's shrink that fits, not granted",
		objs: []obj{poolWithStatus(root, 0, 1, []string{"10.0.0.128/25"}),
			poolWithStatus(func() obj { c := pool("c", "p", "10.0.0.128/26").serving("10.0.0.128/25"); return c }(), 0, 0, nil)},
		want: []string{"L4"},
	}, {
		name: "a child's shrink that would leave a claim outside",
		objs: []obj{poolWithStatus(root, 0, 1, []string{"10.0.0.128/25"}),
			poolWithStatus(func() obj {
				c := pool("c", "p", "10.0.0.128/26").waiting(ipamv1.ReasonClaimsOutside, "cannot change to 10.0.0.128/26: 1 claim lies outside it")
				c.StatusCIDR = "10.0.0.128/25"
				return c
			}(), 1, 0, []string{"10.0.0.224/27"}),
			subnet("s", "c", "", 27).granted("10.0.0.224/27")},
	}, {
		name: "a child's grow onto a sibling, counted by the parent",
		objs: []obj{func() obj {
			q := poolWithStatus(root, 1, 1, []string{"10.0.0.0/26", "10.0.0.128/26"})
			meta.SetStatusCondition(&q.Conditions, metav1.Condition{Type: ipamv1.ConditionOverlapping, Status: metav1.ConditionTrue, Message: "1 claims lose to overlapping claims: ..."})
			return q
		}(), a, poolWithStatus(func() obj {
			c := pool("c", "p", "10.0.0.0/24").waiting(ipamv1.ReasonOverlaps, "")
			c.StatusCIDR = "10.0.0.128/26"
			return c
		}(), 0, 0, nil)},
	}, {
		name: "a child's grow onto a sibling, not counted, and an unjustified reason",
		objs: []obj{poolWithStatus(root, 1, 1, []string{"10.0.0.0/26", "10.0.0.128/26"}), a, poolWithStatus(func() obj {
			c := pool("c", "p", "10.0.0.0/24").waiting(ipamv1.ReasonPoolExhausted, "")
			c.StatusCIDR = "10.0.0.128/26"
			return c
		}(), 0, 0, nil)},
		want: []string{"L4", "L3"},
	}, {
		name: "terminating with users",
		objs: []obj{poolWithStatus(func() obj {
			q := root.waiting(ipamv1.ReasonTerminating, "")
			q.StatusCIDR = "10.0.0.0/24"
			q.Deleting = true
			return q
		}(), 1, 0, []string{"10.0.0.0/26"}), a},
	}, {
		name: "terminating without users",
		objs: []obj{poolWithStatus(func() obj {
			q := root.waiting(ipamv1.ReasonTerminating, "")
			q.StatusCIDR = "10.0.0.0/24"
			q.Deleting = true
			return q
		}(), 0, 0, nil)},
		want: []string{"L1"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := checkQuiescent(recorded(tt.objs), nil)
			var got []string
			for _, f := range r.findings {
				got = append(got, f.Check)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("checks (-want +got):\n%s\nfindings: %v", d, r.findings)
			}
			if len(r.grandfathered) != tt.grandfathered {
				t.Errorf("grandfathered %v, want %d", r.grandfathered, tt.grandfathered)
			}
		})
	}
}

func TestOverlapLosers(t *testing.T) {
	root := pool("p", "", "10.0.0.0/24").serving("10.0.0.0/24")
	objs := []obj{root,
		subnet("a", "p", "", 26).granted("10.0.0.0/26"),
		subnet("b", "p", "10.0.0.0/27", 0).waiting(ipamv1.ReasonOverlaps, ""),                          // loses
		subnet("c", "p", "10.0.0.64/26", 0).waiting(ipamv1.ReasonOverlaps, ""),                         // overlaps nothing held
		subnet("d", "p", "10.0.0.0/23", 0).waiting(ipamv1.ReasonOutOfRange, ""),                        // outside: not a loser
		func() obj { c := pool("c1", "p", "10.0.0.0/25"); c.StatusCIDR = "10.0.0.128/26"; return c }(), // asks for a's range
		func() obj { c := pool("c2", "p", "10.0.0.192/26"); c.StatusCIDR = "10.0.0.192/26"; return c }(),
	}
	w := newWorld(objs, nil)
	var got []string
	for _, o := range overlapLosers(w, w.pools["ns/p"]) {
		got = append(got, o.Name)
	}
	if d := cmp.Diff([]string{"b", "d", "c1"}, got); d != "" {
		t.Errorf("losers (-want +got):\n%s", d)
	}
}

func TestAdmission(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	c1 := subnet("a", "p", "10.0.0.0/25", 0)
	c2 := subnet("b", "p", "10.0.0.0/26", 0)
	create := func(id int, o obj, start, end time.Time, rv uint64) *opRecord {
		return &opRecord{ID: id, Op: "create-explicit-subnet", Verb: "create", Kind: kindSubnet, Namespace: o.Namespace, Name: o.Name,
			Ref: o.Ref, CIDR: o.CIDR, Start: start, End: end, Outcome: outcomeCreated, RV: rv, UID: o.UID}
	}
	tests := []struct {
		name    string
		ops     []*opRecord
		events  []event
		want    []string
		skipped int
	}{{
		name:   "back to back, both admitted",
		ops:    []*opRecord{create(1, c1, ms(0), ms(10), 5), create(2, c2, ms(500), ms(510), 7)},
		events: []event{added(c1.at(5)), added(c2.at(7))},
		want:   []string{"S4a"},
	}, {
		name:    "concurrent: not judged",
		ops:     []*opRecord{create(1, c1, ms(0), ms(10), 5), create(2, c2, ms(500), ms(510), 7), {ID: 3, Verb: "delete", Kind: kindSubnet, Namespace: "ns", Name: "x", Start: ms(505), End: ms(520), Outcome: outcomeNotFound}},
		events:  []event{added(c1.at(5)), added(c2.at(7))},
		skipped: 1,
	}, {
		name:   "the first was deleted before the second was created",
		ops:    []*opRecord{create(1, c1, ms(0), ms(10), 5), create(2, c2, ms(500), ms(510), 7)},
		events: []event{added(c1.at(5)), {Type: "DELETED", Obj: c1.at(6), Received: ms(100)}, added(c2.at(7))},
	}, {
		name:    "a deletion in flight, and the first create too",
		ops:     []*opRecord{create(1, c1, ms(0), ms(10), 5), create(2, c2, ms(100), ms(110), 8)},
		events:  []event{{Type: "ADDED", Obj: c1.at(5), Received: ms(20)}, added(subnet("z", "q", "", 28).at(6)), {Type: "DELETED", Obj: subnet("z", "q", "", 28).at(7), Received: ms(80)}, added(c2.at(8))},
		skipped: 1,
	}, {
		name:   "a deletion in flight, but the first create long delivered",
		ops:    []*opRecord{create(1, c1, ms(0), ms(10), 5), create(2, c2, ms(500), ms(510), 8)},
		events: []event{{Type: "ADDED", Obj: c1.at(5), Received: ms(20)}, added(subnet("z", "q", "", 28).at(6)), {Type: "DELETED", Obj: subnet("z", "q", "", 28).at(7), Received: ms(480)}, added(c2.at(8))},
		want:   []string{"S4a"},
	}, {
		name: "over a dynamic claim the API showed Ready before the create started",
		ops: []*opRecord{{ID: 1, Verb: "create", Kind: kindSubnet, Namespace: "ns", Name: "d", Ref: "ns/p", Start: ms(0), End: ms(10), Outcome: outcomeCreated, RV: 5},
			{ID: 2, Verb: "create", Kind: kindPool, Namespace: "ns", Name: "q", Start: ms(100), End: ms(110), Outcome: outcomeCreated, RV: 7},
			create(3, c2, ms(500), ms(510), 8)},
		events: func() []event {
			d := subnet("d", "p", "", 25)
			return []event{added(d.at(5)), modified(d.granted("10.0.0.0/25").at(6)), added(pool("q", "", "10.9.0.0/24").at(7)), added(c2.at(8))}
		}(),
		want: []string{"S4b"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := replay(tt.events...)
			a := newAdmissionChecker()
			fs := a.check(tt.ops, 0, r)
			var got []string
			for _, f := range fs {
				got = append(got, strings.SplitN(f.Key, "/", 2)[0])
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("findings (-want +got):\n%s\n%v", d, fs)
			}
			skipped := a.pairsSkipped
			for _, n := range a.skipped {
				skipped += n
			}
			if skipped != tt.skipped {
				t.Errorf("skipped %v, want %d", a.skipped, tt.skipped)
			}
		})
	}
}

// in moves an object to namespace ns, keeping its reference where it was.
func (o obj) in(ns string) obj {
	o.Namespace = ns
	return o
}

// Consent across namespaces, at quiescence and in the history: a Subnet
// from a namespace its pool does not allow waits NotAllowed and nothing
// else; one from an allowed namespace is decided on its merits; a pool
// reports the holders it no longer allows; a grant from a namespace its
// pool never allowed is S5; a loser learns another tenant's range, not
// its name.
func TestConsent(t *testing.T) {
	plat := pool("corp", "", "10.0.0.0/24").serving("10.0.0.0/24").in("netops")
	plat.Default = ptr.To[int32](26)
	plat.Allowed = &ipamv1.AllowedNamespaces{From: ipamv1.FromSelector, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "true"}}}
	labels := map[string]map[string]string{"team-a": {"tenant": "true"}, "team-b": nil}
	claim := func(ns, name, cidr string, length int32) obj { return subnet(name, "netops/corp", cidr, length).in(ns) }
	held := claim("team-b", "old", "10.0.0.0/26", 0).granted("10.0.0.0/26")
	tests := []struct {
		name string
		objs []obj
		want []string
	}{{
		name: "a namespace not allowed waits NotAllowed",
		objs: []obj{poolWithStatus(plat, 1, 0, nil), claim("team-b", "x", "", 26).waiting(ipamv1.ReasonNotAllowed, "")},
	}, {
		name: "a namespace not allowed shows another reason",
		objs: []obj{poolWithStatus(plat, 1, 0, nil), claim("team-b", "x", "", 26).waiting(ipamv1.ReasonPoolExhausted, "")},
		want: []string{"L2"},
	}, {
		name: "an allowed namespace waits NotAllowed while it fits",
		objs: []obj{poolWithStatus(plat, 1, 0, nil), claim("team-a", "x", "", 26).waiting(ipamv1.ReasonNotAllowed, "")},
		want: []string{"L2"},
	}, {
		name: "a holder no longer allowed, reported",
		objs: []obj{func() obj {
			p := poolWithStatus(plat, 1, 0, []string{"10.0.0.0/26"})
			meta.SetStatusCondition(&p.Conditions, metav1.Condition{Type: ipamv1.ConditionClaimsNotAllowed, Status: metav1.ConditionTrue,
				Message: "1 claims hold ranges from namespaces that spec.allowedNamespaces no longer allows: Subnet team-b/old"})
			return p
		}(), held},
	}, {
		name: "a holder no longer allowed, not reported",
		objs: []obj{poolWithStatus(plat, 1, 0, []string{"10.0.0.0/26"}), held},
		want: []string{"L3"},
	}, {
		name: "a loser names another tenant's claim",
		objs: []obj{poolWithStatus(plat, 2, 0, []string{"10.0.0.0/26"}), claim("team-a", "h", "10.0.0.0/26", 0).granted("10.0.0.0/26"),
			claim("team-c", "x", "10.0.0.0/27", 0).waiting(ipamv1.ReasonOverlaps, "10.0.0.0/27 overlaps Subnet team-a/h (10.0.0.0/26)")},
		want: []string{"L2", "L3"}, // team-c is not allowed either: it must wait NotAllowed, and the pool count it
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := checkQuiescent(recorded(tt.objs), labels)
			if d := cmp.Diff(tt.want, checksOf(r.findings)); d != "" {
				t.Errorf("checks (-want +got):\n%s\nfindings: %v", d, r.findings)
			}
		})
	}

	// The message of a loser to another tenant gives the range only.
	all := plat
	all.Allowed = &ipamv1.AllowedNamespaces{From: ipamv1.FromAll}
	winner := claim("team-a", "h", "10.0.0.0/26", 0).granted("10.0.0.0/26")
	for _, tc := range []struct {
		message string
		want    []string
	}{
		{"10.0.0.0/27 overlaps a claim in another namespace (10.0.0.0/26), which holds it", nil},
		{"10.0.0.0/27 overlaps Subnet team-a/h (10.0.0.0/26), which holds it", []string{"L2"}},
	} {
		losing := poolWithStatus(all, 2, 0, []string{"10.0.0.0/26"})
		meta.SetStatusCondition(&losing.Conditions, metav1.Condition{Type: ipamv1.ConditionOverlapping, Status: metav1.ConditionTrue, Message: "1 claims lose to overlapping claims: ..."})
		objs := []obj{losing, winner, claim("team-b", "x", "10.0.0.0/27", 0).waiting(ipamv1.ReasonOverlaps, tc.message)}
		r := checkQuiescent(objs, labels)
		if d := cmp.Diff(tc.want, checksOf(r.findings)); d != "" {
			t.Errorf("%q: checks (-want +got):\n%s\nfindings: %v", tc.message, d, r.findings)
		}
	}

	// S5: granted by a pool that never allowed other namespaces.
	same := pool("own", "", "10.1.0.0/24").serving("10.1.0.0/24").in("netops")
	stranger := subnet("x", "netops/own", "10.1.0.0/26", 0).in("team-a")
	r := replay(added(same.at(1)), added(stranger.at(2)), modified(stranger.granted("10.1.0.0/26").at(3)))
	if d := cmp.Diff([]string{"S5"}, checksOf(r.findings)); d != "" {
		t.Errorf("grant without consent (-want +got):\n%s", d)
	}
	r = replay(added(plat.at(1)), added(claim("team-a", "y", "10.0.0.64/26", 0).at(2)), modified(claim("team-a", "y", "10.0.0.64/26", 0).granted("10.0.0.64/26").at(3)))
	if len(r.findings) != 0 {
		t.Errorf("grant with consent: %v", r.findings)
	}
}

// Q1: a grant does not take a namespace past its pool's per-namespace caps
// in force from the claim's creation to its grant; a cap lowered after the
// claim was created is not held against it, nor against claims held before.
func TestQuota(t *testing.T) {
	capped := func(claims int32, addresses string) obj {
		p := pool("corp", "", "10.0.0.0/24").serving("10.0.0.0/24").in("netops")
		p.Allowed = &ipamv1.AllowedNamespaces{From: ipamv1.FromAll, PerNamespace: &ipamv1.NamespaceLimits{MaxAddresses: addresses}}
		if claims >= 0 {
			p.Allowed.PerNamespace.MaxClaims = ptr.To(claims)
		}
		return p
	}
	claim := func(name, cidr string) obj { return subnet(name, "netops/corp", cidr, 0).in("team-a") }
	a, b := claim("a", "10.0.0.0/26"), claim("b", "10.0.0.64/26")

	// Two claims granted under a cap of one.
	r := replay(added(capped(1, "").at(1)), added(a.at(2)), modified(a.granted("10.0.0.0/26").at(3)),
		added(b.at(4)), modified(b.granted("10.0.0.64/26").at(5)))
	if d := cmp.Diff([]string{"Q1"}, checksOf(r.findings)); d != "" {
		t.Errorf("two claims under a cap of one (-want +got):\n%s\nfindings: %v", d, r.findings)
	}
	// 128 addresses under a cap of 64.
	r = replay(added(capped(-1, "64").at(1)), added(a.at(2)), modified(a.granted("10.0.0.0/26").at(3)),
		added(b.at(4)), modified(b.granted("10.0.0.64/26").at(5)))
	if d := cmp.Diff([]string{"Q1"}, checksOf(r.findings)); d != "" {
		t.Errorf("128 addresses under a cap of 64 (-want +got):\n%s\nfindings: %v", d, r.findings)
	}
	// The cap was two when b was created and lowered to one before its
	// grant: the arbiter may have decided on the older pool.
	r = replay(added(capped(2, "").at(1)), added(a.at(2)), modified(a.granted("10.0.0.0/26").at(3)),
		added(b.at(4)), modified(capped(1, "").at(5)), modified(b.granted("10.0.0.64/26").at(6)))
	if len(r.findings) != 0 {
		t.Errorf("a cap lowered while the claim waited: %v", r.findings)
	}
	// The pool's own namespace is not capped.
	own := subnet("own", "netops/corp", "10.0.0.128/26", 0).in("netops")
	r = replay(added(capped(0, "").at(1)), added(own.at(2)), modified(own.granted("10.0.0.128/26").at(3)))
	if len(r.findings) != 0 {
		t.Errorf("the pool's own namespace: %v", r.findings)
	}
}

// At quiescence (L2), a claim that would take its namespace past the
// pool's caps may wait NamespaceQuotaExceeded, while it fits otherwise;
// without caps the same wait is a claim left waiting while it fits.
func TestQuotaWaitAtQuiescence(t *testing.T) {
	plat := pool("corp", "", "10.0.0.0/24").serving("10.0.0.0/24").in("netops")
	plat.Default = ptr.To[int32](26)
	plat.Allowed = &ipamv1.AllowedNamespaces{From: ipamv1.FromAll, PerNamespace: &ipamv1.NamespaceLimits{MaxClaims: ptr.To[int32](1)}}
	held := subnet("a", "netops/corp", "10.0.0.0/26", 0).in("team-a").granted("10.0.0.0/26")
	waiting := subnet("b", "netops/corp", "", 26).in("team-a").waiting(ipamv1.ReasonNamespaceQuotaExceeded, "")
	labels := map[string]map[string]string{"team-a": nil}
	if r := checkQuiescent(recorded([]obj{poolWithStatus(plat, 2, 0, []string{"10.0.0.0/26"}), held, waiting}), labels); len(r.findings) != 0 {
		t.Errorf("a claim over its namespace's cap: %v", r.findings)
	}
	uncapped := plat
	uncapped.Allowed = &ipamv1.AllowedNamespaces{From: ipamv1.FromAll}
	r := checkQuiescent(recorded([]obj{poolWithStatus(uncapped, 2, 0, []string{"10.0.0.0/26"}), held, waiting}), labels)
	if d := cmp.Diff([]string{"L2"}, checksOf(r.findings)); d != "" {
		t.Errorf("waiting for a cap the pool does not have (-want +got):\n%s\nfindings: %v", d, r.findings)
	}
}
