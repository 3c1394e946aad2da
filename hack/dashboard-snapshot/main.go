// Command dashboard-snapshot is `make dashboard-snapshot`: it starts a local
// control plane with two manager replicas and a Prometheus that scrapes
// them, runs the monitoring workload and then some churn, evaluates every
// panel of config/grafana/dashboard.json over that run, and writes the
// results as one self-contained HTML page (SVG charts, tables for the
// instant panels). A picture of the dashboard without a Grafana.
package main

import (
	"context"
	"flag"
	"fmt"
	"html/template"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/test/environment"
	"github.com/subnet-operator/subnet-operator/test/monitoring"
)

func main() {
	out := flag.String("out", ".dev/dashboard-snapshot.html", "The HTML report to write.")
	manager := flag.String("manager", "bin/manager", "The manager binary (make dashboard-snapshot builds it).")
	churn := flag.Duration("churn", 90*time.Second, "How long to create and delete Subnets after the workload, so the charts have a shape.")
	flag.Parse()
	if err := run(*out, *manager, *churn); err != nil {
		fmt.Fprintln(os.Stderr, "dashboard-snapshot:", err)
		os.Exit(1)
	}
}

func run(out, manager string, churn time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	manager, err := filepath.Abs(manager)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "dashboard-snapshot-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()

	fmt.Println("Starting a control plane, cert-manager and two manager replicas on 127.0.0.1 ...")
	env, err := environment.Start(ctx, environment.Options{Dir: filepath.Join(dir, "env"), Manager: manager, Replicas: 2, ControllerManager: true})
	if err != nil {
		return err
	}
	defer env.Stop()
	c, err := environment.AdminClient(env)
	if err != nil {
		return err
	}
	const ns = "snapshot"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	token, err := env.MetricsReaderToken(ctx, ns, "prometheus")
	if err != nil {
		return err
	}
	const step = 2 * time.Second
	prom, err := monitoring.ScrapeEnvironment(ctx, env, token, filepath.Join(dir, "prometheus"), step)
	if err != nil {
		return err
	}
	defer prom.Stop()

	start := time.Now()
	fmt.Println("Running the workload, then", churn, "of churn ...")
	if err := monitoring.Workload(ctx, c, ns); err != nil {
		return err
	}
	if err := doChurn(ctx, c, ns, churn); err != nil {
		return err
	}
	end := time.Now().Add(2 * step)
	time.Sleep(2 * step) // the last scrapes

	d, err := monitoring.LoadDashboard(env.RepoRoot)
	if err != nil {
		return err
	}
	report := evaluate(ctx, prom, d, start, end, step)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := page.Execute(f, report); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Println("Wrote", out)
	return nil
}

// doChurn creates and deletes dynamic Subnets in the workload's child pool.
func doChurn(ctx context.Context, c client.Client, ns string, d time.Duration) error {
	deadline := time.Now().Add(d)
	var live []string
	for i := 0; time.Now().Before(deadline); i++ {
		if len(live) > 0 && (len(live) > 40 || rand.IntN(3) == 0) {
			k := rand.IntN(len(live))
			s := &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: live[k]}}
			if err := c.Delete(ctx, s); err != nil {
				return err
			}
			live = append(live[:k], live[k+1:]...)
		} else {
			name := fmt.Sprintf("churn-%04d", i)
			s := &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: "team-a"}}}
			if err := c.Create(ctx, s); err != nil {
				return err
			}
			live = append(live, name)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(100+rand.IntN(400)) * time.Millisecond):
		}
	}
	return nil
}

// Report is what the page shows.
type Report struct {
	Title      string
	From, To   string
	Panels     []PanelReport
	Generated  string
	Dashboard  string
	Prometheus string
}

// PanelReport is one panel: a chart of series, or a table of values.
type PanelReport struct {
	Title, Description, Type, Unit string
	Chart                          *Chart
	Rows                           []Row
	Errors                         []string
}

// Row is one series' latest value, for stat, table and bar gauge panels.
type Row struct{ Name, Value string }

// Chart is an SVG line chart.
type Chart struct {
	Lines         []Line
	YMin, YMax    string
	Width, Height int
	// LogBase, when set, draws the y axis on that log scale, as Grafana
	// does for the panel (values of 0 or less are left out, as there).
	LogBase int
}

