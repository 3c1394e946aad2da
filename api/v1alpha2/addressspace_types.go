package v1alpha2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultAddressSpace is the space of every root pool that names none
// (spec.addressSpace empty). It exists without an object; an AddressSpace
// of this name, if a platform creates one, sets its rules.
const DefaultAddressSpace = "default"

// AddressSpaceSpec says who may create root pools in the space.
type AddressSpaceSpec struct {
	// RootPoolNamespaces selects the namespaces whose root SubnetPools
	// (without parentRef) may name this space. Unset selects none: a space
	// is opened to namespaces explicitly. {} selects every namespace.
	// +optional
	RootPoolNamespaces *metav1.LabelSelector `json:"rootPoolNamespaces,omitempty"`

	// Description says what the space is for (a VRF, a lab, another
	// cluster's plan).
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Description string `json:"description,omitempty"`
}

// AddressSpace is a cluster-wide domain of uniqueness, as a NetBox VRF
// with enforced unique prefixes or an AWS IPAM scope: no two root
// SubnetPools of one space overlap, so nothing carved from them does
// either. Root pools name their space in spec.addressSpace; those that
// name none are in the default space. Deliberate overlap (separate VRFs,
// an isolated lab) is a second space. Spaces are cluster-scoped: only
// the platform creates them, and a tenant cannot open a space of its own
// to overlap another's range.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=as
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Root Pool Namespaces",type=string,JSONPath=`.spec.rootPoolNamespaces`
// +kubebuilder:printcolumn:name="Description",type=string,JSONPath=`.spec.description`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63",message="an address space's name is at most 63 characters"
type AddressSpace struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec AddressSpaceSpec `json:"spec,omitempty"`
}

// AddressSpaceList is a list of AddressSpaces.
//
// +kubebuilder:object:root=true
type AddressSpaceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AddressSpace `json:"items"`
}
