// Package webhooks holds the defaulting and validating admission webhooks of
// Subnet and SubnetPool. They are the fast, friendly first line: malformed,
// out-of-range and overlapping claims are rejected with the field, the bad
// value and the object they collide with. The guarantee against overlap is
// the arbiter (package ledger, run by the reconcilers); the webhooks answer
// from the same ledger, on every replica.
package webhooks

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	"sigs.k8s.io/controller-runtime/pkg/webhook/conversion"

	ipamv1alpha1 "github.com/subnet-operator/subnet-operator/api/v1alpha1"
	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

// Options tune the webhooks. Both bounds must stay well below the webhook
// configurations' timeoutSeconds (10), so that a caller reads our answer,
// which says what happened and asks it to retry, rather than the API
// server's generic "context deadline exceeded".
type Options struct {
	// FreshnessTimeout bounds the freshness barrier: the consistent reads and
	// the wait for the ledger to catch up with them. A request that does not
	// catch up in time is refused with Retry-After. Default 2s.
	FreshnessTimeout time.Duration
	// SyncTimeout bounds how long a request waits for the ledger's initial
	// sync (a replica that just started) before it is refused with
	// Retry-After. Default 5s.
	SyncTimeout time.Duration
}

// Setup registers the defaulting and validating webhooks of both kinds with
// the manager's webhook server. reader must read from the API server, not a
// cache: it takes the watermarks of the freshness barrier.
func Setup(mgr ctrl.Manager, l *ledger.Ledger, reader client.Reader, opts Options) error {
	if l == nil || reader == nil {
		return fmt.Errorf("webhooks: a ledger and an API reader are required")
	}
	if opts.FreshnessTimeout == 0 {
		opts.FreshnessTimeout = 2 * time.Second
	}
	if opts.SyncTimeout == 0 {
		opts.SyncTimeout = 5 * time.Second
	}
	f := newFreshness(reader, l, opts.FreshnessTimeout, opts.SyncTimeout)
	// Each kind also serves its CRD's conversion (/convert): v1alpha2 is
	// the hub, v1alpha1 the spoke (api/v1alpha1/conversion.go). Every
	// replica serves it, leader or not: reading an object stored in
	// v1alpha1 needs it, the manager's own reads included.
	if err := ctrl.NewWebhookManagedBy(mgr, &ipamv1.Subnet{}).
		WithConverter(conversion.NewHubSpokeConverter(&ipamv1.Subnet{},
			conversion.NewSpokeConverter(&ipamv1alpha1.Subnet{}, ipamv1alpha1.ConvertSubnetFromHub, ipamv1alpha1.ConvertSubnetToHub))).
		WithDefaulter(&SubnetDefaulter{Ledger: l}).
		WithValidator(&SubnetValidator{Ledger: l, fresh: f}).
		Complete(); err != nil {
		return fmt.Errorf("subnet webhooks: %w", err)
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &ipamv1.SubnetPool{}).
		WithConverter(conversion.NewHubSpokeConverter(&ipamv1.SubnetPool{},
			conversion.NewSpokeConverter(&ipamv1alpha1.SubnetPool{}, ipamv1alpha1.ConvertSubnetPoolFromHub, ipamv1alpha1.ConvertSubnetPoolToHub))).
		WithDefaulter(&SubnetPoolDefaulter{Ledger: l, namespaces: f.namespaces}).
		WithValidator(&SubnetPoolValidator{Ledger: l, fresh: f}).
		Complete(); err != nil {
		return fmt.Errorf("subnetpool webhooks: %w", err)
	}
	return nil
}

// freshness is the admission barrier of design invariant 2: once a create
// has returned to its client, an overlapping create must be rejected even if
// this replica's informer has not delivered the first one yet. Before a
// decision that depends on other objects, it takes a watermark of each kind
// with a cheap consistent read (a LIST with limit=1 in the namespace) and
// waits, boundedly, until the ledger has caught up with it. Concurrent
// admissions share the reads (sharedReads).
type freshness struct {
	reader      client.Reader
	ledger      *ledger.Ledger
	timeout     time.Duration
	syncTimeout time.Duration
	reads       *sharedReads
	// namespaces reads the request's namespace when the ledger has not
	// seen it, within a budget (namespaceReads).
	namespaces *namespaceReads
}

func newFreshness(reader client.Reader, l *ledger.Ledger, timeout, syncTimeout time.Duration) *freshness {
	f := &freshness{reader: reader, ledger: l, timeout: timeout, syncTimeout: syncTimeout}
	f.reads = newSharedReads(f.watermark, timeout)
	f.namespaces = newNamespaceReads(reader)
	return f
}

