package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// SubnetPoolSpec is the range a pool hands out and the rules for handing it out.
//
// The CEL rules below hold even when the admission webhook is unreachable; the
// webhook adds the checks that need other objects (parent, siblings, claims).
//
// +kubebuilder:validation:XValidation:rule="!has(self.minPrefixLength) || !has(self.maxPrefixLength) || self.minPrefixLength <= self.maxPrefixLength",message="minPrefixLength must not be greater than maxPrefixLength"
// +kubebuilder:validation:XValidation:rule="!has(self.defaultPrefixLength) || !has(self.minPrefixLength) || self.defaultPrefixLength >= self.minPrefixLength",message="defaultPrefixLength must not be less than minPrefixLength"
// +kubebuilder:validation:XValidation:rule="!has(self.defaultPrefixLength) || !has(self.maxPrefixLength) || self.defaultPrefixLength <= self.maxPrefixLength",message="defaultPrefixLength must not be greater than maxPrefixLength"
// +kubebuilder:validation:XValidation:rule="!isCIDR(self.cidr) || !has(self.defaultPrefixLength) || (self.defaultPrefixLength >= cidr(self.cidr).prefixLength() && self.defaultPrefixLength <= (cidr(self.cidr).ip().family() == 4 ? 32 : 128))",message="defaultPrefixLength must lie between the pool's own prefix length and the family's maximum (32 for IPv4, 128 for IPv6)"
// +kubebuilder:validation:XValidation:rule="!isCIDR(self.cidr) || !has(self.minPrefixLength) || (self.minPrefixLength >= cidr(self.cidr).prefixLength() && self.minPrefixLength <= (cidr(self.cidr).ip().family() == 4 ? 32 : 128))",message="minPrefixLength must lie between the pool's own prefix length and the family's maximum (32 for IPv4, 128 for IPv6)"
// +kubebuilder:validation:XValidation:rule="!isCIDR(self.cidr) || !has(self.maxPrefixLength) || (self.maxPrefixLength >= cidr(self.cidr).prefixLength() && self.maxPrefixLength <= (cidr(self.cidr).ip().family() == 4 ? 32 : 128))",message="maxPrefixLength must lie between the pool's own prefix length and the family's maximum (32 for IPv4, 128 for IPv6)"
// +kubebuilder:validation:XValidation:rule="!has(self.reserved) || !isCIDR(self.cidr) || self.reserved.all(r, !isCIDR(r) || cidr(self.cidr).containsCIDR(r))",message="every reserved range must lie inside cidr and be of its family"
// +kubebuilder:validation:XValidation:rule="has(self.parentRef) == has(oldSelf.parentRef)",message="parentRef cannot be added or removed after creation"
// +kubebuilder:validation:XValidation:rule="!isCIDR(self.cidr) || !isCIDR(oldSelf.cidr) || cidr(self.cidr).ip().family() == cidr(oldSelf.cidr).ip().family()",message="the address family of cidr cannot change: create a pool of the other family"
// +kubebuilder:validation:XValidation:rule="!has(self.addressSpace) || !has(self.parentRef)",message="addressSpace is set on root pools only: a child pool is in its parent's address space"
// +kubebuilder:validation:XValidation:rule="has(self.addressSpace) == has(oldSelf.addressSpace)",message="addressSpace cannot be added or removed after creation: create a new root pool in the other space"
type SubnetPoolSpec struct {
	// CIDR is the range of the pool in canonical form, IPv4 (10.0.0.0/16) or
	// IPv6 (2001:db8::/48). Host bits must be zero. It may grow to a range
	// that contains it; it may shrink only while every claim still fits.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="must be a CIDR such as 10.0.0.0/16 or 2001:db8::/48 (no zone, no leading zeros, no IPv4-mapped IPv6)"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || cidr(self) == cidr(self).masked()",message="host bits set: write the network address (10.0.0.0/24, not 10.0.0.1/24)"
	CIDR string `json:"cidr"`

	// ParentRef names the pool, in the same namespace, that this pool is carved
	// from. The range must lie inside the parent and overlap none of the
	// parent's other claims. Immutable.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="parentRef is immutable"
	ParentRef string `json:"parentRef,omitempty"`

	// DefaultPrefixLength is the length a Subnet gets when it names neither a
	// cidr nor a prefixLength. It is also the block size that
	// status.allocatableBlocks counts.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=128
	DefaultPrefixLength *int32 `json:"defaultPrefixLength,omitempty"`

	// MinPrefixLength is the shortest prefix (the largest range) a Subnet may
	// claim from this pool.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=128
	MinPrefixLength *int32 `json:"minPrefixLength,omitempty"`

	// MaxPrefixLength is the longest prefix (the smallest range) a Subnet may
	// claim from this pool.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=128
	MaxPrefixLength *int32 `json:"maxPrefixLength,omitempty"`

	// Reserved ranges inside the pool are never handed out (a gateway block,
	// addresses managed elsewhere). Each is a CIDR of the pool's family.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="must be a CIDR such as 10.0.0.0/24 (no zone, no leading zeros, no IPv4-mapped IPv6)"
	// +kubebuilder:validation:items:XValidation:rule="!isCIDR(self) || cidr(self) == cidr(self).masked()",message="host bits set: write the network address (10.0.0.0/24, not 10.0.0.1/24)"
	Reserved []string `json:"reserved,omitempty"`

	// AddressSpace is the space of a root pool: no two root pools of one
	// space overlap. Empty means the default space. Immutable. (As in
	// v1alpha2: a field, not an annotation, so no version carries it
	// past the schema's checks.)
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="addressSpace is immutable: create a new root pool in the other space"
	AddressSpace string `json:"addressSpace,omitempty"`
}

