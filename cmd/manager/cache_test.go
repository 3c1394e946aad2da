package main

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

func TestTrimCachedObject(t *testing.T) {
	meta := func() metav1.ObjectMeta {
		return metav1.ObjectMeta{
			Name: "web", Namespace: "default",
			Labels: map[string]string{"team": "dc"},
			Annotations: map[string]string{
				corev1.LastAppliedConfigAnnotation: `{"spec":{}}`,
				ipamv1.AnnotationRecompute:         "1",
			},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		}
	}

	out, err := trimCachedObject(&ipamv1.SubnetPool{ObjectMeta: meta()})
	if err != nil {
		t.Fatal(err)
	}
	p := out.(*ipamv1.SubnetPool)
	if p.ManagedFields != nil {
		t.Errorf("pool keeps managedFields")
	}
	if _, ok := p.Annotations[corev1.LastAppliedConfigAnnotation]; ok {
		t.Error("pool keeps last-applied-configuration")
	}
	if p.Annotations[ipamv1.AnnotationRecompute] != "1" || p.Labels["team"] != "dc" {
		t.Errorf("pool lost metadata the manager reads (the recompute trigger): %+v", p.ObjectMeta)
	}

	// Objects without metadata maps, and tombstones, pass through.
	if _, err := trimCachedObject(&ipamv1.SubnetPool{}); err != nil {
		t.Error(err)
	}
	if out, err := trimCachedObject("not an object"); err != nil || out != "not an object" {
		t.Errorf("non-object: %v %v", out, err)
	}
}
