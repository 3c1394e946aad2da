package capi

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	clusterv1beta1 "sigs.k8s.io/cluster-api/api/core/v1beta1"
	ipamv1beta1 "sigs.k8s.io/cluster-api/api/ipam/v1beta1"
	capiipam "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
)

const stageNS = "staged"

// stage is a fake API server with a pool and a Ready Subnet "m", the
// ledger fed from it by hand (as the informers would, but only when the
// test says: lag is under the test's control), and the controllers.
type stage struct {
	t      *testing.T
	api    client.Client // the API server: what APIReader reads
	cached client.Client // writes go to the API server; reads see the cache
	ledger *ledger.Ledger
	claims *ClaimReconciler
	guard  *SubnetGuard
	// lagging: the cache does not show IPAddresses yet (the informer lags).
	lagging atomic.Bool
}

func newStage(t *testing.T, cidr string, reuseAfter time.Duration) *stage {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := ipamv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	AddToScheme(scheme)
	pool := &ipamv1.SubnetPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: stageNS, Name: "dc", UID: "uid-dc", Generation: 1},
		Spec:       ipamv1.SubnetPoolSpec{CIDR: "10.0.0.0/8"},
	}
	subnet := &ipamv1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Namespace: stageNS, Name: "m", UID: "uid-m", Generation: 1},
		Spec:       ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: "dc"}, CIDR: cidr},
		Status: ipamv1.SubnetStatus{CIDR: cidr, Conditions: []metav1.Condition{{
			Type: ipamv1.ConditionReady, Status: metav1.ConditionTrue, Reason: ipamv1.ReasonAllocated, ObservedGeneration: 1,
		}}},
	}
	api := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(pool, subnet).
		WithStatusSubresource(&ipamv1.Subnet{}, &ipamv1.SubnetPool{}, &capiipam.IPAddressClaim{}).
		Build()
	w := &stage{t: t, api: api, ledger: ledger.New()}
	w.cached = interceptor.NewClient(api.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*capiipam.IPAddress); ok && w.lagging.Load() {
				return apierrors.NewNotFound(capiipam.GroupVersion.WithResource("ipaddresses").GroupResource(), key.Name)
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	w.ledger.MarkSynced()
	w.ledger.ApplyPool(w.get(pool).(*ipamv1.SubnetPool), ledger.Created, nil)
	w.syncSubnet()
	rec := events.NewFakeRecorder(100)
	w.claims = &ClaimReconciler{Client: w.cached, APIReader: api, Ledger: w.ledger, Recorder: rec,
		Options: Options{ReuseAfter: reuseAfter, Workers: 1}}
	w.claims.caughtUp = true // nothing to catch up with: the ledger is fed by hand
	w.guard = &SubnetGuard{Client: w.cached, APIReader: api, Ledger: w.ledger, Recorder: rec, Claims: w.claims, Served: true}
	return w
}

func (w *stage) get(o client.Object) client.Object {
	w.t.Helper()
	if err := w.api.Get(context.Background(), client.ObjectKeyFromObject(o), o); err != nil {
		w.t.Fatal(err)
	}
	return o
}

// syncSubnet feeds the ledger the Subnet as the API server has it.
func (w *stage) syncSubnet() {
	w.t.Helper()
	var s ipamv1.Subnet
	if err := w.api.Get(context.Background(), types.NamespacedName{Namespace: stageNS, Name: "m"}, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return
		}
		w.t.Fatal(err)
	}
	w.ledger.ApplySubnet(&s, ledger.Updated, nil)
}

// syncAddresses delivers the IPAddresses to the ledger as the informer
// would: every one the API server has, and the deletion of those gone.
func (w *stage) syncAddresses(known map[string]ledger.AddressRecord) {
	w.t.Helper()
	var list capiipam.IPAddressList
	if err := w.api.List(context.Background(), &list); err != nil {
		w.t.Fatal(err)
	}
	seen := map[string]bool{}
	for i := range list.Items {
		if rec, ok := record(&list.Items[i]); ok {
			w.ledger.ApplyAddress(rec, ledger.Updated)
			known[rec.Name] = rec
			seen[rec.Name] = true
		}
	}
	for name, rec := range known {
		if !seen[name] {
			w.ledger.DeleteAddress(rec)
			delete(known, name)
		}
	}
}

