package v1alpha2

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
// +kubebuilder:validation:XValidation:rule="!has(self.cidr) || !isCIDR(self.cidr) || !has(self.defaultPrefixLength) || (self.defaultPrefixLength >= cidr(self.cidr).prefixLength() && self.defaultPrefixLength <= (cidr(self.cidr).ip().family() == 4 ? 32 : 128))",message="defaultPrefixLength must lie between the pool's own prefix length and the family's maximum (32 for IPv4, 128 for IPv6)"
// +kubebuilder:validation:XValidation:rule="!has(self.cidr) || !isCIDR(self.cidr) || !has(self.minPrefixLength) || (self.minPrefixLength >= cidr(self.cidr).prefixLength() && self.minPrefixLength <= (cidr(self.cidr).ip().family() == 4 ? 32 : 128))",message="minPrefixLength must lie between the pool's own prefix length and the family's maximum (32 for IPv4, 128 for IPv6)"
// +kubebuilder:validation:XValidation:rule="!has(self.cidr) || !isCIDR(self.cidr) || !has(self.maxPrefixLength) || (self.maxPrefixLength >= cidr(self.cidr).prefixLength() && self.maxPrefixLength <= (cidr(self.cidr).ip().family() == 4 ? 32 : 128))",message="maxPrefixLength must lie between the pool's own prefix length and the family's maximum (32 for IPv4, 128 for IPv6)"
// +kubebuilder:validation:XValidation:rule="!has(self.reserved) || !has(self.cidr) || !isCIDR(self.cidr) || self.reserved.all(r, !isCIDR(r) || cidr(self.cidr).containsCIDR(r))",message="every reserved range must lie inside cidr and be of its family"
// +kubebuilder:validation:XValidation:rule="has(self.parentRef) == has(oldSelf.parentRef)",message="parentRef cannot be added or removed after creation"
// +kubebuilder:validation:XValidation:rule="!has(self.cidr) || !has(oldSelf.cidr) || !isCIDR(self.cidr) || !isCIDR(oldSelf.cidr) || cidr(self.cidr).ip().family() == cidr(oldSelf.cidr).ip().family()",message="the address family of cidr cannot change: create a pool of the other family"
// +kubebuilder:validation:XValidation:rule="!has(self.addressSpace) || !has(self.parentRef)",message="addressSpace is set on root pools only: a child pool is in its parent's address space"
// +kubebuilder:validation:XValidation:rule="has(self.addressSpace) == has(oldSelf.addressSpace)",message="addressSpace cannot be added or removed after creation: create a new root pool in the other space"
// +kubebuilder:validation:XValidation:rule="has(self.cidr) || has(self.delegation)",message="cidr is required, except on a pool delegated from a hub cluster (spec.delegation), whose range the hub grants"
// +kubebuilder:validation:XValidation:rule="!has(self.delegation) || !has(self.parentRef)",message="a delegated pool is a root pool: it takes its range from the hub, not from a parent"
// +kubebuilder:validation:XValidation:rule="!has(self.delegation) || has(self.cidr) || has(self.delegation.prefixLength)",message="a delegated pool asks the hub for a range: set spec.delegation.prefixLength, or spec.cidr for an explicit range"
// +kubebuilder:validation:XValidation:rule="!has(self.delegation) || !has(self.cidr) || !has(self.delegation.prefixLength) || !isCIDR(self.cidr) || cidr(self.cidr).prefixLength() == self.delegation.prefixLength",message="cidr and delegation.prefixLength together mean a range the hub granted: cidr must be a /prefixLength range"
// +kubebuilder:validation:XValidation:rule="has(self.delegation) == has(oldSelf.delegation)",message="delegation cannot be added or removed after creation: create a new pool"
// +kubebuilder:validation:XValidation:rule="!has(self.delegation) || !has(oldSelf.cidr) || (has(self.cidr) && self.cidr == oldSelf.cidr)",message="the cidr of a delegated pool is written once, with the hub's grant, and is immutable: create a new delegated pool for another range"
type SubnetPoolSpec struct {
	// CIDR is the range of the pool in canonical form, IPv4 (10.0.0.0/16) or
	// IPv6 (2001:db8::/48). Host bits must be zero. It may grow to a range
	// that contains it; it may shrink only while every claim still fits.
	//
	// Required, except on a delegated pool (spec.delegation): there the
	// member's manager writes it once, with the range the hub granted, and
	// it is immutable after; set at create, it asks the hub for that range
	// (a restore from a backup does so).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="must be a CIDR such as 10.0.0.0/16 or 2001:db8::/48 (no zone, no leading zeros, no IPv4-mapped IPv6)"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || cidr(self) == cidr(self).masked()",message="host bits set: write the network address (10.0.0.0/24, not 10.0.0.1/24)"
	CIDR string `json:"cidr,omitempty"`

	// ParentRef is the pool this pool is carved from; its namespace
	// defaults to the pool's own. The range must lie inside the parent and
	// overlap none of the parent's other claims. Immutable.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="parentRef is immutable"
	ParentRef *PoolReference `json:"parentRef,omitempty"`

	// AddressSpace is the space of a root pool (one without parentRef):
	// no two root pools of one space overlap. Empty means the default
	// space; any other name must be an AddressSpace. Immutable.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="addressSpace is immutable: create a new root pool in the other space"
	AddressSpace string `json:"addressSpace,omitempty"`

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

	// AllowedNamespaces says from which namespaces Subnets and child pools
	// may claim from this pool, the way a Gateway's allowedRoutes does.
	// Unset means Same: only the pool's own namespace. A namespace that
	// loses the right keeps the ranges its claims hold; the pool's
	// ClaimsNotAllowed condition names them, and new claims are refused.
	// +optional
	AllowedNamespaces *AllowedNamespaces `json:"allowedNamespaces,omitempty"`

	// Delegation takes this root pool's range from a pool in a hub cluster
	// (docs/fleet.md): the member's manager claims it there, records the
	// grant in spec.cidr and serves it once the hub has granted it. Only
	// on root pools; immutable.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="delegation is immutable: create a new delegated pool"
	Delegation *PoolDelegation `json:"delegation,omitempty"`
}

