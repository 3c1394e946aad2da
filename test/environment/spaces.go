package environment

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// CreateIsolatedNamespace creates a namespace whose root pools are in an
// address space of their own (named after it, taking only it): tests that
// share one control plane then use the same ranges without their root
// pools overlapping each other's in the default space. The namespace gets
// labels besides.
func CreateIsolatedNamespace(ctx context.Context, c client.Client, name string, labels map[string]string) error {
	space := &ipamv1.AddressSpace{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: ipamv1.AddressSpaceSpec{
			Description:        "the root pools of test namespace " + name,
			RootPoolNamespaces: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: name}},
		},
	}
	if err := c.Create(ctx, space); err != nil {
		return err
	}
	all := map[string]string{ipamv1.LabelAddressSpace: name}
	for k, v := range labels {
		all[k] = v
	}
	return c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: all}})
}
