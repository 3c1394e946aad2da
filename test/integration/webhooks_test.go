//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// setupPools creates, in ns, a /16 pool with bounds and a reserved /24, an
// explicit Subnet in it, and a child pool.
func setupPools(t *testing.T, ns string) {
	t.Helper()
	manifest := fmt.Sprintf(`
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: SubnetPool
metadata: {name: dc, namespace: %[1]s}
spec:
  cidr: 10.0.0.0/16
  defaultPrefixLength: 24
  minPrefixLength: 20
  maxPrefixLength: 28
  reserved: [10.0.64.0/24]
---
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: Subnet
metadata: {name: web, namespace: %[1]s}
spec: {poolRef: {name: dc}, cidr: 10.0.1.0/24}
---
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: SubnetPool
metadata: {name: team, namespace: %[1]s}
spec: {parentRef: {name: dc}, cidr: 10.0.128.0/17}
`, ns)
	if _, stderr, err := kubectl(t, manifest, "create", "-f", "-"); err != nil {
		t.Fatalf("setup: %v: %s", err, stderr)
	}
}

// Every rule, rejected with its message as `kubectl create` prints it.
func TestRulesAsKubectlPrintsThem(t *testing.T) {
	ns := namespace(t)
	setupPools(t, ns)
	subnet := func(name, spec string) string {
		return fmt.Sprintf("apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: Subnet\nmetadata: {name: %s, namespace: %s}\nspec: %s\n", name, ns, spec)
	}
	pool := func(name, spec string) string {
		return fmt.Sprintf("apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: SubnetPool\nmetadata: {name: %s, namespace: %s}\nspec: %s\n", name, ns, spec)
	}
	tests := []struct {
		name, manifest, want string
	}{
		{"host bits", subnet("a", "{poolRef: {name: dc}, cidr: 10.0.2.1/24}"),
			`The Subnet "a" is invalid: spec.cidr: Invalid value: "10.0.2.1/24": host bits set; did you mean "10.0.2.0/24"?`},
		{"prefix length out of range", subnet("a", "{poolRef: {name: dc}, cidr: 10.0.2.0/33}"),
			`The Subnet "a" is invalid: spec.cidr: Invalid value: "10.0.2.0/33": prefix length 33 is out of range for IPv4 (0-32)`},
		{"leading zeros", subnet("a", "{poolRef: {name: dc}, cidr: 010.0.2.0/24}"),
			`The Subnet "a" is invalid: spec.cidr: Invalid value: "010.0.2.0/24": leading zeros are not allowed in IPv4 addresses (they are read as octal by some tools); did you mean "10.0.2.0/24"?`},
		{"IPv4-mapped IPv6", subnet("a", "{poolRef: {name: dc}, cidr: '::ffff:10.0.2.0/120'}"),
			`The Subnet "a" is invalid: spec.cidr: Invalid value: "::ffff:10.0.2.0/120": IPv4-mapped IPv6 is not allowed; write the IPv4 form; did you mean "10.0.2.0/24"?`},
		{"empty poolRef", subnet("a", `{poolRef: {name: ""}, cidr: 10.0.2.0/24}`),
			`The Subnet "a" is invalid: spec.poolRef.name: Required value: name the SubnetPool to claim from`},
		{"overlap", subnet("a", "{poolRef: {name: dc}, cidr: 10.0.1.128/25}"),
			`The Subnet "a" is invalid: spec.cidr: Invalid value: "10.0.1.128/25": overlaps Subnet ` + ns + `/web (10.0.1.0/24); pick a free range, or set spec.prefixLength to have one allocated`},
		{"overlap with a child pool", subnet("a", "{poolRef: {name: dc}, cidr: 10.0.200.0/24}"),
			`The Subnet "a" is invalid: spec.cidr: Invalid value: "10.0.200.0/24": overlaps SubnetPool ` + ns + `/team (10.0.128.0/17); pick a free range, or set spec.prefixLength to have one allocated`},
		{"outside the pool", subnet("a", "{poolRef: {name: dc}, cidr: 10.1.0.0/24}"),
			`The Subnet "a" is invalid: spec.cidr: Invalid value: "10.1.0.0/24": lies outside SubnetPool ` + ns + `/dc (10.0.0.0/16)`},
		{"reserved", subnet("a", "{poolRef: {name: dc}, cidr: 10.0.64.0/25}"),
			`The Subnet "a" is invalid: spec.cidr: Invalid value: "10.0.64.0/25": overlaps reserved range 10.0.64.0/24 of SubnetPool ` + ns + `/dc`},
		{"family", subnet("a", "{poolRef: {name: dc}, cidr: '2001:db8::/64'}"),
			`The Subnet "a" is invalid: spec.cidr: Invalid value: "2001:db8::/64": is IPv6 but SubnetPool ` + ns + `/dc (10.0.0.0/16) is IPv4`},
		{"maxPrefixLength", subnet("a", "{poolRef: {name: dc}, prefixLength: 30}"),
			`The Subnet "a" is invalid: spec.prefixLength: Invalid value: 30: prefix length 30 is longer than maxPrefixLength 28 of SubnetPool ` + ns + `/dc: use 20 to 28`},
		{"child outside its parent", pool("p", "{parentRef: {name: dc}, cidr: 10.1.0.0/24}"),
			`The SubnetPool "p" is invalid: spec.cidr: Invalid value: "10.1.0.0/24": lies outside parent SubnetPool ` + ns + `/dc (10.0.0.0/16)`},
		{"child over a sibling", pool("p", "{parentRef: {name: dc}, cidr: 10.0.192.0/18}"),
			`The SubnetPool "p" is invalid: spec.cidr: Invalid value: "10.0.192.0/18": overlaps SubnetPool ` + ns + `/team (10.0.128.0/17) in parent SubnetPool ` + ns + `/dc; pick a free range`},
		{"missing parent", pool("p", "{parentRef: {name: nowhere}, cidr: 10.0.64.0/18}"),
			`The SubnetPool "p" is invalid: spec.parentRef: Invalid value: "nowhere": SubnetPool ` + ns + `/nowhere does not exist; create the parent pool first`},
		{"its own parent", pool("p", "{parentRef: {name: p}, cidr: 10.0.64.0/18}"),
			`The SubnetPool "p" is invalid: spec.parentRef: Invalid value: "p": must not name the pool itself`},
		{"min above max", pool("p", "{cidr: 172.16.0.0/12, minPrefixLength: 28, maxPrefixLength: 24}"),
			`The SubnetPool "p" is invalid: spec.minPrefixLength: Invalid value: 28: must not be greater than maxPrefixLength (24)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, err := kubectl(t, tt.manifest, "create", "-f", "-")
			if err == nil {
				t.Fatal("created; want a rejection")
			}
			if got := strings.TrimSpace(stderr); got != tt.want {
				t.Errorf("kubectl printed\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

// Invariant 2, as users meet it: a multi-document apply whose second
// document overlaps the first. kubectl sends the second create only after
// the first returned; the webhook must see the first even if its informer
// has not delivered it yet. Fifty times, not one miss.
func TestMultiDocumentApplyRejectsTheSecond(t *testing.T) {
	ns := namespace(t)
	setupPools(t, ns)
	for i := range 50 {
		manifest := fmt.Sprintf(`
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: Subnet
metadata: {name: first-%[2]d, namespace: %[1]s}
spec: {poolRef: {name: dc}, cidr: 10.0.%[3]d.0/25}
---
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: Subnet
metadata: {name: second-%[2]d, namespace: %[1]s}
spec: {poolRef: {name: dc}, cidr: 10.0.%[3]d.0/24}
`, ns, i, 10+i)
		_, stderr, err := kubectl(t, manifest, "apply", "-f", "-")
		if err == nil || !strings.Contains(stderr, fmt.Sprintf("overlaps Subnet %s/first-%d", ns, i)) {
			t.Fatalf("attempt %d: the second document was not rejected for overlapping the first: %v\n%s", i, err, stderr)
		}
		var second ipamv1.Subnet
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("second-%d", i)}, &second); !apierrors.IsNotFound(err) {
			t.Fatalf("attempt %d: second-%d exists: %v", i, i, err)
		}
	}
}

func TestSubnetBeforeItsPoolIsAdmittedWithAWarning(t *testing.T) {
	ns := namespace(t)
	manifest := fmt.Sprintf("apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: Subnet\nmetadata: {name: early, namespace: %s}\nspec: {poolRef: {name: later}, prefixLength: 24}\n", ns)
	_, stderr, err := kubectl(t, manifest, "apply", "-f", "-")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	want := fmt.Sprintf("Warning: SubnetPool %s/later does not exist yet; the Subnet waits (Ready=False, reason PoolNotFound) until it is created", ns)
	if !strings.Contains(stderr, want) {
		t.Errorf("kubectl printed %q; want the warning %q", stderr, want)
	}
}

// Dry-run requests are decided exactly like real ones, and change nothing.
func TestDryRunBehavesLikeARealRequest(t *testing.T) {
	ns := namespace(t)
	setupPools(t, ns)
	overlapping := fmt.Sprintf("apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: Subnet\nmetadata: {name: clash, namespace: %s}\nspec: {poolRef: {name: dc}, cidr: 10.0.1.0/26}\n", ns)
	if _, stderr, err := kubectl(t, overlapping, "create", "--dry-run=server", "-f", "-"); err == nil || !strings.Contains(stderr, "overlaps Subnet") {
		t.Errorf("dry-run of an overlapping Subnet: %v %s", err, stderr)
	}
	free := fmt.Sprintf("apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: Subnet\nmetadata: {name: free, namespace: %s}\nspec: {poolRef: {name: dc}, cidr: 10.0.2.0/24}\n", ns)
	if _, stderr, err := kubectl(t, free, "create", "--dry-run=server", "-f", "-"); err != nil {
		t.Fatalf("dry-run of a free Subnet: %v %s", err, stderr)
	}
	// Nothing was created, and the range is still free for a real create.
	if _, stderr, err := kubectl(t, free, "create", "-f", "-"); err != nil {
		t.Errorf("the real create after a dry run: %v %s", err, stderr)
	}
}

// Deleting a pool in use is refused with the names of what uses it.
func TestPoolInUseCannotBeDeleted(t *testing.T) {
	ns := namespace(t)
	setupPools(t, ns)
	_, stderr, err := kubectl(t, "", "delete", "subnetpool", "-n", ns, "dc")
	want := fmt.Sprintf(`subnetpools.ipam.subnet-operator.io "dc" is forbidden: SubnetPool %[1]s/dc is in use by 1 Subnets and 1 child pools (Subnet %[1]s/web, SubnetPool %[1]s/team); delete them first`, ns)
	if err == nil || !strings.Contains(stderr, want) {
		t.Errorf("kubectl printed %q\nwant it to contain %q", stderr, want)
	}
}

// A pool's Subnets and child pools are selected by field, not by a label
// (the CRDs' selectableFields).
func TestSelectByPoolReference(t *testing.T) {
	ns := namespace(t)
	setupPools(t, ns)
	create(t, newSubnet(ns, "in-team", "team", 24))
	var subnets ipamv1.SubnetList
	if err := k8s.List(context.Background(), &subnets, client.InNamespace(ns), client.MatchingFields{"spec.poolRef.name": "dc"}); err != nil {
		t.Fatal(err)
	}
	if len(subnets.Items) != 1 || subnets.Items[0].Name != "web" {
		t.Errorf("Subnets of dc: %v", names(subnets.Items))
	}
	stdout, stderr, err := kubectl(t, "", "get", "subnetpools", "-n", ns, "--field-selector", "spec.parentRef.name=dc", "-o", "name")
	if err != nil || strings.TrimSpace(stdout) != "subnetpool.ipam.subnet-operator.io/team" {
		t.Errorf("children of dc: %q %v %s", stdout, err, stderr)
	}
}

func names(subnets []ipamv1.Subnet) []string {
	out := make([]string, 0, len(subnets))
	for _, s := range subnets {
		out = append(out, s.Name)
	}
	return out
}
