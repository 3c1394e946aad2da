package capi

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	capiipam "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
)

// Adoption: IPAddresses the provider did not write for the claim of today.
// A backup tool restores them with their owner references dropped, before
// or after their claims; clusterctl move creates them, owned by the claims
// it created first, while the Cluster is paused. Either way the claim
// takes the IPAddress's address only if the Subnet would hand it out and
// no one else holds it (Ledger.AdoptAddress); otherwise the claim says why
// and the IPAddress is left as it is.

// restoreGrace is how long a restored claim waits for its IPAddress before
// it is given a free address. A claim that arrives with the release
// finalizer, without an IPAddress and not refused (no status, or a status
// restored with it) was bound before it was exported; a backup
// tool may restore its IPAddress a moment later, and an address handed out
// meanwhile would be written first and the machine's own IPAddress refused
// (its name is taken).
const restoreGrace = 30 * time.Second

// awaitItsAddress says how long a restored claim still waits for its
// IPAddress (zero: it does not wait). The grace runs from the claim's
// creation, so a manager restarted later does not wait again.
func (r *ClaimReconciler) awaitItsAddress(ctx context.Context, claim *capiipam.IPAddressClaim, addr *capiipam.IPAddress) time.Duration {
	if addr != nil || !controllerutil.ContainsFinalizer(claim, FinalizerReleaseAddress) ||
		meta.IsStatusConditionFalse(claim.Status.Conditions, capiipam.IPAddressClaimReadyCondition) || // refused before: it had none
		r.Ledger.HoldsAddressFor(claim.Namespace, claim.Spec.PoolRef.Name, claim.Name) {
		return 0
	}
	left := time.Until(claim.CreationTimestamp.Add(restoreGrace))
	if left <= 0 {
		return 0
	}
	r.Recorder.Eventf(claim, nil, corev1.EventTypeNormal, "AwaitingIPAddress", "Allocate",
		"restored bound, without its IPAddress: waits up to %s for its IPAddress to be restored before it gets a free address", left.Round(time.Second))
	return left
}

// adopt takes a restored IPAddress (no owner, or a claim of this name
// that no longer exists) for the claim of its name, if the Subnet would
// hand out its address and no one else holds it: its owner references
// to the claim and the Subnet are pointed at today's objects, every other
// owner's reference is kept, and the Subnet is protected first. The claim
// is bound by the reconcile that the IPAddress's update brings
// (bindExisting).
func (r *ClaimReconciler) adopt(ctx context.Context, addr *capiipam.IPAddress, claim *capiipam.IPAddressClaim) error {
	if paused, missing, err := r.clusterState(ctx, claim.Namespace, clusterName(claim), claim.Annotations); err != nil || paused || missing {
		return err // left alone, as the claim is
	}
	// The claim is ours from here, adopted or refused: its release
	// finalizer first, as on every other path (the contract's).
	if !controllerutil.ContainsFinalizer(claim, FinalizerReleaseAddress) {
		patch := client.MergeFromWithOptions(claim.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(claim, FinalizerReleaseAddress)
		if err := r.Client.Patch(ctx, claim, patch); err != nil {
			return client.IgnoreNotFound(err)
		}
	}
	if reason, msg := foreign(addr, claim); reason != "" {
		return r.refuse(ctx, claim, ledger.AddressDecision{Reason: reason, Message: msg})
	}
	subnet, ok, err := r.admit(ctx, addr, claim)
	if !ok || err != nil {
		return err
	}
	patch := client.MergeFromWithOptions(addr.DeepCopy(), client.MergeFromWithOptimisticLock{})
	refs := make([]metav1.OwnerReference, 0, len(addr.OwnerReferences)+2)
	for _, ref := range addr.OwnerReferences {
		// Our two references, from before the restore: replaced below.
		if isRef(ref, capiipam.GroupVersion.Group, "IPAddressClaim", claim.Name) || isRef(ref, ipamv1.GroupVersion.Group, subnetKind, subnet.Name) {
			continue
		}
		refs = append(refs, ref)
	}
	addr.OwnerReferences = append(refs,
		metav1.OwnerReference{APIVersion: capiipam.GroupVersion.String(), Kind: "IPAddressClaim", Name: claim.Name, UID: claim.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)},
		metav1.OwnerReference{APIVersion: ipamv1.GroupVersion.String(), Kind: subnetKind, Name: subnet.Name, UID: subnet.UID, BlockOwnerDeletion: ptr.To(true)})
	// As write makes them: the finalizer keeps the cool-down on release
	// (one restored or written without it would be deleted at once), the
	// label lets a paused Cluster's IPAddresses be found.
	controllerutil.AddFinalizer(addr, FinalizerProtectAddress)
	if name := clusterName(claim); name != "" {
		metav1.SetMetaDataLabel(&addr.ObjectMeta, clusterv1.ClusterNameLabel, name)
	}
	if err := r.Client.Patch(ctx, addr, patch); err != nil {
		return client.IgnoreNotFound(err)
	}
	logf.FromContext(ctx).Info("IPAddress adopted by its claim", "ipaddress", client.ObjectKeyFromObject(addr), "address", addr.Spec.Address)
	return nil
}

