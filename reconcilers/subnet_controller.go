// Package reconcilers holds the controllers: SubnetReconciler allocates and
// arbitrates claims, PoolStatusReconciler keeps pool status, finalizers and
// child-pool grants. Both run on the leader and take their events from the
// ledger (see sources.go), which also makes their decisions (ledger package).
package reconcilers

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ipspace"
	"github.com/subnet-operator/subnet-operator/ledger"
	"github.com/subnet-operator/subnet-operator/statuscalc"
	"github.com/subnet-operator/subnet-operator/webhooks"
)

// +kubebuilder:rbac:groups=ipam.subnet-operator.io,resources=subnets,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=ipam.subnet-operator.io,resources=subnets/status,verbs=patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Options are the knobs both controllers share.
type Options struct {
	// Workers is the number of concurrent reconciles.
	Workers int
	// Timeout bounds one reconcile (the seed design's 90 s guard).
	Timeout time.Duration
}

// writeTimeout bounds one write of a decision. A write runs to its end even
// when the controller is stopping (a graceful hand-over), so that the lease,
// released only after every worker has returned, is never handed over with
// one of our grants still on its way to the API server; the manager's
// graceful shutdown period must exceed it.
const writeTimeout = 10 * time.Second

// writeContext is the context of a decision's write: not cancelled with the
// reconcile's, bounded by writeTimeout.
func writeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
}

// rateLimiter is the seed design's (§11): per-item exponential back-off
// from 50 ms to 30 s on consecutive failures, forgotten on success, under an
// overall token bucket of 10 per second with a burst of 100. It applies to
// retries only; events enqueue at once and the queue coalesces duplicates.
func rateLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](50*time.Millisecond, 30*time.Second),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// SubnetReconciler writes the arbiter's decision for each Subnet into its
// status: Ready with the allocated or confirmed range, or not Ready and why
// (PoolNotFound, PoolNotReady, Overlaps naming the winner, PoolExhausted,
// OutOfRange). The decision itself is the ledger's (DecideSubnet), made under
// the ledger's decision lock; many workers can therefore write statuses in
// parallel while decisions stay serial.
type SubnetReconciler struct {
	Client client.Client
	// APIReader reads around the cache: a new leader catches up with it
	// before its first decision.
	APIReader client.Reader
	Ledger    *ledger.Ledger
	Recorder  recorder.EventRecorder
	Options

	written lastWrites[*ipamv1.Subnet]
	// queue is the controller's work queue, once started.
	queue atomic.Pointer[workqueue.TypedRateLimitingInterface[reconcile.Request]]
	// allocatedEvents paces the Normal Allocated event (see
	// allocatedEventRate); warnings are never skipped.
	allocatedEvents *rate.Limiter
	// waits are the Subnets waiting for a pool that does not exist, for
	// the subnet_operator_subnets_pool_not_found gauge.
	waits poolWaits
	// hints name the pool a PoolNotFound Subnet likely meant (shared with
	// the admission warning).
	hints *webhooks.PoolHints
}

// The Allocated event is recorded for at most allocatedEventRate Subnets per
// second, after a burst of allocatedEventBurst: a person creating Subnets
// sees one for each, a bulk create of 100k does not make 100k Events (each
// an object in etcd, and kept ~6 minutes in the manager's event cache for
// series detection: ~25 MiB at 100/s). The status and the allocation
// metrics record every allocation; skipped events are counted.
const (
	allocatedEventRate  = 5
	allocatedEventBurst = 100
)

// Queued is the number of Subnets waiting for a reconcile (grants, status
// updates): the AllocationRecorder yields while there are any.
func (r *SubnetReconciler) Queued() int {
	if q := r.queue.Load(); q != nil {
		return (*q).Len()
	}
	return 0
}

