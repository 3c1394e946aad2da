//go:build e2e

// Package helm tests the chart (charts/subnet-operator) with the real helm
// (built into $KUBEBUILDER_ASSETS by make tools): lint, that it renders
// exactly config/default's and config/monitoring's objects, that each value
// changes what it names, a server-side dry run, and install, upgrade and
// uninstall on a local control plane with the manager running from the
// image as the chart's Deployment says.
package helm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/subnet-operator/subnet-operator/test/controlplane"
	"github.com/subnet-operator/subnet-operator/test/environment"
)

const (
	release   = "subnet-operator"
	namespace = "subnet-operator-system"
)

var (
	root  string // the repository
	chart string
	cp    *controlplane.ControlPlane
	image string // the manager's image ID
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	var err error
	if root, err = environment.RepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	chart = filepath.Join(root, "charts", "subnet-operator")
	if _, err := os.Stat(helmBinary()); err != nil {
		fmt.Fprintln(os.Stderr, "helm is missing (make tools builds it):", err)
		return 1
	}
	if image, err = environment.BuildImage(ctx, root, environment.TestImage); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "subnet-operator-helm-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if cp, err = controlplane.Start(ctx, controlplane.Options{Dir: dir, CertManager: true}); err != nil {
		fmt.Fprintln(os.Stderr, "starting the control plane:", err)
		return 1
	}
	defer cp.Stop()
	return m.Run()
}

func helmBinary() string { return filepath.Join(os.Getenv(controlplane.AssetsEnv), "helm") }

