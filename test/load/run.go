package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	capiipam "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/test/controlplane"
	"github.com/subnet-operator/subnet-operator/test/environment"
)

const (
	namespace    = "load"
	poolName     = "load"
	poolCIDR     = "10.0.0.0/8"
	subnetLength = 28 // 16 addresses: the pool's allocated count / 16 is its Ready Subnets
	// Explicit claims take the first /28 of consecutive /24s in the top half
	// of the pool. Best-fit allocation fills the smallest free block first,
	// so dynamic claims fill the holes those leave (15 per /24, against 3
	// dynamic claims per explicit one) and the bottom half, and do not
	// reach the next explicit claim's /24: the two kinds should not
	// collide, so every Subnet should end Ready. (Contiguous explicit
	// claims would collide: the hole next to the last one is always the
	// smallest block.)
	explicitBase   = "10.128.0.0"
	explicitStride = 24
)

// Webhook modes of a run.
const (
	webhooksOn   = "on"   // as installed: the manager answers
	webhooksNoop = "noop" // the same configurations, answered by a no-op server with the same TLS
	webhooksOff  = "off"  // the configurations deleted
)

// runConfig is one load run: N Subnets by C clients, in a webhook mode.
type runConfig struct {
	n, clients, explicitEvery int
	webhooks                  string
	manager                   string
	managerArgs               []string
	managerEnv                []string // NAME=value
	profileDir                string   // where to write pprof profiles; empty: none
	wait                      time.Duration
	restart                   bool // restart the manager at the end and measure its start-up
	records                   bool // wait for every dynamic Subnet's range to be recorded in its spec
}

// result is what a run measured.
type result struct {
	created, denied, failed           int
	createWall                        time.Duration
	createLatency                     []float64 // seconds, client side
	readyDynamic, readyExplicit       []float64 // create sent -> Ready seen
	poolDynamic, poolExplicit         []float64 // create sent -> pool status counts it
	notReady                          map[string]int
	duplicates                        int
	settled                           time.Duration // first create -> last pool status
	recordDynamic                     []float64     // create sent -> range recorded in spec.cidr
	allRecorded                       time.Duration // first create -> last record
	validating, mutating              histogram     // API server's view of the webhooks
	webhookLatency                    histogram     // controller-runtime's, inside the manager
	freshness                         histogram     // the freshness barrier's wait
	admitExplicit, admitDynamic       histogram     // the Subnet validating webhook's decision, by claim
	bareList                          []float64     // a bare consistent LIST (limit 1) probed during the creates
	webhookCalls                      float64       // calls to our webhooks, all operations, as the API server counts them
	explicitCreated                   int
	cacheWaitSubnets, cacheWaitPools  histogram // the API server's wait for its watch cache on consistent reads
	poolReconcile, poolCompute        histogram
	managerRequests                   float64 // rest_client_requests_total delta
	requests                          map[string]float64
	managerCPU, apiserverCPU, etcdCPU float64 // seconds during the run
	managerRSS, managerLive           float64 // bytes at the end, after a GC
	managerHeapSpans                  float64
	heapObjects                       float64
	// With restart: the restarted manager's time from start to ready (its
	// view of every Subnet loaded), its peak RSS and its RSS after a GC.
	restartReady               time.Duration
	restartPeakRSS, restartRSS float64
}

func (r *result) notReadyTotal() int {
	total := 0
	for _, n := range r.notReady {
		total += n
	}
	return total
}

// tracker records when each Subnet is first seen Ready and when the pool's
// status counts k Ready Subnets, from the tool's own informers.
type tracker struct {
	mu          sync.Mutex
	ready       map[string]time.Time
	cidrs       map[string]string
	readyDyn    int                  // Ready Subnets that asked for a prefix length
	recorded    map[string]time.Time // when a dynamic Subnet's spec.cidr was first seen
	poolCounts  []poolSample         // increasing counts
	lastReasons map[string]string    // Ready's reason, once decided
}

