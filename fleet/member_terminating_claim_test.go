package fleet

import (
	"context"
	"net/netip"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
)

// The hub's claim of a served pool was deleted there (kept, holding its
// range, by the member's finalizer); then the member pool was restored
// from a backup: a new object with the recorded spec.cidr and no proof. It
// found the terminating claim made for the old object, said
// DelegationLost "it keeps the range for this pool", and served nothing,
// for good: nothing would ever grant it again while the claim it waits
// behind is kept for it. Found by the lifecycle checker (D4, seed
// 15795840107923631282). The claim is this member's claim for this pool's
// name and still holds the recorded range in the hub: the restored pool
// adopts it, as it adopts one that is not being deleted, and serves it.
func TestARestoredPoolServesItsTerminatingClaimsRange(t *testing.T) {
	ctx := context.Background()
	pool := &ipamv1.SubnetPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "network", Name: "pods", UID: "restored-uid"},
		Spec: ipamv1.SubnetPoolSpec{CIDR: "10.7.0.0/16", Delegation: &ipamv1.PoolDelegation{
			PoolRef: ipamv1.PoolReference{Namespace: "platform", Name: "plan"}, PrefixLength: ptr.To[int32](16)}},
	}
	key := types.NamespacedName{Namespace: "member-a", Name: claimName("member-a", client.ObjectKeyFromObject(pool))}
	t.Run("it holds the recorded range: adopted and served", func(t *testing.T) {
		hubClient := newFakeHub(t, terminatingHubClaim(key, pool.Spec.Delegation.PoolRef, "10.7.0.0/16", "old-uid"))
		r := &MemberReconciler{Hub: &Hub{Cluster: fakeHub{c: hubClient}, Namespace: "member-a"}, ClusterName: "member-a", HubTimeout: 10e9}
		st, err := r.claim(ctx, pool, key)
		if err != nil {
			t.Fatal(err)
		}
		if st.Granted.String() != "10.7.0.0/16" || st.Reason != ipamv1.ReasonDelegationLost {
			t.Errorf("state %+v: want the terminating claim's range granted, and DelegationLost", st)
		}
		var claim ipamv1.Subnet
		if err := hubClient.Get(ctx, key, &claim); err != nil {
			t.Fatalf("the claim holding the range the pool serves is gone from the hub: %v", err)
		}
		if uid := claim.Annotations[ipamv1.AnnotationMemberPoolUID]; uid != string(pool.UID) {
			t.Errorf("the claim still names member pool UID %q: the hub does not say which object it holds the range for", uid)
		}
	})

	t.Run("it holds another range: let go, to claim again", func(t *testing.T) {
		hubClient := newFakeHub(t, terminatingHubClaim(key, pool.Spec.Delegation.PoolRef, "10.9.0.0/16", "old-uid"))
		synced := ledger.New() // knows no Subnet of the pool: nothing uses it
		synced.MarkSynced()
		r := &MemberReconciler{Hub: &Hub{Cluster: fakeHub{c: hubClient}, Namespace: "member-a"}, ClusterName: "member-a", HubTimeout: 10e9, Ledger: synced}
		st, err := r.claim(ctx, pool, key)
		if err != nil {
			t.Fatal(err)
		}
		if st.Granted.IsValid() || st.Reason != ipamv1.ReasonDelegationPending {
			t.Errorf("state %+v: want nothing granted, DelegationPending", st)
		}
		var claim ipamv1.Subnet
		if err := hubClient.Get(ctx, key, &claim); err == nil {
			t.Errorf("the terminating claim holding a range this pool does not ask for is kept (finalizers %v): the pool would wait behind it for good", claim.Finalizers)
		}
	})
}

// Delegated is True only on the hub's standing grant: a pool served on a
// claim Terminating in the hub says it lost the delegation.
func TestDelegatedIsFalseWhileServedOnATerminatingClaim(t *testing.T) {
	ctx := context.Background()
	pool := &ipamv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Namespace: "network", Name: "pods", UID: "uid-pods"}}
	member := fake.NewClientBuilder().WithScheme(newFakeHub(t).Scheme()).WithObjects(pool).WithStatusSubresource(&ipamv1.SubnetPool{}).Build()
	r := &MemberReconciler{Client: member, APIReader: member}
	for _, tt := range []struct {
		reason string
		want   metav1.ConditionStatus
	}{
		{ipamv1.ReasonDelegated, metav1.ConditionTrue},
		{ipamv1.ReasonDelegationLost, metav1.ConditionFalse},
	} {
		var p ipamv1.SubnetPool
		if err := member.Get(ctx, client.ObjectKeyFromObject(pool), &p); err != nil {
			t.Fatal(err)
		}
		st := ledger.DelegationState{UID: p.UID, Granted: netip.MustParsePrefix("10.7.0.0/16"), Reason: tt.reason, Message: "m"}
		if err := r.setCondition(ctx, &p, st); err != nil {
			t.Fatal(err)
		}
		_ = member.Get(ctx, client.ObjectKeyFromObject(pool), &p)
		if c := meta.FindStatusCondition(p.Status.Conditions, ipamv1.ConditionDelegated); c == nil || c.Status != tt.want || c.Reason != tt.reason {
			t.Errorf("granted, %s: Delegated %+v, want %s", tt.reason, c, tt.want)
		}
	}
}

// terminatingHubClaim is a member pool's claim in the hub, deleted there
// and kept by the member's finalizer, holding cidr (Ready), made for the
// member pool object uid.
func terminatingHubClaim(key types.NamespacedName, hubPool ipamv1.PoolReference, cidr string, uid types.UID) *ipamv1.Subnet {
	s := &ipamv1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
			Labels:      map[string]string{ipamv1.LabelMemberCluster: "member-a"},
			Annotations: map[string]string{ipamv1.AnnotationMemberPool: "network/pods", ipamv1.AnnotationMemberPoolUID: string(uid)},
			Finalizers:  []string{ipamv1.FinalizerDelegation}, DeletionTimestamp: ptr.To(metav1.Now())},
		Spec: ipamv1.SubnetSpec{PoolRef: hubPool, PrefixLength: ptr.To[int32](16)},
	}
	s.Status.CIDR = cidr
	meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: ipamv1.ConditionReady, Status: metav1.ConditionTrue, Reason: ipamv1.ReasonAllocated, Message: "granted"})
	return s
}

// readyMemberSubnet is a Subnet of the member pool network/pods, Ready on cidr.
func readyMemberSubnet(name, cidr string) *ipamv1.Subnet {
	return &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: "network", Name: name, UID: types.UID(name + "-uid")},
		Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Namespace: "network", Name: "pods"}, PrefixLength: ptr.To[int32](24)},
		Status: ipamv1.SubnetStatus{CIDR: cidr, Conditions: []metav1.Condition{{Type: ipamv1.ConditionReady,
			Status: metav1.ConditionTrue, Reason: ipamv1.ReasonAllocated}}}}
}
