//go:build integration

package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// A violation written straight into status (as a bypassed or buggy
// controller would) is found by the auditor: a metric and an event. The
// pool's Overlapping condition reports it too. The violation is a Subnet
// over a child pool's range: one over another Subnet's the arbiter takes
// back (TestARestoredStatusDoesNotCarryARangeIntoAnotherPool), one over a
// child pool it only reports (two informers may lag apart).
func TestAuditorReportsInjectedViolation(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	child := newPool(ns, "a", "10.70.1.0/24", 0)
	child.Spec.ParentRef = &ipamv1.PoolReference{Name: "p"}
	create(t, newPool(ns, "p", "10.70.0.0/16", 0), child, explicitSubnet(ns, "b", "p", "10.70.2.0/24"))
	poolShows(t, ns, "a", func(p *ipamv1.SubnetPool) error {
		if p.Status.CIDR != "10.70.1.0/24" {
			return fmt.Errorf("child pool a not granted yet: %+v", p.Status)
		}
		return nil
	})
	b := subnetReason(t, ns, "b", ipamv1.ReasonAllocated)
	before := b.DeepCopy()
	b.Status.CIDR = "10.70.1.128/25" // now inside a's range, and still Ready
	if err := k8s.Status().Patch(ctx, b, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}

	token, err := env.MetricsReaderToken(ctx, ns, "scraper")
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		_, body, err := env.Scrape(ctx, env.Managers[0], token)
		if err != nil {
			return err
		}
		if !strings.Contains(body, `subnet_operator_audit_violations{type="overlap"} 1`) {
			return fmt.Errorf("no overlap reported yet")
		}
		return nil
	})
	eventually(t, 30*time.Second, func() error {
		out, _, err := kubectl(t, "", "get", "events", "-n", ns, "--field-selector", "reason=AuditViolation", "-o", "jsonpath={.items[*].note}{.items[*].message}")
		if err != nil || !strings.Contains(out, fmt.Sprintf("Subnet %s/b holds 10.70.1.128/25, which overlaps SubnetPool %s/a (10.70.1.0/24), also Ready", ns, ns)) {
			return fmt.Errorf("no audit event yet (%q): %w", out, err)
		}
		return nil
	})
	poolShows(t, ns, "p", func(p *ipamv1.SubnetPool) error {
		if !meta.IsStatusConditionTrue(p.Status.Conditions, ipamv1.ConditionOverlapping) {
			return fmt.Errorf("Overlapping not True: %+v", p.Status.Conditions)
		}
		return nil
	})
	// Repaired, the gauge returns to zero.
	if err := k8s.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		_, body, err := env.Scrape(ctx, env.Managers[0], token)
		if err != nil || !strings.Contains(body, `subnet_operator_audit_violations{type="overlap"} 0`) {
			return fmt.Errorf("still reported: %w", err)
		}
		return nil
	})
}

// The metrics endpoint serves only clients the API server authenticates and
// authorizes for get on /metrics.
func TestMetricsEndpointAuth(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	if status, _, err := env.Scrape(ctx, env.Managers[0], ""); err != nil || status != http.StatusUnauthorized {
		t.Errorf("without a token: %d %v, want 401", status, err)
	}
	nobody, err := env.ServiceAccountToken(ctx, ns, "nobody", "")
	if err != nil {
		t.Fatal(err)
	}
	if status, _, err := env.Scrape(ctx, env.Managers[0], nobody); err != nil || status != http.StatusForbidden {
		t.Errorf("an authenticated client without the role: %d %v, want 403", status, err)
	}
	reader, err := env.MetricsReaderToken(ctx, ns, "reader")
	if err != nil {
		t.Fatal(err)
	}
	status, body, err := env.Scrape(ctx, env.Managers[0], reader)
	if err != nil || status != http.StatusOK || !strings.Contains(body, "subnet_operator_admission_decisions_total") {
		t.Errorf("with the metrics-reader role: %d %v", status, err)
	}
}

// The webhook server speaks TLS 1.2 or later and HTTP/1.1 only.
func TestWebhookTLSPolicy(t *testing.T) {
	addr := strings.TrimPrefix(env.WebhookURL, "https://")
	old, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS11}) //nolint:gosec // G402: probing that old TLS is refused
	if err == nil {
		_ = old.Close()
		t.Error("a TLS 1.1 handshake succeeded")
	}
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}}) //nolint:gosec // G402: only the negotiated protocol is checked
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if p := conn.ConnectionState().NegotiatedProtocol; p == "h2" {
		t.Error("HTTP/2 was negotiated; it is off by default")
	}
}