type poolSample struct {
	count int
	at    time.Time
}

func (t *tracker) subnet(obj any) {
	s, ok := obj.(*ipamv1.Subnet)
	if !ok {
		return
	}
	now := time.Now()
	c := meta.FindStatusCondition(s.Status.Conditions, ipamv1.ConditionReady)
	t.mu.Lock()
	defer t.mu.Unlock()
	if c == nil || c.Reason == ipamv1.ReasonPending {
		return
	}
	t.lastReasons[s.Name] = c.Reason
	if c.Status == metav1.ConditionTrue {
		if _, seen := t.ready[s.Name]; !seen {
			t.ready[s.Name] = now
			if s.Spec.PrefixLength != nil {
				t.readyDyn++
			}
		}
		t.cidrs[s.Name] = s.Status.CIDR
	}
	// An explicit claim is created with only a cidr; a dynamic one gets
	// its range added beside its prefixLength.
	if _, seen := t.recorded[s.Name]; !seen && s.Spec.PrefixLength != nil && s.Spec.CIDR != "" {
		t.recorded[s.Name] = now
	}
}

func (t *tracker) pool(obj any) {
	p, ok := obj.(*ipamv1.SubnetPool)
	if !ok || p.Name != poolName || p.Status.Allocated == "" {
		return
	}
	var allocated float64
	if _, err := fmt.Sscan(p.Status.Allocated, &allocated); err != nil {
		return
	}
	count := int(allocated) / (1 << (32 - subnetLength))
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.poolCounts); n == 0 || count > t.poolCounts[n-1].count {
		t.poolCounts = append(t.poolCounts, poolSample{count: count, at: now})
	}
}

// progress is how many Subnets are decided (Ready, or not Ready for a
// reason other than Pending), how many are Ready, how many Ready ones the
// pool's status counts, and how many of the Ready dynamic ones are not
// recorded in their spec yet.
func (t *tracker) progress() (decided, ready, counted, unrecorded int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.poolCounts); n > 0 {
		counted = t.poolCounts[n-1].count
	}
	return len(t.lastReasons), len(t.ready), counted, t.readyDyn - len(t.recorded)
}

func subnetName(i int) string { return fmt.Sprintf("s-%06d", i) }

// explicitCIDR is the i-th explicit claim's range.
func explicitCIDR(k int) string {
	base := netip.MustParseAddr(explicitBase).As4()
	v := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	v += uint32(k) << (32 - explicitStride)
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), subnetLength).String()
}

// writePoolNamespace: the Subnets write their pool's namespace, which
// admission otherwise fills (-write-pool-namespace).
var writePoolNamespace bool

// tenants: the Subnets live in this many tenant namespaces, round robin,
// and claim from the pool in the load's namespace, which allows every
// namespace (-tenants; 0: the Subnets live beside the pool).
var tenants int

func tenantNamespace(k int) string { return fmt.Sprintf("%s-tenant-%03d", namespace, k) }

func newSubnet(i, explicitEvery int) (*ipamv1.Subnet, bool) {
	s := &ipamv1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Name: subnetName(i), Namespace: namespace},
		Spec:       ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: poolName}},
	}
	if writePoolNamespace || tenants > 0 {
		s.Spec.PoolRef.Namespace = namespace
	}
	if tenants > 0 {
		s.Namespace = tenantNamespace(i % tenants)
	}
	if explicitEvery > 0 && i%explicitEvery == 0 {
		s.Spec.CIDR = explicitCIDR(i / explicitEvery)
		return s, true
	}
	length := int32(subnetLength)
	s.Spec.PrefixLength = &length // set, not defaulted: the same objects with the webhooks off
	return s, false
}

func scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := capiipam.AddToScheme(s); err != nil { // the claims mode's IPAddressClaims and IPAddresses
		return nil, err
	}
	return s, ipamv1.AddToScheme(s)
}

