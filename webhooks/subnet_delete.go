package webhooks

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	capiipam "sigs.k8s.io/cluster-api/api/ipam/v1beta2"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

var subnetResource = ipamv1.GroupVersion.WithResource("subnets").GroupResource()

// reasonAddressesInUse labels the refusals of a Subnet delete in the
// admission metrics.
const reasonAddressesInUse = "addresses_in_use"

// addressesInUse refuses the delete of a Subnet whose addresses Cluster API
// IPAddresses use (nil: allowed). Without it kubectl prints "deleted" and
// the Subnet hangs Terminating until the machines let go.
//
// It is best effort: a claim may be handed an address between this check
// and the delete. The address-protection finalizer (capi.SubnetGuard)
// stays the guarantee; the refusal only says early, and what to do.
//
// It refuses only for addresses in use: a released IPAddress (terminating,
// cooling down) goes by itself, so a delete the finalizer then holds for
// at most the cool-down is let through. That is what lets namespace
// deletion, the garbage collector and clusterctl move converge: each
// deletes the IPAddresses (or the claims and Machines that release them)
// too, retries a refused Subnet, and is let through once every IPAddress
// is gone or terminating.
//
// The ledger says whether any address is in use, at no cost for a Subnet
// that never held one (the provider off, or no Cluster API installed:
// nothing changes). It may lag the API server, as after clusterctl move
// deletes the IPAddresses with their finalizers stripped and then the
// Subnet at once: each IPAddress the refusal would name is read again, and
// only those the API server still has, in use, are named; if none is, the
// delete goes through. At most maxNamed reads, and only for a Subnet that
// holds addresses.
//
// What the refusal tells: IPAddresses reference a Subnet of their own
// namespace only (a local poolRef), so every one named is in the namespace
// of the Subnet the requester deletes, as the pool delete refusal names
// only the users in the pool's namespace.
func (v *SubnetValidator) addressesInUse(ctx context.Context, s *ipamv1.Subnet) error {
	if s.DeletionTimestamp != nil {
		return nil // already held by its finalizer: refusing a repeated delete changes nothing
	}
	u, ok := v.Ledger.AddressUsage(s.Namespace, s.Name, maxNamed)
	if !ok || u.InUse == 0 {
		return nil
	}
	var named []string
	stale := 0
	for _, name := range u.Holders {
		inUse, err := v.addressInUse(ctx, s, name)
		if err != nil {
			// Cannot tell: let the finalizer decide rather than block a
			// delete on a failed read.
			return nil
		}
		if inUse {
			named = append(named, s.Namespace+"/"+name)
		} else {
			stale++
		}
	}
	if len(named) == 0 {
		return nil
	}
	total := u.InUse - int64(stale)
	admissionDecisions.WithLabelValues(statuscalc.KindSubnet, operation(ctx), "denied", reasonAddressesInUse).Inc()
	return apierrors.NewForbidden(subnetResource, s.Name, fmt.Errorf(
		"%s; delete their IPAddressClaims (or the Machines that own them) first, then the Subnet",
		describeAddresses(total, named)))
}

// describeAddresses is the first part of the refusal: how many IPAddresses
// are in use and the first few, by namespace/name.
func describeAddresses(total int64, named []string) string {
	list := strings.Join(named, ", ")
	if extra := total - int64(len(named)); extra > 0 {
		list += fmt.Sprintf(" and %d more", extra)
	}
	return fmt.Sprintf("%d %s of this Subnet %s in use by Cluster API machines (%s)",
		total, plural(int(total), "IPAddress", "IPAddresses"), plural(int(total), "is", "are"), list)
}

// addressInUse reads one IPAddress from the API server: does it exist, not
// being deleted, with an address of s?
func (v *SubnetValidator) addressInUse(ctx context.Context, s *ipamv1.Subnet, name string) (bool, error) {
	var a capiipam.IPAddress
	err := v.fresh.reader.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: name}, &a)
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return false, nil
	case err != nil:
		return false, err
	}
	return a.DeletionTimestamp == nil && a.Spec.PoolRef.APIGroup == ipamv1.GroupVersion.Group &&
		a.Spec.PoolRef.Kind == "Subnet" && a.Spec.PoolRef.Name == s.Name, nil
}
