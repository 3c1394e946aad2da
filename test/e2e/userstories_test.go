//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// A platform team's day, with kubectl: a pool, a child pool for a team,
// explicit and dynamic Subnets, the columns `kubectl get` shows, the common
// mistakes, and deletion protection.
func TestUserStories(t *testing.T) {
	ns := namespace(t)
	mustKubectl(t, fmt.Sprintf(`
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: SubnetPool
metadata: {name: dc, namespace: %[1]s}
spec: {cidr: 10.50.0.0/16, defaultPrefixLength: 24, reserved: [10.50.0.0/24]}
---
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: SubnetPool
metadata: {name: team, namespace: %[1]s}
spec: {parentRef: {name: dc}, cidr: 10.50.128.0/17, defaultPrefixLength: 26}
---
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: Subnet
metadata: {name: web, namespace: %[1]s}
spec: {poolRef: {name: dc}, cidr: 10.50.1.0/24}
---
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: Subnet
metadata: {name: api, namespace: %[1]s}
spec: {poolRef: {name: team}}
`, ns), "apply", "-f", "-")
	mustKubectl(t, "", "wait", "-n", ns, "--for=condition=Ready", "--timeout=60s", "subnets", "--all")
	mustKubectl(t, "", "wait", "-n", ns, "--for=condition=Ready", "--timeout=60s", "subnetpools", "--all")

	// The columns. The pool's figures update asynchronously after the
	// Subnets became Ready: wait for them (the exact utilization is in
	// status.utilization; the columns show USED% only).
	eventually(t, 20*time.Second, func() error {
		figures := mustKubectl(t, "", "get", "subnetpools", "-n", ns, "-o", `jsonpath={range .items[*]}{.metadata.name}={.status.utilization} {end}`)
		if !strings.Contains(figures, "dc=50.58%") || !strings.Contains(figures, "team=0.19%") {
			return fmt.Errorf("not yet: %s", figures)
		}
		return nil
	})
	pools := mustKubectl(t, "", "get", "subnetpools", "-n", ns)
	lines := strings.Split(strings.TrimSpace(pools), "\n")
	if got := strings.Fields(lines[0]); strings.Join(got, " ") != "NAME CIDR PARENT READY USED% FREE LARGEST FREE AGE" {
		t.Errorf("pool columns: %q", lines[0])
	}
	// dc: the child /17 (32768) and web (256) of 65536 - 256 reserved,
	// 50.58% shown truncated, so that it sorts as a number.
	if !strings.HasPrefix(strings.Join(strings.Fields(lines[1]), " "), "dc 10.50.0.0/16 True 50 32256 10.50.64.0/18") {
		t.Errorf("dc row: %q", lines[1])
	}
	if !strings.HasPrefix(strings.Join(strings.Fields(lines[2]), " "), "team 10.50.128.0/17 dc True 0 32704 10.50.192.0/18") {
		t.Errorf("team row: %q", lines[2])
	}
	// api's range shows in the CIDR column once the controller has
	// recorded it in its spec. Records yield to grants and follow the
	// records of the Subnets earlier tests created in this manager, at the
	// default budget (12.5 a second): a minute.
	want := []string{"NAME POOL CIDR LENGTH STATE IPS IN USE AGE", "api team 10.50.128.0/26 26 Allocated", "web dc 10.50.1.0/24 Allocated"}
	eventually(t, time.Minute, func() error {
		subnets := mustKubectl(t, "", "get", "subnets", "-n", ns)
		for i, line := range strings.Split(strings.TrimSpace(subnets), "\n") {
			if i >= len(want) || !strings.HasPrefix(strings.Join(strings.Fields(line), " "), want[i]) {
				return fmt.Errorf("subnet line %d: %q, want it to start with %q", i, line, want[min(i, len(want)-1)])
			}
		}
		return nil
	})
	if all := mustKubectl(t, "", "get", "ipam", "-n", ns, "-o", "name"); strings.Count(all, "\n") != 4 {
		t.Errorf("kubectl get ipam lists:\n%s", all)
	}

	// The common mistakes, as kubectl prints them.
	mistakes := []struct{ spec, want string }{
		{"{poolRef: {name: dc}, cidr: 10.50.1.0/25}", fmt.Sprintf(`The Subnet "oops" is invalid: spec.cidr: Invalid value: "10.50.1.0/25": overlaps Subnet %s/web (10.50.1.0/24); pick a free range, or set spec.prefixLength to have one allocated`, ns)},
		{"{poolRef: {name: dc}, cidr: 10.50.2.7/24}", `The Subnet "oops" is invalid: spec.cidr: Invalid value: "10.50.2.7/24": host bits set; did you mean "10.50.2.0/24"?`},
		{"{poolRef: {name: dc}, cidr: 10.50.0.0/25}", fmt.Sprintf(`The Subnet "oops" is invalid: spec.cidr: Invalid value: "10.50.0.0/25": overlaps reserved range 10.50.0.0/24 of SubnetPool %s/dc`, ns)},
	}
	for _, m := range mistakes {
		_, stderr, err := kubectl(t, fmt.Sprintf("apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: Subnet\nmetadata: {name: oops, namespace: %s}\nspec: %s\n", ns, m.spec), "create", "-f", "-")
		if err == nil || strings.TrimSpace(stderr) != m.want {
			t.Errorf("kubectl printed %q\nwant %q", stderr, m.want)
		}
	}

	// Deletion protection: a pool in use stays; once empty it goes.
	if _, stderr, err := kubectl(t, "", "delete", "subnetpool", "-n", ns, "dc"); err == nil || !strings.Contains(stderr, "is in use by 1 Subnets and 1 child pools") {
		t.Errorf("deleting a pool in use: %v %s", err, stderr)
	}
	mustKubectl(t, "", "delete", "-n", ns, "subnet", "api", "web")
	mustKubectl(t, "", "delete", "-n", ns, "subnetpool", "team")
	mustKubectl(t, "", "delete", "-n", ns, "subnetpool", "dc", "--timeout=60s")
	if out := mustKubectl(t, "", "get", "subnetpools", "-n", ns, "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("pools left: %s", out)
	}
}