// plane is a fresh control plane with the operator installed and one
// manager running, and the load's client of it (no client-side limit).
type plane struct {
	env       *environment.Environment
	mgr       *environment.Manager
	scheme    *runtime.Scheme
	restCfg   *rest.Config
	c         client.Client
	pprofAddr string // the manager's pprof endpoint
}

// startPlane starts a plane in a temporary directory; stop stops it and
// removes the directory, unless -keep asked to keep it (its logs).
func startPlane(ctx context.Context, cfg runConfig, clusterAPI bool) (_ *plane, stop func(), err error) {
	dir, err := os.MkdirTemp("", "subnet-operator-load-")
	if err != nil {
		return nil, nil, err
	}
	removeDir := func() {
		if keepDir {
			fmt.Fprintf(os.Stderr, "load: kept %s (logs in %s)\n", dir, filepath.Join(dir, "env"))
			return
		}
		_ = os.RemoveAll(dir)
	}
	ports, err := controlplane.FreePorts(1)
	if err != nil {
		removeDir()
		return nil, nil, err
	}
	p := &plane{pprofAddr: fmt.Sprintf("127.0.0.1:%d", ports[0])}
	opts := environment.Options{
		Dir: filepath.Join(dir, "env"), Manager: cfg.manager, Replicas: 1, ClusterAPI: clusterAPI,
		ManagerArgs: append([]string{"--pprof-bind-address=" + p.pprofAddr, "--zap-log-level=error"}, cfg.managerArgs...),
		ManagerEnv:  cfg.managerEnv,
	}
	if cfg.profileDir != "" {
		opts.APIServerArgs = []string{"--profiling=true"} // the API server is the usual bottleneck: profile it too
	}
	if p.env, err = environment.Start(ctx, opts); err != nil {
		removeDir()
		return nil, nil, err
	}
	stop = func() {
		p.env.Stop()
		removeDir()
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	p.mgr = p.env.Managers[0]
	if p.scheme, err = scheme(); err != nil {
		return nil, nil, err
	}
	p.restCfg = rest.CopyConfig(p.env.Config)
	p.restCfg.QPS, p.restCfg.Burst = -1, -1 // the clients are the load: no client-side limit
	if p.c, err = client.New(p.restCfg, client.Options{Scheme: p.scheme}); err != nil {
		return nil, nil, err
	}
	return p, stop, nil
}

// run starts a fresh control plane and manager, fills one pool and measures.
func run(ctx context.Context, cfg runConfig) (_ *result, err error) {
	p, stop, err := startPlane(ctx, cfg, false)
	if err != nil {
		return nil, err
	}
	defer stop()
	env, mgr, sch, restCfg, c, pprofAddr := p.env, p.mgr, p.scheme, p.restCfg, p.c, p.pprofAddr
	if cfg.webhooks == webhooksOff {
		if _, err := env.Kubectl(ctx, nil, "delete", "validatingwebhookconfiguration,mutatingwebhookconfiguration", "--all"); err != nil {
			return nil, err
		}
	}
	namespaces := []string{namespace}
	for k := range tenants {
		namespaces = append(namespaces, tenantNamespace(k))
	}
	for _, ns := range namespaces {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return nil, err
		}
	}
	length := int32(subnetLength)
	pool := &ipamv1.SubnetPool{
		ObjectMeta: metav1.ObjectMeta{Name: poolName, Namespace: namespace},
		Spec:       ipamv1.SubnetPoolSpec{CIDR: poolCIDR, DefaultPrefixLength: &length},
	}
	if tenants > 0 {
		pool.Spec.AllowedNamespaces = &ipamv1.AllowedNamespaces{From: ipamv1.FromAll}
	}
	if err := c.Create(ctx, pool); err != nil {
		return nil, err
	}
	if cfg.webhooks == webhooksNoop {
		noop, err := startNoopWebhook(env.CertDir("webhook"))
		if err != nil {
			return nil, err
		}
		defer noop.close()
		if err := pointWebhooksAt(ctx, env, noop.url()); err != nil {
			return nil, err
		}
	}
	token, err := env.MetricsReaderToken(ctx, namespace, "load")
	if err != nil {
		return nil, err
	}

	t := &tracker{ready: map[string]time.Time{}, cidrs: map[string]string{}, lastReasons: map[string]string{}, recorded: map[string]time.Time{}}
	watched := map[string]cache.Config{}
	for _, ns := range namespaces {
		watched[ns] = cache.Config{}
	}
	stopCache, err := watchObjects(ctx, restCfg, sch, watched, map[client.Object]func(any){&ipamv1.Subnet{}: t.subnet, &ipamv1.SubnetPool{}: t.pool})
	if err != nil {
		return nil, err
	}
	defer stopCache()
	processes := processIDs(env)
	before, err := measurePoint(ctx, env, mgr, token, processes)
	if err != nil {
		return nil, err
	}

	var cpuProfile chan error
	if cfg.profileDir != "" {
		cpuProfile = make(chan error, 2)
		go func() {
			cpuProfile <- saveProfile(ctx, pprofAddr, "profile?seconds=30", filepath.Join(cfg.profileDir, "cpu.pprof"))
		}()
		go func() {
			cpuProfile <- saveAPIServerProfile(ctx, env.Config, "profile?seconds=30", filepath.Join(cfg.profileDir, "apiserver-cpu.pprof"))
		}()
	}

	// The creates: C clients take the next index until N are sent.
	r := &result{notReady: map[string]int{}}
	sent := make([]time.Time, cfg.n)
	explicit := make([]bool, cfg.n)
	latency := make([]float64, cfg.n)
	ok := make([]bool, cfg.n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failures, denials atomic.Int64
	var firstErr, firstDenial atomic.Value
	start := time.Now()
	// The probe: what one consistent read costs the API server meanwhile,
	// the freshness barrier's floor. Ten a second, from its own client.
	probeCtx, stopProbe := context.WithCancel(ctx)
	probeDone := make(chan []float64, 1)
	go func() { probeDone <- probeConsistentList(probeCtx, c) }()
	for range cfg.clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= cfg.n || ctx.Err() != nil {
					return
				}
				s, isExplicit := newSubnet(i, cfg.explicitEvery)
				explicit[i] = isExplicit
				sent[i] = time.Now()
				err := c.Create(ctx, s)
				latency[i] = time.Since(sent[i]).Seconds()
				if apierrors.IsInvalid(err) { // the webhook said no: the claim collided
					denials.Add(1)
					firstDenial.CompareAndSwap(nil, err.Error())
					continue
				}
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				ok[i] = true
			}
		})
	}
	wg.Wait()
	r.createWall = time.Since(start)
	stopProbe()
	r.bareList = <-probeDone
	r.failed, r.denied = int(failures.Load()), int(denials.Load())
	r.created = cfg.n - r.failed - r.denied
	if r.failed > 0 {
		fmt.Fprintf(os.Stderr, "load: %d creates failed; the first: %v\n", r.failed, firstErr.Load())
	}
	if r.denied > 0 {
		fmt.Fprintf(os.Stderr, "load: %d creates denied; the first: %v\n", r.denied, firstDenial.Load())
	}

	// Wait for every created Subnet to be decided, every Ready one to be
	// counted by the pool and, with records, every Ready dynamic one to have
	// its range recorded: the cost figures then include the records.
	deadline := time.Now().Add(cfg.wait)
	for {
		decided, ready, counted, unrecorded := t.progress()
		if decided >= r.created && counted >= ready && (!cfg.records || unrecorded <= 0) {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "load: gave up waiting after %s: %d of %d decided, %d Ready, the pool counts %d, %d unrecorded\n",
				cfg.wait, decided, r.created, ready, counted, unrecorded)
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}

	if cpuProfile != nil {
		for range 2 {
			if err := <-cpuProfile; err != nil {
				return nil, err
			}
		}
	}
	heapFile := ""
	if cfg.profileDir != "" {
		heapFile = filepath.Join(cfg.profileDir, "heap.pprof")
	}
	// A heap profile with gc=1 collects first, so the heap figure below is
	// what is live, not what is waiting for the next collection.
	if err := saveProfile(ctx, pprofAddr, "heap?gc=1", heapFile); err != nil {
		return nil, err
	}
	after, err := measurePoint(ctx, env, mgr, token, processes)
	if err != nil {
		return nil, err
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	type readyAt struct {
		sent, ready time.Time
		explicit    bool
	}
	var byReady []readyAt
	seen := map[string]string{}
	for i := range cfg.n {
		if !ok[i] {
			continue
		}
		r.createLatency = append(r.createLatency, latency[i])
		if explicit[i] {
			r.explicitCreated++
		}
		name := subnetName(i)
		at, ready := t.ready[name]
		if !ready {
			reason := t.lastReasons[name]
			if reason == "" {
				reason = "undecided"
			}
			r.notReady[reason]++
			continue
		}
		byReady = append(byReady, readyAt{sent: sent[i], ready: at, explicit: explicit[i]})
		d := at.Sub(sent[i]).Seconds()
		if explicit[i] {
			r.readyExplicit = append(r.readyExplicit, d)
		} else {
			r.readyDynamic = append(r.readyDynamic, d)
			if rec, ok := t.recorded[name]; ok {
				r.recordDynamic = append(r.recordDynamic, rec.Sub(sent[i]).Seconds())
				r.allRecorded = max(r.allRecorded, rec.Sub(start))
			}
		}
		if other, dup := seen[t.cidrs[name]]; dup {
			fmt.Fprintf(os.Stderr, "load: %s and %s are both Ready with %s\n", other, name, t.cidrs[name])
			r.duplicates++
		}
		seen[t.cidrs[name]] = name
	}
	// The k-th Subnet to become Ready is in the pool's status from the
	// first status that counts k Ready Subnets.
	sort.Slice(byReady, func(a, b int) bool { return byReady[a].ready.Before(byReady[b].ready) })
	sample := 0
	for k, s := range byReady {
		for sample < len(t.poolCounts) && t.poolCounts[sample].count < k+1 {
			sample++
		}
		if sample == len(t.poolCounts) {
			break // not counted (yet): the wait gave up
		}
		d := t.poolCounts[sample].at.Sub(s.sent).Seconds()
		if s.explicit {
			r.poolExplicit = append(r.poolExplicit, d)
		} else {
			r.poolDynamic = append(r.poolDynamic, d)
		}
	}
	if n := len(t.poolCounts); n > 0 {
		r.settled = t.poolCounts[n-1].at.Sub(start)
	}

	for _, typ := range []struct {
		name string
		into *histogram
	}{{"vsubnet.ipam.subnet-operator.io", &r.validating}, {"msubnet.ipam.subnet-operator.io", &r.mutating}} {
		match := map[string]string{"name": typ.name, "operation": "CREATE"}
		*typ.into = after.apiserver.histogram("apiserver_admission_webhook_admission_duration_seconds", match).
			since(before.apiserver.histogram("apiserver_admission_webhook_admission_duration_seconds", match))
	}
	validatePath := map[string]string{"webhook": "/validate-ipam-subnet-operator-io-v1alpha2-subnet"}
	r.webhookLatency = after.manager.histogram("controller_runtime_webhook_latency_seconds", validatePath).
		since(before.manager.histogram("controller_runtime_webhook_latency_seconds", validatePath))
	subnetKind := map[string]string{"kind": "Subnet"}
	r.freshness = after.manager.histogram("subnet_operator_admission_freshness_wait_seconds", subnetKind).
		since(before.manager.histogram("subnet_operator_admission_freshness_wait_seconds", subnetKind))
	for claim, into := range map[string]*histogram{"explicit": &r.admitExplicit, "dynamic": &r.admitDynamic} {
		match := map[string]string{"claim": claim}
		*into = after.manager.histogram("subnet_operator_subnet_admission_duration_seconds", match).
			since(before.manager.histogram("subnet_operator_subnet_admission_duration_seconds", match))
	}
	for _, name := range []string{"msubnet", "vsubnet", "msubnetpool", "vsubnetpool"} {
		match := map[string]string{"name": name + ".ipam.subnet-operator.io"}
		r.webhookCalls += after.apiserver.histogram("apiserver_admission_webhook_admission_duration_seconds", match).
			since(before.apiserver.histogram("apiserver_admission_webhook_admission_duration_seconds", match)).count
	}
	for _, w := range []struct {
		resource string
		into     *histogram
	}{{"subnets", &r.cacheWaitSubnets}, {"subnetpools", &r.cacheWaitPools}} {
		match := map[string]string{"group": ipamv1.GroupVersion.Group, "resource": w.resource}
		*w.into = after.apiserver.histogram("apiserver_watch_cache_read_wait_seconds", match).
			since(before.apiserver.histogram("apiserver_watch_cache_read_wait_seconds", match))
	}
	r.poolReconcile = after.manager.histogram("subnetpool_parent_reconcile_duration_seconds", nil).
		since(before.manager.histogram("subnetpool_parent_reconcile_duration_seconds", nil))
	r.poolCompute = after.manager.histogram("subnet_operator_pool_status_compute_seconds", nil).
		since(before.manager.histogram("subnet_operator_pool_status_compute_seconds", nil))
	r.managerRequests = after.manager.value("rest_client_requests_total") - before.manager.value("rest_client_requests_total")
	r.requests = requestsBy(after.apiserver, before.apiserver, ipamv1.GroupVersion.Group)
	r.managerCPU = after.procs[mgr.Name].cpuSeconds - before.procs[mgr.Name].cpuSeconds
	r.apiserverCPU = after.procs["kube-apiserver"].cpuSeconds - before.procs["kube-apiserver"].cpuSeconds
	r.etcdCPU = after.procs["etcd"].cpuSeconds - before.procs["etcd"].cpuSeconds
	r.managerRSS = after.procs[mgr.Name].rssBytes
	r.managerLive = after.manager.value("go_memstats_heap_alloc_bytes")
	r.managerHeapSpans = after.manager.value("go_memstats_heap_inuse_bytes")
	r.heapObjects = after.manager.value("go_memstats_heap_objects")
	if cfg.restart {
		if err := measureRestart(ctx, env, mgr, pprofAddr, r); err != nil {
			return nil, fmt.Errorf("restarting the manager: %w", err)
		}
	}
	return r, nil
}

