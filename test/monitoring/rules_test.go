//go:build integration

package monitoring

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/subnet-operator/subnet-operator/test/controlplane"
	"github.com/subnet-operator/subnet-operator/test/environment"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := environment.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func promtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	bin := filepath.Join(os.Getenv(controlplane.AssetsEnv), "promtool")
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestAlertRules runs promtool's checks and the unit tests of
// alerts_test.yaml against the rules of config/prometheus/rules.yaml.
func TestAlertRules(t *testing.T) {
	root := repoRoot(t)
	groups, err := RuleGroups(root)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), groups, 0o600); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join(root, "test", "monitoring", "alerts_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts_test.yaml"), tests, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Log(promtool(t, dir, "check", "rules", "--lint=all", "--lint-fatal", "rules.yaml"))
	t.Log(promtool(t, dir, "test", "rules", "alerts_test.yaml"))
}

// TestEveryAlertIsTestedBothWays checks that alerts_test.yaml has, for each
// alert of the rules, a case where it fires and one where it stays quiet.
func TestEveryAlertIsTestedBothWays(t *testing.T) {
	root := repoRoot(t)
	rules, err := Rules(root)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "test", "monitoring", "alerts_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, test := range file.Tests {
		for _, c := range test.AlertRuleTest {
			if len(c.ExpAlerts) > 0 {
				fires[c.Alertname] = true
			} else {
				quiet[c.Alertname] = true
			}
		}
	}
	if len(rules) == 0 {
		t.Fatal("no alerting rules found")
	}
	for _, r := range rules {
		if !fires[r.Alert] {
			t.Errorf("%s: no test case where it fires", r.Alert)
		}
		if !quiet[r.Alert] {
			t.Errorf("%s: no test case where it stays quiet", r.Alert)
		}
	}
}

// TestEveryAlertHasARunbook checks that each alert links to its own section
// of docs/operations.md, at the page config/monitoring/runbooks.yaml names
// (kustomize rewrites the links from it; the rules file carries the same
// default so that it is right when used on its own).
func TestEveryAlertHasARunbook(t *testing.T) {
	root := repoRoot(t)
	rules, err := Rules(root)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "config", "monitoring", "runbooks.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var runbooks struct {
		Data struct {
			Page string `json:"page"`
		} `json:"data"`
	}
	if err := yaml.Unmarshal(data, &runbooks); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(runbooks.Data.Page, "/docs/operations.md") {
		t.Fatalf("config/monitoring/runbooks.yaml: page %q is not a copy of docs/operations.md", runbooks.Data.Page)
	}
	ops, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		if want := runbooks.Data.Page + "#" + strings.ToLower(r.Alert); r.Runbook != want {
			t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Runbook, want)
		}
		if !strings.Contains(string(ops), "\n#### "+r.Alert+"\n") {
			t.Errorf("%s: docs/operations.md has no section \"#### %s\" for its runbook link", r.Alert, r.Alert)
		}
	}
}

// TestDashboardIsWellFormed checks the dashboard's structure and parses
// every query with Prometheus' parser.
func TestDashboardIsWellFormed(t *testing.T) {
	root := repoRoot(t)
	d, err := LoadDashboard(root)
	if err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("the dashboard needs a uid and a title (uid %q, title %q)", d.UID, d.Title)
	}
	defined := map[string]bool{"__rate_interval": true, "__interval": true, "__range": true}
	for _, v := range d.Templating.List {
		defined[v.Name] = true
	}
	ids := map[int]string{}
	panels := 0
	for _, p := range d.Panels {
		if other, ok := ids[p.ID]; ok {
			t.Errorf("panels %q and %q share id %d", p.Title, other, p.ID)
		}
		ids[p.ID] = p.Title
		if p.Type == "row" {
			continue
		}
		panels++
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q must use the ${datasource} variable, so the dashboard works with any Prometheus", p.Title)
		}
	}
	if panels == 0 {
		t.Fatal("the dashboard has no panels")
	}

	queries, err := d.Queries()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range queries {
		for _, ref := range variable.FindAllString(q.Expr, -1) {
			if name := strings.Trim(ref, "${}"); !defined[name] {
				t.Errorf("%s uses undefined variable %s", q.Where, ref)
			}
		}
	}

	ctx := context.Background()
	prom, err := StartPrometheus(ctx, PrometheusOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer prom.Stop()
	for _, q := range queries {
		selectors, err := prom.Selectors(ctx, d.Interpolate(q.Expr, JobName, "1m"))
		if err != nil {
			t.Errorf("%s: %v\n%s", q.Where, err, q.Expr)
			continue
		}
		if len(selectors) == 0 {
			t.Errorf("%s selects no series: %s", q.Where, q.Expr)
		}
	}
}

