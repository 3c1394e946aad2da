package fleet

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
)

// The member released its claim in the hub (freeing the range
// there for another member) as soon as the pool being deleted lacks the
// pool-protection finalizer. A member tenant with 'edit' may patch
// finalizers: it deletes its delegated pool, which waits for the Subnets
// carved from it, and removes only pool-protection. The claim goes, the hub
// may grant the range to another member, while the Subnets stay Ready
// here: two holders of one range across the fleet.
func TestAClaimIsNotReleasedWhileSubnetsStillUseThePool(t *testing.T) {
	ctx := context.Background()
	hubClient := newFakeHub(t)
	l := ledger.New()
	l.MarkSynced()
	r := &MemberReconciler{Hub: &Hub{Cluster: fakeHub{c: hubClient}, Namespace: "member-a"}, ClusterName: "member-a", HubTimeout: 10e9, Ledger: l}
	pool := &ipamv1.SubnetPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "network", Name: "pods", UID: "pool-uid"},
		Spec: ipamv1.SubnetPoolSpec{CIDR: "10.7.0.0/16", DefaultPrefixLength: ptr.To[int32](24), Delegation: &ipamv1.PoolDelegation{
			PoolRef: ipamv1.PoolReference{Namespace: "platform", Name: "plan"}}},
		Status: ipamv1.SubnetPoolStatus{CIDR: "10.7.0.0/16", GrantedToUID: "pool-uid"},
	}
	key := types.NamespacedName{Namespace: "member-a", Name: claimName("member-a", client.ObjectKeyFromObject(pool))}
	if _, err := r.claim(ctx, pool, key); err != nil {
		t.Fatal(err)
	}
	// A Subnet carved from it, Ready, in the member.
	web := &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: "network", Name: "web", UID: "web-uid"},
		Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Namespace: "network", Name: "pods"}, PrefixLength: ptr.To[int32](24)},
		Status: ipamv1.SubnetStatus{CIDR: "10.7.0.0/24", Conditions: []metav1.Condition{{Type: ipamv1.ConditionReady,
			Status: metav1.ConditionTrue, Reason: ipamv1.ReasonAllocated}}}}
	l.ApplyPool(pool, ledger.Created, nil)
	l.ApplySubnet(web, ledger.Created, nil)

	// The tenant deletes the pool and removes pool-protection by hand.
	deleting := pool.DeepCopy()
	deleting.DeletionTimestamp = ptr.To(metav1.Now())
	deleting.Finalizers = []string{ipamv1.FinalizerDelegation}
	l.ApplyPool(deleting, ledger.Updated, pool)
	if _, subnets, _ := l.Users("network", "pods", 0); subnets != 1 {
		t.Fatalf("the ledger sees %d Subnets using the pool, want 1", subnets)
	}
	r.Client = fake.NewClientBuilder().WithScheme(hubClient.Scheme()).WithObjects(deleting).Build()
	_ = r.release(ctx, deleting, key)

	var claim ipamv1.Subnet
	if err := hubClient.Get(ctx, key, &claim); err != nil {
		t.Fatalf("the claim in the hub was released while a Subnet carved from its range is Ready in the member: %v", err)
	}
}
