package reconcilers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go4.org/netipx"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ipspace"
	"github.com/subnet-operator/subnet-operator/ledger"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

// Violation types the auditor counts.
const (
	// ViolationOverlap: two Ready claims of a pool overlap.
	ViolationOverlap = "overlap"
	// ViolationOutside: a Ready claim lies outside its pool, on one of its
	// reserved ranges, or its pool does not exist.
	ViolationOutside = "outside"
	// ViolationRootOverlap: two root pools of an address space that both
	// serve overlap, and say so (AddressSpaceOverlap=True): granted before
	// the arbiter kept root pools apart, known, not a bug; two that do not
	// say so are an overlap.
	ViolationRootOverlap = "root_overlap"
)

// Auditor checks, periodically and on the leader, the invariant the arbiter
// maintains: no two Ready claims of a pool overlap, and every Ready claim
// lies inside its pool and off its reserved ranges. It reads what the API
// shows (pools from the cache; Subnets' statuses as the ledger stores them,
// never the arbiter's facts or decisions) and checks them with code of its
// own, so a bug in the arbiter cannot hide from it. It is the one deliberate periodic
// pass in the operator: it looks for what no event would announce.
type Auditor struct {
	Client   client.Client
	Ledger   *ledger.Ledger
	Recorder recorder.EventRecorder
	Interval time.Duration
}

