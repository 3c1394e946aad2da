// Package monitoring tests what operators see of subnet-operator: the alert
// rules (config/prometheus/rules.yaml) and the Grafana dashboard
// (config/grafana/dashboard.json), against a real Prometheus built by
// hack/build-tools.sh. It reads both files, runs Prometheus and promtool,
// drives a workload that makes the manager export every series the two
// files name, and checks what they query against what the manager exports.
// test/e2e and hack/dashboard-snapshot use it.
package monitoring

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// JobName is the job label Prometheus gives the manager's targets: the
// metrics Service's name, as a ServiceMonitor sets it. The rules match it.
const JobName = "subnet-operator-metrics-service"

// RuleGroups returns the groups of the PrometheusRule in
// config/prometheus/rules.yaml as a Prometheus rule file.
func RuleGroups(repoRoot string) ([]byte, error) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "config", "prometheus", "rules.yaml"))
	if err != nil {
		return nil, err
	}
	var rule struct {
		Kind string `json:"kind"`
		Spec struct {
			Groups []json.RawMessage `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &rule); err != nil {
		return nil, fmt.Errorf("config/prometheus/rules.yaml: %w", err)
	}
	if rule.Kind != "PrometheusRule" || len(rule.Spec.Groups) == 0 {
		return nil, fmt.Errorf("config/prometheus/rules.yaml: want a PrometheusRule with groups, got kind %q with %d groups", rule.Kind, len(rule.Spec.Groups))
	}
	return yaml.Marshal(map[string]any{"groups": rule.Spec.Groups})
}

// Rule is one alerting rule.
type Rule struct {
	Group, Alert, Expr string
	// Runbook is the runbook_url annotation.
	Runbook string
}

// Rules lists the alerting rules of config/prometheus/rules.yaml.
func Rules(repoRoot string) ([]Rule, error) {
	data, err := RuleGroups(repoRoot)
	if err != nil {
		return nil, err
	}
	var file struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string `json:"alert"`
				Expr        string `json:"expr"`
				Annotations struct {
					RunbookURL string `json:"runbook_url"`
				} `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		return nil, err
	}
	var rules []Rule
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			rules = append(rules, Rule{Group: g.Name, Alert: r.Alert, Expr: r.Expr, Runbook: r.Annotations.RunbookURL})
		}
	}
	return rules, nil
}

// Dashboard is the part of a Grafana dashboard the tests read.
type Dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []Panel `json:"panels"`
	Templating struct {
		List []Variable `json:"list"`
	} `json:"templating"`
}

// Panel is a dashboard panel; rows hold no targets.
type Panel struct {
	ID          int      `json:"id"`
	Type        string   `json:"type"`
	Title       string   `json:"title"`
	Description string   `json:"description"`
	Targets     []Target `json:"targets"`
	Datasource  *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	FieldConfig struct {
		Defaults struct {
			Unit   string `json:"unit"`
			Custom struct {
				// ScaleDistribution is the y axis: type "log" with a
				// base (log) or, by default, linear.
				ScaleDistribution struct {
					Type string `json:"type"`
					Log  int    `json:"log"`
				} `json:"scaleDistribution"`
			} `json:"custom"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
}

// Target is one query of a panel.
type Target struct {
	RefID        string `json:"refId"`
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat"`
	Instant      bool   `json:"instant"`
}

// Variable is a template variable.
type Variable struct {
	Name     string          `json:"name"`
	Type     string          `json:"type"`
	Query    json.RawMessage `json:"query"`
	AllValue string          `json:"allValue"`
}

// LoadDashboard reads config/grafana/dashboard.json.
func LoadDashboard(repoRoot string) (*Dashboard, error) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "config", "grafana", "dashboard.json"))
	if err != nil {
		return nil, err
	}
	var d Dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("config/grafana/dashboard.json: %w", err)
	}
	return &d, nil
}

// Query is a PromQL expression of the dashboard, named by where it is.
type Query struct {
	Where string // "panel \"Held by Subnets, by pool\" target A" or "variable pool"
	Expr  string // as written, with Grafana's variables
	// Instant is true for panels that show the latest value only.
	Instant bool
	Panel   *Panel // nil for a variable
}

// labelValues is Grafana's variable query label_values(selector, label).
var labelValues = regexp.MustCompile(`^\s*label_values\(\s*(.*?)\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)

// Queries lists every PromQL expression of the dashboard: each panel
// target and, for each query variable, the selector of its label_values.
func (d *Dashboard) Queries() ([]Query, error) {
	var qs []Query
	for i := range d.Panels {
		p := &d.Panels[i]
		for _, t := range p.Targets {
			qs = append(qs, Query{Where: fmt.Sprintf("panel %q target %s", p.Title, t.RefID), Expr: t.Expr, Instant: t.Instant, Panel: p})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var s string
			if err := json.Unmarshal(v.Query, &s); err != nil {
				return nil, fmt.Errorf("variable %s: query is neither a string nor an object", v.Name)
			}
			q.Query = s
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			return nil, fmt.Errorf("variable %s: %q is not label_values(selector, label)", v.Name, q.Query)
		}
		qs = append(qs, Query{Where: "variable " + v.Name, Expr: m[1]})
	}
	return qs, nil
}

// Interpolate replaces Grafana's variables the way Grafana does for a
// dashboard with every multi-value variable at "All": their allValue,
// $job with job, and $__rate_interval (and $__interval, $__range) with
// window.
func (d *Dashboard) Interpolate(expr, job, window string) string {
	values := map[string]string{"job": job, "__rate_interval": window, "__interval": window, "__range": window}
	for _, v := range d.Templating.List {
		if v.AllValue != "" {
			values[v.Name] = v.AllValue
		}
	}
	return variable.ReplaceAllStringFunc(expr, func(ref string) string {
		name := strings.Trim(ref, "${}")
		if value, ok := values[name]; ok {
			return value
		}
		return ref
	})
}

var variable = regexp.MustCompile(`\$\{[a-zA-Z_][a-zA-Z0-9_]*\}|\$[a-zA-Z_][a-zA-Z0-9_]*`)