// point is everything read at one moment: the metrics of the manager and
// the API server, and the processes' CPU and memory.
type point struct {
	manager, apiserver scrape
	procs              map[string]procStat
}

func measurePoint(ctx context.Context, env *environment.Environment, mgr *environment.Manager, token string, pids map[string]int) (point, error) {
	var p point
	code, text, err := env.Scrape(ctx, mgr, token)
	if err != nil {
		return p, err
	}
	if code != http.StatusOK {
		return p, fmt.Errorf("manager /metrics: HTTP %d", code)
	}
	if p.manager, err = parseScrape(text); err != nil {
		return p, err
	}
	if p.apiserver, err = scrapeAPIServer(ctx, env.Config); err != nil {
		return p, err
	}
	p.procs = map[string]procStat{}
	for name, pid := range pids {
		s, err := readProc(pid)
		if err != nil {
			return p, err
		}
		p.procs[name] = s
	}
	return p, nil
}

// saveProfile reads a pprof endpoint of the manager into file (discarded
// if file is empty).
// measureRestart stops the manager and starts it again over the N Subnets:
// how long until it is ready (it reports ready once its view holds every
// Subnet and pool), the most memory it held meanwhile, and what it holds
// after a GC.
func measureRestart(ctx context.Context, env *environment.Environment, mgr *environment.Manager, pprofAddr string, r *result) error {
	mgr.Process.Stop(30 * time.Second)
	start := time.Now()
	if err := env.StartManager(ctx, mgr); err != nil {
		return err
	}
	r.restartReady = time.Since(start)
	peak, err := readPeakRSS(mgr.Process.Pid())
	if err != nil {
		return err
	}
	r.restartPeakRSS = peak
	if err := saveProfile(ctx, pprofAddr, "heap?gc=1", ""); err != nil {
		return err
	}
	s, err := readProc(mgr.Process.Pid())
	if err != nil {
		return err
	}
	r.restartRSS = s.rssBytes
	return nil
}

