package capi

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	capiipam "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
)

// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=ipaddressclaims,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=ipaddressclaims/status,verbs=patch
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=ipaddressclaims/finalizers,verbs=update
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=ipaddresses,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=ipam.subnet-operator.io,resources=subnets/finalizers,verbs=update

// subnetKind is the pool kind a claim names to be ours.
const subnetKind = "Subnet"

// errReplaced: the Subnet a grant was decided in was deleted and created
// again under its name; the grant is withdrawn (its range may differ).
var errReplaced = errors.New("the Subnet was replaced since the decision")

// writeTimeout bounds the writes of one grant (as the Subnet controller's).
const writeTimeout = 10 * time.Second

// clusterNameIndex indexes claims by the name of their Cluster.
const clusterNameIndex = "capi.clusterName"

// ours reports whether a pool reference names one of our Subnets.
func ours(ref capiipam.IPPoolReference) bool {
	return ref.APIGroup == ipamv1.GroupVersion.Group && ref.Kind == subnetKind && ref.Name != ""
}

// clusterName is the claim's Cluster: spec.clusterName, else the
// cluster-name label (claims made before the field existed).
func clusterName(c *capiipam.IPAddressClaim) string {
	if c.Spec.ClusterName != "" {
		return c.Spec.ClusterName
	}
	return c.Labels[clusterv1.ClusterNameLabel]
}

// ClaimReconciler answers IPAddressClaims of Subnets. Its requests are
// namespace/name pairs that name a claim and, by the contract, its
// IPAddress: one reconcile sees both, so the IPAddress's cool-down and the
// claim's decision are never handled by two workers at once.
type ClaimReconciler struct {
	Client    client.Client
	APIReader client.Reader
	Ledger    *ledger.Ledger
	Recorder  recorder.EventRecorder
	Options

	// caughtUp is set once the ledger holds every IPAddress the API server
	// has (catchUp), which a new leader must before its first decision.
	caughtUpMu sync.Mutex
	caughtUp   bool
}

// SetupWithManager registers the controller: claims of our Subnets,
// IPAddresses (the same name), the ledger's wake-ups (an address freed, a
// Subnet changed) and Clusters (paused or resumed).
func (r *ClaimReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil || r.APIReader == nil || r.Ledger == nil || r.Recorder == nil {
		return errors.New("ClaimReconciler needs a client, an API reader, a ledger and an event recorder")
	}
	if err := r.feed(mgr); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("ipaddressclaim").
		WithOptions(controller.Options{
			MaxConcurrentReconciles: max(r.Workers, 1),
			RateLimiter: workqueue.NewTypedMaxOfRateLimiter(
				workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](50*time.Millisecond, 30*time.Second),
				&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
			),
			ReconciliationTimeout: r.Timeout,
		}).
		For(&capiipam.IPAddressClaim{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			c, ok := o.(*capiipam.IPAddressClaim)
			return ok && ours(c.Spec.PoolRef)
		}))).
		// Same name as its claim; only our IPAddresses.
		Watches(&capiipam.IPAddress{}, &handler.EnqueueRequestForObject{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			a, ok := o.(*capiipam.IPAddress)
			return ok && ours(a.Spec.PoolRef)
		}))).
		WatchesRawSource(source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			unsubscribe := r.Ledger.Subscribe(func(e ledger.Event) {
				for _, w := range e.Wake {
					if w.Kind == ledger.KindAddressClaim {
						q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: w.Namespace, Name: w.Name}})
					}
				}
			})
			go func() {
				<-ctx.Done()
				unsubscribe()
			}()
			return nil
		}))
	if r.Clusters {
		if err := mgr.GetFieldIndexer().IndexField(context.Background(), &capiipam.IPAddressClaim{}, clusterNameIndex, func(o client.Object) []string {
			if c, ok := o.(*capiipam.IPAddressClaim); ok && ours(c.Spec.PoolRef) && clusterName(c) != "" {
				return []string{clusterName(c)}
			}
			return nil
		}); err != nil {
			return err
		}
		b = b.Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(r.claimsOfCluster),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
				return isPaused(e.ObjectOld) != isPaused(e.ObjectNew)
			}}))
	}
	return b.Complete(r)
}

// isPaused reports whether a Cluster is paused: spec.paused, or the paused
// annotation.
func isPaused(o client.Object) bool {
	if _, ok := o.GetAnnotations()[clusterv1.PausedAnnotation]; ok {
		return true
	}
	c, ok := o.(*clusterv1.Cluster)
	return ok && ptr.Deref(c.Spec.Paused, false)
}

