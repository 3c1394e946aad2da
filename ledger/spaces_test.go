package ledger

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// newRoot is a root pool as created: nothing granted yet.
func newRoot(namespace, name, cidr string, age int) *ipamv1.SubnetPool {
	p := rootPool(name, cidr, 24)
	p.Namespace, p.UID = namespace, types.UID("uid-"+namespace+"-"+name)
	p.CreationTimestamp = metav1.NewTime(t0.Add(time.Duration(age) * time.Second))
	p.Status = ipamv1.SubnetPoolStatus{}
	return p
}

func decideRoot(t *testing.T, l *Ledger, p *ipamv1.SubnetPool) Decision {
	t.Helper()
	d, ok := l.DecidePool(p.Namespace, p.Name, p.UID)
	if !ok {
		t.Fatalf("DecidePool(%s/%s): unknown", p.Namespace, p.Name)
	}
	return d
}

// shown is the pool as the API shows it once its grant is written.
func shown(p *ipamv1.SubnetPool, d Decision) *ipamv1.SubnetPool {
	p = p.DeepCopy()
	p.Status.CIDR = d.CIDR.String()
	return p
}

// Two root pools over one range, in two namespaces, pending together: the
// older is granted, the younger waits Overlaps without the other's name,
// and is granted when the older goes. Until the grant is written the pool
// serves nothing, so no Subnet is carved from a range it may not get.
func TestRootPoolsOfASpaceAreArbitrated(t *testing.T) {
	l, _ := newLedger()
	platform := newRoot("netops", "corp", "10.100.0.0/16", 1)
	tenant := newRoot("team-c", "mine", "10.100.0.0/24", 2)
	l.ApplyPool(tenant, Created, nil) // delivered first, created later
	l.ApplyPool(platform, Created, nil)
	l.ApplySubnet(explicit("web", "mine", "10.100.0.0/25", 3), Created, nil)

	d := decideRoot(t, l, tenant)
	if d.Reason != ipamv1.ReasonOverlaps || d.CIDR.IsValid() || !strings.Contains(d.Message, "a root pool in another namespace (10.100.0.0/16) in address space default") {
		t.Errorf("younger root: %+v", d)
	}
	dp := decideRoot(t, l, platform)
	if !dp.Ready() || !dp.Assumed || dp.CIDR.String() != "10.100.0.0/16" {
		t.Fatalf("older root: %+v", dp)
	}
	if d, ok := l.DecideSubnet(ns, "web", "uid-web"); !ok || d.Ready() {
		t.Errorf("a Subnet of the refused root: %+v", d)
	}
	// The platform's grant is written; then the platform pool goes.
	l.ApplyPool(shown(platform, dp), Updated, platform)
	l.DeletePool(shown(platform, dp))
	d = decideRoot(t, l, tenant)
	if !d.Ready() || d.CIDR.String() != "10.100.0.0/24" || !strings.Contains(d.Message, "in address space default") {
		t.Errorf("younger root after the older went: %+v", d)
	}
}

// Root pools granted before spaces were kept apart (an earlier release
// wrote both status.cidr) keep serving, and each says which other overlaps
// it, naming it only in its own namespace.
func TestOverlappingRootsFromAnEarlierReleaseKeepTheirGrants(t *testing.T) {
	l, _ := newLedger()
	a := rootPool("a", "10.0.0.0/16", 24)
	b := newRoot("team-b", "b", "10.0.0.0/24", 5)
	b.Status.CIDR = b.Spec.CIDR
	c := rootPool("c", "10.0.1.0/24", 24)
	c.Name, c.UID = "c", "uid-c"
	for _, p := range []*ipamv1.SubnetPool{a, b, c} {
		l.ApplyPool(p, Created, nil)
	}
	da := decideRoot(t, l, a)
	if !da.Ready() || !strings.Contains(da.RootOverlaps, "a root pool in another namespace (10.0.0.0/24)") || !strings.Contains(da.RootOverlaps, "SubnetPool team-a/c (10.0.1.0/24)") {
		t.Errorf("a: %+v", da)
	}
	db := decideRoot(t, l, b)
	if !db.Ready() || !strings.Contains(db.RootOverlaps, "a root pool in another namespace (10.0.0.0/16)") {
		t.Errorf("b: %+v", db)
	}
	if got := l.OverlappingRootPools()[ipamv1.DefaultAddressSpace]; got != 3 {
		t.Errorf("overlapping root pools: %d, want 3", got)
	}
	// A new root over the free part is granted; none over the held ones.
	n := newRoot(ns, "n", "10.0.2.0/24", 9)
	l.ApplyPool(n, Created, nil)
	if d := decideRoot(t, l, n); d.Ready() || d.Reason != ipamv1.ReasonOverlaps {
		t.Errorf("a new root inside a held one: %+v", d)
	}
	l.DeletePool(a)
	if d := decideRoot(t, l, n); !d.Ready() {
		t.Errorf("a new root once the range is free: %+v", d)
	}
	if d := decideRoot(t, l, b); d.RootOverlaps != "" {
		t.Errorf("b once a went: %+v", d)
	}
}