func (w *stage) reconcile(name string) reconcile.Result {
	w.t.Helper()
	res, err := w.claims.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: stageNS, Name: name}})
	if err != nil {
		w.t.Fatalf("reconcile %s: %v", name, err)
	}
	return res
}

func (w *stage) createClaim(name string, finalizers ...string) *capiipam.IPAddressClaim {
	w.t.Helper()
	c := &capiipam.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: stageNS, Name: name, UID: types.UID("uid-claim-" + name), Finalizers: finalizers},
		Spec:       capiipam.IPAddressClaimSpec{PoolRef: capiipam.IPPoolReference{APIGroup: ipamv1.GroupVersion.Group, Kind: subnetKind, Name: "m"}},
	}
	if err := w.api.Create(context.Background(), c); err != nil {
		w.t.Fatal(err)
	}
	return c
}

func (w *stage) claim(name string) (*capiipam.IPAddressClaim, bool) {
	w.t.Helper()
	var c capiipam.IPAddressClaim
	err := w.api.Get(context.Background(), types.NamespacedName{Namespace: stageNS, Name: name}, &c)
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		w.t.Fatal(err)
	}
	return &c, true
}

func (w *stage) address(name string) (*capiipam.IPAddress, bool) {
	w.t.Helper()
	var a capiipam.IPAddress
	err := w.api.Get(context.Background(), types.NamespacedName{Namespace: stageNS, Name: name}, &a)
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		w.t.Fatal(err)
	}
	return &a, true
}

// bindClaim creates a claim and reconciles it until it is bound; it
// returns its address. The ledger sees the IPAddress only if synced.
func (w *stage) bindClaim(name string) netip.Addr {
	w.t.Helper()
	w.createClaim(name)
	for range 3 {
		w.reconcile(name)
		if c, _ := w.claim(name); c.Status.AddressRef.Name != "" {
			a, ok := w.address(name)
			if !ok {
				w.t.Fatalf("claim %s bound without an IPAddress", name)
			}
			return netip.MustParseAddr(a.Spec.Address)
		}
	}
	c, _ := w.claim(name)
	w.t.Fatalf("claim %s not bound: %+v", name, c.Status)
	return netip.Addr{}
}

// Item 2: after a claim's release, a reconcile whose cache does not show
// the (cooling-down) IPAddress yet must not withdraw the grant: the next
// claim would get the same address, and the Subnet's finalizer could go
// while the IPAddress exists.
func TestReleasedAddressNotHandedOutWhileTheInformerLags(t *testing.T) {
	ctx := context.Background()
	w := newStage(t, "10.1.0.0/29", time.Hour)
	w.lagging.Store(true) // the informer shows no IPAddress throughout
	first := w.bindClaim("c1")
	w.syncSubnet() // the protection finalizer

	c1, _ := w.claim("c1")
	if err := w.api.Delete(ctx, c1); err != nil {
		t.Fatal(err)
	}
	w.reconcile("c1") // releases: the IPAddress is deleted, kept by its finalizer
	if _, ok := w.claim("c1"); ok {
		t.Fatal("claim c1 still there after its release")
	}
	if a, ok := w.address("c1"); !ok || a.DeletionTimestamp == nil {
		t.Fatalf("IPAddress c1 should be cooling down: %v", a)
	}
	w.reconcile("c1") // claim gone, IPAddress not in the cache yet

	if second := w.bindClaim("c2"); second == first {
		t.Errorf("%s handed out to c2 while IPAddress c1 still holds it (cooling down)", first)
	}

	// The Subnet is deleted: its finalizer stays while IPAddress c1 exists.
	s := w.get(&ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: stageNS, Name: "m"}})
	if err := w.api.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	w.syncSubnet()
	c2, _ := w.claim("c2")
	if err := w.api.Delete(ctx, c2); err != nil {
		t.Fatal(err)
	}
	w.reconcile("c2")
	w.reconcile("c2")
	if _, err := w.guard.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: stageNS, Name: "m"}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := w.address("c1"); !ok {
		t.Fatal("IPAddress c1 went before its cool-down")
	}
	var live ipamv1.Subnet
	if err := w.api.Get(ctx, types.NamespacedName{Namespace: stageNS, Name: "m"}, &live); err != nil || !controllerutil.ContainsFinalizer(&live, ipamv1.FinalizerAddressProtection) {
		t.Errorf("the Subnet's address protection went while IPAddress c1 exists (%v)", err)
	}
}