// claimsOfCluster maps a Cluster to its claims of our Subnets.
func (r *ClaimReconciler) claimsOfCluster(ctx context.Context, o client.Object) []reconcile.Request {
	var claims capiipam.IPAddressClaimList
	if err := r.Client.List(ctx, &claims, client.InNamespace(o.GetNamespace()), client.MatchingFields{clusterNameIndex: o.GetName()}); err != nil {
		logf.FromContext(ctx).Error(err, "listing the claims of a Cluster", "cluster", client.ObjectKeyFromObject(o))
		return nil
	}
	out := make([]reconcile.Request, 0, len(claims.Items))
	for i := range claims.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&claims.Items[i])})
	}
	// And its IPAddresses whose claims are gone (cooling down, or left
	// behind while the Cluster was paused).
	var addrs capiipam.IPAddressList
	if err := r.Client.List(ctx, &addrs, client.InNamespace(o.GetNamespace()), client.MatchingLabels{clusterv1.ClusterNameLabel: o.GetName()}); err != nil {
		logf.FromContext(ctx).Error(err, "listing the IPAddresses of a Cluster", "cluster", client.ObjectKeyFromObject(o))
		return out
	}
	for i := range addrs.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&addrs.Items[i])})
	}
	return out
}

// conflictRetry is when a reconcile whose optimistic write met a newer
// version looks again, should the newer version's own event not come.
const conflictRetry = time.Second

// Reconcile implements reconcile.Reconciler.
func (r *ClaimReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	result, err := r.reconcile(ctx, req)
	if apierrors.IsConflict(err) {
		// An optimistic write (the claim's status, a finalizer) made from
		// a cache that had not shown the newer version yet: expected, and
		// the newer version's event requeues the request anyway. Not an
		// error for the log, with a stack trace.
		logf.FromContext(ctx).V(1).Info("Written from an outdated version; looking again", "reason", err.Error())
		return reconcile.Result{RequeueAfter: conflictRetry}, nil
	}
	if err != nil {
		return reconcile.Result{}, err // the error's backoff requeues it
	}
	return result, nil
}