// await makes the ledger at least as fresh as the API server was when it was
// called, for the given kinds in namespace. It never lets a request through
// on a view it could not bring up to date: invariant 2 promises that a
// create acknowledged to its client is seen by every later admission, and
// deciding on a stale view would break that promise exactly when the
// system is loaded. Instead the request is refused with 504 and Retry-After
// (client-go, and so kubectl, retries such a refusal by itself), and the
// refusal is counted. A failed read is an internal error.
func (f *freshness) await(ctx context.Context, namespace string, kinds ...string) error {
	syncCtx, cancel := context.WithTimeout(ctx, f.syncTimeout)
	defer cancel()
	if err := f.ledger.WaitForSync(syncCtx); err != nil {
		return apierrors.NewTimeoutError("the operator's view of SubnetPools and Subnets is still loading on this replica; retry shortly", 1)
	}
	ctx, cancel = context.WithTimeout(ctx, f.timeout)
	defer cancel()
	caughtUp, readErr := f.catchUp(ctx, namespace, kinds...)
	switch {
	case readErr != nil && ctx.Err() == nil:
		return apierrors.NewInternalError(fmt.Errorf("reading the current state from the API server: %w", readErr))
	case !caughtUp:
		for _, kind := range kinds {
			staleDecisions.WithLabelValues(kind).Inc()
		}
		logf.FromContext(ctx).Info("Refusing an admission: this replica's view did not catch up with the API server in time",
			"namespace", namespace, "timeout", f.timeout)
		return errNotCaughtUp(f.timeout)
	}
	return nil
}

// catchUpForHints is await for what only informs (a warning's hint): it
// refuses nothing and counts no stale decision. A view not caught up in
// time leaves the hint to what it knows.
func (f *freshness) catchUpForHints(ctx context.Context, kinds ...string) {
	if !f.ledger.Synced() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	_, _ = f.catchUp(ctx, "", kinds...)
}

// catchUp reads the API server's watermark of each kind in namespace (all,
// if empty) and waits until the ledger has caught up with them.
func (f *freshness) catchUp(ctx context.Context, namespace string, kinds ...string) (caughtUp bool, readErr error) {
	start := time.Now()
	marks := make([]ledger.Watermark, len(kinds))
	errs := make(chan error, len(kinds))
	for i, kind := range kinds {
		go func() { // the reads are independent: take them in parallel
			var err error
			marks[i], err = f.reads.watermark(ctx, namespace, kind)
			errs <- err
		}()
	}
	for range kinds {
		if err := <-errs; err != nil && readErr == nil {
			readErr = err
		}
	}
	caughtUp = readErr == nil && f.ledger.AwaitCaughtUp(ctx, f.timeout, marks...)
	for _, kind := range kinds {
		freshnessWait.WithLabelValues(kind).Observe(time.Since(start).Seconds())
	}
	return caughtUp, readErr
}

// awaitDomain makes the ledger fresh for a decision about the claims of
// the pools refs, made by a request from namespace: it catches up in
// namespace when every pool is there and only its namespace can claim from
// them, else across namespaces. Whether a pool is shared (ledger.SharedDomain)
// is read after the catch-up in namespace, which brings in the pool's
// current spec: decided before it, a pool created or opened to other
// namespaces a moment ago would be caught up with in one namespace only,
// and a claim acknowledged in another missed.
func (f *freshness) awaitDomain(ctx context.Context, namespace string, refs []ipamv1.PoolReference, kinds ...string) error {
	scope := namespace
	for _, r := range refs {
		if r.Namespace != namespace {
			scope = ""
		}
	}
	if err := f.await(ctx, scope, kinds...); err != nil || scope == "" {
		return err
	}
	for _, r := range refs {
		if f.ledger.SharedDomain(r.Namespace, r.Name) {
			return f.await(ctx, "", kinds...)
		}
	}
	return nil
}

// errNotCaughtUp is the refusal of a request whose view did not catch up.
func errNotCaughtUp(timeout time.Duration) error {
	return apierrors.NewTimeoutError(fmt.Sprintf(
		"this replica's view of SubnetPools and Subnets did not catch up with the API server within %s, so it cannot tell whether the request overlaps a claim made a moment ago; retry", timeout), 1)
}

