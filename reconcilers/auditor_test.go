package reconcilers

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
)

func readySubnet(ns, name, pool, cidr string) ledger.ReadySubnet {
	return ledger.ReadySubnet{Namespace: ns, Name: name, Pool: ipamv1.PoolReference{Namespace: ns, Name: pool}, CIDR: netip.MustParsePrefix(cidr)}
}

func TestAuditCheck(t *testing.T) {
	pool := ipamv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p"},
		Spec: ipamv1.SubnetPoolSpec{CIDR: "10.0.0.0/16", Reserved: []string{"10.0.127.0/24"}}, Status: ipamv1.SubnetPoolStatus{CIDR: "10.0.0.0/16"}}
	granted := ipamv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "child"},
		Spec: ipamv1.SubnetPoolSpec{CIDR: "10.0.128.0/17", ParentRef: &ipamv1.PoolReference{Name: "p"}}, Status: ipamv1.SubnetPoolStatus{CIDR: "10.0.128.0/17"}}
	subnets := []ledger.ReadySubnet{
		readySubnet("a", "big", "p", "10.0.0.0/22"),
		readySubnet("a", "inside-big", "p", "10.0.2.0/24"), // overlaps big
		readySubnet("a", "fine", "p", "10.0.8.0/24"),
		readySubnet("a", "adjacent", "p", "10.0.9.0/24"), // adjacent: fine
		readySubnet("a", "in-child", "p", "10.0.200.0/24"),
		readySubnet("a", "reserved", "p", "10.0.127.0/25"),
		readySubnet("a", "far", "p", "192.168.0.0/24"),
		readySubnet("a", "orphan", "gone", "10.0.0.0/24"),
		readySubnet("b", "other-namespace", "p", "10.0.0.0/22"), // pool b/p does not exist
	}
	var got []string
	for _, f := range Check(slices.Values(subnets), []ipamv1.SubnetPool{pool, granted}) {
		got = append(got, f.Type+": "+f.Message)
	}
	want := []string{
		"outside: Subnet a/far holds 192.168.0.0/24, which lies outside SubnetPool a/p (10.0.0.0/16)",
		"overlap: Subnet a/in-child holds 10.0.200.0/24, which overlaps SubnetPool a/child (10.0.128.0/17), also Ready",
		"overlap: Subnet a/inside-big holds 10.0.2.0/24, which overlaps Subnet a/big (10.0.0.0/22), also Ready",
		"outside: Subnet a/orphan holds 10.0.0.0/24 but its pool a/gone does not exist",
		"outside: Subnet a/reserved holds 10.0.127.0/25, which overlaps reserved range 10.0.127.0/24 of SubnetPool a/p",
		"outside: Subnet b/other-namespace holds 10.0.0.0/22 but its pool b/p does not exist",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
}

// A pool that reports claims granted before its last change (ClaimsOutside)
// has told its users already: those claims are not violations. Overlaps are.
func TestAuditCheckTrustsAReportedClaimsOutside(t *testing.T) {
	pool := ipamv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p"},
		Spec: ipamv1.SubnetPoolSpec{CIDR: "10.0.0.0/24", Reserved: []string{"10.0.0.0/26"}},
		Status: ipamv1.SubnetPoolStatus{CIDR: "10.0.0.0/24", Conditions: []metav1.Condition{
			{Type: ipamv1.ConditionReady, Status: metav1.ConditionFalse, Reason: ipamv1.ReasonClaimsOutside}}}}
	subnets := []ledger.ReadySubnet{
		readySubnet("a", "raced", "p", "10.0.0.0/26"),
		readySubnet("a", "twin", "p", "10.0.0.0/26"),
	}
	var got []string
	for _, f := range Check(slices.Values(subnets), []ipamv1.SubnetPool{pool}) {
		got = append(got, f.Type+": "+f.Message)
	}
	want := []string{"overlap: Subnet a/twin holds 10.0.0.0/26, which overlaps Subnet a/raced (10.0.0.0/26), also Ready"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
}

// Root pools of one address space are checked against each other: a pair
// that says it overlaps (granted by an earlier release) is counted as
// known, a pair that does not is an overlap.
func TestAuditChecksRootPoolsOfASpace(t *testing.T) {
	root := func(ns, name, cidr, space string, reported bool) ipamv1.SubnetPool {
		p := ipamv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: ipamv1.SubnetPoolSpec{CIDR: cidr, AddressSpace: space}, Status: ipamv1.SubnetPoolStatus{CIDR: cidr}}
		if reported {
			p.Status.Conditions = []metav1.Condition{{Type: ipamv1.ConditionAddressSpaceOverlap, Status: metav1.ConditionTrue, Reason: ipamv1.ReasonRootPoolsOverlap}}
		}
		return p
	}
	pools := []ipamv1.SubnetPool{
		root("a", "corp", "10.0.0.0/16", "", true),
		root("b", "mine", "10.0.1.0/24", "", true),
		root("c", "silent", "10.1.0.0/16", "", false),
		root("d", "bug", "10.1.0.0/24", "", false),
		root("e", "lab", "10.0.0.0/16", "lab", false), // another space
	}
	var got []string
	for _, f := range Check(func(func(ledger.ReadySubnet) bool) {}, pools) {
		got = append(got, f.Type+" "+f.Object.GetNamespace()+"/"+f.Object.GetName())
	}
	want := []string{"root_overlap b/mine", "overlap d/bug"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
}