// Item 1: a claim deleted in the foreground (kubectl delete
// --cascade=foreground; Argo CD prunes so) waits for its IPAddress, which
// the garbage collector deletes. The provider must not keep that
// IPAddress for as long as the claim exists: the two would wait for each
// other for good. The released address still cools down.
func TestForegroundDeletionOfABoundClaim(t *testing.T) {
	ctx := context.Background()
	w := newStage(t, "10.1.0.0/29", time.Hour)
	known := map[string]ledger.AddressRecord{}
	held := w.bindClaim("c1")
	w.syncSubnet()
	w.syncAddresses(known)

	// The API server marks the claim, the garbage collector deletes its
	// blocking dependents: the IPAddress (kept by its finalizer).
	c1, _ := w.claim("c1")
	c1.Finalizers = append(c1.Finalizers, metav1.FinalizerDeleteDependents)
	if err := w.api.Update(ctx, c1); err != nil {
		t.Fatal(err)
	}
	if err := w.api.Delete(ctx, c1); err != nil {
		t.Fatal(err)
	}
	a, _ := w.address("c1")
	if err := w.api.Delete(ctx, a); err != nil {
		t.Fatal(err)
	}
	w.syncAddresses(known)

	// The garbage collector lets the claim go once no dependent blocks it.
	gc := func() {
		c, ok := w.claim("c1")
		if !ok || !controllerutil.ContainsFinalizer(c, metav1.FinalizerDeleteDependents) {
			return
		}
		if a, ok := w.address("c1"); ok && slices.ContainsFunc(a.OwnerReferences, func(r metav1.OwnerReference) bool {
			return r.UID == c.UID && ptr.Deref(r.BlockOwnerDeletion, false)
		}) {
			return
		}
		controllerutil.RemoveFinalizer(c, metav1.FinalizerDeleteDependents)
		if err := w.api.Update(ctx, c); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	for range 5 {
		w.reconcile("c1")
		w.syncAddresses(known)
		gc()
	}
	if c, ok := w.claim("c1"); ok {
		t.Fatalf("the claim is still there, finalizers %v: its foreground deletion waits for an IPAddress the provider keeps for it", c.Finalizers)
	}
	// Cooling down: the address is not handed out again yet.
	if a, ok := w.address("c1"); !ok || a.DeletionTimestamp == nil {
		t.Fatalf("IPAddress c1 should cool down, terminating: %v", a)
	}
	if got := w.bindClaim("c2"); got == held {
		t.Errorf("%s handed out again within its cool-down", held)
	}
}

// Item 6c: a claim that is refused must not keep a status.addressRef to
// an IPAddress it no longer holds.
func TestRefusedClaimDropsItsAddressRef(t *testing.T) {
	ctx := context.Background()
	w := newStage(t, "10.1.0.0/29", time.Hour)
	w.bindClaim("c1")
	w.syncSubnet()
	// Its IPAddress goes (its finalizer removed by hand) and the Subnet is
	// being deleted: no address for the claim now.
	a, _ := w.address("c1")
	a.Finalizers = nil
	if err := w.api.Update(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := w.api.Delete(ctx, a); err != nil {
		t.Fatal(err)
	}
	s := w.get(&ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: stageNS, Name: "m"}})
	if err := w.api.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	w.syncSubnet()
	w.reconcile("c1")
	c, _ := w.claim("c1")
	ready := meta.FindStatusCondition(c.Status.Conditions, capiipam.IPAddressClaimReadyCondition)
	if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != ledger.AddressPoolNotReady {
		t.Fatalf("Ready: %+v", ready)
	}
	if c.Status.AddressRef.Name != "" {
		t.Errorf("a refused claim names IPAddress %q, which does not exist", c.Status.AddressRef.Name)
	}
}

