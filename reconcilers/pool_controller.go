package reconcilers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

// The manager patches a pool only to add or remove its finalizer (RBAC
// cannot narrow a verb to metadata), and its status.
// +kubebuilder:rbac:groups=ipam.subnet-operator.io,resources=subnetpools,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=ipam.subnet-operator.io,resources=addressspaces,verbs=list;watch
// +kubebuilder:rbac:groups=ipam.subnet-operator.io,resources=subnetpools/status,verbs=patch

// PoolStatusReconciler owns everything a pool shows: the finalizer that
// keeps a pool in use, the range it serves (for a child pool, the parent's
// grant, decided by the ledger), and its figures and conditions, computed
// by statuscalc from the ledger's maintained free-space map. It writes
// status once per reconcile and only when it changed.
type PoolStatusReconciler struct {
	Client client.Client
	// APIReader reads around the cache on a write conflict of a finalizer
	// and lists a pool's Subnets when it is deleted.
	APIReader client.Reader
	Ledger    *ledger.Ledger
	Recorder  recorder.EventRecorder
	Options
	// AlertsLabel is the SubnetPool label that, set to "off", opts a pool
	// out of the per-pool alerts (see subnet_operator_pool_info).
	AlertsLabel string

	written lastWrites[*ipamv1.SubnetPool]
}

// SetupWithManager registers the controller.
func (r *PoolStatusReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil || r.APIReader == nil || r.Ledger == nil || r.Recorder == nil {
		return errors.New("PoolStatusReconciler needs a client, an API reader, a ledger and an event recorder")
	}
	registerMetrics()
	registerPoolCollector(r.Ledger, r.AlertsLabel)
	return ctrl.NewControllerManagedBy(mgr).
		Named("subnetpool").
		WithOptions(controller.Options{
			MaxConcurrentReconciles: r.Workers,
			RateLimiter:             rateLimiter(),
			ReconciliationTimeout:   r.Timeout,
		}).
		WatchesRawSource(&ledgerSource{ledger: r.Ledger, reader: r.APIReader, mapEvent: poolEvents, initial: func() []reconcile.Request {
			_, pools := r.Ledger.Objects()
			out := make([]reconcile.Request, len(pools))
			for i, p := range pools {
				out[i] = request(p.Namespace, p.Name)
			}
			return out
		}}).
		Complete(r)
}

