package main

// The claims mode (-claims): the Cluster API IPAM provider under load. One
// SubnetPool, one Subnet with an explicit range big enough for N
// addresses, and C clients that create N IPAddressClaims of that Subnet
// (no Cluster: spec.clusterName empty). It measures how fast they are
// bound (status.addressRef and Ready=True, seen by the tool's informer),
// what the manager spends, and checks the addresses handed out.

import (
	"context"
	"fmt"
	"io"
	"math/bits"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go4.org/netipx"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	capiipam "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

const (
	// claimSubnetName is the Subnet the claims ask for an address.
	claimSubnetName = "claims"
	// claimSubnetBase is the start of its range, inside poolCIDR; the
	// range is a /16 (65,533 addresses to hand out) unless N needs more.
	claimSubnetBase   = "10.1.0.0"
	claimSubnetLength = 16
	// claimController is the manager's IPAddressClaim controller.
	claimController = "ipaddressclaim"
)

// claimResult is what a claims run measured.
type claimResult struct {
	n, created, failed int
	subnet             netip.Prefix
	createWall         time.Duration
	createLatency      []float64 // seconds, client side
	bindLatency        []float64 // create sent -> the informer sees the claim bound
	allBound           time.Duration
	// The check at the end, from a LIST of the claims and IPAddresses.
	notBound     map[string]int // by the Ready condition's reason, or "undecided"
	missing      int            // bound to an IPAddress that does not exist or names another claim
	duplicates   int            // IPAddresses whose address another one holds too
	outside      int            // addresses outside the Subnet's range
	reserved     int            // the network, broadcast or gateway address
	wrongFields  int            // spec.prefix or spec.gateway not the Subnet's
	addresses    int            // IPAddresses of the Subnet
	subnetInUse  int64          // the Subnet's status.ipAddresses.inUse at the end; -1: not set
	firstFailure string

	write, reconcile, queueWait       histogram // grant -> IPAddress written; one claim reconcile; its wait in the work queue
	reconciles, reconcileErrors       float64
	subnetReconciles                  float64
	managerRequests                   float64
	requests                          map[string]float64
	managerCPU, apiserverCPU, etcdCPU float64
	managerRSS, managerLive           float64 // bytes at the end, after a GC
	heapObjects                       float64
	logErrors                         []string // the manager's error lines (it logs errors only)
}

func (r *claimResult) notBoundTotal() int {
	total := 0
	for _, n := range r.notBound {
		total += n
	}
	return total
}

// claimTracker records when each claim is first seen bound, from the
// tool's informer, and the Ready reason of the ones that are not.
type claimTracker struct {
	mu      sync.Mutex
	bound   map[string]time.Time
	reasons map[string]string
	count   atomic.Int64
}

func (t *claimTracker) claim(obj any) {
	c, ok := obj.(*capiipam.IPAddressClaim)
	if !ok {
		return
	}
	now := time.Now()
	ready := meta.FindStatusCondition(c.Status.Conditions, capiipam.IPAddressClaimReadyCondition)
	t.mu.Lock()
	defer t.mu.Unlock()
	if ready != nil {
		t.reasons[c.Name] = ready.Reason
	}
	if _, seen := t.bound[c.Name]; seen || !claimBound(c) {
		return
	}
	t.bound[c.Name] = now
	t.count.Add(1)
}

// claimBound: the provider named the claim's IPAddress and said Ready.
func claimBound(c *capiipam.IPAddressClaim) bool {
	return c.Status.AddressRef.Name != "" && meta.IsStatusConditionTrue(c.Status.Conditions, capiipam.IPAddressClaimReadyCondition)
}

func claimName(i int) string { return fmt.Sprintf("c-%06d", i) }

// claimSubnetRange is the Subnet's range: a /16 at claimSubnetBase, or
// wider if n addresses (besides network, gateway and broadcast) need it.
func claimSubnetRange(n int) netip.Prefix {
	hostBits := max(32-claimSubnetLength, bits.Len(uint(n+2))) // 2^hostBits >= n+3
	return netip.PrefixFrom(netip.MustParseAddr(claimSubnetBase), 32-hostBits).Masked()
}

func newClaim(i int) *capiipam.IPAddressClaim {
	return &capiipam.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Name: claimName(i), Namespace: namespace},
		Spec: capiipam.IPAddressClaimSpec{PoolRef: capiipam.IPPoolReference{
			APIGroup: ipamv1.GroupVersion.Group, Kind: "Subnet", Name: claimSubnetName,
		}},
	}
}