func (r *ClaimReconciler) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if err := r.catchUp(ctx); err != nil {
		return reconcile.Result{}, err
	}
	addr := &capiipam.IPAddress{}
	if err := r.Client.Get(ctx, req.NamespacedName, addr); err != nil {
		if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, err
		}
		addr = nil
	} else if !ours(addr.Spec.PoolRef) {
		addr = nil
	}
	claim := &capiipam.IPAddressClaim{}
	if err := r.Client.Get(ctx, req.NamespacedName, claim); err != nil {
		if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, err
		}
		claim = nil
	} else if !ours(claim.Spec.PoolRef) {
		claim = nil
	}
	if claim == nil {
		r.Ledger.StopWaiting(req.Namespace, req.Name)
		if addr == nil {
			// Gone without a release (its finalizer removed by hand): a
			// grant never written is withdrawn. Unless the cache lags: an
			// IPAddress written for it (released, cooling down) holds the
			// address, so the API server says which.
			live, err := r.writtenAddress(ctx, req.NamespacedName)
			if err != nil {
				return reconcile.Result{}, err
			}
			if live == nil {
				r.Ledger.ForgetAssumedName(req.Namespace, req.Name)
			}
			addr = live
		}
	}

	// The IPAddress of this name, whoever's it is.
	var result reconcile.Result
	if addr != nil {
		var done bool
		var err error
		result, done, err = r.reconcileAddress(ctx, addr, claim)
		if done || err != nil {
			return result, err
		}
	}
	if claim == nil {
		return result, nil
	}
	paused, missing, err := r.clusterState(ctx, claim.Namespace, clusterName(claim), claim.Annotations)
	if err != nil || paused {
		return result, err // a paused Cluster's claims are left alone, deletion included
	}
	if claim.DeletionTimestamp != nil {
		return result, r.releaseClaim(ctx, claim)
	}
	if missing {
		// The contract leaves it alone until the Cluster appears (a
		// Cluster event requeues it), but a claim with no status at all
		// does not say why it waits: one that holds nothing says so. A
		// bound claim whose Cluster went first keeps its address.
		if claim.Status.AddressRef.Name == "" && addr == nil {
			return result, r.refuse(ctx, claim, ledger.AddressDecision{Reason: reasonClusterNotFound,
				Message: fmt.Sprintf("Cluster %s does not exist in namespace %s: the claim waits for it (check the claim's cluster name)", clusterName(claim), claim.Namespace)})
		}
		return result, nil
	}
	if wait := r.awaitItsAddress(ctx, claim, addr); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil // restored: its IPAddress may follow (adopt.go)
	}
	if !controllerutil.ContainsFinalizer(claim, FinalizerReleaseAddress) {
		patch := client.MergeFromWithOptions(claim.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(claim, FinalizerReleaseAddress)
		if err := r.Client.Patch(ctx, claim, patch); err != nil {
			return result, client.IgnoreNotFound(err)
		}
	}
	if addr != nil && ownedBy(addr, claim.UID) {
		// The informer shows its IPAddress: the claim is bound (also while
		// someone deletes the IPAddress under it: reconcileAddress keeps
		// it, and its address, until the claim goes).
		return result, r.bindExisting(ctx, claim, addr)
	}

	if addr == nil && claim.Status.AddressRef.Name != "" {
		// Bound before, but the cache does not show its IPAddress: the
		// informer may lag (a new leader's), and the ledger then does not
		// show the address either. Re-deciding would take the address from
		// a machine that uses it (the Subnet may be going, or another
		// claim may get it): the API server says whether it is there.
		live, err := r.writtenAddress(ctx, client.ObjectKeyFromObject(claim))
		if err != nil {
			return result, err
		}
		if live != nil && ownedBy(live, claim.UID) && live.DeletionTimestamp == nil {
			if rec, ok := record(live); ok {
				r.Ledger.ApplyAddress(rec, ledger.Updated)
			}
			return result, r.bindExisting(ctx, claim, live)
		}
	}
	subnet := claim.Spec.PoolRef.Name
	d := r.Ledger.DecideAddress(claim.Namespace, claim.Name, claim.UID, subnet)
	if d.Reason != "" {
		return result, r.refuse(ctx, claim, d)
	}
	if d.Assumed {
		if err := r.write(ctx, claim, d); err != nil {
			return result, err
		}
		if !d.Granted.IsZero() {
			grantLatency.Observe(time.Since(d.Granted).Seconds())
		}
	}
	if err := r.bind(ctx, claim, claim.Name); err != nil {
		return result, err
	}
	if d.Assumed {
		boundLatency.Observe(time.Since(claim.CreationTimestamp.Time).Seconds())
		addressGrants.Inc()
	}
	return result, nil
}

// reconcileAddress looks after the IPAddress of the request's name, given
// the claim of that name (nil if there is none of ours). done: nothing is
// left to do for the claim in this reconcile.
//   - Terminating, its claim gone or going: the cool-down runs from its
//     deletionTimestamp, then its finalizer goes and the address is free.
//   - Terminating under a live claim (deleted by hand, or by a foreground
//     deletion of its Subnet): kept, with its address, until the claim
//     goes; the machine still uses it.
//   - Its claim gone, or a new claim of the name while it was never
//     released: released. Restored with the claims (new UIDs): adopted.
//
// A paused Cluster's IPAddresses (by their cluster-name label) are left
// alone too.
func (r *ClaimReconciler) reconcileAddress(ctx context.Context, addr *capiipam.IPAddress, claim *capiipam.IPAddressClaim) (reconcile.Result, bool, error) {
	if paused, _, err := r.clusterState(ctx, addr.Namespace, addr.Labels[clusterv1.ClusterNameLabel], nil); err != nil || paused {
		return reconcile.Result{}, true, err
	}
	owned := claim != nil && ownedBy(addr, claim.UID)
	if addr.DeletionTimestamp != nil {
		if owned && !released(claim) {
			if claim.DeletionTimestamp == nil {
				r.Recorder.Eventf(claim, nil, corev1.EventTypeWarning, "AddressDeleted", "Protect",
					"IPAddress %s was deleted while the claim holds it; it keeps %s until the claim is deleted", addr.Name, addr.Spec.Address)
			}
			// Its claim releases it (releaseClaim); the cool-down runs
			// from then.
			return reconcile.Result{}, false, nil
		}
		if owned {
			// Released, and its claim still there: a foreground deletion
			// waits for this IPAddress, which waits for the cool-down.
			// The claim need not wait for it: it no longer blocks it.
			if err := r.unblock(ctx, addr, claim); err != nil {
				return reconcile.Result{}, false, err
			}
		}
		left := time.Until(releasedAt(addr).Add(r.ReuseAfter))
		if left > 0 {
			return reconcile.Result{RequeueAfter: left}, false, nil
		}
		if err := r.removeFinalizer(ctx, addr, FinalizerProtectAddress); err != nil {
			return reconcile.Result{}, false, err
		}
		return reconcile.Result{}, false, r.forgetIfGone(ctx, addr)
	}
	if owned {
		return reconcile.Result{}, false, nil
	}
	live, err := r.claimOf(ctx, addr)
	if err != nil {
		return reconcile.Result{}, true, err
	}
	switch {
	case live != nil && (claim == nil || claim.UID != live.UID):
		// A claim of its name exists (its own, or one made again) and the
		// cache shows another, or none: the cache is behind, and its event
		// for the claim requeues this. Released now, a re-created claim
		// would lose its machine's address.
		return reconcile.Result{}, true, nil
	case claim != nil && claim.DeletionTimestamp == nil && adoptable(addr, claim):
		// Never released, and a claim of its name asks: restored from a
		// backup with new UIDs (or its claim's finalizer was removed by
		// hand and the claim made again). The claim gets the address its
		// IPAddress records if the Subnet would hand it out (adopt.go).
		// One of a gone claim that names another pool is released below.
		return reconcile.Result{}, true, r.adopt(ctx, addr, claim)
	case orphan(addr):
		// No owner: restored before its claim (a backup tool drops owner
		// references), or written by hand. Kept for its claim to adopt.
		return reconcile.Result{}, false, nil
	}
	// Its claim is gone: released as the claim's deletion would have.
	return reconcile.Result{}, false, r.release(ctx, addr)
}

