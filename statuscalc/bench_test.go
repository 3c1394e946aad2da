package statuscalc

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ipspace"
)

var benchPools = []struct {
	name   string
	cidr   string
	length int32
}{
	{"ipv4", "10.0.0.0/8", 26},
	{"ipv6", "2001:db8::/32", 64},
}

// benchSpace returns a pool's map holding n ranges, a fifth of them released
// again at random so that free space is fragmented, and the held ranges.
func benchSpace(cidr string, length int32, n int) (*ipspace.Space, []netip.Prefix) {
	s := ipspace.NewSpace(netip.MustParsePrefix(cidr), nil)
	all := make([]netip.Prefix, 0, n+n/4)
	for range n + n/4 {
		p, _ := s.Allocate(int(length))
		all = append(all, p)
	}
	rng := rand.New(rand.NewPCG(uint64(n), 1))
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	for _, p := range all[n:] {
		_ = s.Release(p)
	}
	return s, all[:n]
}

// BenchmarkStatusFromSpace is the reconciler's path: a maintained map, a
// handful of allocations since the last status, then the figures and
// conditions.
func BenchmarkStatusFromSpace(b *testing.B) {
	for _, bp := range benchPools {
		for _, n := range []int{1_000, 10_000, 100_000} {
			s, _ := benchSpace(bp.cidr, bp.length, n)
			p := &ipamv1.SubnetPool{Spec: ipamv1.SubnetPoolSpec{CIDR: bp.cidr, DefaultPrefixLength: ptr.To(bp.length)}}
			ready := Readiness{Status: metav1.ConditionTrue, Reason: ipamv1.ReasonAvailable}
			b.Run(fmt.Sprintf("%s/n=%d", bp.name, n), func(b *testing.B) {
				var got [5]netip.Prefix
				for b.Loop() {
					for i := range got {
						got[i], _ = s.Allocate(int(bp.length))
					}
					f := Measure(int(bp.length), -1, s)
					f.Subnets = int32(n)
					p.Status = Status(p, f, ready)
					for _, g := range got {
						_ = s.Release(g)
					}
				}
			})
		}
	}
}

// BenchmarkCalculate is the full rebuild from lists of Subnet objects: parse
// every claim, build the map, arbitrate, measure.
func BenchmarkCalculate(b *testing.B) {
	for _, bp := range benchPools {
		for _, n := range []int{1_000, 10_000, 100_000} {
			_, held := benchSpace(bp.cidr, bp.length, n)
			subnets := make([]ipamv1.Subnet, n)
			for i, h := range held {
				subnets[i] = subnet(fmt.Sprintf("s-%d", i), i, "", h.String())
			}
			p := pool(bp.cidr, ptr.To(bp.length))
			serving := netip.MustParsePrefix(bp.cidr)
			b.Run(fmt.Sprintf("%s/n=%d", bp.name, n), func(b *testing.B) {
				for b.Loop() {
					f := Calculate(serving, p, subnets, nil)
					if f.Subnets != int32(n) || len(f.Conflicts) != 0 {
						b.Fatalf("unexpected figures %+v", f.Conflicts)
					}
				}
			})
		}
	}
}
