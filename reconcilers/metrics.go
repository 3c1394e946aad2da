package reconcilers

import (
	"math/big"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ipspace"
	"github.com/subnet-operator/subnet-operator/ledger"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

// The seed design's parent-requeue metrics (§12.1), under their names.
var (
	parentRequeues = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "subnetpool_parent_requeue_total",
		Help: "Requeues of a parent pool caused by a Subnet or child pool event, by event type (create, update, delete).",
	}, []string{"event_type"})
	parentReconcileDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "subnetpool_parent_reconcile_duration_seconds",
		Help:    "Duration of pool status reconciles, by result (success, error).",
		Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5},
	}, []string{"result"})
	parentReconcileInflight = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "subnetpool_parent_reconcile_inflight",
		Help: "Pool status reconciles in progress.",
	})
	// The reconcile duration above includes the API round trips; this is
	// the part that grows with the pool, so the two can be told apart.
	poolStatusCompute = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "subnet_operator_pool_status_compute_seconds",
		Help:    "Time to decide a pool's readiness and compute its figures from the ledger's maintained index, without API calls.",
		Buckets: []float64{0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025},
	})
)

// Allocation metrics.
var (
	allocationDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "subnet_operator_allocation_duration_seconds",
		Help:    "Time from the operator first seeing a Subnet to its Ready status being written, by kind of claim (explicit, dynamic).",
		Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
	}, []string{"claim"})
	arbitrationConflicts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "subnet_operator_arbitration_conflicts_total",
		Help: "Claims the arbiter declared losers (Ready=False, reason Overlaps).",
	})
	allocatedEventsSkipped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "subnet_operator_allocated_events_skipped_total",
		Help: "Allocated events not recorded because Subnets were allocated faster than 5 per second after a burst of 100 (each Subnet's status and the allocation metrics still record every allocation).",
	})
	allocationRecords = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "subnet_operator_allocation_records_total",
		Help: "Writes of an allocated range into the Subnet's spec.cidr (its durable record), by result (success, error).",
	}, []string{"result"})
	statusWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "subnet_operator_status_writes_total",
		Help: "Status writes to the API server, by kind and result (success, conflict, error).",
	}, []string{"kind", "result"})
)

// lastStatus remembers when each pool's status was last written, for
// subnetpool_parent_status_last_timestamp_seconds. The collector reports
// only pools the ledger still knows, so a deleted pool leaves no series.
var lastStatus sync.Map // ledger.Object -> time.Time

func noteStatusWritten(o ledger.Object) { lastStatus.Store(o, time.Now()) }

// poolCollector reports every pool's figures at scrape time from the
// ledger: no gauge to keep in sync, no stale series after a pool goes.
// Label cardinality is one series per pool (and per Subnet state), never
// per address.
type poolCollector struct {
	ledger *ledger.Ledger
	// alertsLabel is the pool label that, set to "off", opts the pool out
	// of the per-pool alerts: its info series says alerts="off", and every
	// per-pool alert rule excludes such pools.
	alertsLabel string
}

