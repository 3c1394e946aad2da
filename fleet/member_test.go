package fleet

import (
	"context"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
)

// fakeHub is a hub cluster whose client and API reader are one fake client.
type fakeHub struct {
	cluster.Cluster
	c client.Client
}

func (h fakeHub) GetClient() client.Client    { return h.c }
func (h fakeHub) GetAPIReader() client.Reader { return h.c }
func (h fakeHub) GetScheme() *runtime.Scheme  { return h.c.Scheme() }

func newFakeHub(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := ipamv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(&ipamv1.Subnet{}).Build()
}

// A member's claim deleted in the hub keeps holding its range there while
// the member pool may serve it (the member's finalizer), whatever the
// member does meanwhile; the member lets it go when the pool is deleted.
func TestAClaimDeletedInTheHubStaysWhileThePoolServesIt(t *testing.T) {
	ctx := context.Background()
	hubClient := newFakeHub(t)
	synced := ledger.New() // knows no Subnet of the pool: nothing uses it
	synced.MarkSynced()
	r := &MemberReconciler{Hub: &Hub{Cluster: fakeHub{c: hubClient}, Namespace: "member-a"}, ClusterName: "member-a", HubTimeout: 10e9, Ledger: synced}
	pool := &ipamv1.SubnetPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "network", Name: "pods", UID: "pool-uid"},
		Spec: ipamv1.SubnetPoolSpec{CIDR: "10.7.0.0/16", Delegation: &ipamv1.PoolDelegation{
			PoolRef: ipamv1.PoolReference{Namespace: "platform", Name: "plan"}}},
	}
	// It serves its range, granted to this object.
	pool.Status.CIDR = pool.Spec.CIDR
	pool.Status.GrantedToUID = pool.UID
	key := types.NamespacedName{Namespace: "member-a", Name: claimName("member-a", client.ObjectKeyFromObject(pool))}
	if _, err := r.claim(ctx, pool, key); err != nil {
		t.Fatal(err)
	}
	var claim ipamv1.Subnet
	if err := hubClient.Get(ctx, key, &claim); err != nil {
		t.Fatal(err)
	}
	if err := hubClient.Delete(ctx, &claim); err != nil {
		t.Fatal(err)
	}
	if err := hubClient.Get(ctx, key, &claim); err != nil {
		t.Fatalf("the claim deleted in the hub is gone (%v): its range is free there while the member serves it", err)
	}
	st, err := r.claim(ctx, pool, key)
	if err != nil {
		t.Fatal(err)
	}
	if st.Reason != ipamv1.ReasonDelegationLost {
		t.Errorf("state %+v, want %s", st, ipamv1.ReasonDelegationLost)
	}
	if err := hubClient.Get(ctx, key, &claim); err != nil {
		t.Fatalf("the member let its terminating claim go while serving its range: %v", err)
	}

	// The pool deleted, holding nothing: the claim is released.
	pool.DeletionTimestamp = ptr.To(metav1.Now())
	pool.Finalizers = []string{ipamv1.FinalizerDelegation}
	member := fake.NewClientBuilder().WithScheme(hubClient.Scheme()).WithObjects(pool).Build()
	r.Client = member
	if err := r.release(ctx, pool, key); err != nil {
		t.Fatal(err)
	}
	if err := hubClient.Get(ctx, key, &claim); !apierrors.IsNotFound(err) {
		t.Fatalf("the claim of a deleted pool is still in the hub: %v", err)
	}
}

// A claim found in the hub under this pool's name but made for another hub
// pool (left behind by an earlier pool of that name whose finalizer was
// removed by hand, or restored from another backup) is not this pool's
// grant: a pool delegated from platform/plan must not serve a range of
// platform/other.
func TestAClaimOfAnotherHubPoolIsNotAdopted(t *testing.T) {
	pool := &ipamv1.SubnetPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "network", Name: "pods", UID: "new-uid"},
		Spec: ipamv1.SubnetPoolSpec{Delegation: &ipamv1.PoolDelegation{
			PoolRef: ipamv1.PoolReference{Namespace: "platform", Name: "plan"}, PrefixLength: ptr.To[int32](16)}},
	}
	key := types.NamespacedName{Namespace: "member-a", Name: claimName("member-a", client.ObjectKeyFromObject(pool))}
	stale := &ipamv1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
			Labels:      map[string]string{ipamv1.LabelMemberCluster: "member-a"},
			Annotations: map[string]string{ipamv1.AnnotationMemberPool: "network/pods", ipamv1.AnnotationMemberPoolUID: "old-uid"}},
		Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Namespace: "platform", Name: "other"}, PrefixLength: ptr.To[int32](16)},
	}
	stale.Status.CIDR = "10.9.0.0/16"
	meta.SetStatusCondition(&stale.Status.Conditions, metav1.Condition{Type: ipamv1.ConditionReady, Status: metav1.ConditionTrue, Reason: ipamv1.ReasonAvailable, Message: "granted"})
	hubClient := newFakeHub(t, stale)
	r := &MemberReconciler{Hub: &Hub{Cluster: fakeHub{c: hubClient}, Namespace: "member-a"}, ClusterName: "member-a", HubTimeout: 10e9}

	st, err := r.claim(context.Background(), pool, key)
	if err != nil {
		t.Fatal(err)
	}
	if st.Granted.IsValid() {
		t.Fatalf("the pool delegated from platform/plan is granted %s, which the hub granted from platform/other", st.Granted)
	}
	if st.Reason != ipamv1.ReasonDelegationPending || !strings.Contains(st.Message, "platform/other") {
		t.Errorf("state %+v does not say the claim is of another hub pool", st)
	}
}