// annotationReleasedAt on an IPAddress records when its claim released it,
// if the IPAddress was deleted earlier (by hand, under its live claim): its
// cool-down runs from the later of the two.
const annotationReleasedAt = "ipam.subnet-operator.io/released-at"

// releasedAt is when the IPAddress's cool-down began.
func releasedAt(a *capiipam.IPAddress) time.Time {
	at := a.DeletionTimestamp.Time
	if t, err := time.Parse(time.RFC3339, a.Annotations[annotationReleasedAt]); err == nil && t.After(at) {
		at = t
	}
	return at
}

// released reports whether a claim has released its address: it is
// being deleted and its finalizer is gone (releaseClaim deleted its
// IPAddress, or recorded when, before removing it).
func released(c *capiipam.IPAddressClaim) bool {
	return c.DeletionTimestamp != nil && !controllerutil.ContainsFinalizer(c, FinalizerReleaseAddress)
}

// unblock clears blockOwnerDeletion on the released IPAddress's reference
// to its claim if the claim is deleted in the foreground: the claim then
// goes at once, as in a background deletion, and the IPAddress cools down
// on its own (its finalizer, not the claim, holds the address).
func (r *ClaimReconciler) unblock(ctx context.Context, addr *capiipam.IPAddress, claim *capiipam.IPAddressClaim) error {
	if !controllerutil.ContainsFinalizer(claim, metav1.FinalizerDeleteDependents) {
		return nil
	}
	i := slices.IndexFunc(addr.OwnerReferences, func(o metav1.OwnerReference) bool {
		return o.UID == claim.UID && ptr.Deref(o.BlockOwnerDeletion, false)
	})
	if i < 0 {
		return nil
	}
	patch := client.MergeFromWithOptions(addr.DeepCopy(), client.MergeFromWithOptimisticLock{})
	addr.OwnerReferences = slices.Clone(addr.OwnerReferences)
	addr.OwnerReferences[i].BlockOwnerDeletion = ptr.To(false)
	return client.IgnoreNotFound(r.Client.Patch(ctx, addr, patch))
}

// writtenAddress reads the IPAddress of this name from the API server:
// nil if there is none of ours.
func (r *ClaimReconciler) writtenAddress(ctx context.Context, key types.NamespacedName) (*capiipam.IPAddress, error) {
	var a capiipam.IPAddress
	if err := r.APIReader.Get(ctx, key, &a); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if !ours(a.Spec.PoolRef) {
		return nil, nil
	}
	return &a, nil
}

// claimOf returns the claim of the IPAddress's name, read from the API
// server (the cache may not show a claim created a moment ago): the one
// that owns it, or another of ours made under its name (the request's, so
// the cache catching up requeues it); nil if none.
func (r *ClaimReconciler) claimOf(ctx context.Context, a *capiipam.IPAddress) (*capiipam.IPAddressClaim, error) {
	owner := metav1.GetControllerOf(a)
	name := a.Spec.ClaimRef.Name
	if owner != nil {
		name = owner.Name
	}
	var c capiipam.IPAddressClaim
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: a.Namespace, Name: name}, &c); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if (owner != nil && c.UID == owner.UID) || (c.Name == a.Name && ours(c.Spec.PoolRef)) {
		return &c, nil
	}
	return nil, nil
}

