package v1alpha1

import (
	"context"
	"os"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

// The CRD's own rules, run as the API server runs them on an update: an
// edit of cidr or prefixLength gets one error per field, saying what to do
// instead, in both versions. (test/integration checks v1alpha2 through a
// real API server; serving v1alpha1 there for a test changes the CRD under
// the tests that follow.)
func TestEditingAClaimGetsOneMessagePerField(t *testing.T) {
	b, err := os.ReadFile("../../config/crd/bases/ipam.subnet-operator.io_subnets.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	validators := map[string]*cel.Validator{}
	for _, v := range crd.Spec.Versions {
		var props apiextensions.JSONSchemaProps
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, &props, nil); err != nil {
			t.Fatal(err)
		}
		s, err := structuralschema.NewStructural(&props)
		if err != nil {
			t.Fatal(err)
		}
		validators[v.Name] = cel.NewValidator(s, true, celconfig.PerCallLimit)
	}
	object := func(version, spec string) map[string]any {
		// JSON numbers as the API server decodes them (int64, not float64).
		j, err := yaml.YAMLToJSON([]byte("apiVersion: ipam.subnet-operator.io/" + version + "\nkind: Subnet\nmetadata: {name: web, namespace: team-a}\nspec: " + spec))
		if err != nil {
			t.Fatal(err)
		}
		var o map[string]any
		if err := utiljson.Unmarshal(j, &o); err != nil {
			t.Fatal(err)
		}
		return o
	}
	for _, tc := range []struct {
		name, version, old, updated string
		want                        []string // "field: message"
	}{
		{"explicit cidr", "v1alpha2", "{poolRef: {name: dc, namespace: team-a}, cidr: 10.0.1.0/24}", "{poolRef: {name: dc, namespace: team-a}, cidr: 10.0.2.0/23}",
			[]string{`spec.cidr: "10.0.2.0/23": cidr is immutable: a Subnet keeps the range it claims (10.0.1.0/24) for its lifetime; to claim another, delete this Subnet and create a new one (kubectl ipam next -n team-a dc shows what the pool would allocate)`}},
		{"allocated prefixLength", "v1alpha2", "{poolRef: {name: dc, namespace: team-a}, prefixLength: 24, cidr: 10.0.1.0/24}", "{poolRef: {name: dc, namespace: team-a}, prefixLength: 23, cidr: 10.0.1.0/24}",
			[]string{`spec.prefixLength: 23: prefixLength is immutable: a Subnet keeps the length it asked for (/24) for its lifetime; to claim another, delete this Subnet and create a new one (kubectl ipam next -n team-a dc --length 23 shows what the pool would allocate)`}},
		{"explicit cidr, v1alpha1", "v1alpha1", "{poolRef: dc, cidr: 10.0.1.0/24}", "{poolRef: dc, cidr: 10.0.2.0/23}",
			[]string{`spec.cidr: "10.0.2.0/23": cidr is immutable: a Subnet keeps the range it claims (10.0.1.0/24) for its lifetime; to claim another, delete this Subnet and create a new one (kubectl ipam next dc shows what the pool would allocate)`}},
		{"allocated prefixLength, v1alpha1", "v1alpha1", "{poolRef: dc, prefixLength: 24, cidr: 10.0.1.0/24}", "{poolRef: dc, prefixLength: 23, cidr: 10.0.1.0/24}",
			[]string{`spec.prefixLength: 23: prefixLength is immutable: a Subnet keeps the length it asked for (/24) for its lifetime; to claim another, delete this Subnet and create a new one (kubectl ipam next dc --length 23 shows what the pool would allocate)`}},
		{"allocated cidr, v1alpha1", "v1alpha1", "{poolRef: dc, prefixLength: 24, cidr: 10.0.1.0/24}", "{poolRef: dc, prefixLength: 24, cidr: 10.0.7.0/24}",
			[]string{`spec.cidr: "10.0.7.0/24": cidr is immutable: a Subnet keeps the range it claims (10.0.1.0/24) for its lifetime; to claim another, delete this Subnet and create a new one (kubectl ipam next dc shows what the pool would allocate)`}},
		// The range recorded on a prefixLength claim still has to agree
		// with its length: the agreement rule speaks when neither field
		// changed from a value it had.
		{"recording a range of another length", "v1alpha2", "{poolRef: {name: dc, namespace: team-a}, prefixLength: 24}\nstatus: {cidr: 10.0.0.0/23}", "{poolRef: {name: dc, namespace: team-a}, prefixLength: 24, cidr: 10.0.0.0/23}\nstatus: {cidr: 10.0.0.0/23}",
			[]string{`spec: cidr and prefixLength together mean a range allocated earlier: cidr must be a /prefixLength range`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs, _ := validators[tc.version].Validate(context.Background(), nil, nil, object(tc.version, tc.updated), object(tc.version, tc.old), celconfig.RuntimeCELCostBudget)
			var got []string
			for _, e := range errs {
				got = append(got, e.Field+": "+e.Detail)
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("errors\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// Both versions print the gateway in effect with -o wide, and a pool's
// utilization once (USED%, not also UTILIZATION).
func TestPrinterColumnsOfBothVersions(t *testing.T) {
	columns := func(file string) map[string][]apiextensionsv1.CustomResourceColumnDefinition {
		b, err := os.ReadFile("../../config/crd/bases/" + file)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(b, &crd); err != nil {
			t.Fatal(err)
		}
		out := map[string][]apiextensionsv1.CustomResourceColumnDefinition{}
		for _, v := range crd.Spec.Versions {
			out[v.Name] = v.AdditionalPrinterColumns
		}
		return out
	}
	for version, cols := range columns("ipam.subnet-operator.io_subnets.yaml") {
		var gateway []string
		for _, c := range cols {
			if c.Name == "Gateway" {
				gateway = append(gateway, c.JSONPath)
			}
		}
		if strings.Join(gateway, ",") != ".status.gateway" {
			t.Errorf("%s Subnet: Gateway columns %v, want one showing .status.gateway", version, gateway)
		}
	}
	for version, cols := range columns("ipam.subnet-operator.io_subnetpools.yaml") {
		var figures []string
		for _, c := range cols {
			if c.JSONPath == ".status.utilization" || c.JSONPath == ".status.utilizationPercent" {
				figures = append(figures, c.Name)
			}
		}
		if strings.Join(figures, ",") != "Used%" {
			t.Errorf("%s SubnetPool: utilization columns %v, want Used%% only", version, figures)
		}
		for _, c := range cols {
			if c.Name == "Free" && c.JSONPath != ".status.freeReadable" {
				t.Errorf("%s SubnetPool: Free shows %s, want .status.freeReadable (2^80, not 25 digits)", version, c.JSONPath)
			}
		}
	}
}