// SubnetPoolStatus is what the controller observed of the pool. Address counts
// are decimal strings because an IPv6 pool can hold more than 2^64 addresses.
// A status decided for a pool in another namespace (decidedFor) is this
// release's decision, written through v1alpha2; a v1alpha1 status write
// that gives such a status a range is the earlier release's controller,
// still running during a rolling upgrade, deciding in the wrong pool (it
// knows no references into other namespaces).
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.decidedFor) || !has(self.cidr) || (has(oldSelf.cidr) && self.cidr == oldSelf.cidr)",message="a status decided for a pool in another namespace (decidedFor) gets its range from this release's controller only: stop the earlier release before upgrading"
type SubnetPoolStatus struct {
	// DecidedFor is the parent pool ("namespace/name") this status was
	// decided for, when it is in another namespace than the pool. Without
	// it, a child pool's status was decided for the parent spec.parentRef
	// names in the pool's own namespace. Set by the conversion from
	// v1alpha2; as Subnet's status.decidedFor.
	// +optional
	DecidedFor string `json:"decidedFor,omitempty"`

	// ObservedGeneration is the generation of the spec these figures describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// CIDR is the range the pool serves: spec.cidr once it is valid and, for a
	// child pool, granted by the parent. Subnets are carved from this range.
	// +optional
	CIDR string `json:"cidr,omitempty"`

	// GrantedToUID: as v1alpha2's status.grantedToUID.
	// +optional
	GrantedToUID types.UID `json:"grantedToUID,omitempty"`

	// Capacity is the number of addresses in the served range.
	// +optional
	Capacity string `json:"capacity,omitempty"`

	// Reserved is the number of addresses in spec.reserved.
	// +optional
	Reserved string `json:"reserved,omitempty"`

	// Allocated is the number of addresses held by Ready Subnets and child pools.
	// +optional
	Allocated string `json:"allocated,omitempty"`

	// Free is capacity minus reserved minus allocated. A decimal string,
	// since an IPv6 pool's count does not fit an integer field; kubectl
	// --sort-by=.status.free still orders it numerically (it compares
	// strings that parse as numbers by value).
	// +optional
	Free string `json:"free,omitempty"`

	// FreeReadable is Free as a person reads it, what the FREE column
	// shows: the count up to 2^40, else a power of two ("2^80", or
	// "≈2^80" when not exact).
	// +optional
	FreeReadable string `json:"freeReadable,omitempty"`

	// Utilization is allocated / (capacity - reserved), as a percentage
	// with two decimals, truncated ("37.50%").
	// +optional
	Utilization string `json:"utilization,omitempty"`

	// UtilizationPercent is Utilization as a whole number, truncated (100
	// only when full): sort pools with
	// kubectl get snp --sort-by=.status.utilizationPercent.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	UtilizationPercent *int32 `json:"utilizationPercent,omitempty"`

	// Subnets is the number of Subnets that reference this pool.
	// +optional
	Subnets int32 `json:"subnets,omitempty"`

	// ChildPools is the number of pools whose parentRef is this pool.
	// +optional
	ChildPools int32 `json:"childPools,omitempty"`

	// LargestFreeBlock is the largest free aligned block (lowest address
	// first), for example 10.0.128.0/17. Empty when the pool is full.
	// +optional
	LargestFreeBlock string `json:"largestFreeBlock,omitempty"`

	// FreeBlocks are the largest free aligned blocks, at most 8: largest
	// first, lowest address first among blocks of one size. Together they
	// show where the next large allocations can come from; kubectl ipam
	// free lists them all.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	FreeBlocks []string `json:"freeBlocks,omitempty"`

	// AllocatableBlocks is how many blocks of spec.defaultPrefixLength can
	// still be allocated, given fragmentation. Empty without a default length.
	// +optional
	AllocatableBlocks string `json:"allocatableBlocks,omitempty"`

	// Conditions: Ready (the pool serves spec.cidr), Exhausted (no block of the
	// default length is left) and Overlapping (some claims lost arbitration).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// SubnetPool is a range of IP addresses that Subnets and child pools are
// carved from.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:deprecatedversion:warning="ipam.subnet-operator.io/v1alpha1 SubnetPool is deprecated: use v1alpha2, where poolRef and parentRef are {name, namespace}"
// +kubebuilder:resource:shortName=snp,categories=ipam
// +kubebuilder:selectablefield:JSONPath=`.spec.parentRef`
// +kubebuilder:printcolumn:name="CIDR",type=string,JSONPath=`.spec.cidr`
// +kubebuilder:printcolumn:name="Parent",type=string,JSONPath=`.spec.parentRef`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Used%",type=integer,JSONPath=`.status.utilizationPercent`
// +kubebuilder:printcolumn:name="Free",type=string,JSONPath=`.status.freeReadable`
// +kubebuilder:printcolumn:name="Largest Free",type=string,JSONPath=`.status.largestFreeBlock`
// +kubebuilder:printcolumn:name="Subnets",type=integer,JSONPath=`.status.subnets`,priority=1
// +kubebuilder:printcolumn:name="Allocatable",type=string,JSONPath=`.status.allocatableBlocks`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="!has(self.spec.parentRef) || self.spec.parentRef != self.metadata.name",message="spec.parentRef must not name the pool itself"
type SubnetPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec SubnetPoolSpec `json:"spec"`

	// +optional
	Status SubnetPoolStatus `json:"status,omitempty"`
}

// SubnetPoolList is a list of SubnetPools.
//
// +kubebuilder:object:root=true
type SubnetPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SubnetPool `json:"items"`
}
