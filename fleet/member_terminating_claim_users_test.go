package fleet

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
)

// Found by review of e02ff68. A member tenant with 'edit' removed both finalizers of
// its delegated pool network/pods, granted 10.7.0.0/16, while Subnet web,
// carved from it, stays Ready in the member (release, which waits for the
// pool's users, never ran). The claim stays in the hub holding 10.7.0.0/16.
// The tenant creates network/pods again, asking for another range (or from
// another hub pool); the member says "delete the Subnet in the hub to claim
// again", and the hub admin does. terminatingClaim finds the new object not
// holding its range and the claim showing another one, and drops the
// member's finalizer without asking the ledger whether anything in the
// member still uses the range the claim holds (release does ask): the hub
// frees 10.7.0.0/16 for another member while web is Ready here. At b91cf6a
// a pool with a spec.cidr kept the terminating claim.
func TestATerminatingClaimIsNotLetGoWhileSubnetsStillUseItsRange(t *testing.T) {
	for name, spec := range map[string]ipamv1.SubnetPoolSpec{
		"another range": {CIDR: "10.9.0.0/16", Delegation: &ipamv1.PoolDelegation{
			PoolRef: ipamv1.PoolReference{Namespace: "platform", Name: "plan"}, PrefixLength: ptr.To[int32](16)}},
		"another hub pool": {CIDR: "10.9.0.0/16", Delegation: &ipamv1.PoolDelegation{
			PoolRef: ipamv1.PoolReference{Namespace: "platform", Name: "other"}, PrefixLength: ptr.To[int32](16)}},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			pool := &ipamv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Namespace: "network", Name: "pods", UID: "new-uid"}, Spec: spec}
			key := types.NamespacedName{Namespace: "member-a", Name: claimName("member-a", client.ObjectKeyFromObject(pool))}
			claim := terminatingHubClaim(key, ipamv1.PoolReference{Namespace: "platform", Name: "plan"}, "10.7.0.0/16", "old-uid")
			hubClient := newFakeHub(t, claim)

			l := ledger.New()
			l.MarkSynced()
			l.ApplyPool(pool.DeepCopy(), ledger.Created, nil)
			web := readyMemberSubnet("web", "10.7.0.0/24")
			l.ApplySubnet(web, ledger.Created, nil)
			if _, subnets, _ := l.Users("network", "pods", 0); subnets != 1 {
				t.Fatalf("the ledger sees %d Subnets using the pool, want 1", subnets)
			}

			r := &MemberReconciler{Hub: &Hub{Cluster: fakeHub{c: hubClient}, Namespace: "member-a"}, ClusterName: "member-a", HubTimeout: 10e9, Ledger: l}
			_, _ = r.claim(ctx, pool, key)
			var got ipamv1.Subnet
			if err := hubClient.Get(ctx, key, &got); err != nil {
				t.Fatalf("the terminating claim holding 10.7.0.0/16 in the hub was let go while Subnet web (10.7.0.0/24) is Ready in the member: %v", err)
			}
		})
	}
}

// The fix's other side: Subnets of the pool that hold nothing of the
// terminating claim's range (restored with the pool, in its own spec.cidr)
// do not keep the claim: it is let go, to claim again (e02ff68's case).
func TestATerminatingClaimIsLetGoWhenNoSubnetHoldsItsRange(t *testing.T) {
	ctx := context.Background()
	pool := &ipamv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Namespace: "network", Name: "pods", UID: "new-uid"},
		Spec: ipamv1.SubnetPoolSpec{CIDR: "10.9.0.0/16", Delegation: &ipamv1.PoolDelegation{
			PoolRef: ipamv1.PoolReference{Namespace: "platform", Name: "plan"}, PrefixLength: ptr.To[int32](16)}}}
	key := types.NamespacedName{Namespace: "member-a", Name: claimName("member-a", client.ObjectKeyFromObject(pool))}
	claim := terminatingHubClaim(key, pool.Spec.Delegation.PoolRef, "10.7.0.0/16", "old-uid")
	hubClient := newFakeHub(t, claim)
	l := ledger.New()
	l.MarkSynced()
	l.ApplyPool(pool.DeepCopy(), ledger.Created, nil)
	l.ApplySubnet(readyMemberSubnet("web", "10.9.1.0/24"), ledger.Created, nil)
	r := &MemberReconciler{Hub: &Hub{Cluster: fakeHub{c: hubClient}, Namespace: "member-a"}, ClusterName: "member-a", HubTimeout: 10e9, Ledger: l}
	if _, err := r.claim(ctx, pool, key); err != nil {
		t.Fatal(err)
	}
	var got ipamv1.Subnet
	if err := hubClient.Get(ctx, key, &got); err == nil {
		t.Errorf("the terminating claim, of which nothing here holds a range, is kept (finalizers %v): the pool would wait behind it for good", got.Finalizers)
	}
}
