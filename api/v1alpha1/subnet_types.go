package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SubnetSpec claims a range from a pool: either an explicit cidr, or a
// prefixLength that the controller allocates. With neither, the defaulting
// webhook fills prefixLength from the pool's defaultPrefixLength (and the
// controller falls back to it when the webhook was bypassed).
//
// Every rule here is v1alpha2's, word for word: a request is checked in
// the version it is written in, and the validating webhook is called for
// an update only when the reference changes (config/webhook), so a rule
// missing here would let a v1alpha1 client make a change that a v1alpha2
// client is refused.
//
// The spec is immutable: a Subnet is a claim, and moving a claim means
// releasing it (delete) and claiming anew (create). One field is written
// once after creation: the controller records the range it allocated to a
// prefixLength claim in spec.cidr (as the API server records a Service's
// clusterIP), so that the Subnet asks for the same range again when it is
// restored from a backup without status.
//
// +kubebuilder:validation:XValidation:rule="!has(self.cidr) || !has(self.prefixLength) || !isCIDR(self.cidr) || cidr(self.cidr).prefixLength() == self.prefixLength || (oldSelf.hasValue() && ((has(oldSelf.value().cidr) && oldSelf.value().cidr != self.cidr) || (has(oldSelf.value().prefixLength) && oldSelf.value().prefixLength != self.prefixLength)))",message="cidr and prefixLength together mean a range allocated earlier: cidr must be a /prefixLength range",optionalOldSelf=true
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.cidr) || !has(self.cidr) || self.cidr == oldSelf.cidr",messageExpression="'\"%s\": cidr is immutable: a Subnet keeps the range it claims (%s) for its lifetime; to claim another, delete this Subnet and create a new one (kubectl ipam next %s shows what the pool would allocate)'.format([self.cidr, oldSelf.cidr, self.poolRef])",fieldPath=".cidr",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.prefixLength) || !has(self.prefixLength) || self.prefixLength == oldSelf.prefixLength",messageExpression="'%d: prefixLength is immutable: a Subnet keeps the length it asked for (/%d) for its lifetime; to claim another, delete this Subnet and create a new one (kubectl ipam next %s --length %d shows what the pool would allocate)'.format([self.prefixLength, oldSelf.prefixLength, self.poolRef, self.prefixLength])",fieldPath=".prefixLength",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="has(self.prefixLength) == has(oldSelf.prefixLength) || (!has(oldSelf.prefixLength) && !has(oldSelf.cidr) && has(self.cidr))",message="prefixLength cannot be added or removed after creation, except beside the range recorded in cidr"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.cidr) || has(self.cidr)",message="cidr cannot be removed: it is the range this Subnet claims (for a prefixLength claim, the range allocated to it)"
// +kubebuilder:validation:XValidation:rule="!has(self.gateway) || has(self.cidr)",message="needs an explicit cidr: the gateway of a range not allocated yet cannot be known; leave gateway out to use the first usable address",fieldPath=".gateway"
// +kubebuilder:validation:XValidation:rule="!has(self.gateway) || !has(self.cidr) || !isCIDR(self.cidr) || !isIP(self.gateway) || cidr(self.cidr).containsIP(self.gateway)",messageExpression="'is outside spec.cidr ' + self.cidr + ': the gateway must be an address in that range, of its family'",fieldPath=".gateway"
// +kubebuilder:validation:XValidation:rule="has(self.gateway) == has(oldSelf.gateway)",message="gateway cannot be added or removed after creation"
type SubnetSpec struct {
	// PoolRef names the SubnetPool, in the same namespace, the range is
	// claimed from. Immutable. The pool need not exist yet: the Subnet waits
	// (Ready=False, reason PoolNotFound) until it does.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="poolRef is immutable"
	PoolRef string `json:"poolRef"`

	// CIDR is an explicit range to claim, in canonical form (10.0.1.0/24,
	// 2001:db8:0:1::/64). Host bits must be zero. Immutable once set.
	//
	// On a prefixLength claim the controller sets it, once, to the range it
	// allocated (status.cidr); a Subnet created with both, as a restore
	// from a backup does, asks for that range again. Leave it out of
	// manifests you apply: an apply that omits it keeps it.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="must be a CIDR such as 10.0.1.0/24 or 2001:db8:0:1::/64 (no zone, no leading zeros, no IPv4-mapped IPv6)"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || cidr(self) == cidr(self).masked()",message="host bits set: write the network address (10.0.0.0/24, not 10.0.0.1/24)"
	CIDR string `json:"cidr,omitempty"`

	// PrefixLength asks the controller to allocate a free range of this
	// length from the pool (best fit: the smallest free block that holds it,
	// lowest address first). Immutable.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=128
	PrefixLength *int32 `json:"prefixLength,omitempty"`

	// Gateway is the gateway address handed to Cluster API machines (see
	// v1alpha2). Optional, immutable; it needs an explicit cidr and must
	// lie inside it.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address such as 10.0.1.1 or 2001:db8::1"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="gateway is immutable"
	Gateway string `json:"gateway,omitempty"`
}