// watermark reads the API server's current resourceVersion and count of
// kind in namespace, with one consistent LIST.
func (f *freshness) watermark(ctx context.Context, namespace, kind string) (ledger.Watermark, error) {
	var list client.ObjectList = &ipamv1.SubnetList{}
	if kind == statuscalc.KindSubnetPool {
		list = &ipamv1.SubnetPoolList{}
	}
	if err := f.reader.List(ctx, list, client.InNamespace(namespace), client.Limit(1)); err != nil {
		return ledger.Watermark{}, err
	}
	count := 0
	switch l := list.(type) {
	case *ipamv1.SubnetList:
		count = len(l.Items)
	case *ipamv1.SubnetPoolList:
		count = len(l.Items)
	}
	if remaining := list.GetRemainingItemCount(); remaining != nil {
		count += int(*remaining)
	}
	return ledger.Watermark{Kind: kind, Namespace: namespace, ResourceVersion: list.GetResourceVersion(), Count: count}, nil
}

// finish turns a verdict into the webhook's answer and counts it.
func finish(ctx context.Context, kind string, gk schema.GroupKind, name string, v verdict, warnings admission.Warnings) (admission.Warnings, error) {
	op := operation(ctx)
	if len(v.errs) == 0 {
		admissionDecisions.WithLabelValues(kind, op, "allowed", "").Inc()
		return warnings, nil
	}
	admissionDecisions.WithLabelValues(kind, op, "denied", v.reason()).Inc()
	return warnings, apierrors.NewInvalid(gk, name, v.errs)
}

// internalError counts and returns a failure that is not the user's: a view
// that did not catch up (reason not_caught_up), or anything else (internal).
func internalError(ctx context.Context, kind string, err error) (admission.Warnings, error) {
	reason := "internal"
	if apierrors.IsTimeout(err) {
		reason = reasonNotCaughtUp
	}
	admissionDecisions.WithLabelValues(kind, operation(ctx), "error", reason).Inc()
	return nil, err
}

// reasonNotCaughtUp labels refusals of the freshness barrier.
const reasonNotCaughtUp = "not_caught_up"

func operation(ctx context.Context) string {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return "unknown"
	}
	switch req.Operation {
	case admissionv1.Create, admissionv1.Update, admissionv1.Delete:
		return string(req.Operation)
	}
	return "other"
}

// objectName is the name a message should show; on create with
// generateName the name is not chosen yet.
func objectName(name, generateName string) string {
	if name != "" {
		return name
	}
	return generateName
}

var (
	admissionDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "subnet_operator_admission_decisions_total",
		Help: "Validating admission decisions, by kind, operation (CREATE, UPDATE, DELETE), result (allowed, denied, error) and the reason of a denial.",
	}, []string{"kind", "operation", "result", "reason"})
	freshnessWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "subnet_operator_admission_freshness_wait_seconds",
		Help:    "Time an admission decision waited to read the API server's watermark and for the ledger to catch up with it.",
		Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5},
	}, []string{"kind"})
	subnetAdmission = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "subnet_operator_subnet_admission_duration_seconds",
		Help: "Time the validating webhook took to decide a Subnet create, by claim: explicit (a cidr; waits for the freshness barrier) or dynamic (a prefix length).",
		// Fine buckets (x1.5, 0.5 ms to 3.3 s): benchmarks compare its
		// median with a bare consistent read's.
		Buckets: prometheus.ExponentialBuckets(0.0005, 1.5, 22),
	}, []string{"claim"})
	staleDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "subnet_operator_admission_stale_view_total",
		Help: "Admission requests refused (with Retry-After) because this replica's view did not catch up with the API server within the freshness timeout.",
	}, []string{"kind"})
)

func init() {
	metrics.Registry.MustRegister(admissionDecisions, freshnessWait, staleDecisions, subnetAdmission)
	// Export the series at zero before the first request: an error ratio
	// reads 0, not "no data", and a burst right after start shows in
	// rate() (a series that first appears with the burst's count has no
	// earlier sample to increase from).
	for _, kind := range []string{statuscalc.KindSubnet, statuscalc.KindSubnetPool} {
		freshnessWait.WithLabelValues(kind)
		for _, op := range []admissionv1.Operation{admissionv1.Create, admissionv1.Update, admissionv1.Delete} {
			admissionDecisions.WithLabelValues(kind, string(op), "error", "internal")
			admissionDecisions.WithLabelValues(kind, string(op), "error", reasonNotCaughtUp)
		}
		staleDecisions.WithLabelValues(kind)
	}
	for _, claim := range []string{"explicit", "dynamic"} {
		subnetAdmission.WithLabelValues(claim)
	}
}

// fieldPath helpers, shared by both kinds.
var (
	specPath     = field.NewPath("spec")
	metadataPath = field.NewPath("metadata")
)
