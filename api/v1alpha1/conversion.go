package v1alpha1

import (
	"context"
	"encoding/json"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// v1alpha2 is the hub and the storage version; this version is converted to
// and from it (the manager serves the CRDs' conversion webhook with these
// functions). The only difference is the pool reference: a name here, an
// object {name, namespace} there.
//
// A v1alpha2 reference into another namespace cannot be said here. Converted
// to v1alpha1 it keeps its name in spec.poolRef (or spec.parentRef) and the
// whole reference travels in an annotation, so that a v1alpha1 client's
// read-modify-write sends it back and the conversion to v1alpha2 restores
// it: nothing is lost, as in Kubernetes' own lossy conversions. The status
// says which reference it was decided for (status.decidedFor), so that an
// annotation that moves the reference never takes along a range another
// pool granted (decidedFor, below).
const (
	// AnnotationPoolRef holds a Subnet's v1alpha2 spec.poolRef
	// ("namespace/name") while it is read through v1alpha1.
	AnnotationPoolRef = "ipam.subnet-operator.io/v1alpha2-pool-ref"
	// AnnotationParentRef holds a SubnetPool's v1alpha2 spec.parentRef.
	AnnotationParentRef = "ipam.subnet-operator.io/v1alpha2-parent-ref"
	// AnnotationAllowedNamespaces holds a SubnetPool's v1alpha2
	// spec.allowedNamespaces (JSON), which v1alpha1 has no field for.
	AnnotationAllowedNamespaces = "ipam.subnet-operator.io/v1alpha2-allowed-namespaces"
	// AnnotationDelegation holds a SubnetPool's v1alpha2 spec.delegation
	// (JSON), which v1alpha1 has no field for.
	AnnotationDelegation = "ipam.subnet-operator.io/v1alpha2-delegation"
)

// ConvertSubnetToHub converts a v1alpha1 Subnet to v1alpha2. It leaves
// TypeMeta alone: the caller allocated dst for its version.
func ConvertSubnetToHub(_ context.Context, src *Subnet, dst *v1alpha2.Subnet) error {
	ref, meta := referenceToHub(src.ObjectMeta, src.Spec.PoolRef, AnnotationPoolRef)
	dst.ObjectMeta = meta
	dst.Spec = v1alpha2.SubnetSpec{
		PoolRef:      ref,
		CIDR:         src.Spec.CIDR,
		PrefixLength: copyInt32(src.Spec.PrefixLength),
		Gateway:      src.Spec.Gateway,
	}
	dst.Status = v1alpha2.SubnetStatus{
		ObservedGeneration: src.Status.ObservedGeneration,
		CIDR:               src.Status.CIDR,
		Addresses:          src.Status.Addresses,
		Gateway:            src.Status.Gateway,
		IPAddresses:        (*v1alpha2.IPAddressUsage)(src.Status.IPAddresses.DeepCopy()),
		Conditions:         copyConditions(src.Status.Conditions),
	}
	if !decidedFor(src.Status.DecidedFor, src.Namespace, src.Spec.PoolRef, ref) {
		dst.Status = v1alpha2.SubnetStatus{}
	}
	return nil
}

// ConvertSubnetFromHub converts a v1alpha2 Subnet to v1alpha1.
func ConvertSubnetFromHub(_ context.Context, src *v1alpha2.Subnet, dst *Subnet) error {
	name, meta := referenceFromHub(src.ObjectMeta, src.Spec.PoolRef, AnnotationPoolRef)
	dst.ObjectMeta = meta
	dst.Spec = SubnetSpec{
		PoolRef:      name,
		CIDR:         src.Spec.CIDR,
		PrefixLength: copyInt32(src.Spec.PrefixLength),
		Gateway:      src.Spec.Gateway,
	}
	dst.Status = SubnetStatus{
		DecidedFor:         foreignReference(src.Namespace, src.Spec.PoolRef),
		ObservedGeneration: src.Status.ObservedGeneration,
		CIDR:               src.Status.CIDR,
		Addresses:          src.Status.Addresses,
		Gateway:            src.Status.Gateway,
		IPAddresses:        (*IPAddressUsage)(src.Status.IPAddresses.DeepCopy()),
		Conditions:         copyConditions(src.Status.Conditions),
	}
	return nil
}

// ConvertSubnetPoolToHub converts a v1alpha1 SubnetPool to v1alpha2.
func ConvertSubnetPoolToHub(_ context.Context, src *SubnetPool, dst *v1alpha2.SubnetPool) error {
	ref, meta := referenceToHub(src.ObjectMeta, src.Spec.ParentRef, AnnotationParentRef)
	var parent *v1alpha2.PoolReference
	if src.Spec.ParentRef != "" {
		parent = &ref
	}
	allowed, meta := allowedToHub(meta)
	delegation, meta := carriedToHub[v1alpha2.PoolDelegation](meta, AnnotationDelegation)
	dst.ObjectMeta = meta
	dst.Spec = v1alpha2.SubnetPoolSpec{
		CIDR:                src.Spec.CIDR,
		ParentRef:           parent,
		AddressSpace:        src.Spec.AddressSpace,
		AllowedNamespaces:   allowed,
		Delegation:          delegation,
		DefaultPrefixLength: copyInt32(src.Spec.DefaultPrefixLength),
		MinPrefixLength:     copyInt32(src.Spec.MinPrefixLength),
		MaxPrefixLength:     copyInt32(src.Spec.MaxPrefixLength),
		Reserved:            copyStrings(src.Spec.Reserved),
	}
	s := &src.Status
	dst.Status = v1alpha2.SubnetPoolStatus{
		ObservedGeneration: s.ObservedGeneration,
		CIDR:               s.CIDR,
		GrantedToUID:       s.GrantedToUID,
		Capacity:           s.Capacity,
		Reserved:           s.Reserved,
		Allocated:          s.Allocated,
		Free:               s.Free,
		FreeReadable:       s.FreeReadable,
		Utilization:        s.Utilization,
		UtilizationPercent: copyInt32(s.UtilizationPercent),
		Subnets:            s.Subnets,
		ChildPools:         s.ChildPools,
		LargestFreeBlock:   s.LargestFreeBlock,
		FreeBlocks:         copyStrings(s.FreeBlocks),
		AllocatableBlocks:  s.AllocatableBlocks,
		Conditions:         copyConditions(s.Conditions),
	}
	if parent != nil && !decidedFor(s.DecidedFor, src.Namespace, src.Spec.ParentRef, ref) {
		dst.Status = v1alpha2.SubnetPoolStatus{}
	}
	return nil
}

// ConvertSubnetPoolFromHub converts a v1alpha2 SubnetPool to v1alpha1.
func ConvertSubnetPoolFromHub(_ context.Context, src *v1alpha2.SubnetPool, dst *SubnetPool) error {
	var ref v1alpha2.PoolReference // none: a root pool
	if src.Spec.ParentRef != nil {
		ref = *src.Spec.ParentRef
	}
	parent, meta := referenceFromHub(src.ObjectMeta, ref, AnnotationParentRef)
	dst.ObjectMeta = carriedFromHub(allowedFromHub(meta, src.Spec.AllowedNamespaces), AnnotationDelegation, src.Spec.Delegation)
	dst.Spec = SubnetPoolSpec{
		CIDR:                src.Spec.CIDR,
		ParentRef:           parent,
		AddressSpace:        src.Spec.AddressSpace,
		DefaultPrefixLength: copyInt32(src.Spec.DefaultPrefixLength),
		MinPrefixLength:     copyInt32(src.Spec.MinPrefixLength),
		MaxPrefixLength:     copyInt32(src.Spec.MaxPrefixLength),
		Reserved:            copyStrings(src.Spec.Reserved),
	}
	s := &src.Status
	dst.Status = SubnetPoolStatus{
		DecidedFor:         foreignReference(src.Namespace, ref),
		ObservedGeneration: s.ObservedGeneration,
		CIDR:               s.CIDR,
		GrantedToUID:       s.GrantedToUID,
		Capacity:           s.Capacity,
		Reserved:           s.Reserved,
		Allocated:          s.Allocated,
		Free:               s.Free,
		FreeReadable:       s.FreeReadable,
		Utilization:        s.Utilization,
		UtilizationPercent: copyInt32(s.UtilizationPercent),
		Subnets:            s.Subnets,
		ChildPools:         s.ChildPools,
		LargestFreeBlock:   s.LargestFreeBlock,
		FreeBlocks:         copyStrings(s.FreeBlocks),
		AllocatableBlocks:  s.AllocatableBlocks,
		Conditions:         copyConditions(s.Conditions),
	}
	return nil
}

// referenceToHub makes the v1alpha2 reference of a v1alpha1 name: in the
// object's own namespace, unless the annotation carries a reference that
// still names the same pool (one that a v1alpha2 client wrote, sent back by
// a v1alpha1 client): then that. The annotation is consumed; meta is a copy.
// One that is not namespace/name is dropped: failing would fail a whole
// list of objects stored as v1alpha1. A v1alpha1 client can write the
// annotation too; that an update does not change the reference is the
// admission webhooks' check (the reference is immutable), done on the
// converted object.
func referenceToHub(meta metav1.ObjectMeta, name, annotation string) (v1alpha2.PoolReference, metav1.ObjectMeta) {
	meta = *meta.DeepCopy()
	ref := v1alpha2.PoolReference{Name: name, Namespace: meta.Namespace}
	if carried, ok := meta.Annotations[annotation]; ok {
		ns, carriedName, found := strings.Cut(carried, "/")
		// The namespace must be one v1alpha2's schema accepts: a v1alpha1
		// request is checked in v1alpha1, where the annotation is free text.
		if found && len(validation.IsDNS1123Label(ns)) == 0 && carriedName != "" && carriedName == name {
			ref = v1alpha2.PoolReference{Name: carriedName, Namespace: ns}
		}
		delete(meta.Annotations, annotation)
		if len(meta.Annotations) == 0 {
			meta.Annotations = nil
		}
	}
	return ref, meta
}

// referenceFromHub is the v1alpha1 name of a v1alpha2 reference, and the
// object's metadata with the annotation that carries a reference the name
// cannot say (into another namespace), and without one a v1alpha2 client
// wrote itself: the annotation says only what the reference says. meta is
// a copy.
func referenceFromHub(meta metav1.ObjectMeta, ref v1alpha2.PoolReference, annotation string) (string, metav1.ObjectMeta) {
	meta = *meta.DeepCopy()
	delete(meta.Annotations, annotation)
	if ref.Namespace != "" && ref.Namespace != meta.Namespace {
		if meta.Annotations == nil {
			meta.Annotations = map[string]string{}
		}
		meta.Annotations[annotation] = ref.Namespace + "/" + ref.Name
	}
	if len(meta.Annotations) == 0 {
		meta.Annotations = nil
	}
	return ref.Name, meta
}

// decidedFor reports whether a v1alpha1 status, which says it was decided
// for the pool recorded ("namespace/name"; empty: the pool of that name in
// the object's own namespace), was decided for ref, the reference the
// object converts to. A status is the decision of the pool it was decided
// in: the range it holds was granted there, by that pool's consent and
// against that pool's claims. An annotation can move a v1alpha1 object's
// reference into another namespace, and one stored by the earlier release
// (which knew no annotation) was never checked by anyone; its status must
// not come along, or the pool it now names would find a range held that it
// never granted, and keep it (a held range is never taken away) beside
// another claim's. Without the status, that pool judges the claim as it
// judges a create.
func decidedFor(recorded, namespace, name string, ref v1alpha2.PoolReference) bool {
	if recorded == "" {
		recorded = namespace + "/" + name
	}
	return recorded == ref.In(namespace)+"/"+ref.Name
}

// foreignReference is ref as "namespace/name" when it points into another
// namespace than namespace, the object's own; else empty.
func foreignReference(namespace string, ref v1alpha2.PoolReference) string {
	if ref.Namespace == "" || ref.Namespace == namespace {
		return ""
	}
	return ref.Namespace + "/" + ref.Name
}

// allowedToHub takes a pool's spec.allowedNamespaces out of the annotation
// that carries it through v1alpha1 (meta is already a copy). One that does
// not decode is dropped, and the pool allows its own namespace only: the
// safe reading, and failing would fail a whole list.
func allowedToHub(meta metav1.ObjectMeta) (*v1alpha2.AllowedNamespaces, metav1.ObjectMeta) {
	carried, ok := meta.Annotations[AnnotationAllowedNamespaces]
	if !ok {
		return nil, meta
	}
	delete(meta.Annotations, AnnotationAllowedNamespaces)
	if len(meta.Annotations) == 0 {
		meta.Annotations = nil
	}
	var allowed v1alpha2.AllowedNamespaces
	if err := json.Unmarshal([]byte(carried), &allowed); err != nil {
		return nil, meta
	}
	return &allowed, meta
}

// allowedFromHub puts spec.allowedNamespaces into the annotation (meta is a
// copy), replacing one a client wrote.
func allowedFromHub(meta metav1.ObjectMeta, allowed *v1alpha2.AllowedNamespaces) metav1.ObjectMeta {
	delete(meta.Annotations, AnnotationAllowedNamespaces)
	if allowed != nil {
		data, err := json.Marshal(allowed)
		if err == nil { // a struct of strings and maps always marshals
			if meta.Annotations == nil {
				meta.Annotations = map[string]string{}
			}
			meta.Annotations[AnnotationAllowedNamespaces] = string(data)
		}
	}
	if len(meta.Annotations) == 0 {
		meta.Annotations = nil
	}
	return meta
}

// carriedToHub takes a v1alpha2 field that v1alpha1 has no field for out
// of the annotation that carries it (meta is already a copy). One that does
// not decode is dropped, as allowedToHub drops one: failing would fail a
// whole list.
func carriedToHub[T any](meta metav1.ObjectMeta, annotation string) (*T, metav1.ObjectMeta) {
	carried, ok := meta.Annotations[annotation]
	if !ok {
		return nil, meta
	}
	delete(meta.Annotations, annotation)
	if len(meta.Annotations) == 0 {
		meta.Annotations = nil
	}
	var value T
	if err := json.Unmarshal([]byte(carried), &value); err != nil {
		return nil, meta
	}
	return &value, meta
}

// carriedFromHub puts a v1alpha2 field into its annotation (meta is a
// copy), replacing one a client wrote.
func carriedFromHub[T any](meta metav1.ObjectMeta, annotation string, value *T) metav1.ObjectMeta {
	delete(meta.Annotations, annotation)
	if value != nil {
		if data, err := json.Marshal(value); err == nil { // plain structs always marshal
			if meta.Annotations == nil {
				meta.Annotations = map[string]string{}
			}
			meta.Annotations[annotation] = string(data)
		}
	}
	if len(meta.Annotations) == 0 {
		meta.Annotations = nil
	}
	return meta
}

func copyInt32(p *int32) *int32 {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func copyStrings(s []string) []string {
	if s == nil {
		return nil
	}
	return append([]string(nil), s...)
}

func copyConditions(c []metav1.Condition) []metav1.Condition {
	if c == nil {
		return nil
	}
	out := make([]metav1.Condition, len(c))
	for i := range c {
		c[i].DeepCopyInto(&out[i])
	}
	return out
}
