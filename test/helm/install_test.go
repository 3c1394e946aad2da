//go:build e2e

package helm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/subnet-operator/subnet-operator/test/environment"
)

// The chart's objects pass the API server's schema checks: its default
// render without Prometheus Operator's CRDs (and with none of its objects),
// and with monitoring on once those CRDs exist.
func TestChartServerSideDryRun(t *testing.T) {
	ns := fmt.Sprintf("dry-run-%04x", rand.IntN(1<<16))
	kubectl(t, "", "create", "namespace", ns)
	t.Cleanup(func() { kubectl(t, "", "delete", "namespace", ns, "--wait=false") })
	rendered := template(t, release, ns)
	if strings.Contains(rendered, "monitoring.coreos.com") {
		t.Error("the default render has Prometheus Operator objects")
	}
	out := kubectl(t, rendered, "apply", "--server-side", "--dry-run=server", "-f", "-")
	if n := strings.Count(out, "(server dry run)"); n < 20 {
		t.Errorf("only %d objects accepted:\n%s", n, out)
	}

	crds, err := filepath.EvalSymlinks(filepath.Join(cp.Assets, "prometheus-operator-crds"))
	if err != nil {
		t.Fatal(err)
	}
	kubectl(t, "", "apply", "--server-side", "-f", crds)
	t.Cleanup(func() { kubectl(t, "", "delete", "--ignore-not-found", "-f", crds) })
	kubectl(t, "", "wait", "--for=condition=Established", "--timeout=60s", "-f", crds)
	out = kubectl(t, template(t, release, ns, "monitoring.serviceMonitor.enabled=true", "monitoring.rules.enabled=true", "monitoring.dashboard.enabled=true"),
		"apply", "--server-side", "--dry-run=server", "-f", "-")
	for _, want := range []string{"servicemonitor.monitoring.coreos.com/", "prometheusrule.monitoring.coreos.com/", "configmap/subnet-operator-grafana-dashboard"} {
		if !strings.Contains(out, want) {
			t.Errorf("with monitoring, %s was not accepted:\n%s", want, out)
		}
	}
}