// catchUp loads every IPAddress the API server has into the ledger, once,
// before the first decision: the informer of a replica that was standing
// by may lag behind the IPAddresses its predecessor wrote, and a decision
// on that view could hand out an address twice. Afterwards this leader is
// the only writer, and its own grants are in the ledger as it makes them.
func (r *ClaimReconciler) catchUp(ctx context.Context) error {
	r.caughtUpMu.Lock()
	defer r.caughtUpMu.Unlock()
	if r.caughtUp {
		return nil
	}
	// The Subnets first: a decision needs their ranges as the API shows
	// them (the Subnet controller's catch-up; it runs once per leader).
	if err := r.Ledger.WaitForSync(ctx); err != nil {
		return err
	}
	if _, err := r.Ledger.CatchUp(ctx, r.APIReader); err != nil {
		return err
	}
	err := r.Ledger.CatchUpAddresses(func() ([]ledger.AddressRecord, error) {
		var recs []ledger.AddressRecord
		opts := &client.ListOptions{Limit: 500}
		for {
			var list capiipam.IPAddressList
			if err := r.APIReader.List(ctx, &list, opts); err != nil {
				return nil, fmt.Errorf("catching up with the IPAddresses: %w", err)
			}
			for i := range list.Items {
				if rec, ok := record(&list.Items[i]); ok {
					recs = append(recs, rec)
				}
			}
			if list.Continue == "" {
				return recs, nil
			}
			opts.Continue = list.Continue
		}
	})
	if err != nil {
		return err
	}
	r.caughtUp = true
	return nil
}

// reasonClusterNotFound: a claim names a Cluster that does not exist (its
// Ready condition's reason; not one of the contract's, which has none for
// it).
const reasonClusterNotFound = "ClusterNotFound"

// clusterState reads the named Cluster once and says whether an object of
// the namespace with these annotations is paused (by its own paused
// annotation or its Cluster's), and whether the Cluster it names is
// missing: the contract leaves a claim of a missing Cluster alone (until
// the Cluster appears) unless it is being deleted.
func (r *ClaimReconciler) clusterState(ctx context.Context, namespace, cluster string, annotations map[string]string) (paused, missing bool, err error) {
	if _, ok := annotations[clusterv1.PausedAnnotation]; ok {
		return true, false, nil
	}
	if !r.Clusters || cluster == "" {
		return false, false, nil
	}
	var c clusterv1.Cluster
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: cluster}, &c); err != nil {
		if apierrors.IsNotFound(err) {
			return false, true, nil
		}
		return false, false, err
	}
	return isPaused(&c), false, nil
}

// refuse writes why the claim holds no address.
func (r *ClaimReconciler) refuse(ctx context.Context, claim *capiipam.IPAddressClaim, d ledger.AddressDecision) error {
	before := claim.DeepCopy()
	was := meta.FindStatusCondition(claim.Status.Conditions, capiipam.IPAddressClaimReadyCondition)
	// It holds no IPAddress now: a reference left from an earlier binding
	// would name one that is gone, or another claim's.
	claim.Status.AddressRef = capiipam.IPAddressReference{}
	setReady(claim, metav1.Condition{
		Type: capiipam.IPAddressClaimReadyCondition, Status: metav1.ConditionFalse,
		Reason: d.Reason, Message: d.Message, ObservedGeneration: claim.Generation,
	})
	if equalStatus(before, claim) {
		return nil
	}
	// Optimistic: a claim read from a lagging cache may have been bound
	// since; a plain merge patch would set Ready=False beside the
	// addressRef it does not know of. The conflict requeues it.
	if err := r.Client.Status().Patch(ctx, claim, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return client.IgnoreNotFound(err)
	}
	if was == nil || was.Reason != d.Reason {
		refusals.WithLabelValues(d.Reason).Inc()
		r.Recorder.Eventf(claim, nil, corev1.EventTypeWarning, d.Reason, "Allocate", "%s", d.Message)
	}
	return nil
}

