package v1alpha2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PoolReference names a SubnetPool: the pool a Subnet claims from, or the
// parent a pool is carved from.
type PoolReference struct {
	// Name of the SubnetPool.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`

	// Namespace of the SubnetPool. The defaulting webhook fills in the
	// referring object's own namespace when it is left out, and an empty
	// namespace means that namespace everywhere. A pool in another
	// namespace must allow the referring object's namespace
	// (spec.allowedNamespaces); admission refuses the others and the
	// controller does not grant them (reason NotAllowed).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace,omitempty"`
}

// In returns the namespace the reference points into: its own, or
// namespace (the referring object's) when it names none.
func (r PoolReference) In(namespace string) string {
	if r.Namespace != "" {
		return r.Namespace
	}
	return namespace
}

// String is "namespace/name", or "name" when the namespace is left out.
func (r PoolReference) String() string {
	if r.Namespace == "" {
		return r.Name
	}
	return r.Namespace + "/" + r.Name
}

// The immutability rules of cidr and prefixLength below sit on the spec, not
// on the fields, so that their message can name the pool (kubectl ipam next
// POOL). The API server prints a rule with a fieldPath without the value it
// refused ("spec.cidr: Invalid value: cidr is immutable…"), so the message
// starts with the value, quoted as kubectl quotes it elsewhere. The
// agreement rule (cidr a /prefixLength range) has optionalOldSelf and stays
// quiet on an update that changes either field: the field's own rule says
// what is wrong, once.

// SubnetSpec claims a range from a pool: either an explicit cidr, or a
// prefixLength that the controller allocates. With neither, the defaulting
// webhook fills prefixLength from the pool's defaultPrefixLength (and the
// controller falls back to it when the webhook was bypassed).
//
// The spec is immutable: a Subnet is a claim, and moving a claim means
// releasing it (delete) and claiming anew (create). One field is written
// once after creation: the controller records the range it allocated to a
// prefixLength claim in spec.cidr (as the API server records a Service's
// clusterIP), so that the Subnet asks for the same range again when it is
// restored from a backup without status. A Subnet created with neither
// field before its pool existed gets its range's length in
// spec.prefixLength in the same write.
//
// An edit of cidr or prefixLength is refused with one message per field,
// which says what to do instead.
//
// +kubebuilder:validation:XValidation:rule="!has(self.cidr) || !has(self.prefixLength) || !isCIDR(self.cidr) || cidr(self.cidr).prefixLength() == self.prefixLength || (oldSelf.hasValue() && ((has(oldSelf.value().cidr) && oldSelf.value().cidr != self.cidr) || (has(oldSelf.value().prefixLength) && oldSelf.value().prefixLength != self.prefixLength)))",message="cidr and prefixLength together mean a range allocated earlier: cidr must be a /prefixLength range",optionalOldSelf=true
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.cidr) || !has(self.cidr) || self.cidr == oldSelf.cidr",messageExpression="'\"%s\": cidr is immutable: a Subnet keeps the range it claims (%s) for its lifetime; to claim another, delete this Subnet and create a new one (kubectl ipam next %s shows what the pool would allocate)'.format([self.cidr, oldSelf.cidr, (has(self.poolRef.__namespace__) ? '-n ' + self.poolRef.__namespace__ + ' ' + self.poolRef.name : self.poolRef.name)])",fieldPath=".cidr",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.prefixLength) || !has(self.prefixLength) || self.prefixLength == oldSelf.prefixLength",messageExpression="'%d: prefixLength is immutable: a Subnet keeps the length it asked for (/%d) for its lifetime; to claim another, delete this Subnet and create a new one (kubectl ipam next %s --length %d shows what the pool would allocate)'.format([self.prefixLength, oldSelf.prefixLength, (has(self.poolRef.__namespace__) ? '-n ' + self.poolRef.__namespace__ + ' ' + self.poolRef.name : self.poolRef.name), self.prefixLength])",fieldPath=".prefixLength",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="has(self.prefixLength) == has(oldSelf.prefixLength) || (!has(oldSelf.prefixLength) && !has(oldSelf.cidr) && has(self.cidr))",message="prefixLength cannot be added or removed after creation, except beside the range recorded in cidr"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.cidr) || has(self.cidr)",message="cidr cannot be removed: it is the range this Subnet claims (for a prefixLength claim, the range allocated to it)"
// +kubebuilder:validation:XValidation:rule="!has(self.gateway) || has(self.cidr)",message="needs an explicit cidr: the gateway of a range not allocated yet cannot be known; leave gateway out to use the first usable address",fieldPath=".gateway"
// +kubebuilder:validation:XValidation:rule="!has(self.gateway) || !has(self.cidr) || !isCIDR(self.cidr) || !isIP(self.gateway) || cidr(self.cidr).containsIP(self.gateway)",messageExpression="'is outside spec.cidr ' + self.cidr + ': the gateway must be an address in that range, of its family'",fieldPath=".gateway"
// +kubebuilder:validation:XValidation:rule="has(self.gateway) == has(oldSelf.gateway)",message="gateway cannot be added or removed after creation"
type SubnetSpec struct {
	// PoolRef is the SubnetPool the range is claimed from. Its namespace
	// defaults to the Subnet's own. Immutable. The pool need not exist yet:
	// the Subnet waits (Ready=False, reason PoolNotFound) until it does.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="poolRef is immutable"
	PoolRef PoolReference `json:"poolRef"`

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

	// Gateway is the gateway address of the Subnet's network, handed to
	// Cluster API machines with their addresses (IPAddress spec.gateway)
	// and never handed out as a machine's address. Optional: without it
	// the gateway is the first usable address (the network address + 1).
	// It needs an explicit cidr, must lie inside it, and must not be the
	// network or the IPv4 broadcast address. Immutable.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address such as 10.0.1.1 or 2001:db8::1"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="gateway is immutable"
	Gateway string `json:"gateway,omitempty"`
}