// bindExisting binds the claim to its IPAddress that the informer shows.
// A claim bound before keeps it as it is; a claim not bound yet (its
// IPAddress moved by clusterctl, adopted, or restored with a status-less
// claim) takes it only if the Subnet would hand out its address, and
// protects the Subnet first.
func (r *ClaimReconciler) bindExisting(ctx context.Context, claim *capiipam.IPAddressClaim, addr *capiipam.IPAddress) error {
	if c := meta.FindStatusCondition(claim.Status.Conditions, capiipam.IPAddressClaimReadyCondition); c != nil &&
		c.Status == metav1.ConditionTrue && claim.Status.AddressRef.Name == addr.Name {
		return r.bind(ctx, claim, addr.Name)
	}
	if _, ok, err := r.admit(ctx, addr, claim); !ok || err != nil {
		return err
	}
	return r.bind(ctx, claim, addr.Name)
}

// admit checks an existing IPAddress against the Subnet (the ledger), and
// its prefix and gateway against what the Subnet hands out, and protects
// the Subnet. Not ok: the claim was refused, saying why, or the ledger does
// not show the IPAddress yet (its event requeues the claim).
func (r *ClaimReconciler) admit(ctx context.Context, addr *capiipam.IPAddress, claim *capiipam.IPAddressClaim) (*metav1.ObjectMeta, bool, error) {
	d, err := r.Ledger.AdoptAddress(claim.Namespace, claim.Name, addr.UID, claim.UID, claim.Spec.PoolRef.Name)
	if errors.Is(err, ledger.ErrAddressNotSeen) {
		return nil, false, nil
	}
	if d.Reason == "" {
		d.Reason, d.Message = mismatch(addr, d)
		if d.Reason != "" {
			err = ledger.ErrMustGo
		}
	}
	if errors.Is(err, ledger.ErrMustGo) {
		d.Message += remedy(addr, claim)
	}
	if d.Reason != "" {
		return nil, false, r.refuse(ctx, claim, d)
	}
	subnet, err := r.protect(ctx, claim.Namespace, claim.Spec.PoolRef.Name, d.SubnetUID)
	if err != nil {
		return nil, false, err // gone, replaced or being deleted: the next decision says so
	}
	return subnet, true, nil
}

// foreign says why an IPAddress is not the claim's to take, whatever its
// address: another object controls it, or it names another claim or pool.
func foreign(addr *capiipam.IPAddress, claim *capiipam.IPAddressClaim) (reason, message string) {
	failed := capiipam.IPAddressClaimReadyAllocationFailedReason
	if owner := metav1.GetControllerOf(addr); owner != nil && !isRef(*owner, capiipam.GroupVersion.Group, "IPAddressClaim", claim.Name) {
		return failed, fmt.Sprintf("IPAddress %s is controlled by %s %s, not by a claim of this name; it is not taken over", addr.Name, owner.Kind, owner.Name)
	}
	if addr.Spec.ClaimRef.Name != claim.Name {
		return failed, fmt.Sprintf("IPAddress %s belongs to claim %s (spec.claimRef); delete it for this claim to get an address", addr.Name, addr.Spec.ClaimRef.Name)
	}
	if addr.Spec.PoolRef != claim.Spec.PoolRef {
		return failed, fmt.Sprintf("IPAddress %s is from pool %s %s, not from Subnet %s that the claim names; delete it for this claim to get an address",
			addr.Name, addr.Spec.PoolRef.Kind, addr.Spec.PoolRef.Name, claim.Spec.PoolRef.Name)
	}
	return "", ""
}

// adoptable reports whether the claim may try to take the IPAddress: no
// claim controls it (adopt refuses, saying why, if it is not the claim's),
// or a gone claim of this name did and it names the claim and its pool.
func adoptable(addr *capiipam.IPAddress, claim *capiipam.IPAddressClaim) bool {
	reason, _ := foreign(addr, claim)
	return orphan(addr) || reason == ""
}

// mismatch says why an IPAddress whose address the Subnet hands out still
// is not what the Subnet would write: another prefix or gateway.
func mismatch(addr *capiipam.IPAddress, d ledger.AddressDecision) (reason, message string) {
	failed := capiipam.IPAddressClaimReadyAllocationFailedReason
	if p := ptr.Deref(addr.Spec.Prefix, -1); p != int32(d.Prefix) {
		return failed, fmt.Sprintf("IPAddress %s has prefix %d; Subnet %s hands out /%d", addr.Name, p, addr.Spec.PoolRef.Name, d.Prefix)
	}
	if gw, err := netip.ParseAddr(addr.Spec.Gateway); err != nil || gw.Unmap() != d.Gateway {
		return failed, fmt.Sprintf("IPAddress %s has gateway %q; Subnet %s's gateway is %s", addr.Name, addr.Spec.Gateway, addr.Spec.PoolRef.Name, d.Gateway)
	}
	return "", ""
}

// remedy says what to delete for the claim to get an address: an
// IPAddress the claim does not own yet is kept until it is deleted; one it
// owns, until the claim is (it may be in use by the machine).
func remedy(addr *capiipam.IPAddress, claim *capiipam.IPAddressClaim) string {
	if ownedBy(addr, claim.UID) {
		return "; delete the claim to release it"
	}
	return "; delete the IPAddress and the claim gets a free address"
}

// isRef reports whether an owner reference names the object of this group,
// kind and name (any version, any UID).
func isRef(ref metav1.OwnerReference, group, kind, name string) bool {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == group && ref.Kind == kind && ref.Name == name
}

// orphan reports whether no claim controls an IPAddress: restored by a
// backup tool (owner references dropped) or written by hand. It is kept,
// with its address, until a claim of its name adopts it; only one whose
// claim is gone is released.
func orphan(addr *capiipam.IPAddress) bool {
	owner := metav1.GetControllerOf(addr)
	return owner == nil || !isRef(*owner, capiipam.GroupVersion.Group, "IPAddressClaim", owner.Name)
}