// bind records in the claim's status that it holds the IPAddress name.
func (r *ClaimReconciler) bind(ctx context.Context, claim *capiipam.IPAddressClaim, name string) error {
	before := claim.DeepCopy()
	claim.Status.AddressRef = capiipam.IPAddressReference{Name: name}
	setReady(claim, metav1.Condition{
		Type: capiipam.IPAddressClaimReadyCondition, Status: metav1.ConditionTrue,
		Reason: clusterv1.ReadyReason, Message: "IPAddress " + name + " holds the claim's address", ObservedGeneration: claim.Generation,
	})
	if equalStatus(before, claim) {
		return nil
	}
	// Optimistic, as refuse: the claim may have changed since the cache
	// showed it (deleted, its IPAddress orphaned), and Ready must not land
	// on a claim that no longer holds the address.
	return client.IgnoreNotFound(r.Client.Status().Patch(ctx, claim, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})))
}

// setReady sets the Ready condition, and its v1beta1 form in
// status.deprecated.v1beta1.conditions: Cluster API's conversion gives a
// v1beta1 reader those, never the v1beta2 conditions.
func setReady(claim *capiipam.IPAddressClaim, ready metav1.Condition) {
	meta.SetStatusCondition(&claim.Status.Conditions, ready)
	old := clusterv1.Condition{Type: clusterv1.ReadyV1Beta1Condition, Status: corev1.ConditionStatus(ready.Status)}
	if ready.Status != metav1.ConditionTrue {
		// Warning: every refusal ends by itself once its cause goes.
		old.Reason, old.Message, old.Severity = ready.Reason, ready.Message, clusterv1.ConditionSeverityWarning
	}
	if claim.Status.Deprecated == nil {
		claim.Status.Deprecated = &capiipam.IPAddressClaimDeprecatedStatus{}
	}
	if claim.Status.Deprecated.V1Beta1 == nil {
		claim.Status.Deprecated.V1Beta1 = &capiipam.IPAddressClaimV1Beta1DeprecatedStatus{}
	}
	conds := &claim.Status.Deprecated.V1Beta1.Conditions
	i := slices.IndexFunc(*conds, func(c clusterv1.Condition) bool { return c.Type == old.Type })
	if i < 0 {
		old.LastTransitionTime = metav1.Now()
		*conds = append(*conds, old)
		return
	}
	// v1beta1's rule: the time moves when anything else does.
	if was := (*conds)[i]; was.Status == old.Status && was.Reason == old.Reason && was.Message == old.Message && was.Severity == old.Severity {
		old.LastTransitionTime = was.LastTransitionTime
	} else {
		old.LastTransitionTime = metav1.Now()
	}
	(*conds)[i] = old
}

func equalStatus(a, b *capiipam.IPAddressClaim) bool {
	if a.Status.AddressRef != b.Status.AddressRef || len(a.Status.Conditions) != len(b.Status.Conditions) ||
		!equality.Semantic.DeepEqual(a.Status.Deprecated, b.Status.Deprecated) {
		return false
	}
	for i := range a.Status.Conditions {
		x, y := a.Status.Conditions[i], b.Status.Conditions[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message || x.ObservedGeneration != y.ObservedGeneration {
			return false
		}
	}
	return true
}

// write creates the IPAddress of a grant. The Subnet is protected first
// (its finalizer), so that it cannot go while the address is in use.
func (r *ClaimReconciler) write(ctx context.Context, claim *capiipam.IPAddressClaim, d ledger.AddressDecision) error {
	// The write runs to its end even when the controller is stopping (a
	// graceful hand-over): the lease is released only after every worker
	// returned, so no grant of ours lands after the next leader's catch-up
	// read. The manager's graceful shutdown period exceeds writeTimeout.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	subnet, err := r.protect(ctx, claim.Namespace, claim.Spec.PoolRef.Name, d.SubnetUID)
	if err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || errors.Is(err, errReplaced) {
			// Gone or being deleted: the next decision says so.
			r.Ledger.ForgetAddress(claim.Namespace, claim.Name, claim.UID, claim.Spec.PoolRef.Name, d.Address)
		}
		return err
	}
	addr := &capiipam.IPAddress{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: claim.Namespace, Name: claim.Name,
			Finalizers: []string{FinalizerProtectAddress},
			OwnerReferences: []metav1.OwnerReference{
				{APIVersion: capiipam.GroupVersion.String(), Kind: "IPAddressClaim", Name: claim.Name, UID: claim.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)},
				{APIVersion: ipamv1.GroupVersion.String(), Kind: subnetKind, Name: subnet.Name, UID: subnet.UID, BlockOwnerDeletion: ptr.To(true)},
			},
		},
		Spec: capiipam.IPAddressSpec{
			ClaimRef: capiipam.IPAddressClaimReference{Name: claim.Name},
			PoolRef:  claim.Spec.PoolRef,
			Address:  d.Address.String(),
			Prefix:   ptr.To(int32(d.Prefix)),
			Gateway:  d.Gateway.String(),
		},
	}
	if name := clusterName(claim); name != "" {
		addr.Labels = map[string]string{clusterv1.ClusterNameLabel: name}
	}
	err = r.Client.Create(ctx, addr)
	switch {
	case err == nil:
		return nil
	case apierrors.IsAlreadyExists(err):
		// Written before (a retried grant whose first write landed), or an
		// IPAddress of an earlier claim of this name: read which.
		var found capiipam.IPAddress
		if gerr := r.APIReader.Get(ctx, client.ObjectKeyFromObject(addr), &found); gerr != nil {
			return gerr
		}
		if ownedBy(&found, claim.UID) && found.Spec.Address == addr.Spec.Address && found.DeletionTimestamp == nil {
			return nil
		}
		r.Ledger.ForgetAddress(claim.Namespace, claim.Name, claim.UID, claim.Spec.PoolRef.Name, d.Address)
		if rec, ok := record(&found); ok {
			r.Ledger.ApplyAddress(rec, ledger.Updated)
		}
		return fmt.Errorf("IPAddress %s exists and is not this claim's", addr.Name)
	case apierrors.IsNotFound(err), apierrors.IsInvalid(err), apierrors.IsForbidden(err):
		// Refused for good (the namespace is going, Cluster API's
		// admission refused it): the address is free again.
		r.Ledger.ForgetAddress(claim.Namespace, claim.Name, claim.UID, claim.Spec.PoolRef.Name, d.Address)
		return err
	}
	return err // may have landed: stays assumed, the retry writes the same
}

