// Package v1alpha1 is the first API of subnet-operator, deprecated: still
// served, and converted to and from v1alpha2 (the storage version) by the
// manager's conversion webhook with the functions in conversion.go. Here a
// pool reference is a name in the object's own namespace.
//
// It imports only the standard library and apimachinery, so that any client
// can depend on it without pulling in the operator.
//
// +kubebuilder:object:generate=true
// +groupName=ipam.subnet-operator.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "ipam.subnet-operator.io", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the kinds of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion,
		&SubnetPool{}, &SubnetPoolList{},
		&Subnet{}, &SubnetList{},
	)
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