// runClaims starts a fresh control plane with Cluster API's CRDs and a
// manager, creates N claims of one Subnet and measures.
func runClaims(ctx context.Context, cfg runConfig) (_ *claimResult, err error) {
	p, stop, err := startPlane(ctx, cfg, true)
	if err != nil {
		return nil, err
	}
	defer stop()
	env, mgr, c := p.env, p.mgr, p.c

	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		return nil, err
	}
	length := int32(subnetLength)
	if err := c.Create(ctx, &ipamv1.SubnetPool{
		ObjectMeta: metav1.ObjectMeta{Name: poolName, Namespace: namespace},
		Spec:       ipamv1.SubnetPoolSpec{CIDR: poolCIDR, DefaultPrefixLength: &length},
	}); err != nil {
		return nil, err
	}
	r := &claimResult{n: cfg.n, subnet: claimSubnetRange(cfg.n), notBound: map[string]int{}, subnetInUse: -1}
	if err := c.Create(ctx, &ipamv1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Name: claimSubnetName, Namespace: namespace},
		Spec:       ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: poolName}, CIDR: r.subnet.String()},
	}); err != nil {
		return nil, err
	}
	token, err := env.MetricsReaderToken(ctx, namespace, "load")
	if err != nil {
		return nil, err
	}
	if err := waitSubnetReady(ctx, c); err != nil {
		return nil, err
	}

	t := &claimTracker{bound: map[string]time.Time{}, reasons: map[string]string{}}
	stopCache, err := watchObjects(ctx, p.restCfg, p.scheme, map[string]cache.Config{namespace: {}},
		map[client.Object]func(any){&capiipam.IPAddressClaim{}: t.claim})
	if err != nil {
		return nil, err
	}
	defer stopCache()
	processes := processIDs(env)
	before, err := measurePoint(ctx, env, mgr, token, processes)
	if err != nil {
		return nil, err
	}
	// The manager decides at start whether to serve claims; without the
	// controller nothing would ever be bound.
	if before.manager.valueWhere("controller_runtime_max_concurrent_reconciles", map[string]string{"controller": claimController}) == 0 {
		return nil, fmt.Errorf("the manager runs no %s controller: did it find Cluster API's CRDs at start?", claimController)
	}
	// The creates: C clients take the next index until N are sent.
	sent := make([]time.Time, cfg.n)
	latency := make([]float64, cfg.n)
	ok := make([]bool, cfg.n)
	var next, failures atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range cfg.clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= cfg.n || ctx.Err() != nil {
					return
				}
				sent[i] = time.Now()
				err := c.Create(ctx, newClaim(i))
				latency[i] = time.Since(sent[i]).Seconds()
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
	r.failed = int(failures.Load())
	r.created = cfg.n - r.failed
	if r.failed > 0 {
		fmt.Fprintf(os.Stderr, "load: %d creates failed; the first: %v\n", r.failed, firstErr.Load())
	}
	// The manager's CPU profile covers the 30 s after the creates, when it
	// holds (nearly) N claims and works through the backlog: the costs
	// that grow with N show there, not in the first seconds.
	var cpuProfile chan error
	if cfg.profileDir != "" {
		cpuProfile = make(chan error, 1)
		go func() {
			cpuProfile <- saveProfile(ctx, p.pprofAddr, "profile?seconds=30", filepath.Join(cfg.profileDir, "claims-cpu.pprof"))
		}()
	}

	// Wait until the informer has seen every created claim bound.
	deadline := time.Now().Add(cfg.wait)
	for int(t.count.Load()) < r.created {
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "load: gave up waiting after %s: %d of %d claims bound\n", cfg.wait, t.count.Load(), r.created)
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if cpuProfile != nil {
		if err := <-cpuProfile; err != nil {
			return nil, err
		}
	}
	// A heap profile with gc=1 collects first: the heap and RSS figures
	// below are what is live, not what waits for the next collection.
	heapFile := ""
	if cfg.profileDir != "" {
		heapFile = filepath.Join(cfg.profileDir, "claims-heap.pprof")
	}
	if err := saveProfile(ctx, p.pprofAddr, "heap?gc=1", heapFile); err != nil {
		return nil, err
	}
	after, err := measurePoint(ctx, env, mgr, token, processes)
	if err != nil {
		return nil, err
	}

	t.mu.Lock()
	for i := range cfg.n {
		if !ok[i] {
			continue
		}
		r.createLatency = append(r.createLatency, latency[i])
		if at, bound := t.bound[claimName(i)]; bound {
			r.bindLatency = append(r.bindLatency, at.Sub(sent[i]).Seconds())
			r.allBound = max(r.allBound, at.Sub(start))
		}
	}
	reasons := t.reasons
	t.mu.Unlock()
	if err := checkClaims(ctx, c, r, reasons); err != nil {
		return nil, err
	}

	claimsOf := map[string]string{"controller": claimController}
	r.reconcile = after.manager.histogram("controller_runtime_reconcile_time_seconds", claimsOf).
		since(before.manager.histogram("controller_runtime_reconcile_time_seconds", claimsOf))
	claimQueue := map[string]string{"name": claimController}
	r.queueWait = after.manager.histogram("workqueue_queue_duration_seconds", claimQueue).
		since(before.manager.histogram("workqueue_queue_duration_seconds", claimQueue))
	r.reconciles = after.manager.valueWhere("controller_runtime_reconcile_total", claimsOf) -
		before.manager.valueWhere("controller_runtime_reconcile_total", claimsOf)
	r.reconcileErrors = after.manager.valueWhere("controller_runtime_reconcile_errors_total", claimsOf) -
		before.manager.valueWhere("controller_runtime_reconcile_errors_total", claimsOf)
	subnets := map[string]string{"controller": "subnet"}
	r.subnetReconciles = after.manager.valueWhere("controller_runtime_reconcile_total", subnets) -
		before.manager.valueWhere("controller_runtime_reconcile_total", subnets)
	r.write = after.manager.histogram("subnet_operator_ip_address_write_seconds", nil).
		since(before.manager.histogram("subnet_operator_ip_address_write_seconds", nil))
	r.managerRequests = after.manager.value("rest_client_requests_total") - before.manager.value("rest_client_requests_total")
	r.requests = requestsBy(after.apiserver, before.apiserver, ipamv1.GroupVersion.Group, capiipam.GroupVersion.Group)
	r.managerCPU = after.procs[mgr.Name].cpuSeconds - before.procs[mgr.Name].cpuSeconds
	r.apiserverCPU = after.procs["kube-apiserver"].cpuSeconds - before.procs["kube-apiserver"].cpuSeconds
	r.etcdCPU = after.procs["etcd"].cpuSeconds - before.procs["etcd"].cpuSeconds
	r.managerRSS = after.procs[mgr.Name].rssBytes
	r.managerLive = after.manager.value("go_memstats_heap_alloc_bytes")
	r.heapObjects = after.manager.value("go_memstats_heap_objects")
	for _, line := range strings.Split(string(mgr.Log()), "\n") {
		if strings.TrimSpace(line) != "" {
			r.logErrors = append(r.logErrors, line)
		}
	}
	if len(r.logErrors) > 0 {
		fmt.Fprintf(os.Stderr, "load: the manager logged %d errors; the first: %s\n", len(r.logErrors), r.logErrors[0])
	}
	return r, nil
}

