package monitoring

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/subnet-operator/subnet-operator/test/controlplane"
	"github.com/subnet-operator/subnet-operator/test/environment"
)

// PrometheusOptions configure a Prometheus server.
type PrometheusOptions struct {
	// Dir holds its configuration, token, TSDB and log.
	Dir string
	// Assets is the directory of the prometheus binary; default
	// $KUBEBUILDER_ASSETS.
	Assets string
	// Targets (host:port of the replicas' metrics endpoints) are scraped
	// over HTTPS as job JobName, every ScrapeInterval, with honor_labels as
	// the ServiceMonitor sets it.
	Targets        []string
	ScrapeInterval time.Duration
	// CAFile verifies the targets' certificates; Token authenticates the
	// scrapes (a ServiceAccount token allowed to get /metrics).
	CAFile, Token string
	// RuleFile, if set, is loaded and evaluated every ScrapeInterval.
	RuleFile []byte
}

// Prometheus is a running Prometheus server on 127.0.0.1.
type Prometheus struct {
	URL     string
	process *controlplane.Process
	client  *http.Client
	logDir  string
}

// StartPrometheus starts a server and waits until it is ready. With no
// targets it serves only the query API (parse_query needs nothing more).
func StartPrometheus(ctx context.Context, opts PrometheusOptions) (*Prometheus, error) {
	if opts.Assets == "" {
		opts.Assets = os.Getenv(controlplane.AssetsEnv)
	}
	binary := filepath.Join(opts.Assets, "prometheus")
	if _, err := os.Stat(binary); err != nil {
		return nil, fmt.Errorf("prometheus is not built (run hack/build-tools.sh, as make test does): %w", err)
	}
	if opts.ScrapeInterval == 0 {
		opts.ScrapeInterval = time.Second
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, err
	}
	config := map[string]any{
		"global": map[string]any{"scrape_interval": opts.ScrapeInterval.String(), "evaluation_interval": opts.ScrapeInterval.String()},
	}
	if len(opts.Targets) > 0 {
		tokenFile := filepath.Join(opts.Dir, "token")
		if err := os.WriteFile(tokenFile, []byte(opts.Token), 0o600); err != nil {
			return nil, err
		}
		config["scrape_configs"] = []any{map[string]any{
			"job_name":        JobName,
			"scheme":          "https",
			"honor_labels":    true,
			"authorization":   map[string]any{"credentials_file": tokenFile},
			"tls_config":      map[string]any{"ca_file": opts.CAFile},
			"static_configs":  []any{map[string]any{"targets": opts.Targets}},
			"scrape_timeout":  opts.ScrapeInterval.String(),
			"scrape_interval": opts.ScrapeInterval.String(),
		}}
	}
	if opts.RuleFile != nil {
		ruleFile := filepath.Join(opts.Dir, "rules.yaml")
		if err := os.WriteFile(ruleFile, opts.RuleFile, 0o600); err != nil {
			return nil, err
		}
		config["rule_files"] = []string{ruleFile}
	}
	data, err := yaml.Marshal(config)
	if err != nil {
		return nil, err
	}
	configFile := filepath.Join(opts.Dir, "prometheus.yml")
	if err := os.WriteFile(configFile, data, 0o600); err != nil {
		return nil, err
	}
	ports, err := controlplane.FreePorts(1)
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])
	logDir := filepath.Join(opts.Dir, "logs")
	p, err := controlplane.StartProcess("prometheus", binary, []string{
		"--config.file=" + configFile,
		"--storage.tsdb.path=" + filepath.Join(opts.Dir, "data"),
		"--web.listen-address=" + addr,
		"--log.level=warn",
	}, nil, logDir)
	if err != nil {
		return nil, err
	}
	prom := &Prometheus{URL: "http://" + addr, process: p, client: &http.Client{Timeout: 30 * time.Second}, logDir: logDir}
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case <-p.Exited():
			return nil, fmt.Errorf("prometheus exited: %w (see %s)", p.Err(), prom.Log())
		default:
		}
		err := prom.get(ctx, "/-/ready", nil, nil)
		if err == nil && len(opts.Targets) > 0 {
			// Prometheus hands new targets to its scrapers after up to 5 s;
			// return once every one has been scraped.
			err = prom.WaitScraped(ctx, time.Time{}, len(opts.Targets))
		}
		if err == nil {
			return prom, nil
		}
		if time.Now().After(deadline) {
			p.Stop(5 * time.Second)
			return nil, fmt.Errorf("prometheus not ready: %w (see %s)", err, prom.Log())
		}
		select {
		case <-ctx.Done():
			p.Stop(5 * time.Second)
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitScraped returns nil once targets targets of JobName are up, each
// scraped by a scrape that started after after; otherwise an error saying
// what it saw.
func (p *Prometheus) WaitScraped(ctx context.Context, after time.Time, targets int) error {
	// timestamp() of a plain selector is the scrape's time; of any other
	// expression (such as up == 1) it is the evaluation's, which would make
	// every target look freshly scraped. "and" keeps the left side's values.
	samples, err := p.Query(ctx, fmt.Sprintf(`timestamp(up{job=%[1]q}) and up{job=%[1]q} == 1`, JobName), time.Time{})
	if err != nil {
		return err
	}
	fresh := 0
	for _, s := range samples {
		at, _ := strconv.ParseFloat(fmt.Sprint(s.Value[1]), 64)
		if at*1000 > float64(after.UnixMilli()) {
			fresh++
		}
	}
	if fresh < targets {
		return fmt.Errorf("%d of %d targets up and scraped since %s (see %s)", fresh, targets, after.Format(time.RFC3339Nano), p.Log())
	}
	return nil
}

// Log is the path of the server's log.
func (p *Prometheus) Log() string { return filepath.Join(p.logDir, "prometheus.log") }

// Stop stops the server.
func (p *Prometheus) Stop() { p.process.Stop(10 * time.Second) }

// Sample is one series of a query result with its latest value (instant
// queries) or its values over time (range queries).
type Sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
	Values [][2]any          `json:"values"`
}