// SetupWithManager registers the controller.
func (r *SubnetReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil || r.APIReader == nil || r.Ledger == nil || r.Recorder == nil {
		return errors.New("SubnetReconciler needs a client, an API reader, a ledger and an event recorder")
	}
	registerMetrics()
	registerWaitingCollector(&r.waits)
	r.hints = webhooks.PoolHintsFor(r.Ledger)
	r.allocatedEvents = rate.NewLimiter(allocatedEventRate, allocatedEventBurst)
	return ctrl.NewControllerManagedBy(mgr).
		Named("subnet").
		WithOptions(controller.Options{
			MaxConcurrentReconciles: r.Workers,
			RateLimiter:             rateLimiter(),
			ReconciliationTimeout:   r.Timeout,
		}).
		WatchesRawSource(&ledgerSource{ledger: r.Ledger, reader: r.APIReader, mapEvent: func(e ledger.Event) []reconcile.Request {
			if s, ok := e.Object.(*ipamv1.Subnet); ok {
				r.written.seen(s)
			}
			if e.Kind == statuscalc.KindSubnet && e.Type == ledger.Deleted {
				r.waits.forget(e.Namespace, e.Name)
			}
			return subnetEvents(e)
		}, initial: func() []reconcile.Request {
			subnets, _ := r.Ledger.Objects()
			out := make([]reconcile.Request, len(subnets))
			for i, s := range subnets {
				out[i] = request(s.Namespace, s.Name)
			}
			return out
		}, started: func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			r.queue.Store(&q)
		}}).
		Complete(r)
}

