package capi

import (
	"context"
	"net/netip"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	capiipam "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
)

// Review: a claim deleted with --cascade=orphan (the API server adds the
// "orphan" finalizer; the garbage collector strips the claim's owner
// reference from the IPAddress, then drops that finalizer). releaseClaim
// no longer sees the IPAddress as the claim's and lets the claim go; the
// IPAddress, now without a controller, is an "orphan" that the provider
// keeps "until a claim of its name adopts it": never released, its
// address held for good and its Subnet undeletable.
func TestOrphanCascadeDeletionLeaksTheAddressForever(t *testing.T) {
	ctx := context.Background()
	w := newStage(t, "10.1.0.0/29", time.Minute)
	known := map[string]ledger.AddressRecord{}
	w.bindClaim("c1")
	w.syncSubnet()
	w.syncAddresses(known)

	c1, _ := w.claim("c1")
	c1.Finalizers = append(c1.Finalizers, metav1.FinalizerOrphanDependents)
	if err := w.api.Update(ctx, c1); err != nil {
		t.Fatal(err)
	}
	if err := w.api.Delete(ctx, c1); err != nil {
		t.Fatal(err)
	}
	// The garbage collector orphans the dependents, then drops its finalizer.
	a, _ := w.address("c1")
	var refs []metav1.OwnerReference
	for _, r := range a.OwnerReferences {
		if r.UID != c1.UID {
			refs = append(refs, r)
		}
	}
	a.OwnerReferences = refs
	if err := w.api.Update(ctx, a); err != nil {
		t.Fatal(err)
	}
	c1, _ = w.claim("c1")
	controllerutil.RemoveFinalizer(c1, metav1.FinalizerOrphanDependents)
	if err := w.api.Update(ctx, c1); err != nil {
		t.Fatal(err)
	}
	w.syncAddresses(known)
	for range 4 {
		w.reconcile("c1")
		w.syncAddresses(known)
	}
	if _, ok := w.claim("c1"); ok {
		t.Fatal("claim c1 still there")
	}
	if a, ok := w.address("c1"); ok && a.DeletionTimestamp == nil {
		t.Errorf("claim c1 is gone but its IPAddress (%s) was never released: held forever, the Subnet can never be deleted", a.Spec.Address)
	}
}

// Review: Ledger.AdoptAddress, asked about an IPAddress the ledger does not
// show yet while it holds an assumed grant for the claim (a write that
// timed out and did not land), approves the grant's address, not the
// IPAddress's: admit then adopts and binds an IPAddress whose address
// another claim holds.
func TestAdoptBindsAnAddressAnotherClaimHoldsWhileTheLedgerLags(t *testing.T) {
	ctx := context.Background()
	w := newStage(t, "10.1.0.0/29", time.Minute)
	known := map[string]ledger.AddressRecord{}
	taken := w.bindClaim("c2")
	w.syncSubnet()
	w.syncAddresses(known)

	claim := w.createClaim("c1")
	// c1's first reconcile: granted, its IPAddress write timed out and did
	// not land (the grant stays assumed).
	if d := w.ledger.DecideAddress(stageNS, "c1", claim.UID, "m"); d.Reason != "" || d.Address == taken {
		t.Fatalf("grant: %+v", d)
	}
	// An IPAddress c1 is restored (or written by hand) holding c2's
	// address; the cache shows it, the ledger's handler has not run yet.
	addr := &capiipam.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Namespace: stageNS, Name: "c1", Finalizers: []string{FinalizerProtectAddress}},
		Spec: capiipam.IPAddressSpec{ClaimRef: capiipam.IPAddressClaimReference{Name: "c1"},
			PoolRef: capiipam.IPPoolReference{APIGroup: ipamv1.GroupVersion.Group, Kind: subnetKind, Name: "m"},
			Address: taken.String(), Prefix: ptr.To[int32](29), Gateway: "10.1.0.1"},
	}
	if err := w.api.Create(ctx, addr); err != nil {
		t.Fatal(err)
	}
	w.reconcile("c1")
	w.reconcile("c1")
	c1, _ := w.claim("c1")
	a, _ := w.address("c1")
	c2, _ := w.claim("c2")
	if c1.Status.AddressRef.Name == "c1" && c2.Status.AddressRef.Name == "c2" && a != nil && netip.MustParseAddr(a.Spec.Address) == taken {
		t.Errorf("claims c1 and c2 are both bound to %s: the adoption vetted the assumed grant, not IPAddress c1's address", taken)
	}
	// The ledger catches up: c1 stays bound (bindExisting trusts a bound
	// claim), so the duplicate is permanent.
	w.syncAddresses(known)
	w.reconcile("c1")
	if c1, _ := w.claim("c1"); c1.Status.AddressRef.Name == "c1" {
		t.Errorf("after the ledger caught up, claim c1 is still bound to %s, which claim c2 holds", taken)
	}
}

