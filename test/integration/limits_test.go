//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// A platform pool caps what each tenant namespace holds from it
// (spec.allowedNamespaces.perNamespace). Over the cap a create is refused
// with the figure. Claims that reached the API server without seeing each
// other (here: made before the pool existed, as a GitOps apply in any
// order does) are held to the cap by the arbiter: one is granted, the
// other waits with NamespaceQuotaExceeded and is granted once room is
// freed. Lowering a cap takes nothing away, and says so.
func TestPerNamespaceLimits(t *testing.T) {
	ctx := context.Background()
	platform, tenant := namespace(t), namespace(t)
	subnetOf := func(name string) *ipamv1.Subnet {
		return &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: name},
			Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Namespace: platform, Name: "corp"}, PrefixLength: ptr.To[int32](24)}}
	}
	// Two claims made before their pool: admission lets both through (the
	// pool does not exist yet, they wait PoolNotFound).
	for _, name := range []string{"first", "second"} {
		if err := k8s.Create(ctx, subnetOf(name)); err != nil {
			t.Fatal(err)
		}
	}
	corp := &ipamv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Namespace: platform, Name: "corp"},
		Spec: ipamv1.SubnetPoolSpec{CIDR: "10.0.0.0/16", DefaultPrefixLength: ptr.To[int32](24),
			AllowedNamespaces: &ipamv1.AllowedNamespaces{From: ipamv1.FromAll, PerNamespace: &ipamv1.NamespaceLimits{MaxClaims: ptr.To[int32](1)}}}}
	if err := k8s.Create(ctx, corp); err != nil {
		t.Fatal(err)
	}
	readyReasons := func() (map[string]string, error) {
		out := map[string]string{}
		for _, name := range []string{"first", "second"} {
			s := &ipamv1.Subnet{}
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: tenant, Name: name}, s); err != nil {
				return nil, err
			}
			if c := meta.FindStatusCondition(s.Status.Conditions, ipamv1.ConditionReady); c != nil {
				out[name] = c.Reason
				if c.Reason == ipamv1.ReasonNamespaceQuotaExceeded && !strings.Contains(c.Message, "namespace "+tenant+" holds 1 of the 1 claims SubnetPool "+platform+"/corp allows each namespace") {
					return nil, fmt.Errorf("%s's message: %s", name, c.Message)
				}
			}
		}
		return out, nil
	}
	var granted, waiting string
	eventually(t, 10*time.Second, func() error {
		reasons, err := readyReasons()
		if err != nil {
			return err
		}
		switch {
		case reasons["first"] == ipamv1.ReasonAllocated && reasons["second"] == ipamv1.ReasonNamespaceQuotaExceeded:
			granted, waiting = "first", "second"
		case reasons["second"] == ipamv1.ReasonAllocated && reasons["first"] == ipamv1.ReasonNamespaceQuotaExceeded:
			granted, waiting = "second", "first"
		default:
			return fmt.Errorf("want one Allocated and one NamespaceQuotaExceeded: %v", reasons)
		}
		return nil
	})

	// A third claim is refused at admission, with the figure.
	third := fmt.Sprintf(`{"apiVersion":"ipam.subnet-operator.io/v1alpha2","kind":"Subnet","metadata":{"name":"third","namespace":%q},"spec":{"poolRef":{"name":"corp","namespace":%q},"prefixLength":24}}`, tenant, platform)
	_, stderr, err := kubectl(t, third, "create", "-f", "-")
	want := fmt.Sprintf("spec.poolRef: Forbidden: namespace %s has 2 of the 1 claims SubnetPool %s/corp allows each namespace", tenant, platform)
	if err == nil || !strings.Contains(stderr, want) {
		t.Errorf("a claim over the cap: %v\n%s\nwant %s", err, stderr, want)
	}
	// The pool's own namespace is not capped.
	own := subnetOf("own")
	own.Namespace = platform
	if err := k8s.Create(ctx, own); err != nil {
		t.Errorf("a claim of the pool's own namespace: %v", err)
	}

	// Room is freed: the waiting claim is granted.
	if err := k8s.Delete(ctx, subnetOf(granted)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		s := &ipamv1.Subnet{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: tenant, Name: waiting}, s); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(s.Status.Conditions, ipamv1.ConditionReady) {
			return fmt.Errorf("%s not granted after room was freed: %+v", waiting, s.Status.Conditions)
		}
		return nil
	})

	// Lowering the cap below what the tenant holds: a warning, and the
	// claim keeps its range.
	_, stderr, err = kubectl(t, "", "patch", "subnetpool", "corp", "-n", platform, "--type=merge", "-p", `{"spec":{"allowedNamespaces":{"perNamespace":{"maxClaims":0}}}}`)
	if err != nil || !strings.Contains(stderr, "namespaces "+tenant+" already hold more than spec.allowedNamespaces.perNamespace allows each namespace: their claims keep their ranges") {
		t.Errorf("lowering the cap: %v\n%s", err, stderr)
	}
	held := &ipamv1.Subnet{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: tenant, Name: waiting}, held); err != nil {
		t.Fatal(err)
	}
	cidr := held.Status.CIDR
	// Once this replica's view has the lowered cap, a new claim is
	// refused; the one held keeps its range.
	eventually(t, 10*time.Second, func() error {
		_, stderr, err := kubectl(t, strings.Replace(third, `"third"`, `"fourth"`, 1), "create", "-f", "-")
		if err == nil || !strings.Contains(stderr, "of the 0 claims") {
			return fmt.Errorf("a claim above the lowered cap: %v %s", err, stderr)
		}
		return nil
	})
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: tenant, Name: waiting}, held); err != nil {
		t.Fatal(err)
	}
	if held.Status.CIDR != cidr || !meta.IsStatusConditionTrue(held.Status.Conditions, ipamv1.ConditionReady) {
		t.Errorf("a lowered cap took a range away: %+v", held.Status)
	}
}

// A refusal for consent tells the tenant which of its own namespace's
// labels the pool's selector looks at, not the selector's values, which
// name other tenants here.
func TestConsentRefusalHidesOtherTenants(t *testing.T) {
	platform, tenant := namespace(t), namespace(t)
	pool := fmt.Sprintf(`
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: SubnetPool
metadata: {name: sel, namespace: %s}
spec:
  cidr: 10.0.0.0/16
  defaultPrefixLength: 24
  allowedNamespaces:
    from: Selector
    selector:
      matchExpressions: [{key: kubernetes.io/metadata.name, operator: In, values: [secret-team-one, secret-team-two]}]
`, platform)
	if _, stderr, err := kubectl(t, pool, "create", "-f", "-"); err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	claim := fmt.Sprintf(`{"apiVersion":"ipam.subnet-operator.io/v1alpha2","kind":"Subnet","metadata":{"name":"x","namespace":%q},"spec":{"poolRef":{"name":"sel","namespace":%q}}}`, tenant, platform)
	eventually(t, 10*time.Second, func() error { // the manager's view of the new pool
		_, stderr, err := kubectl(t, claim, "create", "-f", "-")
		want := fmt.Sprintf("namespaces whose labels match its selector on the label kubernetes.io/metadata.name (namespace %[1]s has kubernetes.io/metadata.name=%[1]s), not from %[1]s", tenant)
		if err == nil || !strings.Contains(stderr, want) {
			return fmt.Errorf("%v: %s", err, stderr)
		}
		if strings.Contains(stderr, "secret-team") {
			t.Errorf("the refusal names other tenants: %s", stderr)
		}
		return nil
	})
}