// IPAddressUsage counts the addresses of a Subnet that Cluster API
// IPAddressClaims use (docs/cluster-api.md).
type IPAddressUsage struct {
	// InUse is the number of addresses held by IPAddresses.
	InUse int64 `json:"inUse"`
	// CoolingDown is the number of addresses released less than the
	// cool-down ago (--address-reuse-after): not handed out again yet.
	CoolingDown int64 `json:"coolingDown"`
	// Free is the number of addresses that can be handed out, as a decimal
	// string (an IPv6 /64 holds 2^64): the range's addresses less the
	// network address, the IPv4 broadcast address, the gateway, the ones in
	// use and the ones cooling down.
	Free string `json:"free"`
}

// SubnetStatus is what the controller decided for the claim.
type SubnetStatus struct {
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

	// Gateway is the gateway in effect while the Subnet holds status.cidr:
	// spec.gateway, or else the first usable address of the range (the
	// network address + 1; the network address itself for a /31 or /32, an
	// IPv6 /127 or /128). It is what Cluster API machines get as their
	// IPAddress's gateway, and what kubectl get -o wide shows.
	// +optional
	Gateway string `json:"gateway,omitempty"`

	// IPAddresses counts the addresses handed out from the Subnet to
	// Cluster API IPAddressClaims; set once the Subnet has served one.
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
// +kubebuilder:resource:shortName=sn,categories=ipam
// +kubebuilder:storageversion
// +kubebuilder:selectablefield:JSONPath=`.spec.poolRef.name`
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.poolRef.name`
// +kubebuilder:printcolumn:name="Pool Namespace",type=string,JSONPath=`.spec.poolRef.namespace`,priority=1
// +kubebuilder:printcolumn:name="CIDR",type=string,JSONPath=`.spec.cidr`
// +kubebuilder:printcolumn:name="Length",type=integer,JSONPath=`.spec.prefixLength`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Held",type=string,JSONPath=`.status.cidr`,priority=1
// +kubebuilder:printcolumn:name="Addresses",type=string,JSONPath=`.status.addresses`,priority=1
// +kubebuilder:printcolumn:name="IPs In Use",type=integer,JSONPath=`.status.ipAddresses.inUse`
// +kubebuilder:printcolumn:name="IPs Free",type=string,JSONPath=`.status.ipAddresses.free`,priority=1
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
