package main

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha1"
)

func TestTrimCachedObject(t *testing.T) {
	s := &ipamv1.Subnet{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web", Namespace: "default",
			Annotations: map[string]string{
				corev1.LastAppliedConfigAnnotation: `{"spec":{"poolRef":"dc"}}`,
				"team":                             "payments",
			},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		},
		Spec: ipamv1.SubnetSpec{PoolRef: "dc"},
	}
	out, err := trimCachedObject(s)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*ipamv1.Subnet)
	if got.ManagedFields != nil {
		t.Errorf("managedFields kept: %v", got.ManagedFields)
	}
	if _, ok := got.Annotations[corev1.LastAppliedConfigAnnotation]; ok {
		t.Error("last-applied-configuration kept")
	}
	if got.Annotations["team"] != "payments" || got.Spec.PoolRef != "dc" {
		t.Errorf("trimmed more than it should: %+v", got)
	}
	// Objects without annotations, and tombstones, pass through.
	if _, err := trimCachedObject(&ipamv1.Subnet{}); err != nil {
		t.Error(err)
	}
	if out, err := trimCachedObject("not an object"); err != nil || out != "not an object" {
		t.Errorf("non-object: %v %v", out, err)
	}
}
