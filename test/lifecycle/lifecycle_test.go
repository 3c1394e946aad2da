//go:build integration

package lifecycle

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	capiipam "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/test/controlplane"
	"github.com/subnet-operator/subnet-operator/test/environment"
)

var (
	seedFlag  = flag.String("lifecycle.seed", "", "seed of the operation sequence (default: a random one, printed so the run can be replayed)")
	opsFlag   = flag.Int("lifecycle.ops", 400, "operations to run, counting each request and each fault (a soak: 20000+)")
	phaseFlag = flag.Int("lifecycle.phase", 100, "operations per phase; every phase ends with the quiescence checks")
	settleFor = flag.Duration("lifecycle.settle", 30*time.Second, "how long a phase's end waits for the liveness checks to pass before it reports what still fails")
	outFlag   = flag.String("lifecycle.out", "", "directory to write the operation log and the replayed history to, as JSON lines")
)

// Short leases, so that a hand-over takes a second or two.
const (
	leaseDuration = 4 * time.Second
	renewDeadline = 3 * time.Second
	retryPeriod   = 500 * time.Millisecond
)

var (
	env  *environment.Environment
	runs int
	// lagProxies: each replica's connection to the API server, by
	// replica name (lagproxy_test.go).
	lagProxies = map[string]*lagProxy{}
)

func TestMain(m *testing.M) {
	opts := environment.Options{
		Replicas: 2,
		// The garbage collector, for foreground deletions (and the
		// dependents of what is deleted).
		ControllerManager: true,
		// Each replica through a proxy of its own, which can hold back
		// its IPAddress watches (lag-address-watch).
		ReplicaKubeconfig: func(_ context.Context, cp *controlplane.ControlPlane, name string) (string, error) {
			p, err := startLagProxy(cp.Config)
			if err != nil {
				return "", err
			}
			lagProxies[name] = p
			path := filepath.Join(cp.Dir, name+"-lagged.kubeconfig")
			return path, p.writeKubeconfig(path)
		},
		// Cluster API's CRDs before the replicas start: they serve
		// IPAddressClaims of Subnets (on: or fail to start).
		ClusterAPI: true,
		// The webhook requires the API server's client certificate, and
		// conversion has a port of its own: restarts and hand-overs
		// exercise both (v1alpha1-round-trip converts).
		WebhookClientAuth: true,
		ManagerArgs: []string{
			"--leader-elect-lease-duration=" + leaseDuration.String(),
			"--leader-elect-renew-deadline=" + renewDeadline.String(),
			"--leader-elect-retry-period=" + retryPeriod.String(),
			"--audit-interval=1s",
			"--cluster-api-ipam=on",
			"--address-reuse-after=" + addressReuseAfter.String(),
		},
		// Fleet members of a hub that is this API server
		// (ops_delegation_test.go): the hub kubeconfig's Secret first.
		BeforeInstall: fleetBeforeInstall,
	}
	opts.ManagerArgs = append(opts.ManagerArgs, fleetManagerArgs()...)
	code := environment.Main(m, opts, true, func(e *environment.Environment, _ client.Client) {
		env = e
	})
	for _, p := range lagProxies {
		p.close()
	}
	os.Exit(code)
}

