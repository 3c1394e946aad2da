package reconcilers

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// poolNotFoundDesc is the gauge an alert on Subnets waiting for a pool
// that does not exist reads (a forgotten namespace, a typo): one series per
// namespace that has any, none for the others.
var poolNotFoundDesc = prometheus.NewDesc("subnet_operator_subnets_pool_not_found",
	"Subnets whose spec.poolRef names no SubnetPool (Ready=False, reason PoolNotFound), by namespace. Their condition names the pool likely meant.",
	[]string{"namespace"}, nil)

// poolWaits records, on the leader, which Subnets the arbiter last found
// waiting for a pool that does not exist. The Subnet controller keeps it:
// it sets a Subnet's entry with each decision, and drops it when the
// Subnet is deleted (ledger event) or gone. A pool's creation wakes the
// Subnets that wait for it, whose next decision clears them. The zero
// value is ready to use.
type poolWaits struct {
	mu          sync.Mutex
	byNamespace map[string]map[string]struct{}
}

// set records whether the Subnet namespace/name waits for a missing pool.
func (w *poolWaits) set(namespace, name string, waiting bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !waiting {
		w.forgetLocked(namespace, name)
		return
	}
	if w.byNamespace == nil {
		w.byNamespace = map[string]map[string]struct{}{}
	}
	if w.byNamespace[namespace] == nil {
		w.byNamespace[namespace] = map[string]struct{}{}
	}
	w.byNamespace[namespace][name] = struct{}{}
}

// forget drops a deleted Subnet.
func (w *poolWaits) forget(namespace, name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.forgetLocked(namespace, name)
}

func (w *poolWaits) forgetLocked(namespace, name string) {
	names := w.byNamespace[namespace]
	delete(names, name)
	if len(names) == 0 {
		delete(w.byNamespace, namespace) // no stale series for the namespace
	}
}

// waitingCollector exports poolWaits at scrape time. Its labels are
// namespaces only (bounded by the cluster's namespaces, and only those
// with a waiting Subnet), never Subnet or pool names.
type waitingCollector struct{ waits *poolWaits }

func (c waitingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- poolNotFoundDesc }

func (c waitingCollector) Collect(ch chan<- prometheus.Metric) {
	c.waits.mu.Lock()
	defer c.waits.mu.Unlock()
	for namespace, names := range c.waits.byNamespace {
		ch <- prometheus.MustNewConstMetric(poolNotFoundDesc, prometheus.GaugeValue, float64(len(names)), namespace)
	}
}

var registerWaitingOnce sync.Once

// registerWaitingCollector registers the waiting metrics of the (one)
// Subnet controller of the manager.
func registerWaitingCollector(w *poolWaits) {
	registerWaitingOnce.Do(func() {
		metrics.Registry.MustRegister(waitingCollector{waits: w})
	})
}