// The API server restarts while Subnets are being created: the manager
// recovers without a restart of its own, and every Subnet is allocated.
func TestAPIServerRestartUnderLoad(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	create(t, newPool(ns, "p", "10.80.0.0/16", 26))
	pid := env.Managers[0].Process.Pid()
	const n = 200
	subnets := make([]*ipamv1.Subnet, n)
	for i := range subnets {
		subnets[i] = newSubnet(ns, fmt.Sprintf("r%03d", i), "p", 26)
	}
	wait := createInParallel(subnets, 8, 300)
	time.Sleep(500 * time.Millisecond)
	if err := env.RestartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	for name, err := range wait() {
		t.Errorf("create %s: %v", name, err)
	}
	eventually(t, 2*time.Minute, func() error {
		var list ipamv1.SubnetList
		if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		ready := 0
		for _, s := range list.Items {
			if meta.IsStatusConditionTrue(s.Status.Conditions, ipamv1.ConditionReady) {
				ready++
			}
		}
		if ready != n {
			return fmt.Errorf("%d of %d Ready", ready, n)
		}
		return nil
	})
	poolShows(t, ns, "p", allocatedIs(fmt.Sprint(n*64)))
	if env.Managers[0].Process.Pid() != pid {
		t.Error("the manager was restarted")
	}
}

// With the webhook unreachable, creates fail closed with the API server's
// error while deletes of Subnets still go through; with the webhooks
// bypassed altogether, the CRD schema and its CEL rules still refuse
// malformed input.
func TestWebhookUnreachableFailsClosed(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	create(t, newPool(ns, "p", "10.90.0.0/16", 24), newSubnet(ns, "leaving", "p", 24))
	subnetReason(t, ns, "leaving", ipamv1.ReasonAllocated)
	m := env.Managers[0]
	m.Process.Stop(15 * time.Second)
	// Deleting a Subnet needs no admission: an outage does not block it (nor
	// the deletion of its namespace).
	if _, stderr, err := kubectl(t, "", "delete", "-n", ns, "subnet", "leaving", "--wait=false"); err != nil {
		t.Errorf("deleting a Subnet with the webhook down: %v %s", err, stderr)
	}
	var restore func()
	t.Cleanup(func() { // the manager first: restoring waits for its webhook to answer
		if err := env.StartManager(ctx, m); err != nil {
			t.Error(err)
		}
		if restore != nil {
			restore()
		}
	})
	good := fmt.Sprintf("apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: Subnet\nmetadata: {name: good, namespace: %s}\nspec: {poolRef: {name: p, namespace: %s}, cidr: 10.90.1.0/24}\n", ns, ns)
	_, stderr, err := kubectl(t, good, "create", "-f", "-")
	// (The validating webhook's call fails: a canonical explicit claim
	// with its pool's namespace written out skips the defaulting one, by
	// its matchConditions.)
	if err == nil || !strings.Contains(stderr, `failed calling webhook "vsubnet.ipam.subnet-operator.io"`) {
		t.Errorf("a create with the webhook down: %v %s", err, stderr)
	}
	var s ipamv1.Subnet
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "good"}, &s); err == nil {
		t.Error("the Subnet was stored without admission")
	}

	restore = bypassWebhooks(t)
	for _, tc := range []struct{ spec, want string }{
		{"{poolRef: {name: p}, cidr: 10.90.2.1/24}", "host bits set: write the network address (10.0.0.0/24, not 10.0.0.1/24)"},
		{"{poolRef: {name: p}, cidr: 10.90.2.0/33}", "must be a CIDR such as 10.0.1.0/24 or 2001:db8:0:1::/64"},
		{"{poolRef: {name: p}, cidr: 10.90.2.0/24, prefixLength: 25}", "cidr and prefixLength together mean a range allocated earlier: cidr must be a /prefixLength range"},
		{`{poolRef: {name: ""}, prefixLength: 24}`, "spec.poolRef.name in body should be at least 1 chars long"},
	} {
		manifest := fmt.Sprintf("apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: Subnet\nmetadata: {name: bad, namespace: %s}\nspec: %s\n", ns, tc.spec)
		_, stderr, err := kubectl(t, manifest, "create", "-f", "-")
		if err == nil || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s with the webhooks bypassed: %v %s", tc.spec, err, stderr)
		}
	}
}