var (
	poolLabels         = []string{"namespace", "pool"}
	descCapacity       = prometheus.NewDesc("subnet_operator_pool_capacity_addresses", "Addresses in the range a pool serves.", poolLabels, nil)
	descAllocated      = prometheus.NewDesc("subnet_operator_pool_allocated_addresses", "Addresses held by a pool's Ready Subnets and child pools.", poolLabels, nil)
	descReserved       = prometheus.NewDesc("subnet_operator_pool_reserved_addresses", "Addresses in a pool's reserved ranges.", poolLabels, nil)
	descFree           = prometheus.NewDesc("subnet_operator_pool_free_addresses", "Addresses of a pool neither held nor reserved.", poolLabels, nil)
	descUtilization    = prometheus.NewDesc("subnet_operator_pool_utilization_ratio", "Allocated addresses over allocatable addresses (capacity minus reserved), 0 to 1.", poolLabels, nil)
	descLargestFree    = prometheus.NewDesc("subnet_operator_pool_largest_free_prefix_length", "Prefix length of a pool's largest free block (smaller is larger); absent when the pool is full.", poolLabels, nil)
	descAllocatable    = prometheus.NewDesc("subnet_operator_pool_allocatable_blocks", "Blocks of the pool's defaultPrefixLength that can still be allocated, given fragmentation.", poolLabels, nil)
	descOverlapping    = prometheus.NewDesc("subnet_operator_pool_overlapping_claims", "Claims of a pool that lose to an overlapping claim.", poolLabels, nil)
	descNotAllowed     = prometheus.NewDesc("subnet_operator_pool_claims_not_allowed", "Claims of a pool that hold ranges although spec.allowedNamespaces no longer allows their namespace (the ClaimsNotAllowed condition).", poolLabels, nil)
	descChildren       = prometheus.NewDesc("subnet_operator_pool_child_pools", "Child pools of a pool.", poolLabels, nil)
	descCarved         = prometheus.NewDesc("subnet_operator_pool_child_pool_addresses", "Addresses of a pool carved into its child pools: the ranges they serve.", poolLabels, nil)
	descSubnetUse      = prometheus.NewDesc("subnet_operator_pool_subnet_utilization_ratio", "Addresses held by a pool's Subnets over its allocatable addresses not carved into child pools, 0 to 1; absent when child pools take them all (the children are judged themselves).", poolLabels, nil)
	descSubnets        = prometheus.NewDesc("subnet_operator_pool_subnets", "Subnets of a pool by the Ready reason of their status (Pending before the first status).", append(poolLabels, "reason"), nil)
	descPoolInfo       = prometheus.NewDesc("subnet_operator_pool_info", "Always 1; its parent and parent_namespace labels join child pools to their parent in dashboards; alerts is \"off\" for a pool opted out of the per-pool alerts by its label, else \"on\"; family is IPv4 or IPv6, empty while the pool serves no range, so that address counts of the two families are charted apart.", append(poolLabels, "parent", "parent_namespace", "alerts", "family"), nil)
	descRootOverlaps   = prometheus.NewDesc("subnet_operator_address_space_overlapping_root_pools", "Root pools of an address space whose range overlaps another root pool of the space (granted before spaces were kept apart; the AddressSpaceOverlap condition names the other). Exported for the default space always.", []string{"space"}, nil)
	descLastStatusTime = prometheus.NewDesc("subnetpool_parent_status_last_timestamp_seconds", "When the controller last wrote a pool's status, in Unix seconds.", []string{"ns", "name"}, nil)
)

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCapacity, descAllocated, descReserved, descFree, descUtilization, descLargestFree,
		descAllocatable, descOverlapping, descNotAllowed, descChildren, descCarved, descSubnetUse, descSubnets, descPoolInfo, descLastStatusTime, descRootOverlaps} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	overlaps := c.ledger.OverlappingRootPools()
	if _, ok := overlaps[ipamv1.DefaultAddressSpace]; !ok {
		overlaps[ipamv1.DefaultAddressSpace] = 0 // an alert reads 0, not "no data"
	}
	for space, n := range overlaps {
		ch <- prometheus.MustNewConstMetric(descRootOverlaps, prometheus.GaugeValue, float64(n), space)
	}
	// A pool's children are read before it is reported: the addresses
	// carved into them are what its Subnets cannot use.
	var reports []ledger.PoolReport
	carved := map[ledger.Object]*big.Int{}
	c.ledger.Reports(func(r ledger.PoolReport) {
		reports = append(reports, r)
		if r.Parent.Name == "" || !r.Figures.Serving.IsValid() {
			return
		}
		parent := ledger.Object{Namespace: r.Parent.Namespace, Name: r.Parent.Name}
		if carved[parent] == nil {
			carved[parent] = new(big.Int)
		}
		carved[parent].Add(carved[parent], r.Figures.Usage.Capacity)
	})
	for _, r := range reports {
		c.collectPool(ch, r, carved[r.Object])
	}
}