// waitSubnetReady waits until the claims' Subnet holds its range.
func waitSubnetReady(ctx context.Context, c client.Client) error {
	deadline := time.Now().Add(time.Minute)
	for {
		var s ipamv1.Subnet
		err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: claimSubnetName}, &s)
		if err == nil && meta.IsStatusConditionTrue(s.Status.Conditions, ipamv1.ConditionReady) {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("the claims' Subnet %s: not Ready after a minute: %w", claimSubnetName, err)
			}
			return fmt.Errorf("the claims' Subnet %s: not Ready after a minute: %v", claimSubnetName, s.Status.Conditions)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// checkClaims reads every claim and IPAddress from the API server and
// checks what the provider did: each created claim bound to the IPAddress
// of its name, which names it back; each address unique, inside the
// Subnet, neither its network, broadcast nor gateway address (the first
// usable one: the Subnet sets no spec.gateway), with the Subnet's prefix
// and gateway.
func checkClaims(ctx context.Context, c client.Client, r *claimResult, reasons map[string]string) error {
	var claims capiipam.IPAddressClaimList
	if err := c.List(ctx, &claims, client.InNamespace(namespace)); err != nil {
		return err
	}
	var addrs capiipam.IPAddressList
	if err := c.List(ctx, &addrs, client.InNamespace(namespace)); err != nil {
		return err
	}
	var subnet ipamv1.Subnet
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: claimSubnetName}, &subnet); err != nil {
		return err
	}
	if subnet.Status.IPAddresses != nil {
		r.subnetInUse = subnet.Status.IPAddresses.InUse
	}
	network := r.subnet.Addr()
	gateway := network.Next()
	if subnet.Spec.Gateway != "" {
		gateway = netip.MustParseAddr(subnet.Spec.Gateway)
	}
	broadcast := netipx.PrefixLastIP(r.subnet.Masked())
	fail := func(format string, args ...any) {
		if r.firstFailure == "" {
			r.firstFailure = fmt.Sprintf(format, args...)
		}
	}

	byName := map[string]*capiipam.IPAddress{}
	holder := map[netip.Addr]string{}
	for i := range addrs.Items {
		a := &addrs.Items[i]
		if a.Spec.PoolRef.Name != claimSubnetName || a.Spec.PoolRef.Kind != "Subnet" {
			continue
		}
		r.addresses++
		byName[a.Name] = a
		ip, err := netip.ParseAddr(a.Spec.Address)
		switch {
		case err != nil || !r.subnet.Contains(ip):
			r.outside++
			fail("IPAddress %s holds %q, outside %s", a.Name, a.Spec.Address, r.subnet)
			continue
		case ip == network || ip == broadcast || ip == gateway:
			r.reserved++
			fail("IPAddress %s holds %s, reserved in %s (gateway %s)", a.Name, ip, r.subnet, gateway)
		}
		if other, taken := holder[ip]; taken {
			r.duplicates++
			fail("IPAddresses %s and %s both hold %s", other, a.Name, ip)
		}
		holder[ip] = a.Name
		if a.Spec.Prefix == nil || int(*a.Spec.Prefix) != r.subnet.Bits() || a.Spec.Gateway != gateway.String() {
			r.wrongFields++
			fail("IPAddress %s: prefix %v, gateway %q; want %d, %s", a.Name, a.Spec.Prefix, a.Spec.Gateway, r.subnet.Bits(), gateway)
		}
	}
	created := map[string]bool{}
	for i := range claims.Items {
		created[claims.Items[i].Name] = true
	}
	for i := range claims.Items {
		cl := &claims.Items[i]
		if !claimBound(cl) {
			reason := reasons[cl.Name]
			if reason == "" {
				reason = "undecided"
			}
			r.notBound[reason]++
			continue
		}
		a := byName[cl.Status.AddressRef.Name]
		if a == nil || a.Spec.ClaimRef.Name != cl.Name {
			r.missing++
			fail("claim %s is bound to IPAddress %q, which does not exist or is not its", cl.Name, cl.Status.AddressRef.Name)
		}
	}
	if len(claims.Items) != r.created {
		fail("%d claims exist, %d were created", len(claims.Items), r.created)
		r.notBound["not found"] += max(r.created-len(claims.Items), 0)
	}
	if r.firstFailure != "" {
		fmt.Fprintf(os.Stderr, "load: check failed: %s\n", r.firstFailure)
	}
	return nil
}

