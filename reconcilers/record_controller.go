package reconcilers

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ipspace"
	"github.com/subnet-operator/subnet-operator/ledger"
)

// AllocationRecorder writes the range a dynamic Subnet holds into its
// spec.cidr: the durable record of the allocation. Status is not what a
// backup tool restores by default, nor what a GitOps tool re-applies; spec
// is (a Service's spec.clusterIP is the precedent). A Subnet re-created with
// both prefixLength and cidr asks for that range again, through the same
// winner order as any explicit claim.
//
// It is a controller of its own because a record costs two writes (the
// spec, then the Subnet's status for the new generation) and must not
// compete with grants: recording inline, in the reconcile that granted,
// tripled the writes per allocation and, under a burst of creates, queued
// grants behind records in the client's rate limiter (create -> Ready p50
// went from 35 ms to 7 s at 10k Subnets; docs/benchmarks.md). The recorder
// yields: it records only while no Subnet waits in the SubnetReconciler's
// queue, and at most Rate a second. A burst is granted first and recorded
// just after; an upgrade records existing Subnets at Rate.
type AllocationRecorder struct {
	Client client.Client
	// APIReader reads around the cache, for the catch-up before the first
	// record.
	APIReader client.Reader
	Ledger    *ledger.Ledger
	// Rate bounds records per second (each is followed by one status write
	// of the SubnetReconciler's).
	Rate float64
	// Workers is the number of concurrent reconciles.
	Workers int
	// Queued is the number of Subnets waiting for the SubnetReconciler
	// (SubnetReconciler.Queued); the recorder waits while it is not 0.
	Queued func() int

	limiter *rate.Limiter
}

// SetupWithManager registers the controller.
func (r *AllocationRecorder) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil || r.APIReader == nil || r.Ledger == nil || r.Queued == nil || r.Rate <= 0 {
		return errors.New("AllocationRecorder needs a client, an API reader, a ledger, the grants' queue and a positive rate")
	}
	registerMetrics()
	r.limiter = newRecordLimiter(r.Rate)
	return ctrl.NewControllerManagedBy(mgr).
		Named("subnet-record").
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.Workers), RateLimiter: rateLimiter()}).
		WatchesRawSource(&ledgerSource{ledger: r.Ledger, reader: r.APIReader, mapEvent: func(e ledger.Event) []reconcile.Request {
			if s, ok := e.Object.(*ipamv1.Subnet); ok && e.Type != ledger.Deleted && needsRecord(s) {
				return []reconcile.Request{request(e.Namespace, e.Name)}
			}
			return nil
		}, initial: func() []reconcile.Request {
			subnets, _ := r.Ledger.Objects()
			var out []reconcile.Request
			for _, o := range subnets {
				if s, ok := r.Ledger.Subnet(o.Namespace, o.Name); ok && needsRecord(s) {
					out = append(out, request(o.Namespace, o.Name))
				}
			}
			return out
		}, initialLow: true}).
		Complete(r)
}

// yieldCheck is how often a waiting record looks at the grants' queue again
// (a length read, no request).
const yieldCheck = 50 * time.Millisecond

// yield waits until no Subnet waits for a grant or a status write.
func (r *AllocationRecorder) yield(ctx context.Context) error {
	if r.Queued() == 0 {
		return nil
	}
	tick := time.NewTicker(yieldCheck)
	defer tick.Stop()
	for r.Queued() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// newRecordLimiter allows perSecond records a second, in bursts of up to a
// second's worth.
func newRecordLimiter(perSecond float64) *rate.Limiter {
	return rate.NewLimiter(rate.Limit(perSecond), max(1, int(perSecond)))
}

// needsRecord reports whether s holds a range that its spec does not name:
// a granted dynamic claim whose range is not in spec.cidr yet.
//
// That includes a Subnet that names neither a range nor a length: created
// before its pool (a GitOps sync in any order), admission had no default
// length to fill in and the controller applied the pool's. It is recorded
// with that length, prefixLength and cidr in one write, so that it reads
// as any recorded prefixLength claim: a replace with its manifest from Git
// (neither field) keeps both (the defaulting webhook copies them), and a
// restore asks for the same range.
func needsRecord(s *ipamv1.Subnet) bool {
	return s.Spec.CIDR == "" && s.Status.CIDR != "" && s.DeletionTimestamp == nil &&
		meta.IsStatusConditionTrue(s.Status.Conditions, ipamv1.ConditionReady)
}

// Reconcile records the range of the Subnet the ledger shows, if it needs
// one and the arbiter stands behind it (not Contested: a restored status
// over another claim's range is taken back, not made durable).
//
// The record is written after the status, never before: spec.cidr then only
// ever names a range the API already shows the Subnet holding, so a new
// leader reading it finds a claim on a range that was granted, not on one
// that an unwritten grant promised. The JSON patch tests the UID (not an
// object re-created under the name) and status.cidr (the range is still the
// one held), and the CRD's rules accept the new field only when it equals
// status.cidr, and a new prefixLength only beside it and of its length.
// The spec change bumps the generation; the SubnetReconciler brings the
// status up to it on the event.
func (r *AllocationRecorder) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	s, ok := r.Ledger.Subnet(req.Namespace, req.Name)
	if !ok || !needsRecord(s) || r.Ledger.Contested(req.Namespace, req.Name) {
		return reconcile.Result{}, nil
	}
	// Both waits end early only when the controller stops (leadership
	// handed over, shutdown): not an error, and whatever is left the next
	// leader finds unrecorded and queues.
	if r.yield(ctx) != nil || r.limiter.Wait(ctx) != nil {
		return reconcile.Result{}, nil
	}
	// The wait may have been long: record what the ledger shows now.
	if s, ok = r.Ledger.Subnet(req.Namespace, req.Name); !ok || !needsRecord(s) || r.Ledger.Contested(req.Namespace, req.Name) {
		return reconcile.Result{}, nil
	}
	ops := []jsonPatchOp{
		{Op: "test", Path: "/metadata/uid", Value: s.UID},
		{Op: "test", Path: "/status/cidr", Value: s.Status.CIDR},
		{Op: "add", Path: "/spec/cidr", Value: s.Status.CIDR},
	}
	if s.Spec.PrefixLength == nil {
		// Named neither field: the length goes with the range, in the same
		// write (the CRD accepts prefixLength added only beside the
		// recorded cidr, and the two must agree).
		held, err := ipspace.ParsePrefix(s.Status.CIDR)
		if err != nil {
			// Not a range the controller wrote; nothing to record.
			return reconcile.Result{}, nil
		}
		ops = append(ops, jsonPatchOp{Op: "add", Path: "/spec/prefixLength", Value: held.Bits()})
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return reconcile.Result{}, err
	}
	wctx, cancel := writeContext(ctx)
	defer cancel()
	if err := r.Client.Patch(wctx, s, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		allocationRecords.WithLabelValues("error").Inc()
		if apierrors.IsNotFound(err) || apierrors.IsInvalid(err) {
			// Gone, re-created, or its status moved on since the ledger's
			// copy: the event of whatever changed requeues it if needed.
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	allocationRecords.WithLabelValues("success").Inc()
	return reconcile.Result{}, nil
}