// protect adds the address-protection finalizer to the Subnet, if the
// ledger does not show it yet, and returns the Subnet's name and UID.
func (r *ClaimReconciler) protect(ctx context.Context, namespace, name string, uid types.UID) (*metav1.ObjectMeta, error) {
	s, ok := r.Ledger.Subnet(namespace, name)
	if !ok {
		return nil, apierrors.NewNotFound(ipamv1.GroupVersion.WithResource("subnets").GroupResource(), name)
	}
	if s.UID != uid {
		return nil, errReplaced
	}
	if controllerutil.ContainsFinalizer(s, ipamv1.FinalizerAddressProtection) {
		return &s.ObjectMeta, nil
	}
	// Several workers may protect a new Subnet at once: a conflict is
	// read again and retried here, not logged as a reconcile error.
	var live ipamv1.Subnet
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &live); err != nil {
			return err
		}
		if live.UID != uid {
			return errReplaced
		}
		if live.DeletionTimestamp != nil {
			return apierrors.NewForbidden(ipamv1.GroupVersion.WithResource("subnets").GroupResource(), name, errors.New("being deleted"))
		}
		if controllerutil.ContainsFinalizer(&live, ipamv1.FinalizerAddressProtection) {
			return nil
		}
		patch := client.MergeFromWithOptions(live.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(&live, ipamv1.FinalizerAddressProtection)
		return r.Client.Patch(ctx, &live, patch)
	})
	if err != nil {
		return nil, err
	}
	return &live.ObjectMeta, nil
}