// y maps a value onto the chart's scale; false when the scale has no
// place for it.
func (c *Chart) y(f float64) (float64, bool) {
	if c.LogBase == 0 {
		return f, true
	}
	if f <= 0 {
		return 0, false
	}
	return math.Log(f) / math.Log(float64(c.LogBase)), true
}

// Line is one series.
type Line struct {
	Name, Color, Points string
}

var palette = []string{"#3274d9", "#e0752d", "#56a64b", "#a352cc", "#e02f44", "#14a0a0", "#c4a000", "#8f3bb8", "#6e6e6e"}

func evaluate(ctx context.Context, prom *monitoring.Prometheus, d *monitoring.Dashboard, start, end time.Time, step time.Duration) *Report {
	r := &Report{Title: d.Title, From: start.Format(time.RFC3339), To: end.Format(time.RFC3339),
		Generated: time.Now().Format(time.RFC3339), Dashboard: "config/grafana/dashboard.json", Prometheus: prom.URL}
	window := "1m"
	for i := range d.Panels {
		p := &d.Panels[i]
		if p.Type == "row" {
			r.Panels = append(r.Panels, PanelReport{Title: p.Title, Type: "row"})
			continue
		}
		pr := PanelReport{Title: p.Title, Description: p.Description, Type: p.Type, Unit: p.FieldConfig.Defaults.Unit}
		if p.Type == "timeseries" {
			pr.Chart = &Chart{Width: 560, Height: 180}
			if scale := p.FieldConfig.Defaults.Custom.ScaleDistribution; scale.Type == "log" {
				pr.Chart.LogBase = scale.Log
			}
		}
		var all []seriesValues
		for _, t := range p.Targets {
			expr := d.Interpolate(t.Expr, monitoring.JobName, window)
			if pr.Chart != nil {
				samples, err := prom.QueryRange(ctx, expr, start, end, step)
				if err != nil {
					pr.Errors = append(pr.Errors, fmt.Sprintf("%s: %v", t.RefID, err))
					continue
				}
				for _, s := range samples {
					all = append(all, seriesValues{name: legend(t.LegendFormat, s.Metric), values: s.Values})
				}
				continue
			}
			samples, err := prom.Query(ctx, expr, end)
			if err != nil {
				pr.Errors = append(pr.Errors, fmt.Sprintf("%s: %v", t.RefID, err))
				continue
			}
			for _, s := range samples {
				name := legend(t.LegendFormat, s.Metric)
				if len(p.Targets) > 1 {
					name = t.RefID + ": " + name // which query of a multi-query table
				}
				pr.Rows = append(pr.Rows, Row{Name: name, Value: format(fmt.Sprint(s.Value[1]), pr.Unit)})
			}
		}
		if pr.Chart != nil {
			pr.Chart.draw(all, start, end, pr.Unit)
		}
		sort.SliceStable(pr.Rows, func(i, j int) bool { return pr.Rows[i].Name < pr.Rows[j].Name })
		r.Panels = append(r.Panels, pr)
	}
	return r
}

type seriesValues struct {
	name   string
	values [][2]any
}

func (c *Chart) draw(series []seriesValues, start, end time.Time, unit string) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range series {
		for _, v := range s.values {
			if f, err := strconv.ParseFloat(fmt.Sprint(v[1]), 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
				if f, ok := c.y(f); ok {
					lo, hi = math.Min(lo, f), math.Max(hi, f)
				}
			}
		}
	}
	if math.IsInf(lo, 0) {
		return
	}
	if lo > 0 && c.LogBase == 0 {
		lo = 0
	}
	if hi == lo {
		hi = lo + 1
	}
	c.YMin, c.YMax = format(strconv.FormatFloat(lo, 'g', -1, 64), unit), format(strconv.FormatFloat(hi, 'g', -1, 64), unit)
	if c.LogBase != 0 {
		c.YMin, c.YMax = fmt.Sprintf("%d^%.3g", c.LogBase, lo), fmt.Sprintf("%d^%.3g", c.LogBase, hi)
	}
	span := end.Sub(start).Seconds()
	for i, s := range series {
		var pts []string
		for _, v := range s.values {
			t, _ := v[0].(float64)
			f, err := strconv.ParseFloat(fmt.Sprint(v[1]), 64)
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				continue
			}
			f, ok := c.y(f)
			if !ok {
				continue
			}
			x := (t - float64(start.Unix())) / span * float64(c.Width)
			y := float64(c.Height) - (f-lo)/(hi-lo)*float64(c.Height)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
		}
		c.Lines = append(c.Lines, Line{Name: s.name, Color: palette[i%len(palette)], Points: strings.Join(pts, " ")})
	}
}