// Item 6d: a reader of v1beta1 claims (infrastructure providers not yet on
// v1beta2) gets the claim's conditions from status.deprecated.v1beta1
// (Cluster API's conversion): the provider must write Ready there too.
func TestClaimConditionsForV1beta1Readers(t *testing.T) {
	w := newStage(t, "10.1.0.0/30", time.Hour) // one address: .2
	w.bindClaim("c1")
	w.createClaim("c2")
	w.reconcile("c2")
	w.reconcile("c2")
	for name, want := range map[string]struct{ status, reason string }{
		"c1": {"True", ""},
		"c2": {"False", ledger.AddressPoolExhausted},
	} {
		c, _ := w.claim(name)
		var old ipamv1beta1.IPAddressClaimStatus
		if err := ipamv1beta1.Convert_v1beta2_IPAddressClaimStatus_To_v1beta1_IPAddressClaimStatus(&c.Status, &old, nil); err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(old.Conditions, func(c clusterv1beta1.Condition) bool { return c.Type == clusterv1beta1.ReadyCondition })
		if i < 0 {
			t.Errorf("%s: a v1beta1 reader sees no Ready condition: %+v", name, old.Conditions)
			continue
		}
		if got := old.Conditions[i]; string(got.Status) != want.status || got.Reason != want.reason || (want.status == "False") != (got.Severity != "") {
			t.Errorf("%s: v1beta1 Ready %+v, want status %s reason %q", name, got, want.status, want.reason)
		}
	}
}

// Item 6b: a Subnet protected while the provider was on must not stay
// Terminating once the provider is off (--cluster-api-ipam=off, or
// Cluster API removed): the guard still lets its finalizer go.
func TestGuardWithTheProviderOff(t *testing.T) {
	ctx := context.Background()
	w := newStage(t, "10.1.0.0/29", time.Hour)
	s := w.get(&ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: stageNS, Name: "m"}}).(*ipamv1.Subnet)
	controllerutil.AddFinalizer(s, ipamv1.FinalizerAddressProtection)
	if err := w.api.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := w.api.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	w.syncSubnet()
	off := &SubnetGuard{Client: w.cached, APIReader: w.api, Ledger: w.ledger, Recorder: events.NewFakeRecorder(10)}
	if _, err := off.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: stageNS, Name: "m"}}); err != nil {
		t.Fatal(err)
	}
	if err := w.api.Get(ctx, types.NamespacedName{Namespace: stageNS, Name: "m"}, s); !apierrors.IsNotFound(err) {
		t.Errorf("the Subnet stays Terminating with finalizers %v (%v)", s.Finalizers, err)
	}
}