// Query evaluates expr at time at (the zero time: now). A scalar result
// comes back as one sample without labels.
func (p *Prometheus) Query(ctx context.Context, expr string, at time.Time) ([]Sample, error) {
	params := url.Values{"query": {expr}}
	if !at.IsZero() {
		params.Set("time", strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', 3, 64))
	}
	return p.query(ctx, "/api/v1/query", params)
}

// QueryRange evaluates expr over [start, end] every step.
func (p *Prometheus) QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) ([]Sample, error) {
	return p.query(ctx, "/api/v1/query_range", url.Values{
		"query": {expr}, "start": {strconv.FormatInt(start.Unix(), 10)}, "end": {strconv.FormatInt(end.Unix(), 10)},
		"step": {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)},
	})
}

func (p *Prometheus) query(ctx context.Context, path string, params url.Values) ([]Sample, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.get(ctx, path, params, &data); err != nil {
		return nil, err
	}
	switch data.ResultType {
	case "vector", "matrix":
		var samples []Sample
		return samples, json.Unmarshal(data.Result, &samples)
	case "scalar":
		var value [2]any
		if err := json.Unmarshal(data.Result, &value); err != nil {
			return nil, err
		}
		return []Sample{{Metric: map[string]string{}, Value: value}}, nil
	}
	return nil, fmt.Errorf("unexpected result type %q", data.ResultType)
}

// Selector is one series selector of an expression: a metric name and the
// label matchers on it (the name's own matcher is not among them).
type Selector struct {
	Name     string
	Matchers []Matcher
}

// Matcher is a label matcher: Type is one of =, !=, =~, !~.
type Matcher struct {
	Name, Type, Value string
}

func (s Selector) String() string {
	var ms []string
	for _, m := range s.Matchers {
		ms = append(ms, fmt.Sprintf("%s%s%q", m.Name, m.Type, m.Value))
	}
	return s.Name + "{" + strings.Join(ms, ", ") + "}"
}

// Selectors parses expr with Prometheus' own parser (the parse_query API)
// and returns every vector and range selector in it.
func (p *Prometheus) Selectors(ctx context.Context, expr string) ([]Selector, error) {
	var ast any
	if err := p.get(ctx, "/api/v1/parse_query", url.Values{"query": {expr}}, &ast); err != nil {
		return nil, err
	}
	var out []Selector
	var walk func(node any)
	walk = func(node any) {
		switch n := node.(type) {
		case map[string]any:
			if t, _ := n["type"].(string); t == "vectorSelector" || t == "matrixSelector" {
				s := Selector{}
				s.Name, _ = n["name"].(string)
				ms, _ := n["matchers"].([]any)
				for _, raw := range ms {
					m, _ := raw.(map[string]any)
					name, _ := m["name"].(string)
					typ, _ := m["type"].(string)
					value, _ := m["value"].(string)
					if name == "__name__" {
						if s.Name == "" && typ == "=" {
							s.Name = value
						}
						continue
					}
					s.Matchers = append(s.Matchers, Matcher{Name: name, Type: typ, Value: value})
				}
				out = append(out, s)
				return
			}
			for _, v := range n {
				walk(v)
			}
		case []any:
			for _, v := range n {
				walk(v)
			}
		}
	}
	walk(ast)
	return out, nil
}

// Rules returns the health of every loaded rule: name -> last error
// ("" when it evaluates).
func (p *Prometheus) Rules(ctx context.Context) (map[string]string, error) {
	var data struct {
		Groups []struct {
			Rules []struct {
				Name      string `json:"name"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := p.get(ctx, "/api/v1/rules", nil, &data); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, g := range data.Groups {
		for _, r := range g.Rules {
			switch {
			case r.LastError != "":
				out[r.Name] = r.LastError
			case r.Health != "ok":
				out[r.Name] = "health " + r.Health
			default:
				out[r.Name] = ""
			}
		}
	}
	return out, nil
}

// get calls the HTTP API and decodes the data of a success into out.
func (p *Prometheus) get(ctx context.Context, path string, params url.Values, out any) error {
	u := p.URL + path
	if params != nil {
		u += "?" + params.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if out == nil {
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", path, resp.Status)
		}
		return nil
	}
	var envelope struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
		Error  string          `json:"error"`
	}
	if err := json.Unmarshal(body, &envelope); err != nil {
		return fmt.Errorf("%s: %s: %s", path, resp.Status, body)
	}
	if envelope.Status != "success" {
		return errors.New(envelope.Error)
	}
	return json.Unmarshal(envelope.Data, out)
}

// ScrapeEnvironment starts a Prometheus that scrapes every manager replica
// of env as the ServiceMonitor does (HTTPS with the metrics CA, token as a
// metrics reader's bearer token) and evaluates config/prometheus's rules.
func ScrapeEnvironment(ctx context.Context, env *environment.Environment, token, dir string, interval time.Duration) (*Prometheus, error) {
	rules, err := RuleGroups(env.RepoRoot)
	if err != nil {
		return nil, err
	}
	var targets []string
	for _, m := range env.Managers {
		targets = append(targets, fmt.Sprintf("127.0.0.1:%d", m.MetricsPort))
	}
	return StartPrometheus(ctx, PrometheusOptions{
		Dir: dir, Targets: targets, ScrapeInterval: interval,
		CAFile: filepath.Join(env.CertDir("metrics"), "ca.crt"), Token: token, RuleFile: rules,
	})
}
