package main

import (
	"math"
	"testing"
)

const exposition = `# TYPE lat histogram
lat_bucket{op="a",le="0.005"} 90
lat_bucket{op="a",le="0.025"} 99
lat_bucket{op="a",le="0.1"} 100
lat_bucket{op="a",le="+Inf"} 100
lat_sum{op="a"} 0.5
lat_count{op="a"} 100
lat_bucket{op="b",le="0.005"} 10
lat_bucket{op="b",le="0.025"} 10
lat_bucket{op="b",le="0.1"} 10
lat_bucket{op="b",le="+Inf"} 10
lat_sum{op="b"} 0.01
lat_count{op="b"} 10
# TYPE reqs counter
reqs{code="200"} 7
reqs{code="500"} 3
`

func TestHistogramQuantiles(t *testing.T) {
	s, err := parseScrape(exposition)
	if err != nil {
		t.Fatal(err)
	}
	a := s.histogram("lat", map[string]string{"op": "a"})
	if a.count != 100 {
		t.Fatalf("count = %v, want 100", a.count)
	}
	// p50: rank 50 of the 90 in the first bucket, interpolated from 0.
	if got := a.quantile(0.5); math.Abs(got-0.005*50/90) > 1e-12 {
		t.Errorf("p50 = %v", got)
	}
	// p99: rank 99, the end of the second bucket.
	if got := a.quantile(0.99); math.Abs(got-0.025) > 1e-12 {
		t.Errorf("p99 = %v", got)
	}
	if got := a.fractionWithin(0.005); got != 0.9 {
		t.Errorf("within 5 ms = %v, want 0.9", got)
	}
	// Both series together, and the difference between two reads.
	all := s.histogram("lat", nil)
	if all.count != 110 || all.cumulative[0] != 100 {
		t.Errorf("sum of series: %+v", all)
	}
	d := all.since(a)
	if d.count != 10 || d.cumulative[0] != 10 || d.quantile(0.99) > 0.005 {
		t.Errorf("since: %+v", d)
	}
	if got := (histogram{}).quantile(0.5); !math.IsNaN(got) {
		t.Errorf("empty histogram's p50 = %v, want NaN", got)
	}
	if got := s.value("reqs"); got != 10 {
		t.Errorf("counter sum = %v, want 10", got)
	}
}

func TestPastTheLastBucket(t *testing.T) {
	h := histogram{bounds: []float64{0.1, math.Inf(1)}, cumulative: []float64{1, 10}, count: 10}
	if got := h.quantile(0.99); !math.IsInf(got, 1) {
		t.Errorf("p99 = %v, want +Inf", got)
	}
	if seconds(h.quantile(0.99)) != "> last bucket" {
		t.Errorf("formatted: %q", seconds(h.quantile(0.99)))
	}
}

func TestPercentiles(t *testing.T) {
	values := make([]float64, 100)
	for i := range values {
		values[99-i] = float64(i + 1) // unsorted: 100 .. 1
	}
	got := percentiles(values, 0.5, 0.99, 1)
	if got[0] != 50 || got[1] != 99 || got[2] != 100 {
		t.Errorf("percentiles = %v, want [50 99 100]", got)
	}
	if values[0] != 100 {
		t.Error("percentiles sorted its input")
	}
	if got := percentiles(nil, 0.5); !math.IsNaN(got[0]) {
		t.Errorf("no values: %v", got)
	}
}

func TestExplicitClaimsDoNotShareA24(t *testing.T) {
	if got := explicitCIDR(0); got != "10.128.0.0/28" {
		t.Errorf("explicitCIDR(0) = %s", got)
	}
	if got := explicitCIDR(257); got != "10.129.1.0/28" {
		t.Errorf("explicitCIDR(257) = %s", got)
	}
}