// TestLifecycle drives a seeded random sequence of operations through the
// API server in phases. After each phase, once every operation has
// returned, it checks the settled state (L1-L6, polled until they pass or
// -lifecycle.settle passes), brings the recorded history up to date, and
// replays it in revision order checking S1-S3 and A1-A6 after every event
// and S4 on the phase's explicit creates. See checks.go and addresses.go
// for the rules.
func TestLifecycle(t *testing.T) {
	started := time.Now()
	if err := serveV1alpha1(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	seed := rand.Uint64()
	if *seedFlag != "" {
		var err error
		if seed, err = strconv.ParseUint(*seedFlag, 10, 64); err != nil {
			t.Fatalf("-lifecycle.seed: %v", err)
		}
	}
	t.Logf("seed %d: replay the operation sequence with -lifecycle.seed=%d -lifecycle.ops=%d", seed, seed, *opsFlag)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	c, err := watchClient()
	if err != nil {
		t.Fatal(err)
	}
	runs++
	// Two tenant namespaces, one labelled tenant at the start, and the
	// platform namespace whose pools allow the labelled ones.
	platform := fmt.Sprintf("lifecycle%d-platform", runs)
	namespaces := []string{fmt.Sprintf("lifecycle%d-a", runs), fmt.Sprintf("lifecycle%d-b", runs), platform}
	tenants := namespaces[:1]
	fenceNS := fmt.Sprintf("lifecycle%d-fence", runs)
	for _, ns := range append(slices.Clone(namespaces), fenceNS) {
		o := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
		if slices.Contains(tenants, ns) {
			o.Labels = map[string]string{tenantLabel: "true"}
		}
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if err := setupFleetRun(ctx, c, runs); err != nil {
		t.Fatal(err)
	}
	rec, err := startRecorder(ctx, c, namespaces)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.close()
	f, err := newFence(ctx, c, fenceNS, runs)
	if err != nil {
		t.Fatal(err)
	}

	l := &lifecycle{
		t: t, c: c, namespaces: namespaces, rec: rec, fence: f,
		gen: newGenerator(seed, namespaces, platform, tenants), rep: newReplayer(), adm: newAdmissionChecker(),
		rpt: &report{t: t, seed: seed, seen: map[string]bool{}, grandfathered: map[types.UID]string{}},
	}
	l.d = newDriver(t, env, c)
	for l.done < *opsFlag {
		l.phase++
		l.runPhase(ctx)
		l.endPhase(ctx)
	}
	l.d.ensureReplicas(ctx) // environment.Main stops them and checks how they exit
	for _, m := range env.Managers {
		l.d.scanRaces(m)
	}
	l.rpt.add(l.phase, l.d.takeFindings()...)

	records := l.d.records()
	if *outFlag != "" {
		if err := dump(*outFlag, records, l.events); err != nil {
			t.Errorf("writing %s: %v", *outFlag, err)
		}
	}
	t.Log(summary(seed, records, l, time.Since(started)))
	l.rpt.finish()
}

// lifecycle is one run of TestLifecycle.
type lifecycle struct {
	t          *testing.T
	c          client.WithWatch
	namespaces []string
	rec        *recorder
	fence      *fence
	gen        *generator
	d          *driver
	rep        *replayer
	adm        *admissionChecker
	rpt        *report

	phase, done int
	logged      int // operations judged by S4 so far
	lchecks     int
	settle      []time.Duration
	events      []event // the replayed history, kept for -lifecycle.out
}

// runPhase runs a phase's operations.
func (l *lifecycle) runPhase(ctx context.Context) {
	budget := min(*phaseFlag, *opsFlag-l.done)
	var forced []*operation
	if l.done+budget >= *opsFlag && *opsFlag >= 100 {
		// Every run of some size has both faults at least once.
		if l.d.handOvers == 0 {
			forced = append(forced, l.gen.make(opHandOver))
		}
		if l.d.restarts == 0 {
			forced = append(forced, l.gen.make(opRestart))
		}
	}
	n := 0
	for n < budget {
		var op *operation
		if len(forced) > 0 {
			op, forced = forced[0], forced[1:]
		} else {
			op = l.gen.next()
		}
		n += l.d.run(ctx, op)
		if l.d.broken != nil {
			l.t.Fatalf("phase %d: %v", l.phase, l.d.broken)
		}
	}
	l.done += n
}

// endPhase checks the phase, every operation having returned: liveness on
// the settled state, then safety on the history up to now.
func (l *lifecycle) endPhase(ctx context.Context) {
	l.d.liftLag("the phase", 0) // the settling is not lagged
	q, waited, err := awaitQuiescent(ctx, l.c, l.namespaces, l.rec, l.rpt.seen)
	if err != nil {
		l.t.Fatalf("phase %d: listing: %v", l.phase, err)
	}
	l.settle = append(l.settle, waited)
	l.lchecks += q.checks
	l.rpt.add(l.phase, q.findings...)
	maps.Copy(l.rpt.grandfathered, q.grandfathered)

	evs, hf, err := l.rec.sync(ctx, l.fence, l.rep)
	if err != nil {
		l.t.Fatalf("phase %d: bringing the history up to date: %v", l.phase, err)
	}
	if *outFlag != "" {
		l.events = append(l.events, evs...)
	}
	l.rpt.add(l.phase, hf...)
	l.rpt.add(l.phase, l.rep.findings...)
	l.rep.findings = nil
	records := l.d.records()
	l.rpt.add(l.phase, checkSubnetDeleteRefusals(records[l.logged:])...)
	l.rpt.add(l.phase, l.adm.check(records, l.logged, l.rep)...)
	l.logged = len(records)
	l.rpt.add(l.phase, l.d.takeFindings()...)
	l.t.Logf("phase %d: %d operations so far; settled in %s; %d events replayed; %d violations so far",
		l.phase, l.done, waited.Round(time.Millisecond), l.rep.events, len(l.rpt.all))
}

// watchClient is a client for the cluster admin that can watch, without a
// client-side rate limit and without printing the API's warnings (a Subnet
// created before its pool gets one, by design). It knows Cluster API's
// IPAM types (Go types: `kubectl get ipaddresses` would name the built-in
// networking.k8s.io kind).
func watchClient() (client.WithWatch, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, ipamv1.AddToScheme, capiipam.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = -1, -1
	cfg.WarningHandler = rest.NoWarnings{}
	return client.NewWithWatch(cfg, client.Options{Scheme: scheme})
}

// awaitQuiescent polls the liveness checks on fresh listings until they
// pass or -lifecycle.settle passes, and returns the last report and how
// long it waited. When only violations reported in an earlier phase remain
// and nothing has changed for a while, it stops early: waiting longer for
// what was already reported only slows a run down.
func awaitQuiescent(ctx context.Context, c client.Client, namespaces []string, rec *recorder, reported map[string]bool) (quiescentReport, time.Duration, error) {
	const stillFor = 2 * time.Second
	start := time.Now()
	for {
		objs, labels, err := listAll(ctx, c, namespaces)
		if err != nil {
			return quiescentReport{}, 0, err
		}
		r := checkQuiescent(objs, labels)
		r.checkOneHolderPerRange(objs) // O1: ops_restore_test.go
		r.checkGateways(objs)          // G1, G2: gateway_checks.go
		hub, err := listHub(ctx, c)
		if err != nil {
			return quiescentReport{}, 0, err
		}
		lastDelegation = r.checkDelegations(objs, hub, namespaces) // D1-D5: delegation_checks.go
		known := true
		for _, f := range r.findings {
			known = known && reported[f.Key]
		}
		if len(r.findings) == 0 || time.Since(start) > *settleFor || (known && rec.quiet() > stillFor) {
			return r, time.Since(start), nil
		}
		sleep(ctx, 250*time.Millisecond)
	}
}

// listAll lists the namespaces' Subnets, pools, IPAddressClaims and
// IPAddresses, and reads their labels.
func listAll(ctx context.Context, c client.Client, namespaces []string) ([]obj, map[string]map[string]string, error) {
	var out []obj
	labels := map[string]map[string]string{}
	for _, ns := range namespaces {
		var n corev1.Namespace
		if err := retryTransient(ctx, func(ctx context.Context) error { return c.Get(ctx, client.ObjectKey{Name: ns}, &n) }); err != nil {
			return nil, nil, err
		}
		labels[ns] = n.Labels
		var pools ipamv1.SubnetPoolList
		if err := retryTransient(ctx, func(ctx context.Context) error { return c.List(ctx, &pools, client.InNamespace(ns)) }); err != nil {
			return nil, nil, err
		}
		var subnets ipamv1.SubnetList
		if err := retryTransient(ctx, func(ctx context.Context) error { return c.List(ctx, &subnets, client.InNamespace(ns)) }); err != nil {
			return nil, nil, err
		}
		for i := range pools.Items {
			out = append(out, fromPool(&pools.Items[i]))
		}
		for i := range subnets.Items {
			out = append(out, fromSubnet(&subnets.Items[i]))
		}
		var claims capiipam.IPAddressClaimList
		if err := retryTransient(ctx, func(ctx context.Context) error { return c.List(ctx, &claims, client.InNamespace(ns)) }); err != nil {
			return nil, nil, err
		}
		var addrs capiipam.IPAddressList
		if err := retryTransient(ctx, func(ctx context.Context) error { return c.List(ctx, &addrs, client.InNamespace(ns)) }); err != nil {
			return nil, nil, err
		}
		for i := range claims.Items {
			out = append(out, fromClaim(&claims.Items[i]))
		}
		for i := range addrs.Items {
			out = append(out, fromAddress(&addrs.Items[i]))
		}
	}
	return out, labels, nil
}

// report collects violations, each once, and fails the test for each (the
// first maxPrinted in full).
type report struct {
	t             *testing.T
	seed          uint64
	seen          map[string]bool
	all           []finding
	grandfathered map[types.UID]string
}

const maxPrinted = 50

func (r *report) add(phase int, fs ...finding) {
	for _, f := range fs {
		if r.seen[f.Key] {
			continue
		}
		r.seen[f.Key] = true
		r.all = append(r.all, f)
		if len(r.all) <= maxPrinted {
			r.t.Errorf("phase %d: %s", phase, f)
		}
	}
}

func (r *report) finish() {
	if n := len(r.all) - maxPrinted; n > 0 {
		r.t.Errorf("%d more violations not printed", n)
	}
	if len(r.all) > 0 {
		r.t.Errorf("%d violations; replay with -lifecycle.seed=%d -lifecycle.ops=%d", len(r.all), r.seed, *opsFlag)
	}
}

// summary describes a run: what was done, what was checked, what was
// found.
func summary(seed uint64, records []*opRecord, l *lifecycle, wall time.Duration) string {
	rep, adm, d, rpt := l.rep, l.adm, l.d, l.rpt
	var b strings.Builder
	fmt.Fprintf(&b, "summary of seed %d:\n", seed)
	byOp := map[string]map[string]int{}
	requests := 0
	for _, o := range records {
		if byOp[o.Op] == nil {
			byOp[o.Op] = map[string]int{}
		}
		byOp[o.Op][outcomeLabel(o)]++
		if o.Kind != "" {
			requests++
		}
	}
	fmt.Fprintf(&b, "  requests: %d in %d phases (%.1f requests/s over %s wall)\n", requests, l.phase, float64(requests)/wall.Seconds(), wall.Round(time.Second))
	for _, op := range slices.Sorted(maps.Keys(byOp)) {
		var parts []string
		n := 0
		for _, o := range slices.Sorted(maps.Keys(byOp[op])) {
			parts = append(parts, fmt.Sprintf("%s %d", o, byOp[op][o]))
			n += byOp[op][o]
		}
		fmt.Fprintf(&b, "    %-24s %4d: %s\n", op, n, strings.Join(parts, ", "))
	}
	fmt.Fprintf(&b, "  restores: %s\n", restoreSummary(records, rep))
	fmt.Fprintf(&b, "  faults: %d hand-overs, %d SIGKILL restarts, %d replicas exited on their own %v\n", d.handOvers, d.restarts, len(d.unexpected), d.unexpected)
	var slowest time.Duration
	for _, s := range l.settle {
		slowest = max(slowest, s)
	}
	fmt.Fprintf(&b, "  settling: slowest phase end %s\n", slowest.Round(time.Millisecond))
	fmt.Fprintf(&b, "  history: %d events replayed; objects that showed each Ready reason: %s\n", rep.events, reasonsSeen(rep))
	var skipped []string
	skippedN := 0
	for _, why := range slices.Sorted(maps.Keys(adm.skipped)) {
		skipped = append(skipped, fmt.Sprintf("%d %s", adm.skipped[why], why))
		skippedN += adm.skipped[why]
	}
	fmt.Fprintf(&b, "  checks: S1 %d (%d skipped in watch gaps), S2 %d, S3 %d, S5 %d (%d grants across namespaces), Q1 %d grants under per-namespace caps, S6 %d root pool grants, S4 %d explicit creates judged (%d pairs skipped: a deletion and the claim may both have been undelivered), %d not judged (%s), L1-L7 %d objects checked at quiescence\n",
		rep.s1Checks, rep.s1Skipped, rep.s2Checks, rep.s3Checks, rep.s5Checks, rep.s5Across, rep.q1Checks, rep.s6Checks, adm.checked, adm.pairsSkipped, skippedN, strings.Join(skipped, "; "), l.lchecks)
	fmt.Fprintf(&b, "  addresses: %s\n", addressSummary(records, rep))
	fmt.Fprintf(&b, "  delegation: %s; D6 %d delegated pools' ranges judged against the hub's grants before them\n", lastDelegation, rep.d6Checks)
	fmt.Fprintf(&b, "  edges: %d lag windows; %s\n", d.lagWindows, edgeSummary(records, rep))
	fmt.Fprintf(&b, "  grandfathered claims seen (held outside their pool's range or on its reserved ranges): %d\n", len(rpt.grandfathered))
	for _, uid := range slices.Sorted(maps.Keys(rpt.grandfathered)) {
		fmt.Fprintf(&b, "    %s\n", rpt.grandfathered[uid])
	}
	byCheck := map[string]int{}
	for _, f := range rpt.all {
		byCheck[f.Check]++
	}
	fmt.Fprintf(&b, "  violations: %d %v", len(rpt.all), byCheck)
	return b.String()
}

// reasonsSeen counts, per kind and Ready reason, the objects that showed
// it at some point: what the run exercised.
func reasonsSeen(rep *replayer) string {
	seen := map[string]map[types.UID]bool{}
	for uid, tl := range rep.timelines {
		for _, v := range tl.versions {
			if r := v.readyReason(); r != "" {
				k := v.Kind + "/" + r
				if seen[k] == nil {
					seen[k] = map[types.UID]bool{}
				}
				seen[k][uid] = true
			}
		}
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(seen)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, len(seen[k])))
	}
	return strings.Join(parts, ", ")
}