// helm runs helm against the control plane and returns its output.
func helm(t *testing.T, args ...string) string {
	t.Helper()
	out, err := helmOutput(args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func helmOutput(args ...string) (string, error) {
	cmd := exec.Command(helmBinary(), append(args, "--kubeconfig", cp.Kubeconfig)...)
	// Helm's caches and config in a place of its own, not $HOME.
	home := filepath.Join(cp.Dir, "helm-home")
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

func kubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	var in []byte
	if stdin != "" {
		in = []byte(stdin)
	}
	out, stderr, err := cp.KubectlOutput(context.Background(), cp.Kubeconfig, in, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	return out
}

// template renders the chart as release in namespace with set values.
func template(t *testing.T, release, namespace string, set ...string) string {
	t.Helper()
	args := []string{"template", release, chart, "--namespace", namespace}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return helm(t, args...)
}

// object is one parsed manifest.
type object = map[string]any

// objects parses multi-document YAML into objects by kind/namespace/name.
func objects(t *testing.T, manifests string) map[string]object {
	t.Helper()
	out := map[string]object{}
	for doc := range strings.SplitSeq(manifests, "\n---\n") {
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		if len(o) == 0 {
			continue
		}
		meta, _ := o["metadata"].(map[string]any)
		out[fmt.Sprintf("%v/%v/%v", o["kind"], str(meta["namespace"]), meta["name"])] = o
	}
	return out
}

// str is a string field, "" if absent.
func str(v any) string {
	s, _ := v.(string)
	return s
}

func TestChartLints(t *testing.T) {
	helm(t, "lint", "--strict", chart)
	helm(t, "lint", "--strict", chart, "--set", "monitoring.serviceMonitor.enabled=true,monitoring.rules.enabled=true,monitoring.dashboard.enabled=true")
}

// The chart is made from files/, which hack/sync-chart renders from
// config/: stale files fail here.
func TestChartFilesAreConfigRendered(t *testing.T) {
	tmp := t.TempDir()
	if err := os.MkdirAll(filepath.Join(tmp, "files"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", "./hack/sync-chart", "-kubectl", filepath.Join(os.Getenv(controlplane.AssetsEnv), "kubectl"), "-chart", tmp)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sync-chart: %v\n%s", err, out)
	}
	for _, f := range []string{"default.yaml", "monitoring.yaml", "webhook-client-auth.yaml", "network-policy.yaml"} {
		want, err := os.ReadFile(filepath.Join(tmp, "files", f))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(chart, "files", f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("charts/subnet-operator/files/%s is stale: run make manifests\n%s", f, cmp.Diff(string(want), string(got)))
		}
	}
}

// With its defaults, the chart installs what config/default does, object
// for object, and with monitoring on what config/monitoring does. Removed
// before comparing, and only this: the labels Helm's conventions add, the
// CRDs' keep annotation, and the Namespace (Helm's --create-namespace or
// the user owns it).
func TestChartRendersTheKustomizeInstall(t *testing.T) {
	for _, tc := range []struct {
		config     string
		components []string
		set        []string
	}{
		{"default", nil, nil},
		{"monitoring", nil, []string{"monitoring.serviceMonitor.enabled=true", "monitoring.rules.enabled=true", "monitoring.dashboard.enabled=true"}},
		{"default", []string{"webhook-client-auth"}, []string{"webhook.clientAuth.enabled=true"}},
		// The chart's webhookFrom in place of the component's placeholder.
		{"default", []string{"network-policy"}, []string{"networkPolicy.enabled=true", "networkPolicy.webhookFrom[0].ipBlock.cidr=192.0.2.0/24"}},
		{"default", []string{"network-policy", "webhook-client-auth"}, []string{"networkPolicy.enabled=true", "networkPolicy.webhookFrom[0].ipBlock.cidr=192.0.2.0/24", "webhook.clientAuth.enabled=true"}},
		// A fleet member: the two manager flags and the Role that reads the
		// hub's kubeconfig Secret (config/fleet-member's cluster name).
		{"default", []string{"fleet-member"}, []string{"fleet.member.enabled=true", "fleet.member.clusterName=member"}},
		// A hub onboarding members from ClusterProfiles: the manager's flag
		// and config/fleet-hub-profiles' ClusterRole and binding.
		{"default", []string{"fleet-hub-profiles"}, []string{"fleet.hub.clusterProfiles.namespace=fleet-system"}},
	} {
		t.Run(strings.Join(append([]string{tc.config}, tc.components...), "+"), func(t *testing.T) {
			want := objects(t, kustomize(t, tc.config, tc.components...))
			delete(want, "Namespace//"+namespace)
			got := objects(t, template(t, release, namespace, tc.set...))
			for id, o := range got {
				meta := o["metadata"].(map[string]any)
				labels, _ := meta["labels"].(map[string]any)
				for _, l := range []string{"helm.sh/chart", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "app.kubernetes.io/version"} {
					if labels[l] == nil {
						t.Errorf("%s lacks label %s", id, l)
					}
					delete(labels, l)
				}
				if len(labels) == 0 {
					delete(meta, "labels")
				}
				if o["kind"] == "CustomResourceDefinition" {
					annotations, _ := meta["annotations"].(map[string]any)
					if annotations["helm.sh/resource-policy"] != "keep" {
						t.Errorf("%s is not kept on uninstall", id)
					}
					delete(annotations, "helm.sh/resource-policy")
					if len(annotations) == 0 {
						delete(meta, "annotations")
					}
				}
			}
			for id, w := range want {
				g, ok := got[id]
				if !ok {
					t.Errorf("the chart does not render %s", id)
					continue
				}
				if d := cmp.Diff(w, g); d != "" {
					t.Errorf("%s differs from config/%s (-kustomize +helm):\n%s", id, tc.config, d)
				}
			}
			for id := range got {
				if _, ok := want[id]; !ok {
					t.Errorf("the chart renders %s, which config/%s does not", id, tc.config)
				}
			}
		})
	}
}

// Each value changes what it names, and nothing else. Rendered as another
// release in another namespace, which renames every object and reference.
func TestChartValues(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	got := template(t, "ipam", "infra",
		"replicaCount=3", "webhook.timeoutSeconds=5", "image.digest="+digest, "goMemLimit=180MiB",
		"leaderElection.leaseDuration=30s", "alerts.poolOptOutLabel=example.com/pages",
		"monitoring.rules.enabled=true", "alerts.poolFullPercent=70", "alerts.runbookBaseURL=https://wiki.example.test/ipam.md",
		"podDisruptionBudget.enabled=false", "crds.keep=false", "extraArgs={--audit-interval=1m}")
	for _, want := range []string{
		"name: ipam-subnet-operator-controller-manager\n  namespace: infra",
		"image: ghcr.io/subnet-operator/subnet-operator@" + digest,
		"replicas: 3",
		"value: 180MiB",
		"- --leader-elect-lease-duration=30s",
		"- --pool-alerts-label=example.com/pages",
		"- --audit-interval=1m",
		"timeoutSeconds: 5",
		"runbook_url: https://wiki.example.test/ipam.md#subnetpoolnearlyfull",
		"cert-manager.io/inject-ca-from: infra/ipam-subnet-operator-serving-cert",
		"- ipam-subnet-operator-webhook-service.infra.svc",
		"path: /validate-ipam-subnet-operator-io-v1alpha2-subnet",
		`job="ipam-subnet-operator-metrics-service"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the render lacks %q", want)
		}
	}
	for _, unwanted := range []string{"subnet-operator-system", "kind: PodDisruptionBudget", "helm.sh/resource-policy", "timeoutSeconds: 10", "> 0.85"} {
		if strings.Contains(got, unwanted) {
			t.Errorf("the render has %q", unwanted)
		}
	}
	// The threshold and the summary that states it, wherever YAML folds
	// the lines.
	rules := 0
	for _, o := range objects(t, got) {
		if o["kind"] != "PrometheusRule" {
			continue
		}
		rules++
		for _, want := range []string{"(subnet_operator_pool_subnet_utilization_ratio) > 0.7 unless", "is more than 70% allocated."} {
			if !strings.Contains(fmt.Sprint(o), want) {
				t.Errorf("SubnetPoolNearlyFull lacks %q", want)
			}
		}
	}
	if rules != 1 {
		t.Errorf("%d PrometheusRules rendered, want 1", rules)
	}
}
