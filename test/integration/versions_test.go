//go:build integration

package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"

	ipamv1alpha1 "github.com/subnet-operator/subnet-operator/api/v1alpha1"
	"github.com/subnet-operator/subnet-operator/test/environment"
)

// versionedChange is one kind of update of a stored object, said in each
// served version: what a client of that version does to the object it
// read (a read-modify-write) to make the change.
type versionedChange struct {
	name string
	// objects is a v1alpha2 manifest with NS (the test's namespace) and
	// OTHER (a namespace whose pool dc allows every namespace); the
	// object changed is the one named x.
	objects  string
	resource string // subnets or subnetpools
	// recorded waits until the controller has recorded x's range in
	// spec.cidr, so that the change starts from a settled object.
	recorded bool
	v1alpha1 func(obj map[string]any)
	v1alpha2 func(obj map[string]any)
}

// TestOneVerdictPerChangeWhateverTheVersion sends each kind of update
// through v1alpha1 and through v1alpha2 and expects the same verdict, and
// the same stored result when allowed: a request is checked in the
// version it is written in (the CRD schema's rules are per version) and
// the validating webhook is called only for some updates, so a rule that
// one version lacks lets its clients past a check the other enforces.
func TestOneVerdictPerChangeWhateverTheVersion(t *testing.T) {
	ctx := context.Background()
	serveV1alpha1Everywhere(t)
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	other := versionsNamespace(t, "other")
	if _, stderr, err := kubectl(t, strings.ReplaceAll(`apiVersion: ipam.subnet-operator.io/v1alpha2
kind: SubnetPool
metadata: {name: dc, namespace: OTHER}
spec: {cidr: 10.0.0.0/16, defaultPrefixLength: 24, allowedNamespaces: {from: All}}
`, "OTHER", other), "create", "-f", "-"); err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}

	set := func(value any, path ...string) func(map[string]any) {
		return func(obj map[string]any) {
			if err := unstructured.SetNestedField(obj, value, path...); err != nil {
				panic(err)
			}
		}
	}
	remove := func(path ...string) func(map[string]any) {
		return func(obj map[string]any) { unstructured.RemoveNestedField(obj, path...) }
	}
	annotate := func(key, value string) func(map[string]any) {
		return func(obj map[string]any) {
			u := unstructured.Unstructured{Object: obj}
			a := u.GetAnnotations()
			if a == nil {
				a = map[string]string{}
			}
			a[key] = strings.ReplaceAll(value, "OTHER", other)
			u.SetAnnotations(a)
		}
	}

	const (
		pool     = "apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: SubnetPool\nmetadata: {name: dc, namespace: NS}\nspec: {cidr: 10.0.0.0/16, defaultPrefixLength: 24}\n---\n"
		dc2      = "apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: SubnetPool\nmetadata: {name: dc2, namespace: NS}\nspec: {cidr: 10.1.0.0/16}\n---\n"
		subnet   = "apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: Subnet\nmetadata: {name: x, namespace: NS}\nspec: "
		child    = "apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: SubnetPool\nmetadata: {name: x, namespace: NS}\nspec: {cidr: 10.0.128.0/17, parentRef: {name: dc}}\n"
		rootPool = "apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: SubnetPool\nmetadata: {name: x, namespace: NS}\nspec: {cidr: 10.2.0.0/16}\n"
	)
	explicit := pool + subnet + "{poolRef: {name: dc}, cidr: 10.0.1.0/24}\n"
	withGateway := pool + subnet + "{poolRef: {name: dc}, cidr: 10.0.1.0/24, gateway: 10.0.1.1}\n"
	dynamicClaim := pool + subnet + "{poolRef: {name: dc}, prefixLength: 24}\n"
	waiting := subnet + "{poolRef: {name: missing}, prefixLength: 24}\n"

	changes := []versionedChange{
		{name: "Subnet label (allowed)", objects: explicit, resource: "subnets", v1alpha1: set("yes", "metadata", "labels", "tier"), v1alpha2: set("yes", "metadata", "labels", "tier")},
		{name: "gateway added", objects: explicit, resource: "subnets", v1alpha1: set("10.0.1.1", "spec", "gateway"), v1alpha2: set("10.0.1.1", "spec", "gateway")},
		{name: "gateway changed", objects: withGateway, resource: "subnets", v1alpha1: set("10.0.1.254", "spec", "gateway"), v1alpha2: set("10.0.1.254", "spec", "gateway")},
		{name: "gateway changed to outside the range", objects: withGateway, resource: "subnets", v1alpha1: set("10.9.9.9", "spec", "gateway"), v1alpha2: set("10.9.9.9", "spec", "gateway")},
		{name: "gateway removed", objects: withGateway, resource: "subnets", v1alpha1: remove("spec", "gateway"), v1alpha2: remove("spec", "gateway")},
		{name: "cidr changed", objects: explicit, resource: "subnets", v1alpha1: set("10.0.2.0/24", "spec", "cidr"), v1alpha2: set("10.0.2.0/24", "spec", "cidr")},
		{name: "cidr removed", objects: explicit, resource: "subnets", v1alpha1: remove("spec", "cidr"), v1alpha2: remove("spec", "cidr")},
		{name: "cidr added to a claim that holds nothing", objects: waiting, resource: "subnets", v1alpha1: set("10.0.2.0/24", "spec", "cidr"), v1alpha2: set("10.0.2.0/24", "spec", "cidr")},
		{name: "recorded cidr changed", objects: dynamicClaim, resource: "subnets", recorded: true, v1alpha1: set("10.0.200.0/24", "spec", "cidr"), v1alpha2: set("10.0.200.0/24", "spec", "cidr")},
		{name: "prefixLength added beside an explicit cidr", objects: explicit, resource: "subnets", v1alpha1: set(int64(24), "spec", "prefixLength"), v1alpha2: set(int64(24), "spec", "prefixLength")},
		{name: "prefixLength changed", objects: waiting, resource: "subnets", v1alpha1: set(int64(25), "spec", "prefixLength"), v1alpha2: set(int64(25), "spec", "prefixLength")},
		{name: "prefixLength removed", objects: dynamicClaim, resource: "subnets", recorded: true, v1alpha1: remove("spec", "prefixLength"), v1alpha2: remove("spec", "prefixLength")},
		{name: "poolRef name changed", objects: dc2 + explicit, resource: "subnets", v1alpha1: set("dc2", "spec", "poolRef"), v1alpha2: set("dc2", "spec", "poolRef", "name")},
		{name: "poolRef namespace changed (annotation in v1alpha1)", objects: explicit, resource: "subnets",
			v1alpha1: annotate(ipamv1alpha1.AnnotationPoolRef, "OTHER/dc"),
			v1alpha2: set(other, "spec", "poolRef", "namespace")},
		{name: "pool label (allowed)", objects: rootPool, resource: "subnetpools", v1alpha1: set("yes", "metadata", "labels", "tier"), v1alpha2: set("yes", "metadata", "labels", "tier")},
		{name: "pool cidr grown (allowed)", objects: rootPool, resource: "subnetpools", v1alpha1: set("10.2.0.0/15", "spec", "cidr"), v1alpha2: set("10.2.0.0/15", "spec", "cidr")},
		{name: "pool cidr family changed", objects: rootPool, resource: "subnetpools", v1alpha1: set("2001:db8::/48", "spec", "cidr"), v1alpha2: set("2001:db8::/48", "spec", "cidr")},
		{name: "pool reserved range added (allowed)", objects: rootPool, resource: "subnetpools", v1alpha1: set([]any{"10.2.0.0/24"}, "spec", "reserved"), v1alpha2: set([]any{"10.2.0.0/24"}, "spec", "reserved")},
		{name: "parentRef added", objects: pool + rootPool, resource: "subnetpools", v1alpha1: set("dc", "spec", "parentRef"), v1alpha2: set(map[string]any{"name": "dc"}, "spec", "parentRef")},
		{name: "parentRef removed", objects: pool + child, resource: "subnetpools", v1alpha1: remove("spec", "parentRef"), v1alpha2: remove("spec", "parentRef")},
		{name: "parentRef name changed", objects: pool + dc2 + child, resource: "subnetpools", v1alpha1: set("dc2", "spec", "parentRef"), v1alpha2: set("dc2", "spec", "parentRef", "name")},
		{name: "parentRef namespace changed (annotation in v1alpha1)", objects: pool + child, resource: "subnetpools",
			v1alpha1: annotate(ipamv1alpha1.AnnotationParentRef, "OTHER/dc"),
			v1alpha2: set(other, "spec", "parentRef", "namespace")},
		{name: "addressSpace changed", objects: rootPool, resource: "subnetpools", v1alpha1: set("elsewhere", "spec", "addressSpace"), v1alpha2: set("elsewhere", "spec", "addressSpace")},
		{name: "addressSpace removed", objects: rootPool, resource: "subnetpools", v1alpha1: remove("spec", "addressSpace"), v1alpha2: remove("spec", "addressSpace")},
		{name: "allowedNamespaces set (annotation in v1alpha1; allowed)", objects: rootPool, resource: "subnetpools",
			v1alpha1: annotate(ipamv1alpha1.AnnotationAllowedNamespaces, `{"from":"All"}`),
			v1alpha2: set(map[string]any{"from": "All"}, "spec", "allowedNamespaces")},
	}
	// The same change on objects that start alike, one per version; a
	// fresh namespace each, as each names its objects alike.
	for i, c := range changes {
		t.Run(c.name, func(t *testing.T) {
			verdicts := map[string]error{}
			results := map[string]map[string]any{}
			for version, change := range map[string]func(map[string]any){"v1alpha1": c.v1alpha1, "v1alpha2": c.v1alpha2} {
				ns := versionsNamespace(t, fmt.Sprintf("%d-%s", i, version))
				manifest := strings.NewReplacer("NS", ns, "OTHER", other).Replace(c.objects)
				if _, stderr, err := kubectl(t, manifest, "create", "-f", "-"); err != nil {
					t.Fatalf("%v: %s", err, stderr)
				}
				res := dyn.Resource(schema.GroupVersionResource{Group: "ipam.subnet-operator.io", Version: version, Resource: c.resource}).Namespace(ns)
				if c.recorded {
					eventually(t, 30*time.Second, func() error {
						obj, err := res.Get(ctx, "x", metav1.GetOptions{})
						if err != nil {
							return err
						}
						if cidr, _, _ := unstructured.NestedString(obj.Object, "spec", "cidr"); cidr == "" {
							return fmt.Errorf("x's range not recorded yet")
						}
						return nil
					})
				}
				verdicts[version] = readModifyWrite(ctx, res, change)
				after, getErr := dyn.Resource(schema.GroupVersionResource{Group: "ipam.subnet-operator.io", Version: "v1alpha2", Resource: c.resource}).
					Namespace(ns).Get(ctx, "x", metav1.GetOptions{})
				if getErr != nil {
					t.Fatal(getErr)
				}
				spec, _, _ := unstructured.NestedMap(after.Object, "spec")
				results[version] = normalize(spec, ns)
			}
			v1, v2 := verdicts["v1alpha1"], verdicts["v1alpha2"]
			if (v1 == nil) != (v2 == nil) {
				t.Errorf("different verdicts:\n v1alpha1: %v\n v1alpha2: %v", v1, v2)
			} else if v1 == nil && !equality.Semantic.DeepEqual(results["v1alpha1"], results["v1alpha2"]) {
				t.Errorf("allowed in both, with different results (v1alpha2 spec):\n v1alpha1: %v\n v1alpha2: %v", results["v1alpha1"], results["v1alpha2"])
			}
		})
	}

	// The annotations mean something only to a v1alpha1 request. Written
	// through v1alpha2 they are an object's metadata like any other: the
	// reference stays, in either version's reading.
	t.Run("reference annotations written through v1alpha2 move nothing", func(t *testing.T) {
		ns := versionsNamespace(t, "annotated")
		manifest := strings.ReplaceAll(explicit+"---\n"+child, "NS", ns)
		if _, stderr, err := kubectl(t, manifest, "create", "-f", "-"); err != nil {
			t.Fatalf("%v: %s", err, stderr)
		}
		for resource, annotation := range map[string]string{"subnets": ipamv1alpha1.AnnotationPoolRef, "subnetpools": ipamv1alpha1.AnnotationParentRef} {
			hub := dyn.Resource(schema.GroupVersionResource{Group: "ipam.subnet-operator.io", Version: "v1alpha2", Resource: resource}).Namespace(ns)
			if err := readModifyWrite(ctx, hub, annotate(annotation, "OTHER/dc")); err != nil {
				t.Fatalf("%s: annotating through v1alpha2: %v", resource, err)
			}
			refField := map[string]string{"subnets": "poolRef", "subnetpools": "parentRef"}[resource]
			now, err := hub.Get(ctx, "x", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if refNS, _, _ := unstructured.NestedString(now.Object, "spec", refField, "namespace"); refNS != ns {
				t.Errorf("%s: v1alpha2 spec.%s.namespace %q after the annotation, want %q", resource, refField, refNS, ns)
			}
			legacy := dyn.Resource(schema.GroupVersionResource{Group: "ipam.subnet-operator.io", Version: "v1alpha1", Resource: resource}).Namespace(ns)
			read, err := legacy.Get(ctx, "x", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if carried, ok := read.GetAnnotations()[annotation]; ok {
				t.Errorf("%s: v1alpha1 read carries %s=%q for a reference in its own namespace", resource, annotation, carried)
			}
			// And a v1alpha1 client's read-modify-write leaves it there.
			if err := readModifyWrite(ctx, legacy, set("yes", "metadata", "labels", "touched")); err != nil {
				t.Errorf("%s: a v1alpha1 read-modify-write after the annotation: %v", resource, err)
			}
			if now, err = hub.Get(ctx, "x", metav1.GetOptions{}); err != nil {
				t.Fatal(err)
			}
			if refNS, _, _ := unstructured.NestedString(now.Object, "spec", refField, "namespace"); refNS != ns {
				t.Errorf("%s: v1alpha2 spec.%s.namespace %q after a v1alpha1 write, want %q", resource, refField, refNS, ns)
			}
		}
	})
}

// readModifyWrite reads x, changes it and writes it back, again when the
// controller wrote in between (a conflict is no verdict). It returns the
// write's error: the verdict.
func readModifyWrite(ctx context.Context, res dynamic.ResourceInterface, change func(map[string]any)) error {
	return retry.RetryOnConflict(wait.Backoff{Steps: 20, Duration: 50 * time.Millisecond, Factor: 1}, func() error {
		obj, err := res.Get(ctx, "x", metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(obj.Object)
		_, err = res.Update(ctx, obj, metav1.UpdateOptions{})
		return err
	})
}

// versionsNamespace creates a fresh namespace (namespace's, for names
// that are not a namespace's).
func versionsNamespace(t *testing.T, what string) string {
	t.Helper()
	name := fmt.Sprintf("versions-%s-%04x", what, rand.IntN(1<<16))
	if err := environment.CreateIsolatedNamespace(context.Background(), k8s, name, nil); err != nil {
		t.Fatal(err)
	}
	return name
}

// normalize replaces the namespace a spec names by NS, so that specs of
// two namespaces compare.
func normalize(spec map[string]any, ns string) map[string]any {
	out := map[string]any{}
	for k, v := range spec {
		switch v := v.(type) {
		case string:
			out[k] = strings.ReplaceAll(v, ns, "NS")
		case map[string]any:
			out[k] = normalize(v, ns)
		default:
			out[k] = v
		}
	}
	return out
}

// serveV1alpha1Everywhere serves the deprecated v1alpha1 of both kinds
// until the test ends, as config/serve-v1alpha1 does, and waits until the
// API server serves it.
func serveV1alpha1Everywhere(t *testing.T) {
	t.Helper()
	served := func(on bool) string {
		return fmt.Sprintf(`[{"op":"test","path":"/spec/versions/0/name","value":"v1alpha1"},{"op":"replace","path":"/spec/versions/0/served","value":%v}]`, on)
	}
	crds := []string{"subnetpools.ipam.subnet-operator.io", "subnets.ipam.subnet-operator.io"}
	for _, crd := range crds {
		if _, stderr, err := kubectl(t, "", "patch", "crd", crd, "--type=json", "-p", served(true)); err != nil {
			t.Fatalf("serving v1alpha1: %v: %s", err, stderr)
		}
	}
	t.Cleanup(func() {
		for _, crd := range crds {
			if _, stderr, err := kubectl(t, "", "patch", "crd", crd, "--type=json", "-p", served(false)); err != nil {
				t.Errorf("no longer serving v1alpha1: %v: %s", err, stderr)
			}
		}
	})
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		for _, resource := range []string{"subnets", "subnetpools"} {
			if _, err := dyn.Resource(schema.GroupVersionResource{Group: "ipam.subnet-operator.io", Version: "v1alpha1", Resource: resource}).List(context.Background(), metav1.ListOptions{Limit: 1}); err != nil {
				return err
			}
		}
		return nil
	})
}