// Reconcile implements reconcile.Reconciler.
func (r *SubnetReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	// The ledger is the manager's store of Subnets (ledger.SubnetFeed).
	cached, ok := r.Ledger.Subnet(req.Namespace, req.Name)
	if !ok {
		// Gone, or not delivered yet: its event will requeue it.
		r.written.forget(req.NamespacedName)
		r.waits.forget(req.Namespace, req.Name)
		return reconcile.Result{}, nil
	}
	s := *cached
	if own, ok := r.written.newer(&s); ok {
		s = *own
	}
	if s.DeletionTimestamp != nil {
		return reconcile.Result{}, nil // being deleted: its range returns when it is gone
	}
	d, known := r.Ledger.DecideSubnet(s.Namespace, s.Name, s.UID)
	if !known {
		// Deleted and created again since the read above: the new
		// object's event requeues it.
		return reconcile.Result{}, nil
	}
	r.waits.set(s.Namespace, s.Name, d.Reason == ipamv1.ReasonPoolNotFound)
	if d.Reason == ipamv1.ReasonPoolNotFound && r.hints != nil {
		// A forgotten namespace or a typo waits for good: say which pool
		// was likely meant. (nil hints: a test without SetupWithManager.)
		ref := ipamv1.PoolReference{Namespace: s.Spec.PoolRef.In(s.Namespace), Name: s.Spec.PoolRef.Name}
		d.Message += r.hints.DidYouMean(ref, s.Namespace)
	}

	status := desiredSubnetStatus(&s, d)
	status.IPAddresses = addressUsage(r.Ledger, &s)
	if !equality.Semantic.DeepEqual(s.Status, status) {
		before := s.DeepCopy()
		if err := r.writeStatus(ctx, &s, status); err != nil {
			statusWrites.WithLabelValues(statuscalc.KindSubnet, "error").Inc()
			if d.Assumed && (apierrors.IsNotFound(err) || apierrors.IsInvalid(err)) {
				// The grant can never be written to the object it was made for
				// (it is gone, replaced, or the status is refused): release it.
				// Other errors (timeouts) keep it assumed, since the write may
				// have landed; the retry writes the same range again.
				r.Ledger.Forget(s.Namespace, ledger.SubnetKey(s.Name), s.UID, d.CIDR)
				return reconcile.Result{}, nil
			}
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		statusWrites.WithLabelValues(statuscalc.KindSubnet, "success").Inc()
		r.written.record(&s)
		r.recordTransition(ctx, before, &s, d)
	}
	return reconcile.Result{}, nil
}

// writeStatus replaces s's status, on the condition that the object at the
// API server is the one the decision was made for: a JSON patch whose first
// operation tests metadata.uid. A Subnet deleted and created again under the
// same name while the write was in flight fails the test (422 Invalid), so
// a range granted to the old object never lands on the new one (whose old
// range may have gone to another claim meanwhile). A merge patch cannot
// carry this precondition: the status subresource takes metadata from the
// stored object. No resourceVersion precondition: the leader is the only
// writer of Subnet status, and a metadata change by the user (labels) must
// not fail the write.
func (r *SubnetReconciler) writeStatus(ctx context.Context, s *ipamv1.Subnet, status ipamv1.SubnetStatus) error {
	patch, err := json.Marshal([]jsonPatchOp{
		{Op: "test", Path: "/metadata/uid", Value: s.UID},
		{Op: "add", Path: "/status", Value: status},
	})
	if err != nil {
		return err
	}
	ctx, cancel := writeContext(ctx)
	defer cancel()
	return r.Client.Status().Patch(ctx, s, client.RawPatch(types.JSONPatchType, patch))
}

// jsonPatchOp is one operation of an RFC 6902 JSON patch.
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// desiredSubnetStatus turns a decision into the Subnet's status. The range
// is shown only while Ready, and a Ready range never changes.
func desiredSubnetStatus(s *ipamv1.Subnet, d ledger.Decision) ipamv1.SubnetStatus {
	status := *s.Status.DeepCopy()
	status.ObservedGeneration = s.Generation
	ready := metav1.Condition{Type: ipamv1.ConditionReady, Status: metav1.ConditionFalse, Reason: d.Reason, Message: d.Message, ObservedGeneration: s.Generation}
	if d.Ready() {
		ready.Status = metav1.ConditionTrue
		status.CIDR = d.CIDR.String()
		status.Addresses = ipspace.AddressCount(d.CIDR).String()
		// The gateway Cluster API machines get with their addresses: the
		// ledger's address plan decides it, for both (an unparsable
		// spec.gateway, which validation refuses, means the default).
		gateway, _ := netip.ParseAddr(s.Spec.Gateway)
		status.Gateway = ledger.PlanAddresses(d.CIDR, gateway).Gateway.String()
	} else {
		status.CIDR, status.Addresses, status.Gateway = "", "", ""
	}
	meta.SetStatusCondition(&status.Conditions, ready)
	return status
}

// addressUsage is what the Subnet's status shows of the addresses Cluster
// API claims hold in it: nothing until it has held one.
func addressUsage(l *ledger.Ledger, s *ipamv1.Subnet) *ipamv1.IPAddressUsage {
	u, ok := l.AddressUsage(s.Namespace, s.Name, 0)
	if !ok {
		return nil
	}
	out := &ipamv1.IPAddressUsage{InUse: u.InUse, CoolingDown: u.CoolingDown, Free: "0"}
	if u.Free != nil && u.Free.Sign() > 0 {
		out.Free = u.Free.String()
	}
	return out
}

// recordTransition emits an event and metrics when the Ready reason changed.
func (r *SubnetReconciler) recordTransition(ctx context.Context, before, after *ipamv1.Subnet, d ledger.Decision) {
	was := meta.FindStatusCondition(before.Status.Conditions, ipamv1.ConditionReady)
	if was != nil && was.Reason == d.Reason {
		return
	}
	log := logf.FromContext(ctx)
	switch d.Reason {
	case ipamv1.ReasonAllocated:
		claim := "dynamic"
		if after.Spec.CIDR != "" {
			claim = "explicit"
		}
		if seen, ok := r.Ledger.Seen(after.Namespace, after.Name); ok {
			allocationDuration.WithLabelValues(claim).Observe(time.Since(seen).Seconds())
		}
		log.V(1).Info("Subnet allocated", "subnet", client.ObjectKeyFromObject(after), "cidr", d.CIDR)
		if r.allocatedEvents != nil && !r.allocatedEvents.Allow() { // nil: unpaced (tests)
			allocatedEventsSkipped.Inc()
			return
		}
		r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, ipamv1.ReasonAllocated, "Allocate", "Holds %s", d.CIDR)
	case ipamv1.ReasonOverlaps:
		arbitrationConflicts.Inc()
		log.Info("Subnet lost arbitration", "subnet", client.ObjectKeyFromObject(after), "winner", d.Winner.String())
		r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, d.Reason, "Arbitrate", "%s", d.Message)
	case ipamv1.ReasonPoolExhausted, ipamv1.ReasonOutOfRange, ipamv1.ReasonInvalidSpec, ipamv1.ReasonNotAllowed, ipamv1.ReasonPoolNotFound:
		r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, d.Reason, "Allocate", "%s", d.Message)
	}
}