// Item 2, the guard's side: whatever the ledger shows (its informer may
// lag, or with the provider off it knows no IPAddress), the Subnet's
// protection stays while the API server has an IPAddress of it.
func TestGuardKeepsTheSubnetWhileTheAPIServerHasItsAddresses(t *testing.T) {
	ctx := context.Background()
	for _, on := range []bool{true, false} {
		w := newStage(t, "10.1.0.0/29", time.Hour)
		s := w.get(&ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: stageNS, Name: "m"}}).(*ipamv1.Subnet)
		controllerutil.AddFinalizer(s, ipamv1.FinalizerAddressProtection)
		if err := w.api.Update(ctx, s); err != nil {
			t.Fatal(err)
		}
		// Written by the last leader, not yet in this replica's ledger.
		a := &capiipam.IPAddress{
			ObjectMeta: metav1.ObjectMeta{Namespace: stageNS, Name: "c1", Finalizers: []string{FinalizerProtectAddress}},
			Spec: capiipam.IPAddressSpec{ClaimRef: capiipam.IPAddressClaimReference{Name: "c1"},
				PoolRef: capiipam.IPPoolReference{APIGroup: ipamv1.GroupVersion.Group, Kind: subnetKind, Name: "m"},
				Address: "10.1.0.2", Prefix: ptr.To[int32](29), Gateway: "10.1.0.1"},
		}
		if err := w.api.Create(ctx, a); err != nil {
			t.Fatal(err)
		}
		if err := w.api.Delete(ctx, s); err != nil {
			t.Fatal(err)
		}
		w.syncSubnet()
		g := w.guard
		if !on {
			g = &SubnetGuard{Client: w.cached, APIReader: w.api, Ledger: w.ledger, Recorder: events.NewFakeRecorder(10), Served: true}
		}
		req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: stageNS, Name: "m"}}
		res, err := g.Reconcile(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.api.Get(ctx, req.NamespacedName, s); err != nil || !controllerutil.ContainsFinalizer(s, ipamv1.FinalizerAddressProtection) {
			t.Fatalf("provider on %v: the Subnet's protection went while IPAddress c1 exists (%v)", on, err)
		}
		if res.RequeueAfter == 0 {
			t.Errorf("provider on %v: the guard does not look again", on)
		}
		// The IPAddress goes: so does the finalizer.
		a.Finalizers = nil
		if err := w.api.Update(ctx, a); err != nil {
			t.Fatal(err)
		}
		if err := w.api.Delete(ctx, a); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
		if _, err := g.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
		if err := w.api.Get(ctx, req.NamespacedName, s); !apierrors.IsNotFound(err) {
			t.Errorf("provider on %v: the Subnet stays with finalizers %v once no IPAddress of it is left (%v)", on, s.Finalizers, err)
		}
	}
}

// A new leader whose IPAddress informer lags (the soak's A6): a bound
// claim's IPAddress is in neither its cache nor its ledger, and the Subnet
// is being deleted (its finalizer holds it for the address). The claim must
// stay bound: its machine uses the address. The reconciler reads the API
// server before it re-decides a claim whose status names an IPAddress.
func TestBoundClaimStaysBoundWhileANewLeadersInformerLags(t *testing.T) {
	ctx := context.Background()
	w := newStage(t, "10.1.0.0/29", time.Hour)
	w.lagging.Store(true)
	w.bindClaim("c1")
	w.syncSubnet()
	s := w.get(&ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: stageNS, Name: "m"}}).(*ipamv1.Subnet)
	if !controllerutil.ContainsFinalizer(s, ipamv1.FinalizerAddressProtection) {
		t.Fatalf("bound claim c1 did not protect the Subnet: %v", s.Finalizers)
	}
	if err := w.api.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}

	// The new leader: a ledger fed from informers that do not show the
	// IPAddress yet.
	w.ledger = ledger.New()
	w.ledger.MarkSynced()
	w.ledger.ApplyPool(w.get(&ipamv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Namespace: stageNS, Name: "dc"}}).(*ipamv1.SubnetPool), ledger.Created, nil)
	w.syncSubnet()
	w.claims = &ClaimReconciler{Client: w.cached, APIReader: w.api, Ledger: w.ledger, Recorder: events.NewFakeRecorder(100),
		Options: Options{ReuseAfter: time.Hour, Workers: 1}}
	w.claims.caughtUp = true

	w.reconcile("c1")
	c, _ := w.claim("c1")
	if cond := meta.FindStatusCondition(c.Status.Conditions, capiipam.IPAddressClaimReadyCondition); cond == nil || cond.Status != metav1.ConditionTrue || c.Status.AddressRef.Name != "c1" {
		t.Errorf("bound claim c1 lost its address under a lagging informer: %+v", c.Status)
	}
}

