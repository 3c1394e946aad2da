// Command load drives a local control plane (etcd, kube-apiserver,
// cert-manager and one manager, all on 127.0.0.1) the way a busy cluster
// would: C clients fill one pool with N Subnets, explicit and dynamic mixed,
// while it measures what docs/benchmarks.md reports: create throughput,
// admission latency as the API server and as the webhook see it, the time
// from a create to the Subnet's Ready and to the pool's status counting
// it, pool status reconcile time, the manager's CPU, memory and API
// requests. Each N runs twice on a fresh control plane, with the webhooks
// and without them, so the webhooks' cost is a ratio from one invocation.
//
//	go run ./test/load -n 1000,10000 -manager bin/manager
//
// With -claims it loads the Cluster API IPAM provider instead (claims.go):
// C clients create N IPAddressClaims of one Subnet, on a control plane
// with Cluster API's CRDs, with the webhooks on.
//
//	go run ./test/load -claims -n 1000,10000 -webhooks on -manager bin/manager
//
// It needs KUBEBUILDER_ASSETS (bin/assets, `make tools`). Figures are
// printed, never asserted: these machines are shared and noisy.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func main() {
	sizes := flag.String("n", "1000", "Comma-separated numbers of Subnets, one run pair each.")
	clients := flag.Int("clients", 8, "Concurrent clients creating Subnets.")
	explicitEvery := flag.Int("explicit-every", 4, "Every k-th Subnet claims an explicit CIDR; the others ask for a prefix length.")
	manager := flag.String("manager", "bin/manager", "The manager binary (a release build: make build).")
	managerArgs := flag.String("manager-args", "--kube-api-qps=500 --kube-api-burst=1000",
		"Extra manager flags. The default raises the client-side API limit (50/s) as docs/operations.md advises for large pools; each Subnet costs one status write.")
	modes := flag.String("webhooks", "on,noop,off", "Runs per N: on (as installed), noop (the same webhook configurations answered by a no-op server with the same TLS: the floor), off (webhook configurations deleted).")
	profiles := flag.String("profiles", "", "Directory for the manager's CPU (first 30 s of creates; with -claims the 30 s after them) and heap profiles, per N, of the webhooks-on run; empty: none.")
	managerEnv := flag.String("manager-env", "",
		"Extra environment for the manager, space-separated NAME=value (GOMEMLIMIT=160MiB, as docs/operations.md suggests sizing it); the control plane's processes do not get it.")
	records := flag.Bool("records", true, "Wait until the manager has recorded every dynamic Subnet's range in its spec.cidr, so the costs include the records (false for a build from before durable allocations).")
	restart := flag.Bool("restart", false, "After the creates, restart the manager and report its start-up over the N Subnets: time to ready, peak RSS, RSS after a GC.")
	out := flag.String("out", "", "Also append the report to this file.")
	flag.BoolVar(&writePoolNamespace, "write-pool-namespace", false, "The Subnets write their pool's namespace (spec.poolRef.namespace), which admission fills otherwise.")
	claims := flag.Bool("claims", false, "Cluster API mode: -n counts IPAddressClaims of one Subnet (a /16, explicit) instead of Subnets; needs Cluster API's CRDs in bin/assets (make tools); webhooks on only.")
	flag.BoolVar(&keepDir, "keep", false, "Keep each run's control plane directory (the processes' logs) and print its path.")
	flag.IntVar(&tenants, "tenants", 0, "Spread the Subnets over this many tenant namespaces, claiming from the pool of the load's namespace, which allows them all (a platform's shared plan); 0: beside the pool.")
	flag.Parse()
	ctrllog.SetLogger(logr.Discard()) // the figures are the output
	if *claims {
		webhooksSet := false
		flag.Visit(func(f *flag.Flag) { webhooksSet = webhooksSet || f.Name == "webhooks" })
		if webhooksSet && strings.TrimSpace(*modes) != webhooksOn {
			fmt.Fprintln(os.Stderr, "load: -claims runs with the webhooks on only (-webhooks on)")
			os.Exit(2)
		}
		*modes = webhooksOn
	}
	if err := mainErr(*claims, *sizes, *clients, *explicitEvery, *manager, *managerArgs, *managerEnv, *modes, *profiles, *out, *restart, *records); err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
}

