package webhooks

import (
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// reasonDelegation labels refusals of a delegated pool's spec in the
// admission metrics.
const reasonDelegation = "invalid_delegation"

// A delegated root pool (spec.delegation) takes its range from a pool in a
// hub cluster. Without spec.cidr it asks the hub for delegation.prefixLength;
// the member's manager writes the grant into spec.cidr once. That cidr, or
// one written at create (a restore, an explicit request), is a request to
// the hub: the webhook checks it as any root pool's range (canonical, no
// overlap with the member's other roots), and the arbiter serves it only
// once the hub granted exactly that range (ledger/delegation.go), so a
// tenant who writes a range of its choosing gets nothing the hub did not
// give. The schema (CEL) keeps the rest: cidr written once and immutable,
// delegation immutable, root pools only, a hub namespace named.

// awaitsGrant reports whether a pool's spec has no range yet because the
// hub has not granted one.
func awaitsGrant(spec *ipamv1.SubnetPoolSpec) bool {
	return spec.Delegation != nil && spec.CIDR == ""
}

// validateDelegation repeats the schema's rules for delegated pools that an
// update through v1alpha1 (which has no delegation field; an annotation
// carries it) would otherwise escape: the delegation is fixed at create,
// a delegated pool is a root, and its cidr is written once.
func validateDelegation(old, spec *ipamv1.SubnetPoolSpec, path *field.Path) verdict {
	var v verdict
	d := spec.Delegation
	if d != nil && spec.ParentRef != nil {
		v.add(reasonDelegation, field.Forbidden(path.Child("delegation"), "a delegated pool is a root pool: it takes its range from the hub, not from a parent"))
	}
	if d != nil && d.PoolRef.Namespace == "" {
		v.add(reasonDelegation, field.Required(path.Child("delegation", "poolRef", "namespace"), "name the hub pool's namespace"))
	}
	if d != nil && spec.CIDR == "" && d.PrefixLength == nil {
		v.add(reasonDelegation, field.Required(path.Child("delegation", "prefixLength"), "a delegated pool asks the hub for a range: set delegation.prefixLength, or spec.cidr for an explicit range"))
	}
	if old == nil {
		return v
	}
	if !equality.Semantic.DeepEqual(old.Delegation, spec.Delegation) {
		v.add(reasonImmutable, field.Invalid(path.Child("delegation"), spec.Delegation, "is immutable: create a new delegated pool"))
	}
	if old.Delegation != nil && old.CIDR != "" && spec.CIDR != old.CIDR {
		v.add(reasonImmutable, field.Invalid(path.Child("cidr"), spec.CIDR, "the cidr of a delegated pool is written once, with the hub's grant, and is immutable: create a new delegated pool for another range"))
	}
	return v
}