// A refusal written from a stale cached claim (one that does not show the
// binding the API server has) must not land: Ready=False beside an
// addressRef is a claim that lost its address without being told. The
// write is optimistic and its conflict requeues.
func TestRefusalFromAStaleClaimDoesNotLand(t *testing.T) {
	ctx := context.Background()
	w := newStage(t, "10.1.0.0/29", time.Hour)
	w.lagging.Store(true)
	w.createClaim("c1")
	for range 3 {
		w.reconcile("c1")
	}
	bound, _ := w.claim("c1")
	if bound.Status.AddressRef.Name != "c1" {
		t.Fatalf("claim c1 not bound: %+v", bound.Status)
	}
	// As the cache showed it before the binding: its finalizer, no status.
	stale := bound.DeepCopy()
	stale.Status = capiipam.IPAddressClaimStatus{}
	stale.ResourceVersion = "1"
	s := w.get(&ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: stageNS, Name: "m"}})
	if err := w.api.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	w.syncSubnet()
	// The cache shows the claim as it was before its binding.
	w.claims.Client = interceptor.NewClient(w.api.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			switch o := obj.(type) {
			case *capiipam.IPAddressClaim:
				stale.DeepCopyInto(o)
				return nil
			case *capiipam.IPAddress:
				return apierrors.NewNotFound(capiipam.GroupVersion.WithResource("ipaddresses").GroupResource(), key.Name)
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	w.ledger.ForgetAddress(stageNS, "c1", stale.UID, "m", netip.Addr{}) // the new leader's ledger does not show it either
	_, _ = w.claims.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: stageNS, Name: "c1"}})
	c, _ := w.claim("c1")
	if cond := meta.FindStatusCondition(c.Status.Conditions, capiipam.IPAddressClaimReadyCondition); cond == nil || cond.Status != metav1.ConditionTrue || c.Status.AddressRef.Name != "c1" {
		t.Errorf("a refusal from a stale claim landed: %+v", c.Status)
	}
}

// bind is optimistic too: Ready written from a claim the cache showed
// before it was deleted (its IPAddress orphaned meanwhile, the soak's A6)
// does not land.
func TestBindFromAStaleClaimDoesNotLand(t *testing.T) {
	ctx := context.Background()
	w := newStage(t, "10.1.0.0/29", time.Hour)
	stale := w.createClaim("c1", FinalizerReleaseAddress)
	stale = w.get(stale).(*capiipam.IPAddressClaim).DeepCopy()
	live := stale.DeepCopy()
	if err := w.api.Delete(ctx, live); err != nil { // kept by its finalizer
		t.Fatal(err)
	}
	if err := w.claims.bind(ctx, stale, "c1"); err == nil || !apierrors.IsConflict(err) {
		t.Errorf("bind from a stale claim: %v, want a conflict", err)
	}
	if c, _ := w.claim("c1"); c.Status.AddressRef.Name != "" || meta.IsStatusConditionTrue(c.Status.Conditions, capiipam.IPAddressClaimReadyCondition) {
		t.Errorf("Ready landed on a deleted claim: %+v", c.Status)
	}
}

