//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/test/environment"
)

// tenantLabel marks the namespaces a test's platform pool allows; its value
// is the test's own, so that no other test's namespace matches.
const tenantLabel = "e2e.ipam.subnet-operator.io/tenant"

// One plan, many namespaces: a platform namespace's pool serves Subnets and
// child pools in two tenant namespaces that its selector allows; a third
// namespace is refused with an error that names the pool and its policy; a
// tenant needs rights in its own namespace only; an overlap across
// namespaces is refused at admission, and under parallel creates never
// becomes Ready twice; a namespace that loses the right keeps its ranges,
// and the pool says which claims are no longer allowed.
func TestTenancy(t *testing.T) {
	ctx := context.Background()
	id := fmt.Sprintf("%04x", rand.IntN(1<<16))
	mkNamespace := func(role string, labels map[string]string) string {
		name := fmt.Sprintf("e2e-tenancy-%s-%s", role, id)
		if err := environment.CreateIsolatedNamespace(ctx, k8s, name, labels); err != nil {
			t.Fatal(err)
		}
		return name
	}
	platform := mkNamespace("netops", nil)
	teamA := mkNamespace("a", map[string]string{tenantLabel: id})
	teamB := mkNamespace("b", map[string]string{tenantLabel: id})
	teamC := mkNamespace("c", nil)

	mustKubectl(t, fmt.Sprintf(`
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: SubnetPool
metadata: {name: corp, namespace: %[1]s}
spec:
  cidr: 10.60.0.0/16
  defaultPrefixLength: 24
  allowedNamespaces: {from: Selector, selector: {matchLabels: {%[4]s: "%[5]s"}}}
---
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: Subnet
metadata: {name: web, namespace: %[2]s}
spec: {poolRef: {name: corp, namespace: %[1]s}}
---
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: SubnetPool
metadata: {name: kids, namespace: %[2]s}
spec: {parentRef: {name: corp, namespace: %[1]s}, cidr: 10.60.128.0/20, defaultPrefixLength: 26}
---
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: Subnet
metadata: {name: db, namespace: %[3]s}
spec: {poolRef: {name: corp, namespace: %[1]s}}
---
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: Subnet
metadata: {name: fixed, namespace: %[3]s}
spec: {poolRef: {name: corp, namespace: %[1]s}, cidr: 10.60.200.0/24}
`, platform, teamA, teamB, tenantLabel, id), "apply", "-f", "-")
	for _, ns := range []string{platform, teamA, teamB} {
		mustKubectl(t, "", "wait", "-n", ns, "--for=condition=Ready", "--timeout=60s", "subnets,subnetpools", "--all")
	}

	// A tenant with rights only in its own namespace claims from the plan,
	// from its own child pool too, and sees where its Subnet came from.
	mustKubectl(t, fmt.Sprintf(`
apiVersion: v1
kind: ServiceAccount
metadata: {name: tenant, namespace: %[1]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: claims, namespace: %[1]s}
rules:
- apiGroups: [ipam.subnet-operator.io]
  resources: [subnets]
  verbs: [create, get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: tenant-claims, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: claims}
subjects: [{kind: ServiceAccount, name: tenant, namespace: %[1]s}]
`, teamA), "apply", "-f", "-")
	asTenant := "--as=system:serviceaccount:" + teamA + ":tenant"
	mustKubectl(t, fmt.Sprintf(`
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: Subnet
metadata: {name: api, namespace: %[2]s}
spec: {poolRef: {name: corp, namespace: %[1]s}, prefixLength: 25}
---
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: Subnet
metadata: {name: pod-net, namespace: %[2]s}
spec: {poolRef: {name: kids}}
`, platform, teamA), asTenant, "create", "-f", "-")
	mustKubectl(t, "", asTenant, "wait", "-n", teamA, "--for=condition=Ready", "--timeout=60s", "subnet/api", "subnet/pod-net")
	wide := mustKubectl(t, "", asTenant, "get", "subnets", "-n", teamA, "-o", "wide")
	for _, row := range []string{"api corp " + platform, "web corp " + platform, "pod-net kids " + teamA} {
		if !hasRow(wide, row) {
			t.Errorf("kubectl get subnets -o wide lacks %q:\n%s", row, wide)
		}
	}
	if _, _, err := kubectl(t, "", asTenant, "get", "subnetpools", "-n", platform); err == nil {
		t.Error("the tenant can read the platform namespace's pools; the test's RBAC is wrong")
	}

	// A namespace the pool does not allow is refused, with the pool and the
	// label its selector reads named, and the namespace's own value of it:
	// not the selector's values, which may name other tenants.
	refusal := fmt.Sprintf("SubnetPool %s/corp allows claims only from its own namespace %s and namespaces whose labels match its selector on the label %s (namespace %s has no label %s), not from %s",
		platform, platform, tenantLabel, teamC, tenantLabel, teamC)
	for _, manifest := range []string{
		fmt.Sprintf("apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: Subnet\nmetadata: {name: x, namespace: %s}\nspec: {poolRef: {name: corp, namespace: %s}}\n", teamC, platform),
		fmt.Sprintf("apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: SubnetPool\nmetadata: {name: x, namespace: %s}\nspec: {parentRef: {name: corp, namespace: %s}, cidr: 10.60.240.0/24}\n", teamC, platform),
	} {
		if _, stderr, err := kubectl(t, manifest, "create", "-f", "-"); err == nil || !strings.Contains(stderr, refusal) {
			t.Errorf("a namespace that is not allowed: %v\n%s\nwant it to say %q", err, stderr, refusal)
		}
	}

	// An overlap across namespaces is refused at admission; the tenant
	// learns the range, not the other tenant's object.
	overlap := fmt.Sprintf("apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: Subnet\nmetadata: {name: oops, namespace: %s}\nspec: {poolRef: {name: corp, namespace: %s}, cidr: 10.60.200.0/25}\n", teamA, platform)
	want := `The Subnet "oops" is invalid: spec.cidr: Invalid value: "10.60.200.0/25": overlaps a range held in another namespace (10.60.200.0/24); pick a free range, or set spec.prefixLength to have one allocated`
	if _, stderr, err := kubectl(t, overlap, "create", "-f", "-"); err == nil || strings.TrimSpace(stderr) != want {
		t.Errorf("overlap across namespaces: %v\n%s\nwant %s", err, stderr, want)
	}

	// Parallel creates of one range from both tenants: whatever admission
	// lets through, exactly one becomes Ready; the others say who holds it.
	var created []client.ObjectKey
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			s := &ipamv1.Subnet{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("race-%d", i), Namespace: []string{teamA, teamB}[i%2]},
				Spec:       ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: "corp", Namespace: platform}, CIDR: "10.60.210.0/24"},
			}
			if err := k8s.Create(ctx, s); err == nil {
				mu.Lock()
				created = append(created, client.ObjectKeyFromObject(s))
				mu.Unlock()
			} else if !strings.Contains(err.Error(), "overlaps") {
				t.Errorf("race-%d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if len(created) == 0 {
		t.Fatal("no parallel create was admitted")
	}
	readyCount := func() (int, error) {
		ready := 0
		for _, key := range created {
			var s ipamv1.Subnet
			if err := k8s.Get(ctx, key, &s); err != nil {
				return 0, err
			}
			c := meta.FindStatusCondition(s.Status.Conditions, ipamv1.ConditionReady)
			switch {
			case c == nil || c.Reason == ipamv1.ReasonPending:
				return 0, fmt.Errorf("%s not decided yet", key)
			case c.Status == metav1.ConditionTrue:
				ready++
			case c.Reason != ipamv1.ReasonOverlaps:
				return 0, fmt.Errorf("%s: %s %s", key, c.Reason, c.Message)
			}
		}
		return ready, nil
	}
	eventually(t, time.Minute, func() error {
		n, err := readyCount()
		if err == nil && n != 1 {
			err = fmt.Errorf("%d of %d parallel claims on one range are Ready", n, len(created))
		}
		return err
	})
	t.Logf("%d of 8 parallel creates of one range across two namespaces were admitted; 1 Ready", len(created))

	// team-b loses the right: its claims keep their ranges, the pool says
	// which are no longer allowed, and a new claim from it is refused.
	var before ipamv1.SubnetList
	if err := k8s.List(ctx, &before, client.InNamespace(teamB)); err != nil {
		t.Fatal(err)
	}
	mustKubectl(t, "", "label", "namespace", teamB, tenantLabel+"-")
	eventually(t, 30*time.Second, func() error {
		var p ipamv1.SubnetPool
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: platform, Name: "corp"}, &p); err != nil {
			return err
		}
		c := meta.FindStatusCondition(p.Status.Conditions, ipamv1.ConditionClaimsNotAllowed)
		if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "Subnet "+teamB+"/db") || !strings.Contains(c.Message, "Subnet "+teamB+"/fixed") {
			return fmt.Errorf("ClaimsNotAllowed: %+v", c)
		}
		return nil
	})
	for _, s := range before.Items {
		var now ipamv1.Subnet
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(&s), &now); err != nil {
			t.Fatal(err)
		}
		if now.Status.CIDR != s.Status.CIDR || meta.IsStatusConditionTrue(now.Status.Conditions, ipamv1.ConditionReady) != meta.IsStatusConditionTrue(s.Status.Conditions, ipamv1.ConditionReady) {
			t.Errorf("%s/%s changed after its namespace lost the right: %s -> %s", s.Namespace, s.Name, s.Status.CIDR, now.Status.CIDR)
		}
	}
	late := fmt.Sprintf("apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: Subnet\nmetadata: {name: late, namespace: %s}\nspec: {poolRef: {name: corp, namespace: %s}}\n", teamB, platform)
	eventually(t, 10*time.Second, func() error {
		if _, stderr, err := kubectl(t, late, "create", "-f", "-"); err == nil || !strings.Contains(stderr, "not from "+teamB) {
			if err == nil {
				mustKubectl(t, "", "delete", "-n", teamB, "subnet", "late")
			}
			return fmt.Errorf("a new claim after the right was lost: %w %s", err, stderr)
		}
		return nil
	})
	// Allowed again: nothing is listed.
	mustKubectl(t, "", "label", "namespace", teamB, tenantLabel+"="+id)
	eventually(t, 30*time.Second, func() error {
		var p ipamv1.SubnetPool
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: platform, Name: "corp"}, &p); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(p.Status.Conditions, ipamv1.ConditionClaimsNotAllowed); c == nil || c.Status != metav1.ConditionFalse {
			return fmt.Errorf("ClaimsNotAllowed: %+v", c)
		}
		return nil
	})

	// The platform cannot delete the plan from under its tenants, and is
	// told how many claims other namespaces hold there: their names are
	// their namespaces' business (a forged review must not learn them).
	if _, stderr, err := kubectl(t, "", "delete", "subnetpool", "-n", platform, "corp"); err == nil ||
		!strings.Contains(stderr, "claims in other namespaces") || strings.Contains(stderr, teamA+"/") {
		t.Errorf("deleting a pool tenants use: %v %s", err, stderr)
	}
	for _, ns := range []string{teamA, teamB} {
		mustKubectl(t, "", "delete", "-n", ns, "subnets", "--all", "--timeout=60s")
	}
	mustKubectl(t, "", "delete", "-n", teamA, "subnetpool", "kids", "--timeout=60s")
	mustKubectl(t, "", "delete", "-n", platform, "subnetpool", "corp", "--timeout=60s")
}

// hasRow reports whether a line of kubectl's table starts with prefix,
// columns separated by single spaces.
func hasRow(table, prefix string) bool {
	for _, line := range strings.Split(table, "\n") {
		if strings.HasPrefix(strings.Join(strings.Fields(line), " "), prefix) {
			return true
		}
	}
	return false
}