// A namespace whose address space takes no root pools from it cannot make
// the member claim ranges in the hub: a delegated pool is a root pool of
// its space, and without the space's consent it would only drain the hub's
// plan (the webhook admits a delegated pool without a range unchecked
// against its space, and with the webhooks bypassed nothing checks it).
func TestNoHubClaimForANamespaceItsSpaceRefuses(t *testing.T) {
	ctx := context.Background()
	hubClient := newFakeHub(t)
	l := ledger.New()
	l.ApplyAddressSpace(&ipamv1.AddressSpace{ObjectMeta: metav1.ObjectMeta{Name: "lab"},
		Spec: ipamv1.AddressSpaceSpec{RootPoolNamespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"lab": "yes"}}}}, ledger.Created)
	l.ApplyNamespace("tenant", map[string]string{"team": "a"}, ledger.Created)
	r := &MemberReconciler{Ledger: l, Hub: &Hub{Cluster: fakeHub{c: hubClient}, Namespace: "member-a"}, ClusterName: "member-a", HubTimeout: 10e9}
	for _, space := range []string{"lab", "nowhere"} {
		pool := &ipamv1.SubnetPool{
			ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "drain-" + space, UID: types.UID("uid-" + space)},
			Spec: ipamv1.SubnetPoolSpec{AddressSpace: space, Delegation: &ipamv1.PoolDelegation{
				PoolRef: ipamv1.PoolReference{Namespace: "platform", Name: "plan"}, PrefixLength: ptr.To[int32](16)}},
		}
		key := types.NamespacedName{Namespace: "member-a", Name: claimName("member-a", client.ObjectKeyFromObject(pool))}
		st, _ := r.claim(ctx, pool, key)
		if err := hubClient.Get(ctx, key, &ipamv1.Subnet{}); !apierrors.IsNotFound(err) {
			t.Errorf("space %s: a claim in the hub for a pool its space refuses (%v)", space, err)
		}
		if st.Granted.IsValid() || st.Reason != ipamv1.ReasonDelegationPending || !strings.Contains(st.Message, space) {
			t.Errorf("space %s: state %+v does not say the space refuses the pool", space, st)
		}
	}
}

// A claim made before claims carried the member's finalizer (or by a pool
// restored from a backup) is adopted with it.
func TestAnAdoptedClaimGetsTheMembersFinalizer(t *testing.T) {
	ctx := context.Background()
	pool := &ipamv1.SubnetPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "network", Name: "pods", UID: "restored-uid"},
		Spec: ipamv1.SubnetPoolSpec{CIDR: "10.7.0.0/16", Delegation: &ipamv1.PoolDelegation{
			PoolRef: ipamv1.PoolReference{Namespace: "platform", Name: "plan"}}},
	}
	key := types.NamespacedName{Namespace: "member-a", Name: claimName("member-a", client.ObjectKeyFromObject(pool))}
	old := &ipamv1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Finalizers: []string{"hub.example/keep"},
			Labels:      map[string]string{ipamv1.LabelMemberCluster: "member-a"},
			Annotations: map[string]string{ipamv1.AnnotationMemberPool: "network/pods", ipamv1.AnnotationMemberPoolUID: "old-uid"}},
		Spec: ipamv1.SubnetSpec{PoolRef: pool.Spec.Delegation.PoolRef, CIDR: "10.7.0.0/16"},
	}
	hubClient := newFakeHub(t, old)
	r := &MemberReconciler{Hub: &Hub{Cluster: fakeHub{c: hubClient}, Namespace: "member-a"}, ClusterName: "member-a", HubTimeout: 10e9}
	if _, err := r.claim(ctx, pool, key); err != nil {
		t.Fatal(err)
	}
	var got ipamv1.Subnet
	if err := hubClient.Get(ctx, key, &got); err != nil {
		t.Fatal(err)
	}
	if got.Annotations[ipamv1.AnnotationMemberPoolUID] != "restored-uid" ||
		!slices.Equal(got.Finalizers, []string{"hub.example/keep", ipamv1.FinalizerDelegation}) {
		t.Fatalf("adopted claim: uid %q, finalizers %v", got.Annotations[ipamv1.AnnotationMemberPoolUID], got.Finalizers)
	}
}