// The production install (config/default) needs cert-manager and nothing
// else: schema-checked by a real API server that has cert-manager's CRDs and
// not Prometheus Operator's. Then, with Prometheus Operator's CRDs installed,
// config/monitoring (the same install plus the ServiceMonitor, the alert rules
// and the dashboard) is accepted too.
func TestInstallServerSideDryRun(t *testing.T) {
	crds, err := filepath.EvalSymlinks(filepath.Join(env.Assets, "prometheus-operator-crds"))
	if err != nil {
		t.Fatal(err)
	}
	if out, _, err := kubectl(t, "", "get", "crd", "servicemonitors.monitoring.coreos.com"); err == nil {
		t.Fatalf("Prometheus Operator's CRDs are already installed, so config/default is not checked without them:\n%s", out)
	}

	rendered := mustKubectl(t, "", "kustomize", filepath.Join(env.RepoRoot, "config", "default"))
	if strings.Contains(rendered, "monitoring.coreos.com") {
		t.Error("config/default renders Prometheus Operator objects")
	}
	out := mustKubectl(t, rendered, "apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", "-")
	if n := strings.Count(out, "(server dry run)"); n < 20 {
		t.Errorf("config/default: only %d objects accepted:\n%s", n, out)
	}

	mustKubectl(t, "", "apply", "--server-side", "-f", crds)
	t.Cleanup(func() { mustKubectl(t, "", "delete", "--ignore-not-found", "--wait=true", "-f", crds) })
	mustKubectl(t, "", "wait", "--for=condition=Established", "--timeout=60s", "-f", crds)
	monitoring := mustKubectl(t, "", "kustomize", filepath.Join(env.RepoRoot, "config", "monitoring"))
	out = mustKubectl(t, monitoring, "apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", "-")
	for _, want := range []string{"servicemonitor.monitoring.coreos.com/subnet-operator-controller-manager-metrics-monitor",
		"prometheusrule.monitoring.coreos.com/subnet-operator-alerts", "configmap/subnet-operator-grafana-dashboard"} {
		if !strings.Contains(out, want+" serverside-applied (server dry run)") {
			t.Errorf("config/monitoring: %s was not accepted:\n%s", want, out)
		}
	}
}