// addressSummary says what the Cluster API part of a run did and checked.
func addressSummary(records []*opRecord, rep *replayer) string {
	created, foreign, deleted := 0, 0, 0
	for _, o := range records {
		switch {
		case o.Kind != kindClaim:
		case o.Verb == "create" && o.Outcome == outcomeCreated:
			created++
			if o.Ref == "" {
				foreign++
			}
		case o.Verb == "delete" && o.Outcome == outcomeDeleted:
			deleted++
		}
	}
	a := rep.addr
	return fmt.Sprintf("%d IPAddressClaims created (%d of another kind of pool), %d deleted; %d bound (A6); %d IPAddresses created (A1, A2, A5), %d of them an address handed out again after a release (A3), %d released (A6), %d went (A3; at most %s after their deletion); %d Subnet deletions with IPAddresses (A4)",
		created, foreign, deleted, a.bound, a.created, a.reused, a.released, a.went, a.cooledMax.Round(time.Millisecond), a.subnetsGone)
}

// outcomeLabel is an operation's outcome for the summary, with the rule a
// rejection names.
// restoreSummary says what the re-creates from an export became: those
// that asked for their recorded range again, by whether they got it (S3
// holds that a Ready explicit claim holds exactly its spec.cidr) or still
// wait (another claim took the range meanwhile), and those exported before
// their range was recorded (a new dynamic claim).
func restoreSummary(records []*opRecord, rep *replayer) string {
	var back, waiting, unrecorded int
	for _, o := range records {
		if o.Op != opRestoreSubnet || o.Verb != "create" || o.Outcome != outcomeCreated {
			continue
		}
		if o.CIDR == "" {
			unrecorded++
			continue
		}
		if tl := rep.timelines[o.UID]; tl != nil && tl.readyAt != 0 {
			back++
		} else {
			waiting++
		}
	}
	return fmt.Sprintf("%d asked for their recorded range again: %d hold it, %d wait (taken meanwhile); %d were exported before their range was recorded",
		back+waiting, back, waiting, unrecorded)
}