// helm install, upgrade and uninstall, with the manager running from the
// image as the release's Deployment says (environment.RunInstalled): it
// allocates after the install, is replaced by one with the upgraded
// Deployment that keeps every allocation and makes new ones, and the
// uninstall removes the release but keeps the CRDs and so every Subnet.
func TestChartInstallUpgradeUninstall(t *testing.T) {
	ctx := context.Background()
	imageValues := []string{"--set", "image.repository=localhost/subnet-operator", "--set", "image.tag=test"}
	helm(t, append([]string{"install", release, chart, "--namespace", namespace, "--create-namespace"}, imageValues...)...)
	manifest := helm(t, "get", "manifest", release, "--namespace", namespace)
	if !strings.Contains(manifest, "image: "+environment.TestImage) {
		t.Fatalf("the release's Deployment does not run %s", environment.TestImage)
	}

	mgr, err := environment.RunInstalled(ctx, cp, []byte(manifest), environment.TestImage, filepath.Join(t.TempDir(), "install"))
	if err != nil {
		t.Fatal(err)
	}
	defer mgr.Stop()
	if err := mgr.PointWebhooks(ctx); err != nil {
		t.Fatal(err)
	}
	// A namespace of this run's own: with -count, the next run installs
	// again over the CRDs and Subnets this one keeps.
	team := fmt.Sprintf("team-%04x", rand.IntN(1<<16))
	// The install takes root pools only from labelled namespaces; this
	// run's root pools go in an address space of their own, so that the
	// next run's (same ranges) do not overlap them.
	kubectl(t, `
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: AddressSpace
metadata: {name: `+team+`}
spec: {rootPoolNamespaces: {matchLabels: {kubernetes.io/metadata.name: `+team+`}}}
---
apiVersion: v1
kind: Namespace
metadata: {name: `+team+`, labels: {ipam.subnet-operator.io/address-space: `+team+`}}
`, "apply", "-f", "-")
	kubectl(t, `
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: SubnetPool
metadata: {name: datacenter, namespace: `+team+`}
spec: {cidr: 10.30.0.0/16, defaultPrefixLength: 24}
---
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: Subnet
metadata: {name: before-upgrade, namespace: `+team+`}
spec: {poolRef: {name: datacenter}}
`, "apply", "-f", "-")
	before := waitAllocated(t, mgr, team, "before-upgrade")

	// The upgrade changes values the API server shows. (First the webhooks
	// get their Service back, so Helm patches what it installed.)
	if err := mgr.UnpointWebhooks(ctx); err != nil {
		t.Fatal(err)
	}
	helm(t, append([]string{"upgrade", release, chart, "--namespace", namespace,
		"--set", "replicaCount=3", "--set", "webhook.timeoutSeconds=5", "--set", "alerts.poolOptOutLabel=example.com/pages"}, imageValues...)...)
	if got := kubectl(t, "", "get", "-n", namespace, "deployment/subnet-operator-controller-manager", "-o", "jsonpath={.spec.replicas}"); got != "3" {
		t.Errorf("replicas after the upgrade: %s, want 3", got)
	}
	if got := kubectl(t, "", "get", "validatingwebhookconfiguration/subnet-operator-validating-webhook-configuration", "-o", "jsonpath={.webhooks[*].timeoutSeconds}"); got != "5 5" {
		t.Errorf("webhook timeouts after the upgrade: %q, want 5 5", got)
	}
	manifest = helm(t, "get", "manifest", release, "--namespace", namespace)
	if !strings.Contains(manifest, "--pool-alerts-label=example.com/pages") {
		t.Error("the upgraded Deployment lacks the new flag")
	}
	// A rolling update: the old replica stops, one of the new spec starts.
	mgr.Stop()
	mgr, err = environment.RunInstalled(ctx, cp, []byte(manifest), environment.TestImage, filepath.Join(t.TempDir(), "upgrade"))
	if err != nil {
		t.Fatal(err)
	}
	defer mgr.Stop()
	if !strings.Contains(strings.Join(mgr.Pod.Args, " "), "--pool-alerts-label=example.com/pages") {
		t.Errorf("the new replica runs without the upgraded flag: %v", mgr.Pod.Args)
	}
	if err := mgr.PointWebhooks(ctx); err != nil {
		t.Fatal(err)
	}
	kubectl(t, `{"apiVersion":"ipam.subnet-operator.io/v1alpha2","kind":"Subnet","metadata":{"name":"after-upgrade","namespace":"`+team+`"},"spec":{"poolRef":{"name":"datacenter"}}}`, "apply", "-f", "-")
	after := waitAllocated(t, mgr, team, "after-upgrade")
	if again := waitAllocated(t, mgr, team, "before-upgrade"); again != before || after == before {
		t.Errorf("before the upgrade %s held %s; after it %s, and after-upgrade got %s", "before-upgrade", before, again, after)
	}

	helm(t, "uninstall", release, "--namespace", namespace, "--wait")
	mgr.Stop()
	for _, gone := range []string{"deployment/subnet-operator-controller-manager", "service/subnet-operator-webhook-service", "certificates.cert-manager.io/subnet-operator-serving-cert"} {
		if out, _, err := cp.KubectlOutput(ctx, cp.Kubeconfig, nil, "get", "-n", namespace, gone); err == nil {
			t.Errorf("%s outlives the uninstall: %s", gone, out)
		}
	}
	if out, _, err := cp.KubectlOutput(ctx, cp.Kubeconfig, nil, "get", "validatingwebhookconfigurations", "-o", "name"); err != nil || strings.Contains(out, "subnet-operator") {
		t.Errorf("webhook configurations after the uninstall: %s %v", out, err)
	}
	// The CRDs are kept, and with them every allocation.
	if got := kubectl(t, "", "get", "-n", team, "subnet/before-upgrade", "-o", "jsonpath={.status.cidr}"); got != before {
		t.Errorf("after the uninstall, before-upgrade holds %q, want %s", got, before)
	}
}

// waitAllocated waits until Subnet name in namespace team is Ready and
// returns its range.
func waitAllocated(t *testing.T, mgr *environment.Installed, team, name string) string {
	t.Helper()
	if out, stderr, err := cp.KubectlOutput(context.Background(), cp.Kubeconfig, nil, "wait", "-n", team, "--for=condition=Ready", "--timeout=60s", "subnet/"+name); err != nil {
		t.Fatalf("Subnet %s was not allocated: %v\n%s%s\nmanager log:\n%s", name, err, out, stderr, mgr.Manager.Log())
	}
	cidr := kubectl(t, "", "get", "-n", team, "subnet/"+name, "-o", "jsonpath={.status.cidr}")
	if !strings.HasPrefix(cidr, "10.30.") {
		t.Fatalf("Subnet %s holds %q, want a range of 10.30.0.0/16", name, cidr)
	}
	return cidr
}
