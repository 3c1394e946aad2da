package capi

import (
	"math/big"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/subnet-operator/subnet-operator/ledger"
)

// Metrics of the Cluster API provider (docs/metrics.md).
var (
	addressGrants = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "subnet_operator_ip_address_grants_total",
		Help: "Addresses handed to Cluster API IPAddressClaims (an IPAddress written and the claim bound).",
	})
	addressReleases = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "subnet_operator_ip_address_releases_total",
		Help: "IPAddresses deleted because their claim was deleted; each address cools down before it is handed out again.",
	})
	refusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "subnet_operator_ip_address_claim_refusals_total",
		Help: "IPAddressClaims that got no address, by reason (the contract's PoolNotReady, PoolExhausted, AllocationFailed, and ClusterNotFound), counted when the reason changes.",
	}, []string{"reason"})
	boundLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "subnet_operator_ip_address_claim_bind_seconds",
		Help:    "Time from an IPAddressClaim's creation (its creationTimestamp, to the second) to its IPAddress written and its status bound.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300},
	})
	grantLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "subnet_operator_ip_address_write_seconds",
		Help:    "Time from the arbiter's grant of an address to its IPAddress written.",
		Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5},
	})
	addressesDesc = prometheus.NewDesc("subnet_operator_subnet_ip_addresses",
		"Addresses of a Subnet that serves Cluster API IPAddressClaims, by state: in_use (held by an IPAddress), cooling_down (released, not handed out again yet), free (can be handed out). One series per Subnet that has held an address.",
		[]string{"namespace", "subnet", "state"}, nil)
)

var registerOnce sync.Once

func registerMetrics(l *ledger.Ledger) {
	registerOnce.Do(func() {
		metrics.Registry.MustRegister(addressGrants, addressReleases, refusals, boundLatency, grantLatency, &addressCollector{ledger: l})
	})
}

// addressCollector reports each Subnet's address counts at scrape time
// from the ledger.
type addressCollector struct{ ledger *ledger.Ledger }

func (c *addressCollector) Describe(ch chan<- *prometheus.Desc) { ch <- addressesDesc }

func (c *addressCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.ledger.AddressSubnets() {
		u, ok := c.ledger.AddressUsage(s.Namespace, s.Name, 0)
		if !ok {
			continue
		}
		ch <- prometheus.MustNewConstMetric(addressesDesc, prometheus.GaugeValue, float64(u.InUse), s.Namespace, s.Name, "in_use")
		ch <- prometheus.MustNewConstMetric(addressesDesc, prometheus.GaugeValue, float64(u.CoolingDown), s.Namespace, s.Name, "cooling_down")
		if u.Free != nil {
			free, _ := new(big.Float).SetInt(u.Free).Float64()
			ch <- prometheus.MustNewConstMetric(addressesDesc, prometheus.GaugeValue, free, s.Namespace, s.Name, "free")
		}
	}
}
