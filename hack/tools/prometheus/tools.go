//go:build tools

// Package prometheus pins the Prometheus server and promtool that the tests
// run: promtool checks and unit-tests the alert rules, the server scrapes the
// manager and evaluates every dashboard query. Its own module, so that
// Prometheus' dependencies never meet the operator's.
package prometheus

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