// The runbook links of the alerts follow config/monitoring/runbooks.yaml:
// a copy of config/ with another page renders every link at that page, each
// with its alert's anchor.
func TestRunbookPageIsConfigurable(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "config"), os.DirFS(filepath.Join(env.RepoRoot, "config"))); err != nil {
		t.Fatal(err)
	}
	runbooks := filepath.Join(dir, "config", "monitoring", "runbooks.yaml")
	data, err := os.ReadFile(runbooks)
	if err != nil {
		t.Fatal(err)
	}
	const page = "https://wiki.example.test/network/subnet-operator.md"
	edited := regexp.MustCompile(`(?m)^  page: .*$`).ReplaceAll(data, []byte("  page: "+page))
	if bytes.Equal(edited, data) {
		t.Fatal("runbooks.yaml has no data.page line to edit")
	}
	if err := os.WriteFile(runbooks, edited, 0o600); err != nil {
		t.Fatal(err)
	}
	rendered := mustKubectl(t, "", "kustomize", filepath.Join(dir, "config", "monitoring"))
	links := regexp.MustCompile(`runbook_url: (\S+)`).FindAllStringSubmatch(rendered, -1)
	if len(links) < 10 {
		t.Fatalf("only %d runbook links rendered", len(links))
	}
	for _, l := range links {
		if !strings.HasPrefix(l[1], page+"#subnet") {
			t.Errorf("runbook link %s is not at %s", l[1], page)
		}
	}
	if strings.Contains(rendered, "name: runbooks") {
		t.Error("the runbooks source (local-config) is rendered as an object")
	}
}

// Least privilege: no Role or ClusterRole of the install grants a wildcard.
func TestRBACHasNoWildcards(t *testing.T) {
	rendered := mustKubectl(t, "", "kustomize", filepath.Join(env.RepoRoot, "config", "default"))
	type rule struct {
		APIGroups       []string `json:"apiGroups"`
		Resources       []string `json:"resources"`
		Verbs           []string `json:"verbs"`
		NonResourceURLs []string `json:"nonResourceURLs"`
	}
	roles := 0
	for _, doc := range strings.Split(rendered, "\n---\n") {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Rules []rule `json:"rules"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		if obj.Kind != "Role" && obj.Kind != "ClusterRole" {
			continue
		}
		roles++
		for _, r := range obj.Rules {
			for _, v := range append(append(append(r.APIGroups, r.Resources...), r.Verbs...), r.NonResourceURLs...) {
				if strings.Contains(v, "*") {
					t.Errorf("%s %s grants a wildcard: %+v", obj.Kind, obj.Metadata.Name, r)
				}
			}
			for _, res := range r.Resources {
				if res == "secrets" {
					t.Errorf("%s %s grants access to Secrets", obj.Kind, obj.Metadata.Name)
				}
			}
		}
	}
	if roles < 5 {
		t.Errorf("found %d roles in config/default", roles)
	}
}

// The manager runs restricted: non-root, read-only root filesystem, no
// privilege escalation, no capabilities, in a namespace that enforces the
// restricted Pod Security Standard.
func TestDeploymentIsRestricted(t *testing.T) {
	rendered := mustKubectl(t, "", "kustomize", filepath.Join(env.RepoRoot, "config", "default"))
	var found bool
	for _, doc := range strings.Split(rendered, "\n---\n") {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
			Spec struct {
				Template struct {
					Spec struct {
						SecurityContext struct {
							RunAsNonRoot   *bool `json:"runAsNonRoot"`
							SeccompProfile struct {
								Type string `json:"type"`
							} `json:"seccompProfile"`
						} `json:"securityContext"`
						Containers []struct {
							SecurityContext struct {
								AllowPrivilegeEscalation *bool `json:"allowPrivilegeEscalation"`
								ReadOnlyRootFilesystem   *bool `json:"readOnlyRootFilesystem"`
								Capabilities             struct {
									Drop []string `json:"drop"`
								} `json:"capabilities"`
							} `json:"securityContext"`
						} `json:"containers"`
					} `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		switch obj.Kind {
		case "Namespace":
			if obj.Metadata.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
				t.Errorf("the namespace does not enforce the restricted Pod Security Standard: %v", obj.Metadata.Labels)
			}
		case "Deployment":
			found = true
			pod := obj.Spec.Template.Spec
			if pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot || pod.SecurityContext.SeccompProfile.Type != "RuntimeDefault" {
				t.Errorf("pod security context: %+v", pod.SecurityContext)
			}
			for _, c := range pod.Containers {
				sc := c.SecurityContext
				if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
					len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
					t.Errorf("container security context: %+v", sc)
				}
			}
		}
	}
	if !found {
		t.Fatal("no Deployment in config/default")
	}
}
