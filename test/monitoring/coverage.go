package monitoring

import (
	"fmt"
	"regexp"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Exposition is what one or more /metrics scrapes hold: the label sets of
// every sample, by sample name (histograms as Prometheus stores them:
// name_bucket with le, name_sum, name_count).
type Exposition map[string][]map[string]string

// ParseExposition reads Prometheus text-format scrapes.
func ParseExposition(scrapes ...string) (Exposition, error) {
	e := Exposition{}
	for _, text := range scrapes {
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err := parser.TextToMetricFamilies(strings.NewReader(text))
		if err != nil {
			return nil, err
		}
		for name, f := range families {
			for _, m := range f.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				e.add(name, f.GetType(), m, labels)
			}
		}
	}
	return e, nil
}

func (e Exposition) add(name string, typ dto.MetricType, m *dto.Metric, labels map[string]string) {
	with := func(k, v string) map[string]string {
		out := map[string]string{k: v}
		for lk, lv := range labels {
			out[lk] = lv
		}
		return out
	}
	switch typ {
	case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
		for _, b := range m.GetHistogram().GetBucket() {
			e[name+"_bucket"] = append(e[name+"_bucket"], with("le", model.FloatString(b.GetUpperBound()).String()))
		}
		e[name+"_bucket"] = append(e[name+"_bucket"], with("le", "+Inf"))
		e[name+"_sum"] = append(e[name+"_sum"], labels)
		e[name+"_count"] = append(e[name+"_count"], labels)
	case dto.MetricType_SUMMARY:
		for _, q := range m.GetSummary().GetQuantile() {
			e[name] = append(e[name], with("quantile", model.FloatString(q.GetQuantile()).String()))
		}
		e[name+"_sum"] = append(e[name+"_sum"], labels)
		e[name+"_count"] = append(e[name+"_count"], labels)
	default:
		e[name] = append(e[name], labels)
	}
}

// targetLabels are attached by Prometheus to every scraped series, so the
// manager never exports them; "up" is the series Prometheus writes for
// each scrape.
var targetLabels = map[string]bool{"job": true, "instance": true}

// Covers reports whether some series satisfies s, and if not, why.
func (e Exposition) Covers(s Selector) (bool, string) {
	if s.Name == "" {
		return false, "selects by labels only; name the metric"
	}
	var matchers []Matcher
	for _, m := range s.Matchers {
		if !targetLabels[m.Name] {
			matchers = append(matchers, m)
		}
	}
	if s.Name == "up" {
		if len(matchers) > 0 {
			return false, "up carries only target labels"
		}
		return true, ""
	}
	series, ok := e[s.Name]
	if !ok {
		return false, "the manager does not export " + s.Name
	}
	for _, labels := range series {
		if matchAll(matchers, labels) {
			return true, ""
		}
	}
	return false, fmt.Sprintf("none of the %d series of %s matches", len(series), s.Name)
}

func matchAll(matchers []Matcher, labels map[string]string) bool {
	for _, m := range matchers {
		value := labels[m.Name] // a missing label is the empty string, as in PromQL
		var ok bool
		switch m.Type {
		case "=":
			ok = value == m.Value
		case "!=":
			ok = value != m.Value
		case "=~", "!~":
			re, err := regexp.Compile("^(?:" + m.Value + ")$")
			if err != nil {
				return false
			}
			ok = re.MatchString(value) == (m.Type == "=~")
		}
		if !ok {
			return false
		}
	}
	return true
}