func saveProfile(ctx context.Context, addr, path, file string) error {
	return fetchProfile(ctx, http.DefaultClient, "http://"+addr, path, file)
}

// saveAPIServerProfile reads a pprof endpoint of the API server, as the
// admin (it runs with --profiling=true when profiles are asked for).
func saveAPIServerProfile(ctx context.Context, cfg *rest.Config, path, file string) error {
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	return fetchProfile(ctx, c, cfg.Host, path, file)
}

func fetchProfile(ctx context.Context, c *http.Client, base, path, file string) error {
	out := io.Discard
	if file != "" {
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			return err
		}
		f, err := os.Create(file)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		out = f
	}
	return get(ctx, c, base+"/debug/pprof/"+path, out)
}

// get copies the body of a GET of url into out; anything but 200 is an error.
func get(ctx context.Context, c *http.Client, url string, out io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	_, err = io.Copy(out, resp.Body)
	return err
}

func seconds(v float64) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case math.IsInf(v, 1):
		return "> last bucket"
	case v < 0.001:
		return fmt.Sprintf("%.0f µs", v*1e6)
	case v < 1:
		return fmt.Sprintf("%.1f ms", v*1e3)
	default:
		return fmt.Sprintf("%.2f s", v)
	}
}

// probeConsistentList times a consistent LIST with limit=1 of the Subnets
// in the load's namespace, the read the freshness barrier makes, ten times
// a second until ctx ends.
func probeConsistentList(ctx context.Context, c client.Client) []float64 {
	var out []float64
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
		start := time.Now()
		if err := c.List(ctx, &ipamv1.SubnetList{}, client.InNamespace(namespace), client.Limit(1)); err == nil {
			out = append(out, time.Since(start).Seconds())
		}
	}
}