// bypassWebhooks points both webhook configurations at no operation until
// the returned function restores them. Both wait until the API server
// applies the change (it reloads webhook configurations asynchronously): a
// dry-run create with host bits set is refused by the CRD's CEL rule when
// the webhooks are bypassed, and by the mutating webhook otherwise.
func bypassWebhooks(t *testing.T) (restore func()) {
	t.Helper()
	probe := "apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: Subnet\nmetadata: {name: probe, namespace: default}\nspec: {poolRef: {name: p}, cidr: 10.0.0.1/24}\n"
	answered := func(answeredBy string) {
		eventually(t, 30*time.Second, func() error {
			_, stderr, _ := kubectl(t, probe, "create", "--dry-run=server", "-f", "-")
			if !strings.Contains(stderr, answeredBy) {
				return fmt.Errorf("not applied yet: %s", stderr)
			}
			return nil
		})
	}
	restoreValidating := setWebhookOperations(t, validatingConfiguration, noOperations)
	restoreMutating := setWebhookOperations(t, mutatingConfiguration, noOperations)
	answered("host bits set: write the network address")
	return func() {
		restoreValidating()
		restoreMutating()
		answered("did you mean")
	}
}

// The manager's role, as config/rbac grants it, can do what the manager
// does and nothing else: no Secrets, no writes to objects it does not own.
func TestManagerRBACIsLeastPrivilege(t *testing.T) {
	ns := namespace(t)
	for _, f := range []string{"role.yaml", "role_binding.yaml", "leader_election_role.yaml", "leader_election_role_binding.yaml"} {
		manifest := mustRead(t, filepath.Join(env.RepoRoot, "config", "rbac", f))
		manifest = strings.ReplaceAll(manifest, "namespace: system", "namespace: "+ns)
		if _, stderr, err := kubectl(t, manifest, "apply", "-f", "-"); err != nil {
			t.Fatalf("%s: %v %s", f, err, stderr)
		}
	}
	as := "--as=system:serviceaccount:" + ns + ":controller-manager"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "subnets", "-A"}, "yes"},
		{[]string{"patch", "subnets", "--subresource=status", "-A"}, "yes"},
		{[]string{"patch", "subnetpools", "--subresource=status", "-A"}, "yes"},
		{[]string{"patch", "subnetpools", "-A"}, "yes"}, // the finalizer
		{[]string{"create", "events.events.k8s.io", "-A"}, "yes"},
		{[]string{"get", "leases", "-n", ns}, "yes"},
		{[]string{"create", "leases", "-n", ns}, "yes"},
		{[]string{"update", "leases", "-n", ns}, "yes"},
		{[]string{"update", "subnetpools", "-A"}, "no"},
		{[]string{"update", "subnetpools", "--subresource=finalizers", "-A"}, "no"},
		{[]string{"update", "subnets", "--subresource=status", "-A"}, "no"},
		{[]string{"update", "subnetpools", "--subresource=status", "-A"}, "no"},
		{[]string{"list", "leases", "-n", ns}, "no"},
		{[]string{"watch", "leases", "-n", ns}, "no"},
		{[]string{"delete", "leases", "-n", ns}, "no"},
		{[]string{"update", "subnets", "-A"}, "no"},
		{[]string{"delete", "subnets", "-A"}, "no"},
		{[]string{"create", "subnetpools", "-A"}, "no"},
		{[]string{"delete", "subnetpools", "-A"}, "no"},
		{[]string{"get", "secrets", "-A"}, "no"},
		{[]string{"list", "secrets", "-A"}, "no"},
		{[]string{"get", "configmaps", "-A"}, "no"},
		{[]string{"update", "validatingwebhookconfigurations"}, "no"},
		{[]string{"create", "pods", "-A"}, "no"},
	} {
		out, _, _ := kubectl(t, "", append([]string{"auth", "can-i", as}, tc.args...)...)
		if got := strings.TrimSpace(out); got != tc.want {
			t.Errorf("can-i %s: %s, want %s", strings.Join(tc.args, " "), got, tc.want)
		}
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// The controller writes a Subnet's status with a JSON patch that tests
// metadata.uid (reconcilers.SubnetReconciler.writeStatus): kube-apiserver
// must refuse it, as Invalid, for another object under the same name, and
// apply it to the same object. The unit test of the re-created Subnet
// relies on this answer.
func TestStatusWriteIsPreconditionedOnTheUID(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	s := newSubnet(ns, "s", "missing", 24)
	create(t, s)
	patch := func(uid string) error {
		body := fmt.Sprintf(`[{"op":"test","path":"/metadata/uid","value":%q},{"op":"add","path":"/status","value":{"observedGeneration":1}}]`, uid)
		return k8s.Status().Patch(ctx, s.DeepCopy(), client.RawPatch(types.JSONPatchType, []byte(body)))
	}
	if err := patch("not-" + string(s.UID)); !apierrors.IsInvalid(err) {
		t.Errorf("patch for another object: %v, want Invalid", err)
	}
	if err := patch(string(s.UID)); err != nil {
		t.Errorf("patch for this object: %v", err)
	}
}
