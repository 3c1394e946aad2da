//go:build e2e

package helm

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// kustomize renders config/<base> with the components config/<component>,
// through a kustomization of its own: kustomize takes neither a component
// on the command line nor absolute paths.
func kustomize(t *testing.T, base string, components ...string) string {
	t.Helper()
	if len(components) == 0 {
		return kubectl(t, "", "kustomize", filepath.Join(root, "config", base))
	}
	dir := t.TempDir()
	rel := func(p string) string {
		r, err := filepath.Rel(dir, filepath.Join(root, "config", p))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	var comps []string
	for _, c := range components {
		comps = append(comps, rel(c))
	}
	kustomization := fmt.Sprintf("resources: [%s]\ncomponents: [%s]\n", rel(base), strings.Join(comps, ", "))
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kustomization), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubectl(t, "", "kustomize", dir)
}

// policyView is what the NetworkPolicies of a render open on the manager's
// Pods, and the ports the manager's container listens on.
type policyView struct {
	containerPorts []int32
	// open maps each port a policy opens to whether some rule opens it to
	// every source (a rule without from).
	open map[int32]bool
}

func viewPolicies(t *testing.T, manifests string) policyView {
	t.Helper()
	var deployment *appsv1.Deployment
	var policies []networkingv1.NetworkPolicy
	for doc := range strings.SplitSeq(manifests, "\n---\n") {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "Deployment":
			deployment = &appsv1.Deployment{}
			if err := yaml.UnmarshalStrict([]byte(doc), deployment); err != nil {
				t.Fatal(err)
			}
		case "NetworkPolicy":
			var p networkingv1.NetworkPolicy
			if err := yaml.UnmarshalStrict([]byte(doc), &p); err != nil {
				t.Fatal(err)
			}
			policies = append(policies, p)
		}
	}
	if deployment == nil || len(policies) == 0 {
		t.Fatalf("the render has %d NetworkPolicies and a Deployment: %v", len(policies), deployment != nil)
	}
	v := policyView{open: map[int32]bool{}}
	for _, c := range deployment.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			v.containerPorts = append(v.containerPorts, p.ContainerPort)
		}
	}
	podLabels := labels.Set(deployment.Spec.Template.Labels)
	for _, p := range policies {
		if p.Namespace != deployment.Namespace || !labels.SelectorFromSet(p.Spec.PodSelector.MatchLabels).Matches(podLabels) {
			t.Errorf("NetworkPolicy %s/%s does not select the manager's Pods", p.Namespace, p.Name)
		}
		for _, rule := range p.Spec.Ingress {
			for _, port := range rule.Ports {
				if port.Port == nil || port.Port.IntValue() == 0 {
					t.Errorf("NetworkPolicy %s: a port by name or none (%v): say the number, so this test can compare it", p.Name, port.Port)
					continue
				}
				n := int32(port.Port.IntValue())
				v.open[n] = v.open[n] || len(rule.From) == 0
			}
		}
	}
	return v
}

// The NetworkPolicies, from kustomize (config/network-policy, with and
// without config/webhook-client-auth) and from the chart, open exactly the
// manager container's ports, and open to everyone only the probes: a
// port renamed or added in the Deployment without its policy fails here.
func TestNetworkPolicyPortsAreTheDeployments(t *testing.T) {
	const webhook, conversion, metrics, probes = 9443, 9444, 8443, 8081
	for _, tc := range []struct {
		name      string
		manifests func(t *testing.T) string
	}{
		{"kustomize", func(t *testing.T) string { return kustomize(t, "default", "network-policy") }},
		{"kustomize with client auth", func(t *testing.T) string {
			return kustomize(t, "default", "network-policy", "webhook-client-auth")
		}},
		{"helm", func(t *testing.T) string {
			return template(t, "ipam", "infra", "networkPolicy.enabled=true", "networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/28")
		}},
		{"helm with client auth", func(t *testing.T) string {
			return template(t, "ipam", "infra", "networkPolicy.enabled=true", "networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/28", "webhook.clientAuth.enabled=true")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := viewPolicies(t, tc.manifests(t))
			var opened []int32
			for port, toAll := range v.open {
				opened = append(opened, port)
				if toAll != (port == probes) {
					t.Errorf("port %d open to every source: %v", port, toAll)
				}
			}
			// The webhook's rule opens the conversion port whether or not
			// the manager listens there: the components work in either
			// order.
			want := slices.Clone(v.containerPorts)
			if !slices.Contains(want, conversion) {
				want = append(want, conversion)
			}
			slices.Sort(opened)
			slices.Sort(want)
			if !slices.Equal(opened, want) {
				t.Errorf("the NetworkPolicies open %v, the manager's container listens on %v (and the conversion port)", opened, v.containerPorts)
			}
			for _, must := range []int32{webhook, conversion, metrics, probes} {
				if !slices.Contains(opened, must) {
					t.Errorf("port %d is not opened", must)
				}
			}
			if strings.Contains(tc.name, "client auth") != slices.Contains(v.containerPorts, conversion) {
				t.Errorf("the conversion port %d: listened on %v with client auth %v", conversion, slices.Contains(v.containerPorts, conversion), strings.Contains(tc.name, "client auth"))
			}
		})
	}
	// The chart refuses to render a webhook policy without its sources.
	if out, err := helmOutput("template", "ipam", chart, "--set", "networkPolicy.enabled=true"); err == nil {
		t.Errorf("the chart rendered networkPolicy.enabled without networkPolicy.webhookFrom:\n%s", out)
	}
}