// Review: with the provider off (--cluster-api-ipam=off after running
// on), an IPAddress released before the switch keeps its ProtectAddress
// finalizer for good (only the claim controller removes it, after the
// cool-down). The off-guard finds it in the API server on every look, so
// its Subnet (and the namespace) stays Terminating forever, long after the
// cool-down ended: the defect SetupOff was meant to fix.
func TestProviderOffSubnetStuckBehindACooledDownAddress(t *testing.T) {
	ctx := context.Background()
	w := newStage(t, "10.1.0.0/29", time.Millisecond)
	w.bindClaim("c1")
	w.syncSubnet()
	c1, _ := w.claim("c1")
	if err := w.api.Delete(ctx, c1); err != nil {
		t.Fatal(err)
	}
	w.reconcile("c1") // released: IPAddress c1 cools down
	if a, ok := w.address("c1"); !ok || a.DeletionTimestamp == nil {
		t.Fatalf("IPAddress c1 should cool down: %+v", a)
	}
	// The manager restarts with --cluster-api-ipam=off; the Subnet is deleted.
	s := w.get(&ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: stageNS, Name: "m"}}).(*ipamv1.Subnet)
	if err := w.api.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	w.syncSubnet()
	off := &SubnetGuard{Client: w.cached, APIReader: w.api, Ledger: w.ledger, Recorder: w.guard.Recorder, Served: true}
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: stageNS, Name: "m"}}
	for range 3 {
		if _, err := off.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.api.Get(ctx, req.NamespacedName, s); err == nil {
		a, _ := w.address("c1")
		t.Errorf("provider off: Subnet m stays Terminating (finalizers %v) behind IPAddress c1, whose cool-down ended but whose finalizer nothing removes (%v)", s.Finalizers, a.Finalizers)
	}
}

// Review: an adopted IPAddress keeps whatever finalizers it came with. One
// written by hand (or by a tool that strips finalizers) lacks
// ProtectAddress, so when its claim is deleted the release deletes it at
// once: no cool-down, and the next claim gets the address while the old
// machine may still answer on it.
func TestAdoptedAddressWithoutItsFinalizerSkipsTheCoolDown(t *testing.T) {
	claim := claimObject("m-0", "m")
	addr := restoredAddress("m-0", "m", "10.0.0.2", 24, "10.0.0.1", nil)
	addr.Finalizers = nil
	w := newWorld(t, subnetObject("m", "10.0.0.0/24", "", ""), claim, addr)
	w.settle("m-0")
	if c := w.claim("m-0"); c.Status.AddressRef.Name != "m-0" {
		t.Fatalf("not adopted: %+v", c.Status)
	}
	if err := w.c.Delete(context.Background(), w.claim("m-0")); err != nil {
		t.Fatal(err)
	}
	adopted := w.address("m-0")
	w.settle("m-0")
	if a := w.address("m-0"); a == nil || a.DeletionTimestamp == nil {
		t.Errorf("the adopted address 10.0.0.2 was released without a cool-down (IPAddress %v, ReuseAfter %s)", a, w.r.ReuseAfter)
		if rec, ok := record(adopted); ok && a == nil {
			w.l.DeleteAddress(rec) // the informer's delete event
		}
	}
	if err := w.c.Create(context.Background(), claimObject("next", "m")); err != nil {
		t.Fatal(err)
	}
	w.settle("next")
	if a := w.address("next"); a != nil && a.Spec.Address == "10.0.0.2" {
		t.Errorf("10.0.0.2 handed out again at once, within its cool-down")
	}
}

// Review: an IPAddress whose claim is gone (its finalizer removed by hand,
// or the manager was down) is released, as the docs say, unless a claim of
// its name exists: then it is "adopted", and when the new claim names
// another Subnet adoption refuses. Before this change it was released; now
// nothing releases it, the new claim is refused for good and the old
// Subnet's address stays pinned.
func TestStaleAddressOfAGoneClaimBlocksANewClaimOfAnotherSubnet(t *testing.T) {
	old := claimObject("m-0", "m")
	old.UID = "claim-m-0-deleted"
	addr := restoredAddress("m-0", "m", "10.0.0.9", 24, "10.0.0.1", old)
	claim := claimObject("m-0", "n")
	w := newWorld(t, subnetObject("m", "10.0.0.0/24", "", ""), subnetObject("n", "10.0.1.0/24", "", ""), claim, addr)
	w.settle("m-0")
	if a := w.address("m-0"); a != nil && a.DeletionTimestamp == nil {
		t.Errorf("IPAddress m-0 of a deleted claim is neither released nor adopted; claim m-0 of Subnet n: %+v", ready(w.claim("m-0")))
	}
}

// Review: a claim's finalizer removed by hand and the claim made again
// (docs: its IPAddress is adopted). If the reconcile that the old claim's
// deletion queued runs while the cache does not show the new claim yet,
// claimOf reads the new claim from the API server, sees another UID and
// returns nil; with no claim in the cache the IPAddress is released: the
// machine's address goes into a cool-down and the new claim gets another.
func TestReCreatedClaimNotYetCachedLosesItsAddress(t *testing.T) {
	old := claimObject("m-0", "m")
	old.UID = "claim-m-0-before"
	addr := restoredAddress("m-0", "m", "10.0.0.9", 24, "10.0.0.1", old)
	claim := claimObject("m-0", "m") // made again, new UID
	w := newWorld(t, subnetObject("m", "10.0.0.0/24", "", ""), claim, addr)
	api := w.r.Client
	w.r.Client = interceptor.NewClient(api.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*capiipam.IPAddressClaim); ok {
				return apierrors.NewNotFound(capiipam.GroupVersion.WithResource("ipaddressclaims").GroupResource(), key.Name)
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	if _, err := w.r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: testNS, Name: "m-0"}}); err != nil {
		t.Fatal(err)
	}
	w.r.Client = api // the cache catches up
	w.settle("m-0")
	if a := w.address("m-0"); a == nil || a.DeletionTimestamp != nil || !ownedBy(a, claim.UID) {
		t.Errorf("the re-created claim's IPAddress (10.0.0.9) was released instead of adopted: %+v; claim: %+v", a, ready(w.claim("m-0")))
	}
}
