//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/subnet-operator/subnet-operator/test/monitoring"
)

// TestMonitoring runs a real Prometheus that scrapes both replicas (as the
// ServiceMonitor does: HTTPS, a ServiceAccount token, honor_labels) and
// loads the alert rules, drives a workload, and then checks the dashboard
// and the rules against what the manager exports and what Prometheus
// stores.
func TestMonitoring(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	for _, m := range env.Managers {
		if err := m.WaitReady(ctx, time.Minute); err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
	}
	token, err := env.MetricsReaderToken(ctx, ns, "prometheus")
	if err != nil {
		t.Fatal(err)
	}
	prom, err := monitoring.ScrapeEnvironment(ctx, env, token, filepath.Join(t.TempDir(), "prometheus"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer prom.Stop()

	if err := monitoring.Workload(ctx, k8s, ns); err != nil {
		t.Fatal(err)
	}
	if err := monitoring.MachineAddresses(ctx, k8s, ns); err != nil {
		t.Fatal(err)
	}
	// Once Prometheus has scraped the workload, the denied requests again:
	// the series they first created increase within the query window.
	workloadDone := time.Now()
	eventually(t, time.Minute, func() error { return prom.WaitScraped(ctx, workloadDone, len(env.Managers)) })
	if err := monitoring.Denied(ctx, k8s, ns); err != nil {
		t.Fatal(err)
	}
	// Prometheus has scraped the end state of the workload from every
	// replica, and its rules have seen it.
	done := time.Now()
	eventually(t, time.Minute, func() error {
		if err := prom.WaitScraped(ctx, done.Add(time.Second), len(env.Managers)); err != nil {
			return err
		}
		waiting, err := prom.Query(ctx, fmt.Sprintf(`subnet_operator_pool_subnets{namespace=%q, pool="tiny", reason="PoolExhausted"}`, ns), time.Time{})
		if err != nil {
			return err
		}
		if len(waiting) != len(env.Managers) {
			return fmt.Errorf("PoolExhausted series of pool tiny: %v, want one per replica", waiting)
		}
		for _, s := range waiting {
			if s.Value[1] != "2" {
				return fmt.Errorf("Subnets of pool tiny waiting, as %s reports: %v, want 2", s.Metric["instance"], s.Value[1])
			}
		}
		return nil
	})

	dashboard, err := monitoring.LoadDashboard(env.RepoRoot)
	if err != nil {
		t.Fatal(err)
	}
	dashboardQueries, err := dashboard.Queries()
	if err != nil {
		t.Fatal(err)
	}
	alerts, err := monitoring.Rules(env.RepoRoot)
	if err != nil {
		t.Fatal(err)
	}
	queries := dashboardQueries
	for _, r := range alerts {
		queries = append(queries, monitoring.Query{Where: "alert " + r.Alert, Expr: r.Expr})
	}

	t.Run("EveryNamedSeriesIsExported", func(t *testing.T) {
		var scrapes []string
		for _, m := range env.Managers {
			code, body, err := env.Scrape(ctx, m, token)
			if err != nil || code != 200 {
				t.Fatalf("scraping %s: %d %v", m.Name, code, err)
			}
			scrapes = append(scrapes, body)
		}
		exposed, err := monitoring.ParseExposition(scrapes...)
		if err != nil {
			t.Fatal(err)
		}
		checked := 0
		for _, q := range queries {
			selectors, err := prom.Selectors(ctx, dashboard.Interpolate(q.Expr, monitoring.JobName, "1m"))
			if err != nil {
				t.Errorf("%s: %v", q.Where, err)
				continue
			}
			for _, s := range selectors {
				checked++
				if ok, why := exposed.Covers(s); !ok {
					t.Errorf("%s selects %s: %s", q.Where, s, why)
				}
			}
		}
		t.Logf("%d selectors in %d queries, each matched by a series the manager exports", checked, len(queries))
	})

	t.Run("EveryDashboardQueryReturnsData", func(t *testing.T) {
		for _, q := range dashboardQueries {
			expr := dashboard.Interpolate(q.Expr, monitoring.JobName, "2m")
			samples, err := prom.Query(ctx, expr, time.Time{})
			if err != nil {
				t.Errorf("%s: %v\n%s", q.Where, err, expr)
				continue
			}
			if len(samples) == 0 {
				t.Errorf("%s returns no data:\n%s", q.Where, expr)
				continue
			}
			// A quantile of a histogram with no observations in the
			// window is NaN: a panel that shows nothing.
			numbers := 0
			for _, s := range samples {
				if v := fmt.Sprint(s.Value[1]); v != "NaN" {
					numbers++
				}
			}
			if numbers == 0 {
				t.Errorf("%s returns only NaN:\n%s", q.Where, expr)
			}
		}
	})

	t.Run("RulesEvaluate", func(t *testing.T) {
		health, err := prom.Rules(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range alerts {
			lastError, ok := health[r.Alert]
			switch {
			case !ok:
				t.Errorf("%s: not loaded", r.Alert)
			case lastError != "":
				t.Errorf("%s: %s", r.Alert, lastError)
			}
		}
		// The pool the workload filled trips its two alerts; they wait out
		// their "for" as pending.
		for _, alert := range []string{"SubnetPoolExhausted", "SubnetPoolNoDefaultBlock"} {
			eventually(t, 30*time.Second, func() error {
				got, err := prom.Query(ctx, fmt.Sprintf(`ALERTS{alertname=%q, namespace=%q, pool="tiny"}`, alert, ns), time.Time{})
				if err != nil {
					return err
				}
				if len(got) != 1 {
					return fmt.Errorf("%s for pool tiny: %v, want one alert", alert, got)
				}
				return nil
			})
		}
		// Pool quiet is as full, but its label opts it out: no alert, not
		// even pending.
		got, err := prom.Query(ctx, fmt.Sprintf(`ALERTS{namespace=%q, pool="quiet"}`, ns), time.Time{})
		if err != nil || len(got) != 0 {
			t.Errorf("pool quiet, labelled alerts: off, has alerts: %v %v", got, err)
		}
		if got, err := prom.Query(ctx, fmt.Sprintf(`subnet_operator_pool_info{namespace=%q, pool="quiet", alerts="off"}`, ns), time.Time{}); err != nil || len(got) != len(env.Managers) {
			t.Errorf("pool quiet's info series with alerts=\"off\": %v %v, want one per replica", got, err)
		}
		// And nothing is wrong with the operator itself. (Before the first
		// scrape SubnetOperatorDown is pending: nothing is up yet.)
		for _, alert := range []string{"SubnetOperatorDown", "SubnetOperatorReplicaDown", "SubnetOperatorWebhookErrors",
			"SubnetOperatorCertificateUnreadable", "SubnetOperatorAuditViolations", "SubnetOperatorNoLeader", "SubnetPoolParentReconcileErrors"} {
			eventually(t, 10*time.Second, func() error {
				got, err := prom.Query(ctx, fmt.Sprintf(`ALERTS{alertname=%q}`, alert), time.Time{})
				if err != nil {
					return err
				}
				if len(got) != 0 {
					return fmt.Errorf("%s is %s on a healthy system: %v", alert, got[0].Metric["alertstate"], got)
				}
				return nil
			})
		}
	})
}
