package reconcilers

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// Field indexes of the manager's cache, declared once here and registered
// by cmd/manager before the webhooks and controllers start. The ledger
// answers the hot paths; this lets a reconcile confirm from the cache what
// the ledger says before an irreversible step (removing a pool's
// finalizer). Subnets are not cached (ledger.SubnetFeed): that check asks
// the API server, by the CRD's selectable field spec.poolRef.name.
const (
	// IndexPoolParentRef indexes SubnetPools by the parent they name,
	// "namespace/name" (ParentKey), whichever namespace the child is in.
	IndexPoolParentRef = "spec.parentRef"
	// FieldSubnetPoolRef is the Subnet CRD's selectable field
	// spec.poolRef.name.
	FieldSubnetPoolRef = "spec.poolRef.name"
)

// ParentKey is IndexPoolParentRef's value for the pool namespace/name.
func ParentKey(namespace, name string) string { return namespace + "/" + name }

// RegisterIndexes adds the field indexes to the manager's cache.
func RegisterIndexes(ctx context.Context, indexer client.FieldIndexer) error {
	return indexer.IndexField(ctx, &ipamv1.SubnetPool{}, IndexPoolParentRef, poolParentRef)
}

func poolParentRef(o client.Object) []string {
	if p, ok := o.(*ipamv1.SubnetPool); ok && p.Spec.ParentRef != nil {
		return []string{ParentKey(p.Spec.ParentRef.In(p.Namespace), p.Spec.ParentRef.Name)}
	}
	return nil
}
