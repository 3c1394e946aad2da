// Package v1alpha2 contains the API of subnet-operator: SubnetPool and Subnet
// in the group ipam.subnet-operator.io. It is the storage version and the
// version the operator works in; v1alpha1 is converted to and from it.
//
// It imports only the standard library and apimachinery, so that any client
// can depend on it without pulling in the operator.
//
// +kubebuilder:object:generate=true
// +groupName=ipam.subnet-operator.io
package v1alpha2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "ipam.subnet-operator.io", Version: "v1alpha2"}

	// SchemeBuilder registers the kinds of this package with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the kinds of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion,
		&SubnetPool{}, &SubnetPoolList{},
		&Subnet{}, &SubnetList{},
		&AddressSpace{}, &AddressSpaceList{},
	)
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