// Reconcile implements reconcile.Reconciler.
func (r *PoolStatusReconciler) Reconcile(ctx context.Context, req reconcile.Request) (_ reconcile.Result, err error) {
	start := time.Now()
	parentReconcileInflight.Inc()
	defer func() {
		parentReconcileInflight.Dec()
		result := "success"
		if err != nil {
			result = "error"
		}
		parentReconcileDuration.WithLabelValues(result).Observe(time.Since(start).Seconds())
	}()

	var p ipamv1.SubnetPool
	if err := r.Client.Get(ctx, req.NamespacedName, &p); err != nil {
		if client.IgnoreNotFound(err) == nil {
			forgetPool(ledger.Object{Namespace: req.Namespace, Name: req.Name})
			r.written.forget(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	cachedVersion := p.ResourceVersion
	if own, ok := r.written.newer(&p); ok {
		p = *own
	}
	if done, err := r.reconcileFinalizer(ctx, &p); done || err != nil {
		return reconcile.Result{}, err
	}

	computeStart := time.Now()
	d, known := r.Ledger.DecidePool(p.Namespace, p.Name, p.UID)
	if !known {
		return reconcile.Result{}, nil // the ledger's event for it will requeue it
	}
	if d.PoolVersion != cachedVersion && d.PoolVersion != p.ResourceVersion {
		// The ledger is one of the informer's handlers, called after the
		// cache is updated: it has not applied the version read here. A
		// status from its older view would erase what that version shows
		// (a restored status's range, which the pool must keep); the
		// optimistic lock cannot tell, as the write is based on the newest
		// object.
		return reconcile.Result{RequeueAfter: newerVersionRetry}, nil
	}
	figures, _ := r.Ledger.PoolFigures(p.Namespace, p.Name)
	poolStatusCompute.Observe(time.Since(computeStart).Seconds())
	readiness := statuscalc.Readiness{Status: metav1.ConditionFalse, Reason: d.Reason, Message: d.Message, CIDR: d.CIDR,
		Root: p.Spec.ParentRef == nil, RootOverlaps: d.RootOverlaps, GrantedTo: grantedTo(&p, d)}
	if d.Ready() {
		readiness.Status = metav1.ConditionTrue
	}
	if current, err := r.writeStatus(ctx, &p, figures, readiness); err != nil || !current {
		return reconcile.Result{RequeueAfter: newerVersionRetry}, err
	}
	return reconcile.Result{}, nil
}

// newerVersionRetry is when a pool whose status was not written because a
// newer version exists (the ledger has not applied it, or another writer's
// landed first) is looked at again. The ledger's event for that version
// usually requeues it first; one that changes only metadata does not
// (poolEvents), and this retry is for that.
const newerVersionRetry = time.Second

// grantedTo is a delegated pool's status.grantedToUID for decision d. The
// ledger serves a delegated pool's spec.cidr only on the hub's grant to this
// object or on a hold already proven (ledger.HoldsGrant), so a pool served
// its spec.cidr (Decision.Serves) names itself. One that is not served
// keeps what its status names for the range it still shows, a restored
// status's old UID included.
func grantedTo(p *ipamv1.SubnetPool, d ledger.Decision) types.UID {
	switch {
	case p.Spec.Delegation == nil || p.Spec.ParentRef != nil || !d.CIDR.IsValid():
		return ""
	case d.Serves() && d.CIDR.String() == p.Spec.CIDR:
		return p.UID
	case d.CIDR.String() == p.Status.CIDR:
		return p.Status.GrantedToUID
	}
	return ""
}

// reconcileFinalizer adds the pool-protection finalizer, or removes it from
// a pool being deleted once nothing uses it. done means the reconcile is
// over (the finalizer was removed, the pool is about to go; or it was added
// to a version read around the cache).
func (r *PoolStatusReconciler) reconcileFinalizer(ctx context.Context, p *ipamv1.SubnetPool) (done bool, err error) {
	if p.DeletionTimestamp == nil {
		if controllerutil.ContainsFinalizer(p, ipamv1.FinalizerPoolProtection) {
			return false, nil
		}
		reread, err := r.patchFinalizers(ctx, p, func(p *ipamv1.SubnetPool) bool {
			return controllerutil.AddFinalizer(p, ipamv1.FinalizerPoolProtection)
		})
		// A conflict made patchFinalizers read the pool around the cache:
		// that version (a restored status) may be one the ledger has not
		// applied, so no status is written onto it. The finalizer's event
		// requeues the pool.
		return reread, err
	}
	if !controllerutil.ContainsFinalizer(p, ipamv1.FinalizerPoolProtection) {
		return true, nil
	}
	if _, subnets, children := r.Ledger.Users(p.Namespace, p.Name, 0); subnets+children > 0 {
		return false, nil // Terminating: the status says what it waits for
	}
	// The ledger says nothing uses it; confirm before the irreversible
	// step: Subnets with the API server (they are not cached), child pools
	// with the cache's index. Subnets are asked for in every namespace
	// (tenants claim from other namespaces' pools) by the pool's name; the
	// list is of the Subnets that name it, which the ledger says are none:
	// no limit is needed.
	var subnets ipamv1.SubnetList
	if err := r.APIReader.List(ctx, &subnets, client.MatchingFields{FieldSubnetPoolRef: p.Name}); err != nil {
		return false, err
	}
	// The field selector matches the name only: a Subnet that names a pool
	// of that name in another namespace does not use this one, nor does one
	// the pool refuses (its namespace is not allowed) that holds nothing.
	ref := ipamv1.PoolReference{Namespace: p.Namespace, Name: p.Name}
	subnets.Items = slices.DeleteFunc(subnets.Items, func(s ipamv1.Subnet) bool {
		if s.Spec.PoolRef.In(s.Namespace) != p.Namespace {
			return true
		}
		return r.refused(ref, s.Namespace, s.Status.CIDR)
	})
	var children ipamv1.SubnetPoolList
	if err := r.Client.List(ctx, &children, client.MatchingFields{IndexPoolParentRef: ParentKey(p.Namespace, p.Name)}); err != nil {
		return false, err
	}
	children.Items = slices.DeleteFunc(children.Items, func(c ipamv1.SubnetPool) bool { return r.refused(ref, c.Namespace, c.Status.CIDR) })
	if len(subnets.Items)+len(children.Items) > 0 {
		return false, fmt.Errorf("the ledger and the API disagree on the users of SubnetPool %s/%s; retrying", p.Namespace, p.Name)
	}
	logf.FromContext(ctx).Info("SubnetPool no longer in use; releasing it", "subnetpool", client.ObjectKeyFromObject(p))
	_, err = r.patchFinalizers(ctx, p, func(p *ipamv1.SubnetPool) bool {
		return controllerutil.RemoveFinalizer(p, ipamv1.FinalizerPoolProtection)
	})
	return true, client.IgnoreNotFound(err)
}

// refused reports whether a claim from namespace on pool is one the pool
// refuses (its namespace is not allowed) and that holds nothing: it does
// not use the pool (ledger: book.outsiders).
func (r *PoolStatusReconciler) refused(pool ipamv1.PoolReference, namespace, held string) bool {
	if namespace == pool.Namespace || held != "" {
		return false
	}
	allowed, _, found := r.Ledger.Consent(pool, namespace)
	return found && !allowed
}

// patchFinalizers applies change to the pool's finalizers with a merge patch
// preconditioned on the resourceVersion it was computed from: the patch
// carries the whole list, so without the precondition a stale copy would
// drop a finalizer another client added meanwhile. On a conflict it reads
// the pool around the cache and tries again, on the same object only (UID):
// a pool deleted and created again under the same name is another pool,
// which its own reconcile handles. reread says the patch landed on a
// version read around the cache; that write is not kept as our last write
// (lastWrites), since reconciles start from it as from a version the
// ledger has seen.
func (r *PoolStatusReconciler) patchFinalizers(ctx context.Context, p *ipamv1.SubnetPool, change func(*ipamv1.SubnetPool) bool) (reread bool, err error) {
	uid := p.UID
	current := p
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		before := current.DeepCopy()
		if !change(current) {
			return nil
		}
		wctx, cancel := writeContext(ctx)
		defer cancel()
		err := r.Client.Patch(wctx, current, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		if !apierrors.IsConflict(err) {
			return err
		}
		fresh := &ipamv1.SubnetPool{}
		if getErr := r.APIReader.Get(ctx, client.ObjectKeyFromObject(current), fresh); getErr != nil {
			return getErr
		}
		if fresh.UID != uid {
			return apierrors.NewNotFound(ipamv1.GroupVersion.WithResource("subnetpools").GroupResource(), p.Name)
		}
		current = fresh
		return err
	})
	reread = current != p
	if err == nil {
		if !reread {
			r.written.record(current)
		} else {
			*p = *current
		}
	}
	return reread, err
}

// writeStatus writes p's status for the ledger's figures and readiness,
// on the condition that p is still the stored version (an optimistic
// lock). On a conflict it stops: another writer's newer version carries
// facts (a restored status, a new spec) the decision did not see, so a
// retry with the same decision could undo them. current says the stored
// status is the decision's (written now, already so, or the pool is gone);
// false after a conflict.
func (r *PoolStatusReconciler) writeStatus(ctx context.Context, p *ipamv1.SubnetPool, figures statuscalc.Figures, readiness statuscalc.Readiness) (current bool, err error) {
	status := statuscalc.Status(p, figures, readiness)
	if equality.Semantic.DeepEqual(p.Status, status) {
		return true, nil
	}
	before := p.DeepCopy()
	p.Status = status
	wctx, cancel := writeContext(ctx)
	defer cancel()
	err = r.Client.Status().Patch(wctx, p, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	switch {
	case err == nil:
		statusWrites.WithLabelValues(statuscalc.KindSubnetPool, "success").Inc()
		noteStatusWritten(ledger.Object{Namespace: p.Namespace, Name: p.Name})
		r.written.record(p)
		r.recordTransitions(before, p)
		return true, nil
	case apierrors.IsConflict(err):
		statusWrites.WithLabelValues(statuscalc.KindSubnetPool, "conflict").Inc()
		return false, nil
	case apierrors.IsNotFound(err):
		statusWrites.WithLabelValues(statuscalc.KindSubnetPool, "error").Inc()
		return true, nil // gone: nothing to write to
	default:
		statusWrites.WithLabelValues(statuscalc.KindSubnetPool, "error").Inc()
		return false, err
	}
}

// recordTransitions emits events when a pool becomes exhausted or starts
// to have overlapping claims.
func (r *PoolStatusReconciler) recordTransitions(before, after *ipamv1.SubnetPool) {
	became := func(typ string) (*metav1.Condition, bool) {
		now := meta.FindStatusCondition(after.Status.Conditions, typ)
		return now, now != nil && now.Status == metav1.ConditionTrue && !meta.IsStatusConditionTrue(before.Status.Conditions, typ)
	}
	if c, ok := became(ipamv1.ConditionExhausted); ok {
		r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, "PoolExhausted", "Measure", "%s", c.Message)
	}
	if c, ok := became(ipamv1.ConditionOverlapping); ok {
		r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, "ClaimsOverlap", "Arbitrate", "%s", c.Message)
	}
	if c, ok := became(ipamv1.ConditionAddressSpaceOverlap); ok {
		r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, ipamv1.ReasonRootPoolsOverlap, "Arbitrate", "%s", c.Message)
	}
	// A root pool that waits for its address space (it overlaps another
	// root pool, its space does not exist or does not take its namespace)
	// says so once per reason, as Subnets do.
	if after.Spec.ParentRef == nil {
		now := meta.FindStatusCondition(after.Status.Conditions, ipamv1.ConditionReady)
		was := meta.FindStatusCondition(before.Status.Conditions, ipamv1.ConditionReady)
		if now != nil && now.Status == metav1.ConditionFalse && (was == nil || was.Reason != now.Reason) {
			switch now.Reason {
			case ipamv1.ReasonOverlaps, ipamv1.ReasonAddressSpaceNotFound, ipamv1.ReasonNotAllowed:
				r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, now.Reason, "Arbitrate", "%s", now.Message)
			}
		}
	}
}
