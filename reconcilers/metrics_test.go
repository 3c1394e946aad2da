package reconcilers

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
)

// gatherPools scrapes a pool collector and returns the samples of the
// named metrics as "name{label=value,...} value", sorted.
func gatherPools(t *testing.T, l *ledger.Ledger, names ...string) []string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(&poolCollector{ledger: l})
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	wanted := map[string]bool{}
	for _, n := range names {
		wanted[n] = true
	}
	var out []string
	for _, f := range families {
		if !wanted[f.GetName()] {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, lp.GetName()+"="+lp.GetValue())
			}
			out = append(out, fmt.Sprintf("%s{%s} %g", f.GetName(), strings.Join(labels, ","), m.GetGauge().GetValue()))
		}
	}
	sort.Strings(out)
	return out
}

// A root carved into team pools exports the addresses carved into them,
// and no Subnet share (nothing is left to Subnets); a pool partly carved
// reports its Subnets' share of the rest; each pool says its family.
func TestPoolMetricsSeparateCarvedSpace(t *testing.T) {
	l := ledger.New()
	l.MarkSynced()
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: "netops", Name: name, UID: types.UID("uid-" + name)}
	}
	root := func(name, cidr string) *ipamv1.SubnetPool {
		return &ipamv1.SubnetPool{ObjectMeta: meta(name), Spec: ipamv1.SubnetPoolSpec{CIDR: cidr}, Status: ipamv1.SubnetPoolStatus{CIDR: cidr}}
	}
	child := func(name, parent, cidr string) *ipamv1.SubnetPool {
		p := root(name, cidr)
		p.Spec.ParentRef = &ipamv1.PoolReference{Namespace: "netops", Name: parent}
		return p
	}
	for _, p := range []*ipamv1.SubnetPool{
		root("corp", "10.0.0.0/16"), child("team-a", "corp", "10.0.0.0/17"), child("team-b", "corp", "10.0.128.0/17"),
		root("dc", "10.1.0.0/24"), child("rack", "dc", "10.1.0.0/25"),
		root("v6", "2001:db8::/48"),
	} {
		l.ApplyPool(p, ledger.Created, nil)
	}
	held := &ipamv1.Subnet{ObjectMeta: meta("web"), Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Namespace: "netops", Name: "dc"}, CIDR: "10.1.0.128/26"},
		Status: ipamv1.SubnetStatus{CIDR: "10.1.0.128/26", Conditions: []metav1.Condition{{Type: ipamv1.ConditionReady, Status: metav1.ConditionTrue, Reason: ipamv1.ReasonAllocated}}}}
	l.ApplySubnet(held, ledger.Created, nil)

	got := gatherPools(t, l, "subnet_operator_pool_child_pool_addresses", "subnet_operator_pool_subnet_utilization_ratio", "subnet_operator_pool_info")
	want := []string{
		"subnet_operator_pool_child_pool_addresses{namespace=netops,pool=corp} 65536",
		"subnet_operator_pool_child_pool_addresses{namespace=netops,pool=dc} 128",
		"subnet_operator_pool_child_pool_addresses{namespace=netops,pool=rack} 0",
		"subnet_operator_pool_child_pool_addresses{namespace=netops,pool=team-a} 0",
		"subnet_operator_pool_child_pool_addresses{namespace=netops,pool=team-b} 0",
		"subnet_operator_pool_child_pool_addresses{namespace=netops,pool=v6} 0",
		"subnet_operator_pool_info{alerts=on,family=IPv4,namespace=netops,parent=,parent_namespace=,pool=corp} 1",
		"subnet_operator_pool_info{alerts=on,family=IPv4,namespace=netops,parent=,parent_namespace=,pool=dc} 1",
		"subnet_operator_pool_info{alerts=on,family=IPv4,namespace=netops,parent=corp,parent_namespace=netops,pool=team-a} 1",
		"subnet_operator_pool_info{alerts=on,family=IPv4,namespace=netops,parent=corp,parent_namespace=netops,pool=team-b} 1",
		"subnet_operator_pool_info{alerts=on,family=IPv4,namespace=netops,parent=dc,parent_namespace=netops,pool=rack} 1",
		"subnet_operator_pool_info{alerts=on,family=IPv6,namespace=netops,parent=,parent_namespace=,pool=v6} 1",
		// corp is carved whole: no share. dc: web holds 64 of the 128 not carved.
		"subnet_operator_pool_subnet_utilization_ratio{namespace=netops,pool=dc} 0.5",
		"subnet_operator_pool_subnet_utilization_ratio{namespace=netops,pool=rack} 0",
		"subnet_operator_pool_subnet_utilization_ratio{namespace=netops,pool=team-a} 0",
		"subnet_operator_pool_subnet_utilization_ratio{namespace=netops,pool=team-b} 0",
		"subnet_operator_pool_subnet_utilization_ratio{namespace=netops,pool=v6} 0",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("pool series (-want +got):\n%s", d)
	}
}