// watchObjects starts an informer cache over the namespaces with a handler
// per kind (on add and update), and waits for it to sync; stop ends it.
func watchObjects(ctx context.Context, cfg *rest.Config, sch *runtime.Scheme, namespaces map[string]cache.Config, handlers map[client.Object]func(any)) (stop func(), err error) {
	informers, err := cache.New(cfg, cache.Options{
		Scheme: sch, DefaultNamespaces: namespaces,
		DefaultTransform: cache.TransformStripManagedFields(),
	})
	if err != nil {
		return nil, err
	}
	for obj, handle := range handlers {
		inf, err := informers.GetInformer(ctx, obj)
		if err != nil {
			return nil, err
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc: handle, UpdateFunc: func(_, o any) { handle(o) },
		}); err != nil {
			return nil, err
		}
	}
	cacheCtx, cancel := context.WithCancel(ctx)
	go func() { _ = informers.Start(cacheCtx) }()
	if !informers.WaitForCacheSync(ctx) {
		cancel()
		return nil, errors.New("the load tool's cache did not sync")
	}
	return cancel, nil
}

// processIDs names the control plane's processes' IDs, for their CPU.
func processIDs(env *environment.Environment) map[string]int {
	out := map[string]int{}
	for _, p := range env.Processes() {
		out[p.Name] = p.Pid()
	}
	return out
}