// The soak's L5/L6 at e3b6198 (a /30 Subnet "in use" with no IPAddress,
// its claims PoolExhausted for good): a claim of a burst is granted the
// Subnet's only address, its IPAddress written, released and gone after
// its cool-down, all while the replica's IPAddress watch lagged and then
// re-listed. The informer never showed that IPAddress, so no event of it
// withdrew the grant. Once the provider itself ends the IPAddress, the
// address is free.
func TestGrantWhoseIPAddressTheInformerNeverShowedIsFreedWithIt(t *testing.T) {
	ctx := context.Background()
	w := newStage(t, "10.1.0.0/30", 0) // one address to hand out: 10.1.0.2
	w.lagging.Store(true)
	known := map[string]ledger.AddressRecord{}
	if got := w.bindClaim("c1"); got != netip.MustParseAddr("10.1.0.2") {
		t.Fatalf("c1 got %s", got)
	}
	w.syncSubnet()

	c1, _ := w.claim("c1")
	if err := w.api.Delete(ctx, c1); err != nil {
		t.Fatal(err)
	}
	w.reconcile("c1") // released: the IPAddress is deleted, kept by its finalizer
	w.reconcile("c1") // the cool-down (none) is over: its finalizer goes
	if a, ok := w.address("c1"); ok {
		t.Fatalf("IPAddress c1 still there after its cool-down: %v", a)
	}
	// The watch re-lists: the IPAddress, gone, is in no list and no event.
	w.syncAddresses(known)
	w.lagging.Store(false)

	if u, _ := w.ledger.AddressUsage(stageNS, "m", 0); u.InUse != 0 || u.CoolingDown != 0 {
		t.Errorf("Subnet m has no IPAddress but the ledger counts %d in use, %d cooling down", u.InUse, u.CoolingDown)
	}
	if got := w.bindClaim("c2"); got != netip.MustParseAddr("10.1.0.2") {
		t.Errorf("c2 got %s, want the freed 10.1.0.2", got)
	}
}

// The other way a record outlives its IPAddress under a lagging watch: an
// IPAddress written by hand for a claim before it, which the ledger learns
// of from the API server (the claim's own write finds the name taken; the
// m2 line of the soak's log), not from the informer. The claim is deleted
// and its release deletes that IPAddress: gone before the informer ever
// showed it, it must not hold its address.
func TestHandWrittenIPAddressReadFromTheAPIIsFreedWithIt(t *testing.T) {
	ctx := context.Background()
	w := newStage(t, "10.1.0.0/30", 0)
	w.lagging.Store(true)
	known := map[string]ledger.AddressRecord{}
	byHand := &capiipam.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Namespace: stageNS, Name: "c1"},
		Spec: capiipam.IPAddressSpec{
			ClaimRef: capiipam.IPAddressClaimReference{Name: "c1"},
			PoolRef:  capiipam.IPPoolReference{APIGroup: ipamv1.GroupVersion.Group, Kind: subnetKind, Name: "m"},
			Address:  "10.1.0.2", Prefix: ptr.To(int32(30)), Gateway: "10.1.0.1",
		},
	}
	if err := w.api.Create(ctx, byHand); err != nil {
		t.Fatal(err)
	}
	w.createClaim("c1")
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: stageNS, Name: "c1"}}
	if _, err := w.claims.Reconcile(ctx, req); err == nil {
		t.Fatal("the claim's write should have found IPAddress c1 taken")
	}
	if u, _ := w.ledger.AddressUsage(stageNS, "m", 0); u.InUse != 1 {
		t.Fatalf("the ledger should hold the IPAddress read from the API server: %+v", u)
	}

	c1, _ := w.claim("c1")
	if err := w.api.Delete(ctx, c1); err != nil {
		t.Fatal(err)
	}
	w.reconcile("c1") // its release deletes the IPAddress (no finalizer: gone at once)
	w.reconcile("c1")
	if a, ok := w.address("c1"); ok {
		t.Fatalf("IPAddress c1 still there: %v", a)
	}
	w.syncAddresses(known) // re-listed: never shown
	w.lagging.Store(false)

	if u, _ := w.ledger.AddressUsage(stageNS, "m", 0); u.InUse != 0 || u.CoolingDown != 0 {
		t.Errorf("Subnet m has no IPAddress but the ledger counts %d in use, %d cooling down", u.InUse, u.CoolingDown)
	}
	if got := w.bindClaim("c2"); got != netip.MustParseAddr("10.1.0.2") {
		t.Errorf("c2 got %s, want the freed 10.1.0.2", got)
	}
}

