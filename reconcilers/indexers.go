package reconcilers

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha1"
)

// Field indexes of the manager's cache, declared once here and registered
// by cmd/manager before the webhooks and controllers start. The ledger
// answers the hot paths; these let a reconcile confirm from the cache what
// the ledger says before an irreversible step (removing a pool's finalizer)
// and let the auditor list a pool's Subnets.
const (
	// IndexSubnetPoolRef indexes Subnets by spec.poolRef.
	IndexSubnetPoolRef = "spec.poolRef"
	// IndexPoolParentRef indexes SubnetPools by spec.parentRef.
	IndexPoolParentRef = "spec.parentRef"
)

// RegisterIndexes adds the field indexes to the manager's cache.
func RegisterIndexes(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &ipamv1.Subnet{}, IndexSubnetPoolRef, subnetPoolRef); err != nil {
		return err
	}
	return indexer.IndexField(ctx, &ipamv1.SubnetPool{}, IndexPoolParentRef, poolParentRef)
}

func subnetPoolRef(o client.Object) []string {
	if s, ok := o.(*ipamv1.Subnet); ok && s.Spec.PoolRef != "" {
		return []string{s.Spec.PoolRef}
	}
	return nil
}

func poolParentRef(o client.Object) []string {
	if p, ok := o.(*ipamv1.SubnetPool); ok && p.Spec.ParentRef != "" {
		return []string{p.Spec.ParentRef}
	}
	return nil
}