// SetupWithManager adds the auditor to the manager as a leader-only runnable.
func (a *Auditor) SetupWithManager(mgr ctrl.Manager) error {
	if a.Client == nil || a.Ledger == nil || a.Recorder == nil || a.Interval <= 0 {
		return errors.New("the auditor needs a client, a ledger, an event recorder and a positive interval")
	}
	auditMetricsOnce()
	return mgr.Add(a)
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: the auditor
// runs where the arbiter runs.
func (a *Auditor) NeedLeaderElection() bool { return true }

// Start runs a pass now and then every Interval until ctx ends.
func (a *Auditor) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("auditor")
	ticker := time.NewTicker(a.Interval)
	defer ticker.Stop()
	for {
		if err := a.Audit(ctx); err != nil && ctx.Err() == nil {
			log.Error(err, "Audit pass failed")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// Finding is one violation of the invariant.
type Finding struct {
	Type    string
	Object  client.Object
	Message string
}

// Audit runs one pass: it sets the violation gauges and records an event on
// each offending object. Subnets come from the ledger's store, where the
// Subnet feed keeps each one's status as the API shows it (not the
// arbiter's decisions), as facts copied out under the ledger's read lock;
// pools from the cache. The cache's own copies are
// listed: a deep copy of every pool per pass would be garbage for nothing.
func (a *Auditor) Audit(ctx context.Context) error {
	var pools ipamv1.SubnetPoolList
	if err := a.Client.List(ctx, &pools, client.UnsafeDisableDeepCopy); err != nil {
		auditRuns.WithLabelValues("error").Inc()
		return err
	}
	findings := Check(a.Ledger.ReadySubnets(), pools.Items)
	counts := map[string]int{ViolationOverlap: 0, ViolationOutside: 0, ViolationRootOverlap: 0}
	for _, f := range findings {
		counts[f.Type]++
		a.Recorder.Eventf(f.Object, nil, corev1.EventTypeWarning, "AuditViolation", "Audit", "%s", f.Message)
	}
	for typ, n := range counts {
		auditViolations.WithLabelValues(typ).Set(float64(n))
	}
	auditRuns.WithLabelValues("success").Inc()
	if len(findings) > 0 {
		logf.FromContext(ctx).Info("Audit found violations of the allocation invariant", "overlap", counts[ViolationOverlap], "outside", counts[ViolationOutside],
			"rootOverlap", counts[ViolationRootOverlap])
	}
	return nil
}

// held is a Ready claim's range and whose it is. Only names are kept, so a
// pass over 100k Subnets holds no object of theirs. The claim's namespace
// may differ from its pool's (a tenant's claim on a platform pool).
type held struct {
	prefix    netip.Prefix
	kind      string
	namespace string
	name      string
	uid       types.UID
}

// object returns a reference to the claim's object, for its event.
func (h held) object() client.Object {
	meta := metav1.ObjectMeta{Namespace: h.namespace, Name: h.name, UID: h.uid}
	if h.kind == statuscalc.KindSubnetPool {
		return &ipamv1.SubnetPool{ObjectMeta: meta}
	}
	return &ipamv1.Subnet{ObjectMeta: meta}
}

// Check finds the violations among Ready Subnets (as the ledger's
// ReadySubnets yields them) and granted child pools, per pool, against the
// pool's range and each other. subnets is read once.
func Check(subnets iter.Seq[ledger.ReadySubnet], pools []ipamv1.SubnetPool) []Finding {
	type poolKey struct{ ns, name string }
	byPool := map[poolKey][]held{}
	poolsByKey := map[poolKey]*ipamv1.SubnetPool{}
	for i := range pools {
		p := &pools[i]
		poolsByKey[poolKey{p.Namespace, p.Name}] = p
		if p.Spec.ParentRef != nil && p.Status.CIDR != "" {
			if r, err := ipspace.ParsePrefix(p.Status.CIDR); err == nil {
				k := poolKey{p.Spec.ParentRef.In(p.Namespace), p.Spec.ParentRef.Name}
				byPool[k] = append(byPool[k], held{r, statuscalc.KindSubnetPool, p.Namespace, p.Name, p.UID})
			}
		}
	}
	for s := range subnets {
		k := poolKey{s.Pool.Namespace, s.Pool.Name}
		byPool[k] = append(byPool[k], held{s.CIDR, statuscalc.KindSubnet, s.Namespace, s.Name, s.UID})
	}

	var findings []Finding
	for k, claims := range byPool {
		pool := poolsByKey[k]
		var rules *ipspace.Rules
		// A pool edit that raced a grant leaves the claim its range, and the
		// pool says so (Ready reason ClaimsOutside): known, not a violation.
		// Overlaps are violations whatever the pool says.
		if pool != nil && !claimsOutsideReported(pool) {
			serving := pool.Status.CIDR
			if serving == "" {
				serving = pool.Spec.CIDR
			}
			if r, err := ipspace.ParsePrefix(serving); err == nil {
				rules = &ipspace.Rules{Name: fmt.Sprintf("SubnetPool %s/%s", k.ns, k.name), Pool: r,
					Reserved: statuscalc.ParseReserved(pool.Spec.Reserved), MinLength: -1, MaxLength: -1}
			}
		}
		for _, c := range claims {
			if pool != nil && rules == nil {
				continue // ClaimsOutside reported, or an unparseable range the pool reports
			}
			if rules == nil {
				findings = append(findings, Finding{ViolationOutside, c.object(),
					fmt.Sprintf("%s %s/%s holds %s but its pool %s/%s does not exist", c.kind, c.namespace, c.name, c.prefix, k.ns, k.name)})
			} else if v := rules.CheckRange(c.prefix, false); v != nil {
				findings = append(findings, Finding{ViolationOutside, c.object(),
					fmt.Sprintf("%s %s/%s holds %s, which %s", c.kind, c.namespace, c.name, c.prefix, v.Detail)})
			}
		}
		// Sorted by address, a range overlaps an earlier one exactly when it
		// starts at or before the furthest end seen so far; CIDR ranges nest
		// or are disjoint, so the range with that end contains its start.
		slices.SortFunc(claims, func(a, b held) int { return a.prefix.Addr().Compare(b.prefix.Addr()) })
		var furthest *held
		for i := range claims {
			c := &claims[i]
			if furthest != nil && furthest.prefix.Addr().BitLen() == c.prefix.Addr().BitLen() &&
				!netipx.PrefixLastIP(furthest.prefix).Less(c.prefix.Addr()) {
				findings = append(findings, Finding{ViolationOverlap, c.object(),
					fmt.Sprintf("%s %s/%s holds %s, which overlaps %s %s/%s (%s), also Ready",
						c.kind, c.namespace, c.name, c.prefix, furthest.kind, furthest.namespace, furthest.name, furthest.prefix)})
			}
			if furthest == nil || furthest.prefix.Addr().BitLen() != c.prefix.Addr().BitLen() ||
				netipx.PrefixLastIP(furthest.prefix).Less(netipx.PrefixLastIP(c.prefix)) {
				furthest = c
			}
		}
	}
	findings = append(findings, checkRootPools(pools)...)
	slices.SortStableFunc(findings, func(a, b Finding) int {
		if c := cmp.Compare(a.Object.GetNamespace(), b.Object.GetNamespace()); c != 0 {
			return c
		}
		return cmp.Compare(a.Object.GetName(), b.Object.GetName())
	})
	return findings
}

// checkRootPools finds root pools of one address space whose served
// ranges (status.cidr) overlap. A pair where either reports it
// (AddressSpaceOverlap=True) is known; any other is a violation.
func checkRootPools(pools []ipamv1.SubnetPool) []Finding {
	bySpace := map[string][]*ipamv1.SubnetPool{}
	for i := range pools {
		p := &pools[i]
		if p.Spec.ParentRef != nil || p.Status.CIDR == "" {
			continue
		}
		space := p.Spec.AddressSpace
		if space == "" {
			space = ipamv1.DefaultAddressSpace
		}
		bySpace[space] = append(bySpace[space], p)
	}
	var findings []Finding
	for space, roots := range bySpace {
		type root struct {
			prefix netip.Prefix
			pool   *ipamv1.SubnetPool
		}
		var rs []root
		for _, p := range roots {
			if r, err := ipspace.ParsePrefix(p.Status.CIDR); err == nil {
				rs = append(rs, root{r, p})
			}
		}
		// Root pools are few: every pair.
		for i := range rs {
			for j := range i {
				a, b := rs[i], rs[j]
				if !a.prefix.Overlaps(b.prefix) {
					continue
				}
				typ := ViolationOverlap
				if meta.IsStatusConditionTrue(a.pool.Status.Conditions, ipamv1.ConditionAddressSpaceOverlap) ||
					meta.IsStatusConditionTrue(b.pool.Status.Conditions, ipamv1.ConditionAddressSpaceOverlap) {
					typ = ViolationRootOverlap
				}
				findings = append(findings, Finding{typ, &ipamv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Namespace: a.pool.Namespace, Name: a.pool.Name, UID: a.pool.UID}},
					fmt.Sprintf("root SubnetPool %s/%s serves %s, which overlaps root SubnetPool %s/%s (%s) of address space %s",
						a.pool.Namespace, a.pool.Name, a.prefix, b.pool.Namespace, b.pool.Name, b.prefix, space)})
			}
		}
	}
	return findings
}

// claimsOutsideReported reports whether the pool's Ready condition says that
// claims granted before its last change lie outside its rules.
func claimsOutsideReported(p *ipamv1.SubnetPool) bool {
	c := meta.FindStatusCondition(p.Status.Conditions, ipamv1.ConditionReady)
	return c != nil && c.Reason == ipamv1.ReasonClaimsOutside
}

var (
	auditViolations = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "subnet_operator_audit_violations",
		Help: "Violations of the allocation invariant found by the last audit pass, by type (overlap: two Ready claims of a pool overlap; outside: a Ready claim outside its pool or on a reserved range).",
	}, []string{"type"})
	auditRuns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "subnet_operator_audit_runs_total",
		Help: "Audit passes, by result (success, error).",
	}, []string{"result"})
)

var registerAuditOnce sync.Once

func auditMetricsOnce() {
	registerAuditOnce.Do(func() {
		metrics.Registry.MustRegister(auditViolations, auditRuns)
		// At zero from the start, so increase() counts the first pass.
		auditRuns.WithLabelValues("success")
		auditRuns.WithLabelValues("error")
	})
}