func mainErr(claims bool, sizes string, clients, explicitEvery int, manager, managerArgs, managerEnv, modes, profiles, out string, restart, records bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	manager, err := filepath.Abs(manager)
	if err != nil {
		return err
	}
	var w io.Writer = os.Stdout
	if out != "" {
		f, err := os.OpenFile(out, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		w = io.MultiWriter(os.Stdout, f)
	}
	var ns []int
	for _, field := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(field))
		if err != nil || n <= 0 {
			return fmt.Errorf("-n: %q is not a positive number", field)
		}
		ns = append(ns, n)
	}
	if claims {
		cfg := runConfig{
			clients: clients, webhooks: webhooksOn,
			manager: manager, managerArgs: strings.Fields(managerArgs), managerEnv: strings.Fields(managerEnv),
		}
		cfg.profileDir = profiles // per N below it
		return claimsMain(ctx, w, ns, cfg, strings.TrimSpace(managerArgs+" "+managerEnv))
	}
	for _, n := range ns {
		results := map[string]*result{}
		var order []string
		for _, mode := range strings.Split(modes, ",") {
			mode = strings.TrimSpace(mode)
			if mode != webhooksOn && mode != webhooksNoop && mode != webhooksOff {
				return fmt.Errorf("-webhooks: %q is none of on, noop, off", mode)
			}
			cfg := runConfig{
				n: n, clients: clients, explicitEvery: explicitEvery, webhooks: mode,
				manager: manager, managerArgs: strings.Fields(managerArgs), managerEnv: strings.Fields(managerEnv),
				wait:    5*time.Minute + time.Duration(n)*20*time.Millisecond,
				restart: restart, records: records,
			}
			if profiles != "" && mode == webhooksOn {
				cfg.profileDir = filepath.Join(profiles, strconv.Itoa(n))
			}
			fmt.Fprintf(os.Stderr, "load: N=%d, %d clients, webhooks %s ...\n", n, clients, mode)
			r, err := run(ctx, cfg)
			if err != nil {
				return fmt.Errorf("%d Subnets, webhooks %s: %w", n, mode, err)
			}
			results[mode] = r
			order = append(order, mode)
		}
		report(w, n, clients, explicitEvery, strings.TrimSpace(managerArgs+" "+managerEnv), order, results)
	}
	return nil
}

// keepDir: keep each run's control plane directory (-keep).
var keepDir bool