// A status written from a claim the cache shows outdated meets a conflict
// (bind and refuse are optimistic): expected under any lag, so the request
// is looked at again without a "Reconciler error" and its stack trace.
func TestConflictOfAnOptimisticStatusWriteRequeuesQuietly(t *testing.T) {
	ctx := context.Background()
	w := newStage(t, "10.1.0.0/29", time.Hour)
	w.createClaim("c1", FinalizerReleaseAddress)
	stale := w.get(&capiipam.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: stageNS, Name: "c1"}}).(*capiipam.IPAddressClaim).DeepCopy()
	// Someone changes the claim; the cache does not show it yet.
	live := stale.DeepCopy()
	live.Labels = map[string]string{"changed": "yes"}
	if err := w.api.Update(ctx, live); err != nil {
		t.Fatal(err)
	}
	w.claims.Client = interceptor.NewClient(w.api.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if o, ok := obj.(*capiipam.IPAddressClaim); ok && key.Name == "c1" {
				stale.DeepCopyInto(o)
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: stageNS, Name: "c1"}}
	res, err := w.claims.Reconcile(ctx, req)
	if err != nil {
		t.Fatalf("a conflict of the binding was returned as an error (logged as a Reconciler error): %v", err)
	}
	if res.RequeueAfter <= 0 {
		t.Errorf("a conflict of the binding is not looked at again: %+v", res)
	}
	if c, _ := w.claim("c1"); c.Status.AddressRef.Name != "" {
		t.Fatalf("the binding from the outdated claim landed: %+v", c.Status)
	}
	// The cache catches up: the claim is bound to the IPAddress written.
	w.claims.Client = w.cached
	w.syncAddresses(map[string]ledger.AddressRecord{})
	w.reconcile("c1")
	if c, _ := w.claim("c1"); c.Status.AddressRef.Name != "c1" {
		t.Errorf("claim c1 not bound once the cache caught up: %+v", c.Status)
	}
}

// A claim of a Cluster that does not exist (a typo in its cluster name)
// says so, instead of showing no status at all; Cluster API's contract
// leaves it otherwise alone until the Cluster appears. A bound claim whose
// Cluster went first keeps its address.
func TestClaimOfAMissingClusterSaysSo(t *testing.T) {
	ctx := context.Background()
	w := newStage(t, "10.1.0.0/29", time.Hour)
	w.claims.Clusters = true
	c := w.createClaim("c1")
	c.Spec.ClusterName = "prodd"
	if err := w.api.Update(ctx, c); err != nil {
		t.Fatal(err)
	}
	w.reconcile("c1")
	c, _ = w.claim("c1")
	cond := meta.FindStatusCondition(c.Status.Conditions, capiipam.IPAddressClaimReadyCondition)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != reasonClusterNotFound || !strings.Contains(cond.Message, "Cluster prodd does not exist") {
		t.Fatalf("claim of a missing Cluster: %+v", c.Status)
	}
	if _, ok := w.address("c1"); ok {
		t.Fatal("an address was handed to a claim of a missing Cluster")
	}

	// Bound while its Cluster existed, then the Cluster went first.
	w.claims.Clusters = false
	w.createClaim("c2")
	w.reconcile("c2")
	w.reconcile("c2")
	w.claims.Clusters = true
	c2, _ := w.claim("c2")
	if c2.Status.AddressRef.Name != "c2" {
		t.Fatalf("claim c2 not bound: %+v", c2.Status)
	}
	c2.Spec.ClusterName = "gone"
	if err := w.api.Update(ctx, c2); err != nil {
		t.Fatal(err)
	}
	w.reconcile("c2")
	if c2, _ = w.claim("c2"); c2.Status.AddressRef.Name != "c2" || !meta.IsStatusConditionTrue(c2.Status.Conditions, capiipam.IPAddressClaimReadyCondition) {
		t.Errorf("a bound claim lost its address when its Cluster went: %+v", c2.Status)
	}
}
