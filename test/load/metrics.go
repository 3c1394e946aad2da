package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"
)

// scrape is one read of a /metrics endpoint.
type scrape map[string]*dto.MetricFamily

func parseScrape(text string) (scrape, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	return scrape(families), err
}

// scrapeAPIServer reads the API server's /metrics as the admin.
func scrapeAPIServer(ctx context.Context, cfg *rest.Config) (scrape, error) {
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	var body strings.Builder
	if err := get(ctx, c, cfg.Host+"/metrics", &body); err != nil {
		return nil, err
	}
	return parseScrape(body.String())
}

// matches reports whether m carries every label of want.
func matches(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == k && l.GetValue() == v {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// value sums the counter or gauge samples of name.
func (s scrape) value(name string) float64 {
	total := 0.0
	for _, m := range s[name].GetMetric() {
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		case m.Untyped != nil:
			total += m.GetUntyped().GetValue()
		}
	}
	return total
}

// histogram is a classic histogram: cumulative counts per upper bound.
type histogram struct {
	bounds     []float64
	cumulative []float64
	count, sum float64
}

// histogram sums the histogram series of name that match.
func (s scrape) histogram(name string, match map[string]string) histogram {
	var h histogram
	for _, m := range s[name].GetMetric() {
		if !matches(m, match) || m.Histogram == nil {
			continue
		}
		hm := m.GetHistogram()
		if h.bounds == nil {
			for _, b := range hm.GetBucket() {
				h.bounds = append(h.bounds, b.GetUpperBound())
				h.cumulative = append(h.cumulative, 0)
			}
		}
		for i, b := range hm.GetBucket() {
			if i < len(h.cumulative) {
				h.cumulative[i] += float64(b.GetCumulativeCount())
			}
		}
		h.count += float64(hm.GetSampleCount())
		h.sum += hm.GetSampleSum()
	}
	return h
}

// since is h minus an earlier read of the same histogram.
func (h histogram) since(before histogram) histogram {
	out := histogram{bounds: h.bounds, count: h.count - before.count, sum: h.sum - before.sum}
	for i, c := range h.cumulative {
		if i < len(before.cumulative) {
			c -= before.cumulative[i]
		}
		out.cumulative = append(out.cumulative, c)
	}
	return out
}

// quantile interpolates linearly inside the bucket, as Prometheus's
// histogram_quantile does; +Inf when it falls past the last bound.
func (h histogram) quantile(q float64) float64 {
	if h.count == 0 {
		return math.NaN()
	}
	rank := q * h.count
	lower, below := 0.0, 0.0
	for i, upper := range h.bounds {
		if h.cumulative[i] >= rank {
			in := h.cumulative[i] - below
			if in == 0 {
				return upper
			}
			return lower + (upper-lower)*(rank-below)/in
		}
		lower, below = upper, h.cumulative[i]
	}
	return math.Inf(1)
}

// fractionWithin is the share of observations at or below bound (which
// must be a bucket bound).
func (h histogram) fractionWithin(bound float64) float64 {
	for i, upper := range h.bounds {
		if upper == bound && h.count > 0 {
			return h.cumulative[i] / h.count
		}
	}
	return math.NaN()
}

// requestsBy sums apiserver_request_total deltas for the resources of
// the API groups (the operator's, Cluster API's IPAM) by verb, resource
// and subresource.
func requestsBy(after, before scrape, groups ...string) map[string]float64 {
	out := map[string]float64{}
	add := func(s scrape, sign float64) {
		for _, m := range s["apiserver_request_total"].GetMetric() {
			if !slices.Contains(groups, label(m, "group")) {
				continue
			}
			key := label(m, "verb") + " " + label(m, "resource")
			if sub := label(m, "subresource"); sub != "" {
				key += "/" + sub
			}
			out[key] += sign * m.GetCounter().GetValue()
		}
	}
	add(after, 1)
	add(before, -1)
	for k, v := range out {
		if v == 0 {
			delete(out, k)
		}
	}
	return out
}

// procStat is a process's CPU time and resident memory, from /proc.
type procStat struct {
	cpuSeconds float64
	rssBytes   float64
}

const clockTicks = 100 // USER_HZ on Linux

func readProc(pid int) (procStat, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	// Fields after the command name (which may hold spaces), from field 3.
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(fields) < 22 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	rssPages, _ := strconv.ParseFloat(fields[21], 64)
	return procStat{cpuSeconds: (utime + stime) / clockTicks, rssBytes: rssPages * float64(os.Getpagesize())}, nil
}

// readPeakRSS returns the most memory a process has held resident (VmHWM).
func readPeakRSS(pid int) (float64, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmHWM", pid)
}

// percentiles of durations in seconds.
func percentiles(values []float64, qs ...float64) []float64 {
	out := make([]float64, len(qs))
	if len(values) == 0 {
		for i := range out {
			out[i] = math.NaN()
		}
		return out
	}
	sorted := append([]float64(nil), values...)
	sort.Float64s(sorted)
	for i, q := range qs {
		idx := int(math.Ceil(q*float64(len(sorted)))) - 1
		idx = max(0, min(idx, len(sorted)-1))
		out[i] = sorted[idx]
	}
	return out
}