// releaseClaim releases a deleted claim's address: its IPAddress is
// deleted (and kept, terminating, for the cool-down), then the claim's
// finalizer goes. The IPAddress is read from the API server, not the
// cache: one written a moment ago must not be missed.
func (r *ClaimReconciler) releaseClaim(ctx context.Context, claim *capiipam.IPAddressClaim) error {
	r.Ledger.StopWaiting(claim.Namespace, claim.Name)
	if !controllerutil.ContainsFinalizer(claim, FinalizerReleaseAddress) {
		return nil
	}
	var addr capiipam.IPAddress
	err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(claim), &addr)
	switch {
	case apierrors.IsNotFound(err):
		// Never written: withdraw any grant.
		r.Ledger.ForgetAddress(claim.Namespace, claim.Name, claim.UID, claim.Spec.PoolRef.Name, netip.Addr{})
	case err != nil:
		return err
	case ownedBy(&addr, claim.UID) && addr.DeletionTimestamp == nil:
		if err := r.release(ctx, &addr); err != nil {
			return err
		}
	case metav1.GetControllerOf(&addr) == nil && addr.DeletionTimestamp == nil && addr.Spec.ClaimRef.Name == claim.Name && addr.Spec.PoolRef == claim.Spec.PoolRef:
		// Its owner reference dropped (a --cascade=orphan deletion strips
		// it before the claim goes): still this claim's address, and no
		// claim would ever release it after this one.
		if err := r.release(ctx, &addr); err != nil {
			return err
		}
	case ownedBy(&addr, claim.UID) && addr.Annotations[annotationReleasedAt] == "":
		// Deleted earlier under the live claim: the machine used it until
		// now, so its cool-down starts now.
		patch := client.MergeFrom(addr.DeepCopy())
		metav1.SetMetaDataAnnotation(&addr.ObjectMeta, annotationReleasedAt, time.Now().UTC().Format(time.RFC3339))
		if err := r.Client.Patch(ctx, &addr, patch); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	// Its IPAddress cools down from now on: terminating, it keeps the
	// address until reconcileAddress lets it go.
	patch := client.MergeFromWithOptions(claim.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(claim, FinalizerReleaseAddress)
	return client.IgnoreNotFound(r.Client.Patch(ctx, claim, patch))
}

// release deletes an IPAddress; its finalizer keeps it for the cool-down
// (one without it, written by hand or restored without it, goes at once).
func (r *ClaimReconciler) release(ctx context.Context, addr *capiipam.IPAddress) error {
	err := r.Client.Delete(ctx, addr, client.Preconditions{UID: &addr.UID})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err == nil {
		addressReleases.Inc()
		logf.FromContext(ctx).V(1).Info("Address released", "ipaddress", client.ObjectKeyFromObject(addr), "address", addr.Spec.Address)
	}
	return r.forgetIfGone(ctx, addr)
}

// forgetIfGone frees the address of an IPAddress that this provider just
// ended (deleted, or removed its last finalizer), if the API server no
// longer has it. The informer may never show that deletion: a watch that
// lags and then re-lists skips an object that came and went in between.
// The ledger then holds the address by a record no informer event removes:
// this replica's grant (assumed until the informer shows its IPAddress) or
// the IPAddress as read from the API server (write, Reconcile). Both are
// withdrawn by identity, the IPAddress's UID and its claim's grant, so a
// newer IPAddress or grant of the name stays.
func (r *ClaimReconciler) forgetIfGone(ctx context.Context, addr *capiipam.IPAddress) error {
	var live capiipam.IPAddress
	err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(addr), &live)
	switch {
	case err == nil && live.UID == addr.UID:
		return nil // still there: another finalizer keeps it, and the ledger with it
	case err != nil && !apierrors.IsNotFound(err):
		return err
	}
	rec, ok := record(addr)
	if !ok {
		return nil
	}
	r.Ledger.DeleteAddress(rec)
	r.Ledger.ForgetAddress(rec.Namespace, rec.Name, rec.ClaimUID, rec.Subnet, rec.Address)
	return nil
}

// removeFinalizer removes one of the IPAddress's finalizers.
func (r *ClaimReconciler) removeFinalizer(ctx context.Context, addr *capiipam.IPAddress, finalizer string) error {
	if !controllerutil.ContainsFinalizer(addr, finalizer) {
		return nil
	}
	patch := client.MergeFromWithOptions(addr.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(addr, finalizer)
	return client.IgnoreNotFound(r.Client.Patch(ctx, addr, patch))
}

// ownedBy reports whether the IPAddress belongs to the claim with this UID.
func ownedBy(a *capiipam.IPAddress, claimUID types.UID) bool {
	owner := metav1.GetControllerOf(a)
	return owner != nil && owner.UID == claimUID
}

// record is what the ledger keeps of one of our IPAddresses.
func record(a *capiipam.IPAddress) (ledger.AddressRecord, bool) {
	if !ours(a.Spec.PoolRef) {
		return ledger.AddressRecord{}, false
	}
	addr, err := netip.ParseAddr(a.Spec.Address)
	if err != nil {
		return ledger.AddressRecord{}, false
	}
	rec := ledger.AddressRecord{
		Namespace: a.Namespace, Name: a.Name, UID: a.UID, ResourceVersion: a.ResourceVersion,
		Subnet: a.Spec.PoolRef.Name, Address: addr.Unmap(),
	}
	if owner := metav1.GetControllerOf(a); owner != nil {
		rec.ClaimUID = owner.UID
	}
	if a.DeletionTimestamp != nil {
		rec.Releasing = a.DeletionTimestamp.Time
	}
	return rec, true
}