// TestCoverage checks the check the end-to-end test relies on: a selector
// is covered only by a series that has its name and satisfies every
// matcher except the target labels Prometheus adds.
func TestCoverage(t *testing.T) {
	e, err := ParseExposition(`# TYPE subnet_operator_pool_subnets gauge
subnet_operator_pool_subnets{namespace="a",pool="p",reason="Allocated"} 3
# TYPE subnetpool_parent_reconcile_duration_seconds histogram
subnetpool_parent_reconcile_duration_seconds_bucket{result="success",le="0.5"} 1
subnetpool_parent_reconcile_duration_seconds_bucket{result="success",le="+Inf"} 1
subnetpool_parent_reconcile_duration_seconds_sum{result="success"} 0.1
subnetpool_parent_reconcile_duration_seconds_count{result="success"} 1
`)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		s    Selector
		want bool
	}{
		{Selector{Name: "subnet_operator_pool_subnets", Matchers: []Matcher{{"reason", "=", "Allocated"}, {"job", "=~", "x"}}}, true},
		{Selector{Name: "subnet_operator_pool_subnets", Matchers: []Matcher{{"reason", "=", "PoolExhausted"}}}, false},
		{Selector{Name: "subnet_operator_pool_subnets", Matchers: []Matcher{{"reason", "!=", "Allocated"}}}, false},
		{Selector{Name: "subnet_operator_pool_subnets", Matchers: []Matcher{{"namespace", "=~", ".*"}, {"pool", "=~", "p|q"}}}, true},
		{Selector{Name: "subnet_operator_pool_subnets", Matchers: []Matcher{{"pool", "=~", "p.+"}}}, false},
		{Selector{Name: "subnet_operator_pool_subnets", Matchers: []Matcher{{"parent", "=", ""}}}, true},
		{Selector{Name: "subnetpool_parent_reconcile_duration_seconds_count", Matchers: []Matcher{{"result", "=", "success"}}}, true},
		{Selector{Name: "subnetpool_parent_reconcile_duration_seconds_count", Matchers: []Matcher{{"result", "=", "error"}}}, false},
		{Selector{Name: "subnetpool_parent_reconcile_duration_seconds_bucket", Matchers: []Matcher{{"le", "=", "0.5"}}}, true},
		{Selector{Name: "subnetpool_parent_requeue_total"}, false},
		{Selector{Name: "up", Matchers: []Matcher{{"job", "=", "x"}}}, true},
		{Selector{Name: "up", Matchers: []Matcher{{"pool", "=", "x"}}}, false},
	} {
		if got, why := e.Covers(c.s); got != c.want {
			t.Errorf("Covers(%s) = %v (%s), want %v", c.s, got, why, c.want)
		}
	}
}

// addressCounts names the series that count addresses (or blocks) of a
// pool or Subnet: an IPv6 count is up to 2^96 times an IPv4 one, so on
// one axis or one bar scale every IPv4 value lies at 0. A chart of them
// must keep to one family: a family matcher on subnet_operator_pool_info.
// The Subnets' address counts carry no family, so their free count (a
// /64 has 2^64) may only be shown where each value stands alone.
var addressCounts = map[string]func(Selector) bool{
	"subnet_operator_pool_capacity_addresses":   always,
	"subnet_operator_pool_allocated_addresses":  always,
	"subnet_operator_pool_reserved_addresses":   always,
	"subnet_operator_pool_free_addresses":       always,
	"subnet_operator_pool_child_pool_addresses": always,
	"subnet_operator_pool_allocatable_blocks":   always,
	"subnet_operator_subnet_ip_addresses":       selectsState("free"),
}

func always(Selector) bool { return true }

// selectsState reports whether a selector can select the state.
func selectsState(state string) func(Selector) bool {
	return func(s Selector) bool {
		for _, m := range s.Matchers {
			if m.Name != "state" {
				continue
			}
			switch m.Type {
			case "=":
				return m.Value == state
			case "=~":
				return regexp.MustCompile("^(?:" + m.Value + ")$").MatchString(state)
			}
		}
		return true
	}
}

// TestChartsKeepAddressFamiliesApart checks that no chart with a shared
// axis or scale (time series, bar gauge) draws address counts of both
// families: each such query restricts itself to one family, and all the
// queries of a panel to the same one. Tables and stats show each value on
// its own and are not checked.
func TestChartsKeepAddressFamiliesApart(t *testing.T) {
	root := repoRoot(t)
	d, err := LoadDashboard(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	prom, err := StartPrometheus(ctx, PrometheusOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer prom.Stop()
	charts := 0
	for _, p := range d.Panels {
		if p.Type != "timeseries" && p.Type != "bargauge" {
			continue
		}
		families := map[string]bool{}
		counts := false
		for _, target := range p.Targets {
			selectors, err := prom.Selectors(ctx, d.Interpolate(target.Expr, JobName, "1m"))
			if err != nil {
				t.Fatalf("panel %q target %s: %v", p.Title, target.RefID, err)
			}
			family, countsAddresses := "", false
			for _, s := range selectors {
				if counted, ok := addressCounts[s.Name]; ok && counted(s) {
					countsAddresses = true
				}
				for _, m := range s.Matchers {
					if s.Name == "subnet_operator_pool_info" && m.Name == "family" && m.Type == "=" && m.Value != "" {
						family = m.Value
					}
				}
			}
			if !countsAddresses {
				continue
			}
			counts = true
			if family == "" {
				t.Errorf("panel %q target %s charts address counts of both families on one scale: %s", p.Title, target.RefID, target.Expr)
				continue
			}
			families[family] = true
		}
		if len(families) > 1 {
			t.Errorf("panel %q charts address counts of several families on one scale: %v", p.Title, families)
		}
		if counts {
			charts++
		}
	}
	if charts == 0 {
		t.Error("no chart of address counts found: the check checks nothing")
	}
}