// PoolDelegation names the hub pool a member's root pool takes its range
// from.
type PoolDelegation struct {
	// PoolRef is the pool in the hub cluster. Its namespace is required:
	// the member's namespaces mean nothing in the hub.
	// +required
	// +kubebuilder:validation:XValidation:rule="has(self.__namespace__)",message="namespace is required: name the hub pool's namespace"
	PoolRef PoolReference `json:"poolRef"`

	// PrefixLength is the size of range to ask the hub for. Leave it out
	// to ask for the explicit range in spec.cidr.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=128
	PrefixLength *int32 `json:"prefixLength,omitempty"`
}

// FromNamespaces says which namespaces a pool allows claims from.
// +kubebuilder:validation:Enum=Same;All;Selector
type FromNamespaces string

const (
	// FromSame allows only the pool's own namespace (the default).
	FromSame FromNamespaces = "Same"
	// FromAll allows every namespace.
	FromAll FromNamespaces = "All"
	// FromSelector allows the pool's own namespace and the namespaces whose
	// labels match the selector.
	FromSelector FromNamespaces = "Selector"
)

// AllowedNamespaces is a pool's consent to claims from other namespaces.
// +kubebuilder:validation:XValidation:rule="self.from == 'Selector' ? has(self.selector) : !has(self.selector)",message="selector is required when from is Selector, and allowed only then"
type AllowedNamespaces struct {
	// From is Same, All or Selector.
	// +optional
	// +kubebuilder:default=Same
	From FromNamespaces `json:"from,omitempty"`

	// Selector selects namespaces by their labels, when From is Selector.
	// The pool's own namespace is always allowed.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`

	// PerNamespace caps what each namespace other than the pool's own may
	// hold from this pool. The pool's own namespace is not capped: its
	// owners set the caps and can change them. Over a cap, a create is
	// refused at admission and a claim that raced past it waits (Ready=False,
	// reason NamespaceQuotaExceeded) until room is freed. Lowering a cap
	// takes nothing away: claims granted before keep their ranges.
	// +optional
	PerNamespace *NamespaceLimits `json:"perNamespace,omitempty"`
}

// NamespaceLimits caps what one namespace holds from a pool, counting its
// Subnets and child pools of this pool (not of the pool's children).
// +kubebuilder:validation:MinProperties=1
type NamespaceLimits struct {
	// MaxClaims is how many Subnets and child pools one namespace may have
	// on this pool.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxClaims *int32 `json:"maxClaims,omitempty"`

	// MaxAddresses is how many addresses one namespace's claims may hold
	// together, a decimal number such as "4096" (a /20 of IPv4) or
	// "18446744073709551616" (one IPv6 /64): a string, like the pool's
	// status counts, because an IPv6 amount does not fit an integer field.
	// A claim counts the whole range it holds or asks for.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=39
	// +kubebuilder:validation:Pattern=`^(0|[1-9][0-9]*)$`
	MaxAddresses string `json:"maxAddresses,omitempty"`
}

// SubnetPoolStatus is what the controller observed of the pool. Address counts
// are decimal strings because an IPv6 pool can hold more than 2^64 addresses.
type SubnetPoolStatus struct {
	// ObservedGeneration is the generation of the spec these figures describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// CIDR is the range the pool serves: spec.cidr once it is valid and, for a
	// child pool, granted by the parent. Subnets are carved from this range.
	// +optional
	CIDR string `json:"cidr,omitempty"`

	// GrantedToUID, on a delegated root pool, is the UID of the pool object
	// the member's manager served CIDR for after seeing the hub grant it.
	// With CIDR equal to spec.cidr it lets the pool keep serving its range
	// without the hub (restarts, hub outages). A status restored onto a new
	// object names the old one, and such a pool waits for the hub.
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
	// default length is left), Overlapping (some claims lost arbitration)
	// and ClaimsNotAllowed (claims hold ranges from namespaces that
	// spec.allowedNamespaces no longer allows).
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
// +kubebuilder:resource:shortName=snp,categories=ipam
// +kubebuilder:storageversion
// +kubebuilder:selectablefield:JSONPath=`.spec.parentRef.name`
// +kubebuilder:printcolumn:name="CIDR",type=string,JSONPath=`.spec.cidr`
// +kubebuilder:printcolumn:name="Parent",type=string,JSONPath=`.spec.parentRef.name`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Used%",type=integer,JSONPath=`.status.utilizationPercent`
// +kubebuilder:printcolumn:name="Free",type=string,JSONPath=`.status.freeReadable`
// +kubebuilder:printcolumn:name="Largest Free",type=string,JSONPath=`.status.largestFreeBlock`
// +kubebuilder:printcolumn:name="Parent Namespace",type=string,JSONPath=`.spec.parentRef.namespace`,priority=1
// +kubebuilder:printcolumn:name="Allowed",type=string,JSONPath=`.spec.allowedNamespaces.from`,priority=1
// +kubebuilder:printcolumn:name="Subnets",type=integer,JSONPath=`.status.subnets`,priority=1
// +kubebuilder:printcolumn:name="Allocatable",type=string,JSONPath=`.status.allocatableBlocks`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="!has(self.spec.parentRef) || has(self.spec.parentRef.namespace) || self.spec.parentRef.name != self.metadata.name",message="spec.parentRef must not name the pool itself"
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