// IPAddressUsage counts the addresses Cluster API IPAddressClaims use (see
// v1alpha2).
type IPAddressUsage struct {
	InUse       int64  `json:"inUse"`
	CoolingDown int64  `json:"coolingDown"`
	Free        string `json:"free"`
}

// SubnetStatus is what the controller decided for the claim.
// A status decided for a pool in another namespace (decidedFor) is this
// release's decision, written through v1alpha2; a v1alpha1 status write
// that gives such a status a range is the earlier release's controller,
// still running during a rolling upgrade, deciding in the wrong pool (it
// knows no references into other namespaces).
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.decidedFor) || !has(self.cidr) || (has(oldSelf.cidr) && self.cidr == oldSelf.cidr)",message="a status decided for a pool in another namespace (decidedFor) gets its range from this release's controller only: stop the earlier release before upgrading"
type SubnetStatus struct {
	// DecidedFor is the pool ("namespace/name") this status was decided
	// for, when it is in another namespace than the Subnet: the status of
	// a v1alpha2 claim into another namespace. Without it, the status was
	// decided for the pool spec.poolRef names in the Subnet's own
	// namespace (all the earlier release could decide). Set by the
	// conversion from v1alpha2; a status converted to v1alpha2 for another
	// pool than the one it names is dropped, so that the pool the claim
	// now names judges it as it judges a create.
	// +optional
	DecidedFor string `json:"decidedFor,omitempty"`

	// ObservedGeneration is the generation of the spec this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// CIDR is the range this Subnet holds: spec.cidr once confirmed, or the
	// range the controller allocated. Set only while Ready is True, and
	// never changed once set.
	// +optional
	CIDR string `json:"cidr,omitempty"`

	// Addresses is the number of addresses in status.cidr, as a decimal
	// string (an IPv6 /64 holds 2^64).
	// +optional
	Addresses string `json:"addresses,omitempty"`

	// Gateway is the gateway in effect while the Subnet holds status.cidr
	// (see v1alpha2).
	// +optional
	Gateway string `json:"gateway,omitempty"`

	// IPAddresses counts the addresses handed out to Cluster API claims.
	// +optional
	IPAddresses *IPAddressUsage `json:"ipAddresses,omitempty"`

	// Conditions: Ready, with reason Allocated when the range is held, or
	// PoolNotFound, PoolNotReady, Overlaps, PoolExhausted, OutOfRange while
	// it is not.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// Subnet is a range claimed from a SubnetPool.
//
// The CIDR column is spec.cidr: the range asked for, or the range allocated
// to a prefixLength claim; State says whether the Subnet holds it (Held,
// with -o wide, is status.cidr).
//
// +kubebuilder:validation:XValidation:rule="!has(self.spec.cidr) || has(oldSelf.spec.cidr) || (has(oldSelf.status) && has(oldSelf.status.cidr) && self.spec.cidr == oldSelf.status.cidr)",message="spec.cidr can be added after creation only to record the range the Subnet holds (status.cidr); to claim another range, create a new Subnet"
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:deprecatedversion:warning="ipam.subnet-operator.io/v1alpha1 Subnet is deprecated: use v1alpha2, where poolRef and parentRef are {name, namespace}"
// +kubebuilder:resource:shortName=sn,categories=ipam
// +kubebuilder:selectablefield:JSONPath=`.spec.poolRef`
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.poolRef`
// +kubebuilder:printcolumn:name="CIDR",type=string,JSONPath=`.spec.cidr`
// +kubebuilder:printcolumn:name="Length",type=integer,JSONPath=`.spec.prefixLength`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Held",type=string,JSONPath=`.status.cidr`,priority=1
// +kubebuilder:printcolumn:name="Addresses",type=string,JSONPath=`.status.addresses`,priority=1
// +kubebuilder:printcolumn:name="Gateway",type=string,JSONPath=`.status.gateway`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Subnet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec SubnetSpec `json:"spec"`

	// +optional
	Status SubnetStatus `json:"status,omitempty"`
}

// SubnetList is a list of Subnets.
//
// +kubebuilder:object:root=true
type SubnetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Subnet `json:"items"`
}
