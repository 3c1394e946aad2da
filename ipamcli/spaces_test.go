package ipamcli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// kubectl ipam spaces lists each space with its root pools, and says which
// overlap another root pool of their space.
func TestSpaces(t *testing.T) {
	a := pool("a", "10.0.0.0/16", "", 10)
	b := pool("b", "10.0.1.0/24", "", 10) // granted by an earlier release over a's range
	lab := pool("lab", "10.0.0.0/16", "", 10)
	lab.Spec.AddressSpace = "lab"
	kid := pool("kid", "10.0.2.0/24", "a", 10)
	space := &ipamv1.AddressSpace{ObjectMeta: metav1.ObjectMeta{Name: "lab"},
		Spec: ipamv1.AddressSpaceSpec{RootPoolNamespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"lab": "true"}}}}
	rows, err := Spaces(context.Background(), fakeClient(t, a, b, lab, kid, space))
	if err != nil {
		t.Fatal(err)
	}
	want := []SpaceRoot{
		{Space: "default", Namespace: "ns", Name: "a", CIDR: "10.0.0.0/16", Holds: true, State: "Available", Overlaps: 1, Rules: "<the manager's --root-pool-namespace-selector>"},
		{Space: "default", Namespace: "ns", Name: "b", CIDR: "10.0.1.0/24", Holds: true, State: "Available", Overlaps: 1, Rules: "<the manager's --root-pool-namespace-selector>"},
		{Space: "lab", Namespace: "ns", Name: "lab", CIDR: "10.0.0.0/16", Holds: true, State: "Available", Rules: "lab=true"},
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("spaces (-want +got):\n%s", diff)
	}
	var out bytes.Buffer
	if err := (printer{out: &out}).spaces(rows); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "SPACE    ROOT POOL NAMESPACES") || !strings.Contains(out.String(), "1 root pool\n") {
		t.Errorf("table:\n%s", out.String())
	}
}
