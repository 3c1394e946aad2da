//go:build e2e

package helm

// Adversarial review of commit 5183fd1 (config/network-policy,
// config/webhook-client-auth and their Helm values). Each test here FAILS
// on that commit and names the finding it proves.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// FINDING (medium): networkPolicy.metricsFrom: [] (an operator's way to
// say "nobody scrapes") renders the metrics rule as `from: []`, which a
// NetworkPolicy reads as every source: the metrics port is opened to the
// whole cluster instead of closed. webhookFrom has a guard, metricsFrom
// none. Want: render no metrics rule (the port stays closed) or fail.
func TestReviewHelmEmptyMetricsFromKeepsMetricsClosed(t *testing.T) {
	const metrics = 8443
	out, err := helmOutput("template", "ipam", chart, "--namespace", "infra",
		"--set", "networkPolicy.enabled=true", "--set", "networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/28",
		"--set-json", "networkPolicy.metricsFrom=[]")
	if err != nil {
		return // refusing to render is a fix too
	}
	if v := viewPolicies(t, out); v.open[metrics] {
		t.Errorf("networkPolicy.metricsFrom=[] opened the metrics port %d to every source", metrics)
	}
}

// FINDING (low): config/webhook-client-auth adds the conversion port to
// config/network-policy's webhook policy only when it is listed after
// that component; listed before (the patch then matches nothing), the
// build succeeds and the policy blocks 9444: every read or write of a
// stored v1alpha1 object, and every v1alpha1 request, fails conversion,
// with nothing at build time to say why. The kustomization's comment asks
// for the order, but kustomize does not enforce it. Want: the same render
// in either order (e.g. the policy's conversion port in
// config/network-policy itself, harmless when nothing listens) or a build
// error.
func TestReviewKustomizeComponentsInEitherOrderOpenTheConversionPort(t *testing.T) {
	const conversion = 9444
	v := viewPolicies(t, kustomize(t, "default", "webhook-client-auth", "network-policy"))
	if _, ok := v.open[conversion]; !ok {
		t.Errorf("with config/webhook-client-auth listed before config/network-policy, the NetworkPolicies block the conversion port %d (the container listens on %v)", conversion, v.containerPorts)
	}
}

// FINDING (medium): config/webhook-client-auth finds what it patches by
// the final names config/default gives them (Deployment
// subnet-operator-controller-manager, Service
// subnet-operator-webhook-service). Used over a base that renamed them (an
// overlay with its own namePrefix, the usual kustomize layering: one
// overlay per cluster over a shared one), its patches match nothing,
// kustomize builds without a word, and the manager runs WITHOUT
// --webhook-client-ca-file: the webhook answers every caller while the
// operator believes it checks the API server's certificate (the issuance
// part is applied, so the Certificates and Secret exist and look right).
// Want: targets by label (control-plane=controller-manager), or a build
// that fails when a target is missing.
func TestReviewClientAuthComponentOverARenamedBase(t *testing.T) {
	dir := t.TempDir()
	base, top := filepath.Join(dir, "base"), filepath.Join(dir, "top")
	for _, d := range []string{base, top} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rel := func(from, p string) string {
		r, err := filepath.Rel(from, filepath.Join(root, "config", p))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	files := map[string]string{
		filepath.Join(base, "kustomization.yaml"): fmt.Sprintf("namespace: ipam\nnamePrefix: acme-\nresources: [%s]\n", rel(base, "default")),
		filepath.Join(top, "kustomization.yaml"):  fmt.Sprintf("resources: [../base]\ncomponents: [%s]\n", rel(top, "webhook-client-auth")),
	}
	for name, content := range files {
		if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out := kubectl(t, "", "kustomize", top)
	var deployment *appsv1.Deployment
	var service *corev1.Service
	for doc := range strings.SplitSeq(out, "\n---\n") {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "Deployment":
			deployment = &appsv1.Deployment{}
			if err := yaml.Unmarshal([]byte(doc), deployment); err != nil {
				t.Fatal(err)
			}
		case "Service":
			var s corev1.Service
			if err := yaml.Unmarshal([]byte(doc), &s); err != nil {
				t.Fatal(err)
			}
			if strings.HasSuffix(s.Name, "webhook-service") {
				service = &s
			}
		}
	}
	if deployment == nil || service == nil {
		t.Fatalf("no Deployment (%v) or webhook Service (%v) in the render", deployment != nil, service != nil)
	}
	args := strings.Join(deployment.Spec.Template.Spec.Containers[0].Args, " ")
	if !strings.Contains(args, "--webhook-client-ca-file=") {
		t.Errorf("with config/webhook-client-auth over a base named %s, the manager runs without --webhook-client-ca-file: %s", deployment.Name, args)
	}
	if !slices.ContainsFunc(service.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == 9444 }) {
		t.Errorf("the Service %s has no conversion port 9444 while the CRDs point at it", service.Name)
	}
}