// collectPool reports one pool; carved is the addresses its child pools
// serve (nil: none).
func (c *poolCollector) collectPool(ch chan<- prometheus.Metric, r ledger.PoolReport, carved *big.Int) {
	labels := []string{r.Namespace, r.Name}
	gauge := func(d *prometheus.Desc, v float64, extra ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append(labels, extra...)...)
	}
	alerts := "on"
	if c.alertsLabel != "" && r.Labels[c.alertsLabel] == "off" {
		alerts = "off"
	}
	family := ""
	if r.Figures.Serving.IsValid() {
		family = ipspace.Family(r.Figures.Serving.Addr())
	}
	gauge(descPoolInfo, 1, r.Parent.Name, r.Parent.Namespace, alerts, family)
	gauge(descOverlapping, float64(len(r.Figures.Conflicts)))
	gauge(descNotAllowed, float64(r.Figures.NotAllowedTotal))
	gauge(descChildren, float64(r.Figures.ChildPools))
	for reason, count := range r.SubnetsByReason {
		if reason == "" {
			reason = "Pending"
		}
		gauge(descSubnets, float64(count), reason)
	}
	if t, ok := lastStatus.Load(r.Object); ok {
		ch <- prometheus.MustNewConstMetric(descLastStatusTime, prometheus.GaugeValue, float64(t.(time.Time).Unix()), r.Namespace, r.Name)
	}
	if !r.Figures.Serving.IsValid() {
		return
	}
	u := r.Figures.Usage
	toFloat := func(x *big.Int) float64 { f, _ := new(big.Float).SetInt(x).Float64(); return f }
	gauge(descCapacity, toFloat(u.Capacity))
	gauge(descAllocated, toFloat(u.Held))
	gauge(descReserved, toFloat(u.Reserved))
	gauge(descFree, toFloat(u.Free))
	allocatable := new(big.Int).Sub(u.Capacity, u.Reserved)
	gauge(descUtilization, statuscalc.Ratio(u.Held, allocatable))
	if u.LargestFree.IsValid() {
		gauge(descLargestFree, float64(u.LargestFree.Bits()))
	}
	if r.Figures.Allocatable != nil {
		gauge(descAllocatable, toFloat(r.Figures.Allocatable))
	}
	if carved == nil {
		carved = new(big.Int)
	}
	subnetSpace := statuscalc.SplitCarved(u, carved)
	gauge(descCarved, toFloat(subnetSpace.Carved))
	if subnetSpace.Allocatable.Sign() > 0 {
		gauge(descSubnetUse, statuscalc.Ratio(subnetSpace.Held, subnetSpace.Allocatable))
	}
}

// forgetPool drops what the metrics remember of a deleted pool.
func forgetPool(o ledger.Object) { lastStatus.Delete(o) }

var registerOnce, registerCollectorOnce sync.Once

// registerPoolCollector registers the per-pool metrics, read from the
// ledger when scraped.
func registerPoolCollector(l *ledger.Ledger, alertsLabel string) {
	registerCollectorOnce.Do(func() {
		metrics.Registry.MustRegister(&poolCollector{ledger: l, alertsLabel: alertsLabel})
	})
}

// registerMetrics registers the controllers' metrics with
// controller-runtime's registry (served on the manager's metrics endpoint).
func registerMetrics() {
	registerOnce.Do(func() {
		metrics.Registry.MustRegister(parentRequeues, parentReconcileDuration, parentReconcileInflight, poolStatusCompute,
			allocationDuration, arbitrationConflicts, allocatedEventsSkipped, allocationRecords, statusWrites)
		// Every known label value is exported at zero from the start. A
		// series that first appears with the count of a whole burst has no
		// increase to show (rate() needs an earlier sample), and an error
		// ratio should read 0 on a healthy manager, not "no data".
		for _, result := range []string{"success", "error"} {
			parentReconcileDuration.WithLabelValues(result)
		}
		for _, typ := range []ledger.EventType{ledger.Created, ledger.Updated, ledger.Deleted} {
			parentRequeues.WithLabelValues(string(typ))
		}
		for _, claim := range []string{"explicit", "dynamic"} {
			allocationDuration.WithLabelValues(claim)
		}
		// Subnet status is patched without a precondition: no conflicts.
		statusWrites.WithLabelValues(statuscalc.KindSubnet, "success")
		statusWrites.WithLabelValues(statuscalc.KindSubnet, "error")
		for _, result := range []string{"success", "conflict", "error"} {
			statusWrites.WithLabelValues(statuscalc.KindSubnetPool, result)
		}
	})
}