var legendRef = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

// legend renders a Grafana legend format ("{{namespace}}/{{pool}}").
func legend(format string, metric map[string]string) string {
	if format == "" || format == "__auto" {
		var parts []string
		for k, v := range metric {
			if k != "__name__" {
				parts = append(parts, k+"="+v)
			}
		}
		sort.Strings(parts)
		if len(parts) == 0 {
			return "value"
		}
		return strings.Join(parts, ", ")
	}
	return legendRef.ReplaceAllStringFunc(format, func(ref string) string {
		return metric[legendRef.FindStringSubmatch(ref)[1]]
	})
}

// format shows a value in the panel's unit.
func format(value, unit string) string {
	f, err := strconv.ParseFloat(value, 64)
	if err != nil || math.IsNaN(f) {
		return value
	}
	switch unit {
	case "percentunit":
		return strconv.FormatFloat(f*100, 'f', 1, 64) + "%"
	case "s":
		if math.Abs(f) >= 86400 {
			return strconv.FormatFloat(f/86400, 'f', 1, 64) + " d"
		}
		if math.Abs(f) < 1 && f != 0 {
			return strconv.FormatFloat(f*1000, 'g', 3, 64) + " ms"
		}
		return strconv.FormatFloat(f, 'g', 3, 64) + " s"
	case "ops", "reqps":
		return strconv.FormatFloat(f, 'g', 3, 64) + "/s"
	}
	return strconv.FormatFloat(f, 'g', 6, 64)
}

var page = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}: dashboard snapshot</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5rem;background:#f4f5f7;color:#222}
h1{margin:0 0 .2rem} .meta{color:#666;margin-bottom:1rem}
h2{grid-column:1/-1;margin:1.2rem 0 0;border-bottom:1px solid #ccc}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(600px,1fr));gap:1rem}
.panel{background:#fff;border:1px solid #ddd;border-radius:4px;padding:.8rem}
.panel h3{margin:0 0 .3rem;font-size:1rem} .desc{color:#666;font-size:.8rem;margin:0 0 .4rem}
svg{background:#fafafa;border:1px solid #eee} .axis{font-size:.75rem;color:#666}
ul.legend{list-style:none;padding:0;margin:.3rem 0 0;font-size:.8rem;columns:2}
ul.legend span{display:inline-block;width:.8rem;height:.8rem;margin-right:.3rem;vertical-align:middle}
table{border-collapse:collapse;font-size:.85rem} td{padding:.15rem .6rem;border-bottom:1px solid #eee}
td.v{text-align:right;font-variant-numeric:tabular-nums;font-weight:600}
.err{color:#b00020;font-size:.8rem} .empty{color:#999}
</style></head><body>
<h1>{{.Title}}</h1>
<div class="meta">Every panel of {{.Dashboard}}, evaluated by Prometheus over {{.From}} to {{.To}} with every variable at All. Generated {{.Generated}}.</div>
<div class="grid">
{{range .Panels}}{{if eq .Type "row"}}<h2>{{.Title}}</h2>{{else}}<div class="panel"><h3>{{.Title}}</h3>{{if .Description}}<p class="desc">{{.Description}}</p>{{end}}
{{with .Chart}}{{if .Lines}}<div class="axis">max {{.YMax}}</div>
<svg width="{{.Width}}" height="{{.Height}}" viewBox="0 0 {{.Width}} {{.Height}}">{{range .Lines}}<polyline fill="none" stroke="{{.Color}}" stroke-width="1.5" points="{{.Points}}"/>{{end}}</svg>
<div class="axis">min {{.YMin}}</div>
<ul class="legend">{{range .Lines}}<li><span style="background:{{.Color}}"></span>{{.Name}}</li>{{end}}</ul>{{else}}<p class="empty">No data</p>{{end}}{{end}}
{{if .Rows}}<table>{{range .Rows}}<tr><td>{{.Name}}</td><td class="v">{{.Value}}</td></tr>{{end}}</table>{{else}}{{if not .Chart}}<p class="empty">No data</p>{{end}}{{end}}
{{range .Errors}}<p class="err">{{.}}</p>{{end}}</div>{{end}}
{{end}}</div></body></html>
`))
