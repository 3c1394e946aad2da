package webhooks

import (
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
)

func hintPool(namespace, name, cidr string, from ipamv1.FromNamespaces) *ipamv1.SubnetPool {
	p := &ipamv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("uid-" + namespace + "-" + name)}, Spec: ipamv1.SubnetPoolSpec{CIDR: cidr}}
	if from != "" {
		p.Spec.AllowedNamespaces = &ipamv1.AllowedNamespaces{From: from}
	}
	return p
}

// The pool a reference that names none most likely meant: the same name
// where the Subnet may use it, or a name a typo away; never a pool the
// Subnet's namespace may not use.
func TestSuggestPool(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pools []*ipamv1.SubnetPool
		ref   ipamv1.PoolReference
		want  string
	}{
		{"forgot the namespace: the pool elsewhere allows team-a",
			[]*ipamv1.SubnetPool{hintPool("netops", "corp", "10.0.0.0/8", ipamv1.FromAll)},
			ipamv1.PoolReference{Namespace: ns, Name: "corp"}, "netops/corp"},
		{"forgot the namespace: the pool elsewhere does not allow team-a, so it is not disclosed",
			[]*ipamv1.SubnetPool{hintPool("netops", "corp", "10.0.0.0/8", "")},
			ipamv1.PoolReference{Namespace: ns, Name: "corp"}, ""},
		{"a typo in the Subnet's own namespace",
			[]*ipamv1.SubnetPool{hintPool(ns, "payments", "10.1.0.0/16", ""), hintPool(ns, "platform", "10.2.0.0/16", "")},
			ipamv1.PoolReference{Namespace: ns, Name: "paymnets"}, ns + "/payments"},
		{"a typo in the referenced namespace, which allows team-a",
			[]*ipamv1.SubnetPool{hintPool("netops", "corp", "10.0.0.0/8", ipamv1.FromAll)},
			ipamv1.PoolReference{Namespace: "netops", Name: "copr"}, "netops/corp"},
		{"a typo in the referenced namespace, which does not allow team-a",
			[]*ipamv1.SubnetPool{hintPool("netops", "corp", "10.0.0.0/8", "")},
			ipamv1.PoolReference{Namespace: "netops", Name: "copr"}, ""},
		{"nothing close",
			[]*ipamv1.SubnetPool{hintPool(ns, "payments", "10.1.0.0/16", "")},
			ipamv1.PoolReference{Namespace: ns, Name: "storage"}, ""},
		{"the own namespace's pool first, then the closest",
			[]*ipamv1.SubnetPool{hintPool("netops", "corp", "10.0.0.0/8", ipamv1.FromAll), hintPool(ns, "corp", "172.16.0.0/12", "")},
			ipamv1.PoolReference{Namespace: "other", Name: "corp"}, ns + "/corp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := ledger.New()
			l.MarkSynced()
			hints := PoolHintsFor(l) // before the pools: they arrive as events
			for _, p := range tc.pools {
				l.ApplyPool(p, ledger.Created, nil)
			}
			if got := hints.SuggestPool(tc.ref, ns); got != tc.want {
				t.Errorf("SuggestPool(%s) from %s = %q, want %q", tc.ref, ns, got, tc.want)
			}
		})
	}
}

// Pools the ledger knew before the hints were first asked for count too.
func TestPoolHintsReadKnownPools(t *testing.T) {
	l := ledger.New()
	l.MarkSynced()
	l.ApplyPool(hintPool("netops", "corp", "10.0.0.0/8", ipamv1.FromAll), ledger.Created, nil)
	if got := PoolHintsFor(l).SuggestPool(ipamv1.PoolReference{Namespace: ns, Name: "corp"}, ns); got != "netops/corp" {
		t.Errorf("got %q, want netops/corp", got)
	}
}

// The create warning names the likely pool and says what to do.
func TestCreateWarningSuggestsPool(t *testing.T) {
	w := newWorld(hintPool("netops", "corp", "10.0.0.0/8", ipamv1.FromAll))
	s := &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Namespace: ns, Name: "corp"}, PrefixLength: new(int32(24))}}
	warnings, err := w.subnetValidator().ValidateCreate(withOp("CREATE"), s)
	if err != nil {
		t.Fatal(err)
	}
	want := "SubnetPool team-a/corp does not exist yet; the Subnet waits (Ready=False, reason PoolNotFound) until it is created. " +
		"Did you mean netops/corp? spec.poolRef cannot change: delete the Subnet and create it again with poolRef netops/corp"
	if len(warnings) != 1 || warnings[0] != want {
		t.Errorf("warnings %q, want [%q]", warnings, want)
	}
}

// A pool created in another namespace a moment before the Subnet that
// meant it (CI failed TestSubnetWaitingForAMissingPoolNamesTheLikelyPool
// so): the API server stores it, the informer has not delivered it yet.
// The barrier before a not-found warning covered only the Subnet's own
// namespace, so the hint was missing. The warning now catches up across
// namespaces first.
func TestCreateWarningSuggestsAPoolCreatedAMomentAgoElsewhere(t *testing.T) {
	w := newWorld()
	corp := hintPool("netops", "corp", "10.0.0.0/8", ipamv1.FromAll)
	w.api.add(corp) // stored and returned to its client; not delivered yet
	// The informer delivers it only once a read covers its namespace.
	var deliver sync.Once
	w.api.onRead = func(namespace string) {
		if namespace == "" || namespace == corp.Namespace {
			deliver.Do(func() { w.ledger.ApplyPool(corp, ledger.Created, nil) })
		}
	}
	s := &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Namespace: ns, Name: "corp"}, PrefixLength: new(int32(24))}}
	warnings, err := w.subnetValidator().ValidateCreate(withOp("CREATE"), s)
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "Did you mean netops/corp?") {
		t.Errorf("warnings %q: no hint of the pool netops/corp, stored before the Subnet's create", warnings)
	}
}