// A named space is another domain: a root there may overlap the default
// space's. It waits for its AddressSpace, which must take its namespace,
// and keeps what it holds when the AddressSpace goes.
func TestNamedAddressSpaces(t *testing.T) {
	l, _ := newLedger()
	l.ApplyPool(rootPool("corp", "10.0.0.0/16", 24), Created, nil)
	lab := newRoot(ns, "lab", "10.0.0.0/16", 1)
	lab.Spec.AddressSpace = "lab"
	l.ApplyPool(lab, Created, nil)
	if d := decideRoot(t, l, lab); d.Reason != ipamv1.ReasonAddressSpaceNotFound {
		t.Errorf("before the space: %+v", d)
	}
	space := &ipamv1.AddressSpace{ObjectMeta: metav1.ObjectMeta{Name: "lab"},
		Spec: ipamv1.AddressSpaceSpec{RootPoolNamespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"lab": "yes"}}}}
	l.ApplyAddressSpace(space, Created)
	l.ApplyNamespace(ns, map[string]string{"team": "a"}, Created)
	d := decideRoot(t, l, lab)
	if d.Reason != ipamv1.ReasonNotAllowed || !strings.Contains(d.Message, "it lacks lab=yes") {
		t.Errorf("namespace without the label: %+v", d)
	}
	l.ApplyNamespace(ns, map[string]string{"team": "a", "lab": "yes"}, Updated)
	d = decideRoot(t, l, lab)
	if !d.Ready() || d.CIDR.String() != "10.0.0.0/16" || d.RootOverlaps != "" {
		t.Fatalf("in its own space: %+v", d)
	}
	l.ApplyPool(shown(lab, d), Updated, lab)
	l.DeleteAddressSpace(space)
	if d := decideRoot(t, l, shown(lab, d)); !d.Ready() {
		t.Errorf("a held root once its space went: %+v", d)
	}
}

// The default space's rules come from the flag: a root pool from another
// namespace is not granted even if admission was bypassed; one granted
// before the rule keeps its range.
func TestDefaultSpaceRules(t *testing.T) {
	l, _ := newLedger()
	l.SetDefaultSpaceRules(labels.SelectorFromSet(labels.Set{ipamv1.LabelRootPools: "true"}))
	l.ApplyNamespace(ns, nil, Created)
	held := rootPool("held", "10.0.0.0/16", 24)
	l.ApplyPool(held, Created, nil)
	if d := decideRoot(t, l, held); !d.Ready() {
		t.Errorf("a root granted before the rule: %+v", d)
	}
	fresh := newRoot(ns, "fresh", "10.1.0.0/16", 1)
	l.ApplyPool(fresh, Created, nil)
	d := decideRoot(t, l, fresh)
	if d.Reason != ipamv1.ReasonNotAllowed || !strings.Contains(d.Message, "it lacks ipam.subnet-operator.io/root-pools=true") {
		t.Errorf("a new root without the label: %+v", d)
	}
	if v := l.Space(ipamv1.DefaultAddressSpace, ns); v.Allowed || len(v.Missing) != 1 {
		t.Errorf("space view: %+v", v)
	}
}