// report prints one markdown table per N.
func report(w io.Writer, n, clients, explicitEvery int, managerArgs string, order []string, results map[string]*result) {
	p := func(format string, args ...any) { _, _ = fmt.Fprintf(w, format, args...) }
	p("\n### N = %d\n\n", n)
	p("%d clients, one Subnet in %d explicit, /28s in a /8; manager flags and environment `%s`; %s, %d CPUs, %s.\n\n",
		clients, explicitEvery, managerArgs, time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), runtime.Version())
	header := "| | " + strings.Join(mapModes(order, func(m string) string { return "webhooks " + m }), " | ") + " |"
	p("%s\n|---|%s\n", header, strings.Repeat("---|", len(order)))
	row := func(name string, cell func(r *result) string) {
		cells := mapModes(order, func(m string) string { return cell(results[m]) })
		p("| %s | %s |\n", name, strings.Join(cells, " | "))
	}
	pct := func(values []float64) string {
		q := percentiles(values, 0.5, 0.99)
		return seconds(q[0]) + " / " + seconds(q[1])
	}
	hq := func(h histogram) string {
		if h.count == 0 {
			return "–"
		}
		return seconds(h.quantile(0.5)) + " / " + seconds(h.quantile(0.99))
	}
	share := func(h histogram, bound float64) string {
		if h.count == 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f%%", 100*h.fractionWithin(bound))
	}
	perSubnet := func(r *result, v float64) float64 { return v / float64(max(r.created, 1)) }

	row("Subnets created / denied / failed", func(r *result) string { return fmt.Sprintf("%d / %d / %d", r.created, r.denied, r.failed) })
	row("create throughput", func(r *result) string {
		return fmt.Sprintf("%.0f /s", float64(r.created)/r.createWall.Seconds())
	})
	row("create latency, client, p50 / p99", func(r *result) string { return pct(r.createLatency) })
	row("API server: validating webhook p50 / p99", func(r *result) string { return hq(r.validating) })
	row("API server: validating webhook within 5 ms", func(r *result) string { return share(r.validating, 0.005) })
	row("API server: mutating webhook p50 / p99", func(r *result) string { return hq(r.mutating) })
	row("API server: mutating webhook within 5 ms", func(r *result) string { return share(r.mutating, 0.005) })
	row("manager: validating webhook within 1 ms / 10 ms", func(r *result) string {
		if r.webhookLatency.count == 0 {
			return "–"
		}
		return share(r.webhookLatency, 0.001) + " / " + share(r.webhookLatency, 0.01)
	})
	row("manager: freshness read p50 / p99", func(r *result) string { return hq(r.freshness) })
	row("manager: Subnet admission, explicit, p50 / p99", func(r *result) string { return hq(r.admitExplicit) })
	row("manager: Subnet admission, dynamic, p50 / p99", func(r *result) string { return hq(r.admitDynamic) })
	row("bare consistent LIST (limit 1) during the creates, p50 / p99", func(r *result) string { return pct(r.bareList) })
	row("explicit admission p50 / bare LIST p50", func(r *result) string {
		if r.admitExplicit.count == 0 || len(r.bareList) == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2fx", r.admitExplicit.quantile(0.5)/percentiles(r.bareList, 0.5)[0])
	})
	row("consistent LISTs by the webhooks per explicit Subnet", func(r *result) string {
		if r.explicitCreated == 0 {
			return "–"
		}
		// The probe's own reads are LISTs of subnets too; they are not the webhooks'.
		lists := r.requests["LIST subnets"] - float64(len(r.bareList)) + r.requests["LIST subnetpools"]
		return fmt.Sprintf("%.2f", lists/float64(r.explicitCreated))
	})
	row("webhook calls per Subnet (API server's count, all four webhooks)", func(r *result) string {
		return fmt.Sprintf("%.2f", perSubnet(r, r.webhookCalls))
	})
	row("API server: consistent LIST waits for its watch cache, subnets p50 / p99 (count)", func(r *result) string {
		return fmt.Sprintf("%s (%.0f)", hq(r.cacheWaitSubnets), r.cacheWaitSubnets.count)
	})
	row("API server: the same, subnetpools", func(r *result) string {
		return fmt.Sprintf("%s (%.0f)", hq(r.cacheWaitPools), r.cacheWaitPools.count)
	})
	row("create → Ready, dynamic, p50 / p99", func(r *result) string { return pct(r.readyDynamic) })
	row("create → Ready, explicit, p50 / p99", func(r *result) string { return pct(r.readyExplicit) })
	row("create → pool status counts it, dynamic, p50 / p99", func(r *result) string { return pct(r.poolDynamic) })
	row("create → pool status counts it, explicit, p50 / p99", func(r *result) string { return pct(r.poolExplicit) })
	row("pool status reconcile p50 / p99 (count)", func(r *result) string {
		return fmt.Sprintf("%s (%.0f)", hq(r.poolReconcile), r.poolReconcile.count)
	})
	row("pool status compute from the index, p50 / p99", func(r *result) string { return hq(r.poolCompute) })
	row("first create → pool status final", func(r *result) string { return seconds(r.settled.Seconds()) })
	row("create → range recorded in spec, dynamic, p50 / p99", func(r *result) string { return pct(r.recordDynamic) })
	row("first create → every range recorded", func(r *result) string {
		if len(r.recordDynamic) == 0 {
			return "–"
		}
		return seconds(r.allRecorded.Seconds())
	})
	row("Subnets not Ready / duplicate ranges", func(r *result) string {
		return fmt.Sprintf("%d / %d", r.notReadyTotal(), r.duplicates)
	})
	row("manager CPU (per 1k Subnets)", func(r *result) string {
		return fmt.Sprintf("%.1f s (%.2f s)", r.managerCPU, 1000*perSubnet(r, r.managerCPU))
	})
	row("kube-apiserver / etcd CPU", func(r *result) string {
		return fmt.Sprintf("%.1f s / %.1f s", r.apiserverCPU, r.etcdCPU)
	})
	row("manager RSS / live heap / heap spans in use, after a GC", func(r *result) string {
		return fmt.Sprintf("%.0f / %.0f / %.0f MiB", r.managerRSS/(1<<20), r.managerLive/(1<<20), r.managerHeapSpans/(1<<20))
	})
	if results[order[0]].restartReady > 0 {
		row("manager restarted over the N Subnets: ready after / peak RSS / RSS after a GC", func(r *result) string {
			return fmt.Sprintf("%.1f s / %.0f MiB / %.0f MiB", r.restartReady.Seconds(), r.restartPeakRSS/(1<<20), r.restartRSS/(1<<20))
		})
	}
	row("manager live heap per Subnet", func(r *result) string {
		return fmt.Sprintf("%.1f KiB, %.0f objects", perSubnet(r, r.managerLive)/1024, perSubnet(r, r.heapObjects))
	})
	row("manager requests to the API server per Subnet", func(r *result) string {
		return fmt.Sprintf("%.2f", perSubnet(r, r.managerRequests))
	})
	verbs := map[string]bool{}
	for _, m := range order {
		for k := range results[m].requests {
			if k != "CREATE subnets" { // the load itself
				verbs[k] = true
			}
		}
	}
	keys := make([]string, 0, len(verbs))
	for k := range verbs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		row("API server: "+k+" per Subnet", func(r *result) string { return fmt.Sprintf("%.2f", perSubnet(r, r.requests[k])) })
	}
	if on, off := results[webhooksOn], results[webhooksOff]; on != nil && off != nil {
		a, b := percentiles(on.createLatency, 0.5, 0.99), percentiles(off.createLatency, 0.5, 0.99)
		p("\nThe webhooks add %s at p50 and %s at p99 to a create (client side, on minus off); throughput on/off: %.2f.\n",
			seconds(a[0]-b[0]), seconds(a[1]-b[1]),
			(float64(on.created)/on.createWall.Seconds())/(float64(off.created)/off.createWall.Seconds()))
	}
	if on, noop := results[webhooksOn], results[webhooksNoop]; on != nil && noop != nil {
		a, b := percentiles(on.createLatency, 0.99), percentiles(noop.createLatency, 0.99)
		p("\nOurs against the no-op floor: API server CPU per create %.2fx, client p99 %.2fx, throughput %.2fx.\n",
			perSubnet(on, on.apiserverCPU)/perSubnet(noop, noop.apiserverCPU), a[0]/b[0],
			(float64(on.created)/on.createWall.Seconds())/(float64(noop.created)/noop.createWall.Seconds()))
	}
	for _, m := range order {
		if r := results[m]; r.notReadyTotal() > 0 {
			p("\nWebhooks %s: Subnets not Ready by last reason: %v\n", m, r.notReady)
		}
	}
}

func mapModes(order []string, f func(string) string) []string {
	out := make([]string, len(order))
	for i, m := range order {
		out[i] = f(m)
	}
	return out
}