// claimsMain runs the claims mode for each N and reports.
func claimsMain(ctx context.Context, w io.Writer, ns []int, cfg runConfig, managerArgs string) error {
	var results []*claimResult
	profiles := cfg.profileDir
	for _, n := range ns {
		cfg.n = n
		if profiles != "" {
			cfg.profileDir = filepath.Join(profiles, strconv.Itoa(n))
		}
		cfg.wait = 5*time.Minute + time.Duration(n)*20*time.Millisecond
		fmt.Fprintf(os.Stderr, "load: %d IPAddressClaims, %d clients, webhooks on ... (%s)\n", n, cfg.clients, time.Now().Format(time.TimeOnly))
		r, err := runClaims(ctx, cfg)
		if err != nil {
			return fmt.Errorf("%d IPAddressClaims: %w", n, err)
		}
		results = append(results, r)
		reportClaims(w, cfg.clients, managerArgs, []*claimResult{r})
	}
	if len(results) > 1 {
		reportClaims(w, cfg.clients, managerArgs, results)
	}
	return nil
}

// reportClaims prints one markdown table, a column per N, and with more
// than one N the ratio of the last to the first.
func reportClaims(w io.Writer, clients int, managerArgs string, rs []*claimResult) {
	p := func(format string, args ...any) { _, _ = fmt.Fprintf(w, format, args...) }
	ns := make([]string, len(rs))
	for i, r := range rs {
		ns[i] = fmt.Sprintf("N = %d", r.n)
	}
	p("\n### Cluster API claims, %s\n\n", strings.Join(ns, ", "))
	p("%d clients, IPAddressClaims of one Subnet (%s, explicit, in a /8 pool), webhooks on; manager flags and environment `%s`; %s, %d CPUs, %s.\n\n",
		clients, rs[len(rs)-1].subnet, managerArgs, time.Now().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), runtime.Version())
	ratio := len(rs) > 1
	header := "| | " + strings.Join(ns, " | ") + " |"
	rule := "|---|" + strings.Repeat("---|", len(rs))
	if ratio {
		header += fmt.Sprintf(" %d / %d |", rs[len(rs)-1].n, rs[0].n)
		rule += "---|"
	}
	p("%s\n%s\n", header, rule)
	// row prints a cell per run; values, if any, are compared as the last
	// run's over the first's.
	row := func(name string, cell func(r *claimResult) (string, []float64)) {
		cells := make([]string, len(rs))
		for i, r := range rs {
			cells[i], _ = cell(r)
		}
		line := "| " + name + " | " + strings.Join(cells, " | ") + " |"
		if ratio {
			_, first := cell(rs[0])
			_, last := cell(rs[len(rs)-1])
			var rr []string
			for i := range first {
				rr = append(rr, fmt.Sprintf("%.2fx", last[i]/first[i]))
			}
			if len(rr) == 0 {
				rr = []string{""}
			}
			line += " " + strings.Join(rr, " / ") + " |"
		}
		p("%s\n", line)
	}
	text := func(s string) (string, []float64) { return s, nil }
	quantiles := func(values []float64, qs ...float64) (string, []float64) {
		q := percentiles(values, qs...)
		cells := make([]string, len(q))
		for i, v := range q {
			cells[i] = seconds(v)
		}
		return strings.Join(cells, " / "), q
	}
	hq := func(h histogram) (string, []float64) {
		if h.count == 0 {
			return "–", nil
		}
		q := []float64{h.quantile(0.5), h.quantile(0.99)}
		return seconds(q[0]) + " / " + seconds(q[1]), q
	}
	perClaim := func(r *claimResult, v float64) float64 { return v / float64(max(r.created, 1)) }

	row("claims created / failed", func(r *claimResult) (string, []float64) {
		return text(fmt.Sprintf("%d / %d", r.created, r.failed))
	})
	row("create throughput", func(r *claimResult) (string, []float64) {
		v := float64(r.created) / r.createWall.Seconds()
		return fmt.Sprintf("%.0f /s", v), []float64{v}
	})
	row("create latency, client, p50 / p99", func(r *claimResult) (string, []float64) { return quantiles(r.createLatency, 0.5, 0.99) })
	row("first create → every claim bound", func(r *claimResult) (string, []float64) {
		return seconds(r.allBound.Seconds()), []float64{r.allBound.Seconds()}
	})
	row("claims bound per second, over that time", func(r *claimResult) (string, []float64) {
		v := float64(len(r.bindLatency)) / r.allBound.Seconds()
		return fmt.Sprintf("%.0f /s", v), []float64{v}
	})
	row("create → bound, p50 / p90 / p99", func(r *claimResult) (string, []float64) { return quantiles(r.bindLatency, 0.5, 0.9, 0.99) })
	mean := func(h histogram) (string, []float64) {
		if h.count == 0 {
			return "–", nil
		}
		return seconds(h.sum / h.count), []float64{h.sum / h.count}
	}
	row("manager: claim reconcile p50 / p99", func(r *claimResult) (string, []float64) { return hq(r.reconcile) })
	row("manager: claim reconcile, mean", func(r *claimResult) (string, []float64) { return mean(r.reconcile) })
	row("manager: claim wait in the work queue, mean", func(r *claimResult) (string, []float64) { return mean(r.queueWait) })
	row("manager: claim reconciles per claim (errors)", func(r *claimResult) (string, []float64) {
		v := perClaim(r, r.reconciles)
		return fmt.Sprintf("%.2f (%.0f)", v, r.reconcileErrors), []float64{v}
	})
	row("manager: grant → IPAddress written, p50 / p99", func(r *claimResult) (string, []float64) { return hq(r.write) })
	row("manager: Subnet reconciles per claim", func(r *claimResult) (string, []float64) {
		v := perClaim(r, r.subnetReconciles)
		return fmt.Sprintf("%.2f", v), []float64{v}
	})
	row("not bound / duplicates", func(r *claimResult) (string, []float64) {
		return text(fmt.Sprintf("%d / %d", r.notBoundTotal(), r.duplicates))
	})
	row("IPAddresses / outside the Subnet / network, broadcast or gateway / wrong prefix or gateway / claims bound to a missing IPAddress", func(r *claimResult) (string, []float64) {
		return text(fmt.Sprintf("%d / %d / %d / %d / %d", r.addresses, r.outside, r.reserved, r.wrongFields, r.missing))
	})
	row("Subnet status.ipAddresses.inUse at the end", func(r *claimResult) (string, []float64) {
		if r.subnetInUse < 0 {
			return text("unset")
		}
		return text(fmt.Sprintf("%d", r.subnetInUse))
	})
	row("manager CPU (per 1k claims)", func(r *claimResult) (string, []float64) {
		v := 1000 * perClaim(r, r.managerCPU)
		return fmt.Sprintf("%.1f s (%.2f s)", r.managerCPU, v), []float64{v}
	})
	row("kube-apiserver / etcd CPU (per 1k claims)", func(r *claimResult) (string, []float64) {
		a, e := 1000*perClaim(r, r.apiserverCPU), 1000*perClaim(r, r.etcdCPU)
		return fmt.Sprintf("%.1f s / %.1f s (%.2f s / %.2f s)", r.apiserverCPU, r.etcdCPU, a, e), []float64{a, e}
	})
	row("manager RSS / live heap, after a GC", func(r *claimResult) (string, []float64) {
		return fmt.Sprintf("%.0f / %.0f MiB", r.managerRSS/(1<<20), r.managerLive/(1<<20)), []float64{r.managerRSS, r.managerLive}
	})
	row("manager live heap per claim", func(r *claimResult) (string, []float64) {
		v := perClaim(r, r.managerLive) / 1024
		return fmt.Sprintf("%.1f KiB, %.0f objects", v, perClaim(r, r.heapObjects)), []float64{v}
	})
	row("manager requests to the API server per claim", func(r *claimResult) (string, []float64) {
		v := perClaim(r, r.managerRequests)
		return fmt.Sprintf("%.2f", v), []float64{v}
	})
	verbs := map[string]bool{}
	for _, r := range rs {
		for k := range r.requests { // POST ipaddressclaims included: the load itself, 1.00
			verbs[k] = true
		}
	}
	keys := make([]string, 0, len(verbs))
	for k := range verbs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		row("API server: "+k+" per claim", func(r *claimResult) (string, []float64) {
			return text(fmt.Sprintf("%.2f", perClaim(r, r.requests[k])))
		})
	}
	row("manager log: error lines", func(r *claimResult) (string, []float64) { return text(fmt.Sprintf("%d", len(r.logErrors))) })
	for _, r := range rs {
		if r.notBoundTotal() > 0 {
			p("\nN = %d: claims not bound by last Ready reason: %v\n", r.n, r.notBound)
		}
		if r.firstFailure != "" {
			p("\nN = %d: the first failed check: %s\n", r.n, r.firstFailure)
		}
	}
}

// valueWhere sums the counter or gauge samples of name that match.
func (s scrape) valueWhere(name string, match map[string]string) float64 {
	total := 0.0
	for _, m := range s[name].GetMetric() {
		if !matches(m, match) {
			continue
		}
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		}
	}
	return total
}