func outcomeLabel(o *opRecord) string {
	switch o.Outcome {
	case outcomeRejected:
		return "rejected(" + o.Reason + ":" + rejectionRule(o.Message) + ")"
	case outcomeFailed:
		return "failed(" + o.Reason + ")"
	}
	if o.Ambiguous {
		return string(o.Outcome) + "(after a retry)"
	}
	return string(o.Outcome)
}

func rejectionRule(msg string) string {
	for _, r := range []struct{ substr, rule string }{
		{"already exists", "exists"},
		{"in use by Cluster API machines", "addresses-in-use"},
		{"is in use by", "in-use"},
		{"being deleted", "terminating"},
		{"would leave claims outside", "shrink-below-claims"},
		{"covers ranges already claimed", "reserve-over-claims"},
		{"makes a cycle", "cycle"},
		{"does not exist", "parent-missing"},
		{"overlaps reserved", "on-reserved"},
		{"overlaps", "overlap"},
		{"lies outside", "outside"},
		{"prefix length", "length"},
		{"PrefixLength", "length"},
		{"must lie inside", "reserved-outside"},
	} {
		if strings.Contains(msg, r.substr) {
			return r.rule
		}
	}
	return "other"
}

// dump writes the operation log and the replayed history as JSON lines.
func dump(dir string, records []*opRecord, events []event) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	write := func(name string, n int, item func(int) any) error {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		enc := json.NewEncoder(f)
		for i := range n {
			if err := enc.Encode(item(i)); err != nil {
				_ = f.Close()
				return err
			}
		}
		return f.Close()
	}
	if err := write("operations.jsonl", len(records), func(i int) any { return records[i] }); err != nil {
		return err
	}
	return write("history.jsonl", len(events), func(i int) any { return events[i] })
}
