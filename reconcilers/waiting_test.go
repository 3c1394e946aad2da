package reconcilers

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
	"github.com/subnet-operator/subnet-operator/webhooks"
)

// A Subnet whose poolRef forgot the namespace (`poolRef: {name: corp}` from
// team-a while netops/corp allows team-a) waits with a condition that names
// the pool likely meant and says what to do, one Warning event, and a
// gauge an alert can read; once the pool it names appears, it is
// allocated and leaves the gauge.
func TestSubnetWaitingForAMissingPoolSaysWhy(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, interceptor.Funcs{})
	corp := &ipamv1.SubnetPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "netops", Name: "corp", UID: "uid-corp", CreationTimestamp: created, Generation: 1},
		Spec: ipamv1.SubnetPoolSpec{CIDR: "10.1.0.0/16", DefaultPrefixLength: ptr.To[int32](24),
			AllowedNamespaces: &ipamv1.AllowedNamespaces{From: ipamv1.FromAll}},
		Status: ipamv1.SubnetPoolStatus{CIDR: "10.1.0.0/16"},
	}
	f.ledger.ApplyPool(corp, ledger.Created, nil)
	lost := &ipamv1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "lost", UID: "uid-lost", CreationTimestamp: created, Generation: 1},
		Spec:       ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Namespace: "team-a", Name: "corp"}, PrefixLength: ptr.To[int32](26)},
	}
	if err := f.client.Create(ctx, lost); err != nil {
		t.Fatal(err)
	}
	f.ledger.ApplySubnet(lost, ledger.Created, nil)
	r := f.subnetReconciler()
	r.hints = webhooks.PoolHintsFor(f.ledger)

	reconcileAndRead := func() *metav1.Condition {
		t.Helper()
		if _, err := r.Reconcile(ctx, reqFor(lost)); err != nil {
			t.Fatal(err)
		}
		var got ipamv1.Subnet
		if err := f.client.Get(ctx, client.ObjectKeyFromObject(lost), &got); err != nil {
			t.Fatal(err)
		}
		f.ledger.ApplySubnet(&got, ledger.Updated, nil) // as the feed delivers our write
		return meta.FindStatusCondition(got.Status.Conditions, ipamv1.ConditionReady)
	}

	ready := reconcileAndRead()
	want := "SubnetPool team-a/corp does not exist; waiting for it to be created. Did you mean netops/corp? " +
		"spec.poolRef cannot change: delete the Subnet and create it again with poolRef netops/corp"
	if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != ipamv1.ReasonPoolNotFound || ready.Message != want {
		t.Fatalf("Ready %+v\nwant False, PoolNotFound, %q", ready, want)
	}
	if e := <-f.recorder.Events; !strings.HasPrefix(e, "Warning PoolNotFound ") || !strings.Contains(e, "Did you mean netops/corp?") {
		t.Errorf("event %q, want a Warning PoolNotFound naming netops/corp", e)
	}
	gauge := `
# HELP subnet_operator_subnets_pool_not_found Subnets whose spec.poolRef names no SubnetPool (Ready=False, reason PoolNotFound), by namespace. Their condition names the pool likely meant.
# TYPE subnet_operator_subnets_pool_not_found gauge
subnet_operator_subnets_pool_not_found{namespace="team-a"} 1
`
	if err := testutil.CollectAndCompare(waitingCollector{&r.waits}, strings.NewReader(gauge)); err != nil {
		t.Error(err)
	}

	// Reconciled again (a wake-up, a resync): no second event.
	reconcileAndRead()
	select {
	case e := <-f.recorder.Events:
		t.Errorf("a second event while the reason stayed PoolNotFound: %q", e)
	default:
	}

	// The pool it names appears: allocated, and no longer counted.
	pool := &ipamv1.SubnetPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "corp", UID: "uid-team-a-corp", CreationTimestamp: created, Generation: 1},
		Spec:       ipamv1.SubnetPoolSpec{CIDR: "10.2.0.0/24"},
		Status:     ipamv1.SubnetPoolStatus{CIDR: "10.2.0.0/24"},
	}
	f.ledger.ApplyPool(pool, ledger.Created, nil)
	if ready := reconcileAndRead(); ready == nil || ready.Reason != ipamv1.ReasonAllocated {
		t.Fatalf("Ready %+v once the pool exists, want Allocated", ready)
	}
	if n := testutil.CollectAndCount(waitingCollector{&r.waits}); n != 0 {
		t.Errorf("%d series once no Subnet waits, want none", n)
	}
}

// A deleted Subnet leaves the gauge (deletes do not requeue it).
func TestPoolWaitsForgetDeletedSubnets(t *testing.T) {
	var w poolWaits
	w.set("team-a", "lost", true)
	w.set("team-b", "typo", true)
	w.forget("team-a", "lost")
	w.set("team-b", "typo", true)
	want := `
# HELP subnet_operator_subnets_pool_not_found Subnets whose spec.poolRef names no SubnetPool (Ready=False, reason PoolNotFound), by namespace. Their condition names the pool likely meant.
# TYPE subnet_operator_subnets_pool_not_found gauge
subnet_operator_subnets_pool_not_found{namespace="team-b"} 1
`
	if err := testutil.CollectAndCompare(waitingCollector{&w}, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
