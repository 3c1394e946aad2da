package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ipspace"
	"github.com/subnet-operator/subnet-operator/ledger"
)

// The manager writes a delegated pool's spec.cidr once (the hub's grant)
// and its Delegated condition, and keeps its own finalizer on it.
// +kubebuilder:rbac:groups=ipam.subnet-operator.io,resources=subnetpools,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=ipam.subnet-operator.io,resources=subnetpools/status,verbs=patch

// MemberReconciler claims each delegated root pool's range in the hub and
// tells the ledger what the hub granted (ledger.SetDelegation): the ledger
// serves a delegated pool's spec.cidr only once the hub granted exactly
// that range. It runs on the leader, beside the arbiter whose ledger it
// informs.
//
// Events, not polling: the member's pools (the manager's cache) and the
// Subnets of the member's hub namespace (the hub's cache) requeue the pool
// they concern. While the hub is unreachable a reconcile fails and is
// retried with the rate limiter's back-off.
type MemberReconciler struct {
	Client client.Client
	// APIReader reads a pool around the cache after a write conflict.
	APIReader client.Reader
	Ledger    *ledger.Ledger
	Hub       *Hub
	// ClusterName is the member's identity in the hub: in the names,
	// labels and annotations of its claims.
	ClusterName string
	// HubTimeout bounds each call to the hub, so that an unreachable hub
	// is reported at once rather than after TCP's own time-outs.
	HubTimeout time.Duration
}

// SetupWithManager registers the controller and runs the hub's cache with
// the manager (on the leader only).
func (r *MemberReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil || r.APIReader == nil || r.Ledger == nil || r.Hub == nil || r.ClusterName == "" {
		return errors.New("MemberReconciler needs a client, an API reader, a ledger, the hub and the member's cluster name")
	}
	if r.HubTimeout == 0 {
		r.HubTimeout = 10 * time.Second
	}
	if err := mgr.Add(leaderOnly{r.Hub}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("fleet-member").
		For(&ipamv1.SubnetPool{}, builder.WithPredicates(predicate.NewPredicateFuncs(isDelegated), predicate.Funcs{UpdateFunc: delegationMayChange})).
		WatchesRawSource(source.Func(r.hubClaimEvents)).
		WithOptions(controller.Options{
			// Two workers: each reconcile waits on the hub; decisions are
			// the hub's and the ledger's, so workers only overlap calls.
			MaxConcurrentReconciles: 2,
			// Back-off while the hub is unreachable: 1 s doubling to 30 s, so a
			// pool that waits is claimed at most 30 s after the hub is back
			// (a claim never made has no hub event to requeue it).
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Second, 30*time.Second),
		}).
		Complete(r)
}

// leaderOnly runs the hub's cache as a runnable that needs the lease: only
// the leader talks to the hub.
type leaderOnly struct{ *Hub }

func (leaderOnly) NeedLeaderElection() bool { return true }

// isDelegated selects the pools this controller manages.
func isDelegated(o client.Object) bool {
	p, ok := o.(*ipamv1.SubnetPool)
	return ok && p.Spec.Delegation != nil
}

// delegationMayChange passes the updates of a pool that change what its
// claim in the hub should be or whether it may go: not the pool's figures,
// which change with every Subnet carved from it, nor our own condition.
func delegationMayChange(e event.UpdateEvent) bool {
	old, ok1 := e.ObjectOld.(*ipamv1.SubnetPool)
	p, ok2 := e.ObjectNew.(*ipamv1.SubnetPool)
	if !ok1 || !ok2 {
		return true
	}
	return old.Generation != p.Generation || old.Status.CIDR != p.Status.CIDR ||
		!old.DeletionTimestamp.Equal(p.DeletionTimestamp) || !slices.Equal(old.Finalizers, p.Finalizers)
}

// hubClaimEvents requeues the member pool of each claim of this member's
// that the hub adds, changes or deletes. Registered on the informer without
// waiting for it to sync: with the hub down at start, the controller must
// start anyway (a Kind source would fail it after the sync time-out).
func (r *MemberReconciler) hubClaimEvents(ctx context.Context, queue workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	informer, err := r.Hub.GetCache().GetInformer(ctx, &ipamv1.Subnet{}, cache.BlockUntilSynced(false))
	if err != nil {
		return err
	}
	enqueue := func(obj any) {
		if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if s, ok := obj.(client.Object); ok {
			if pool, mine := memberPoolOf(s, r.ClusterName); mine {
				queue.Add(reconcile.Request{NamespacedName: pool})
			}
		}
	}
	_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	})
	return err
}

// Reconcile implements reconcile.Reconciler.
func (r *MemberReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var p ipamv1.SubnetPool
	if err := r.Client.Get(ctx, req.NamespacedName, &p); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if p.Spec.Delegation == nil {
		return reconcile.Result{}, nil
	}
	claimKey := types.NamespacedName{Namespace: r.Hub.Namespace, Name: claimName(r.ClusterName, req.NamespacedName)}
	if p.DeletionTimestamp != nil {
		return reconcile.Result{}, r.release(ctx, &p, claimKey)
	}
	if !controllerutil.ContainsFinalizer(&p, ipamv1.FinalizerDelegation) {
		before := p.DeepCopy()
		controllerutil.AddFinalizer(&p, ipamv1.FinalizerDelegation)
		if err := r.Client.Patch(ctx, &p, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
	st, err := r.claim(ctx, &p, claimKey)
	st.UID = p.UID
	if st.Granted.IsValid() {
		// The grant goes into spec once (durable, as a Subnet's range
		// is). Once the ledger serves it, the pool's status names this
		// object (status.grantedToUID), which is what lets it keep the
		// range without the hub (ledger.HoldsGrant).
		if recordErr := r.record(ctx, &p, st.Granted); recordErr != nil {
			if !apierrors.IsInvalid(recordErr) && !apierrors.IsForbidden(recordErr) {
				return reconcile.Result{}, recordErr
			}
			// This cluster refuses the hub's grant (it overlaps a local
			// root pool): not served, and the pool says why.
			st = ledger.DelegationState{UID: p.UID, Reason: ipamv1.ReasonDelegationPending,
				Message: fmt.Sprintf("the hub granted %s, but this cluster refuses to record it: %v", st.Granted, recordErr)}
			err = recordErr
		}
	}
	r.Ledger.SetDelegation(p.Namespace, p.Name, st)
	if condErr := r.setCondition(ctx, &p, st); condErr != nil {
		return reconcile.Result{}, condErr
	}
	return reconcile.Result{}, err
}

// claim makes sure the pool's claim is in the hub and says what the hub
// makes of it. An error means the reconcile is retried (with back-off).
func (r *MemberReconciler) claim(ctx context.Context, p *ipamv1.SubnetPool, key types.NamespacedName) (ledger.DelegationState, error) {
	hctx, cancel := context.WithTimeout(ctx, r.HubTimeout)
	defer cancel()
	held := ledger.HoldsGrant(p)
	var claim ipamv1.Subnet
	err := r.Hub.GetAPIReader().Get(hctx, key, &claim)
	switch {
	case apierrors.IsNotFound(err):
		if !held {
			if refused := r.spaceRefuses(p); refused != nil {
				// Retried with back-off: no event of ours follows a label.
				return ledger.DelegationState{Reason: ipamv1.ReasonDelegationPending,
					Message: fmt.Sprintf("nothing claimed in the hub: %v", refused)}, refused
			}
		}
		claim = r.newClaim(p, key)
		if err := r.Hub.GetClient().Create(hctx, &claim); err != nil {
			return r.hubFailed(p, key, held, err), err
		}
		logf.FromContext(ctx).Info("Claimed the delegated pool's range in the hub", "hubSubnet", key, "cidr", claim.Spec.CIDR)
		if held {
			return ledger.DelegationState{Reason: ipamv1.ReasonDelegationLost,
				Message: fmt.Sprintf("the claim in the hub (Subnet %s) was deleted there; still serving %s and claiming it again", key, p.Spec.CIDR)}, nil
		}
		return pending(key, "claimed; waiting for the hub's decision"), nil
	case err != nil:
		return r.hubFailed(p, key, held, err), err
	}
	if claim.DeletionTimestamp != nil {
		return r.terminatingClaim(hctx, p, key, &claim, held)
	}
	if d := p.Spec.Delegation; claim.Spec.PoolRef != d.PoolRef {
		// Left behind by an earlier pool of this name with another
		// delegation: not this pool's grant, and not ours to adopt.
		return pending(key, fmt.Sprintf("the claim there asks SubnetPool %s, this pool's delegation names %s: delete the Subnet in the hub to claim again", claim.Spec.PoolRef, d.PoolRef)), nil
	}
	uid := claim.Annotations[ipamv1.AnnotationMemberPoolUID]
	if claim.DeletionTimestamp == nil && (uid != string(p.UID) || !controllerutil.ContainsFinalizer(&claim, ipamv1.FinalizerDelegation)) {
		// Made for an earlier object of this pool's name (the pool was
		// restored from a backup): this member's claim for this pool
		// name, so the restored pool adopts it, and may release it. The
		// finalizer: see newClaim.
		before := claim.DeepCopy()
		metav1.SetMetaDataAnnotation(&claim.ObjectMeta, ipamv1.AnnotationMemberPoolUID, string(p.UID))
		controllerutil.AddFinalizer(&claim, ipamv1.FinalizerDelegation)
		// Locked: a merge patch replaces the whole finalizers list.
		if err := r.Hub.GetClient().Patch(hctx, &claim, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return r.hubFailed(p, key, held, err), err
		}
	}
	ready := meta.FindStatusCondition(claim.Status.Conditions, ipamv1.ConditionReady)
	granted, parseErr := ipspace.ParsePrefix(claim.Status.CIDR)
	if ready == nil || ready.Status != metav1.ConditionTrue || parseErr != nil {
		why := "waiting for the hub's decision"
		if ready != nil {
			why = fmt.Sprintf("%s: %s", ready.Reason, ready.Message)
		}
		if held {
			return ledger.DelegationState{Reason: ipamv1.ReasonDelegationLost,
				Message: fmt.Sprintf("the hub does not grant %s to its claim (Subnet %s) again: %s; still serving it", p.Spec.CIDR, key, why)}, nil
		}
		return pending(key, why), nil
	}
	if p.Spec.CIDR != "" && p.Spec.CIDR != granted.String() {
		return pending(key, fmt.Sprintf("the hub granted %s, but spec.cidr asks for %s: delete the pool, or the Subnet in the hub, to claim again", granted, p.Spec.CIDR)), nil
	}
	return ledger.DelegationState{Granted: granted, Reason: ipamv1.ReasonDelegated,
		Message: fmt.Sprintf("the hub granted %s from SubnetPool %s (Subnet %s in the hub)", granted, p.Spec.Delegation.PoolRef, key)}, nil
}

// terminatingClaim is the state of a pool whose claim was deleted in the
// hub. The member's finalizer keeps the claim, and so its range, held
// there while this pool may serve it: released with the pool. A claim
// still showing the range recorded in spec.cidr is this member's grant
// for this pool's name, served (a pool restored from a backup adopts it,
// as it adopts a claim that is not being deleted). One that holds nothing
// this pool serves is let go, and claimed again once it is gone: kept, it
// would hold the pool back for good.
func (r *MemberReconciler) terminatingClaim(ctx context.Context, p *ipamv1.SubnetPool, key types.NamespacedName, claim *ipamv1.Subnet, held bool) (ledger.DelegationState, error) {
	lost := ledger.DelegationState{Reason: ipamv1.ReasonDelegationLost,
		Message: fmt.Sprintf("the claim in the hub (Subnet %s) is being deleted there; it keeps %s for this pool until the pool is deleted", key, p.Spec.CIDR)}
	granted := claimGrant(claim)
	if controllerutil.ContainsFinalizer(claim, ipamv1.FinalizerDelegation) && claim.Spec.PoolRef == p.Spec.Delegation.PoolRef &&
		granted.IsValid() && granted.String() == p.Spec.CIDR {
		if claim.Annotations[ipamv1.AnnotationMemberPoolUID] != string(p.UID) {
			before := claim.DeepCopy()
			metav1.SetMetaDataAnnotation(&claim.ObjectMeta, ipamv1.AnnotationMemberPoolUID, string(p.UID))
			if err := r.Hub.GetClient().Patch(ctx, claim, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
				return r.hubFailed(p, key, held, err), err
			}
		}
		lost.Granted = granted
		return lost, nil
	}
	if held {
		return lost, nil // still serving what its status proves
	}
	// The range the claim holds may be an earlier object's of this name,
	// whose Subnets are still here (its finalizers removed by hand, so
	// release never ran): as release does, let it go only once nothing
	// here holds any of it. Retried with back-off: no event of ours
	// follows the last holder's deletion.
	if granted.IsValid() {
		if !r.Ledger.Synced() {
			return pending(key, "being deleted in the hub; waiting for the ledger to sync before letting it go"),
				errors.New("waiting for the ledger to sync before letting a terminating claim go")
		}
		if _, n := r.Ledger.HeldOverlapping(p.Namespace, p.Name, granted, 0); n > 0 {
			why := fmt.Sprintf("being deleted in the hub; kept, holding %s there, while %d claims of this pool hold ranges of it", granted, n)
			return pending(key, why), errors.New(why)
		}
	}
	if err := r.dropClaimFinalizer(ctx, claim); err != nil {
		return r.hubFailed(p, key, held, err), err
	}
	return pending(key, "being deleted in the hub; will claim again once it is gone"), nil
}

// claimGrant is the range a claim in the hub was granted: its status's,
// while Ready; invalid otherwise.
func claimGrant(claim *ipamv1.Subnet) netip.Prefix {
	if !meta.IsStatusConditionTrue(claim.Status.Conditions, ipamv1.ConditionReady) {
		return netip.Prefix{}
	}
	granted, err := ipspace.ParsePrefix(claim.Status.CIDR)
	if err != nil {
		return netip.Prefix{}
	}
	return granted
}

// spaceRefuses says why the pool's address space takes no root pool from
// its namespace, if it does not: a delegated pool is a root pool there,
// and one the space refuses must not take a range from the hub's plan.
func (r *MemberReconciler) spaceRefuses(p *ipamv1.SubnetPool) error {
	space := p.Spec.AddressSpace
	if space == "" {
		space = ipamv1.DefaultAddressSpace
	}
	switch view := r.Ledger.Space(space, p.Namespace); {
	case !view.Exists:
		return fmt.Errorf("AddressSpace %s does not exist", space)
	case !view.Allowed:
		return fmt.Errorf("address space %s takes no root pools from namespace %s", space, p.Namespace)
	}
	return nil
}

func pending(key types.NamespacedName, why string) ledger.DelegationState {
	return ledger.DelegationState{Reason: ipamv1.ReasonDelegationPending, Message: fmt.Sprintf("claim in the hub (Subnet %s): %s", key, why)}
}

// hubFailed is the state after a call to the hub failed: the hub refused
// the claim (its admission names the reason), or could not be reached.
func (r *MemberReconciler) hubFailed(p *ipamv1.SubnetPool, key types.NamespacedName, held bool, err error) ledger.DelegationState {
	if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsAlreadyExists(err) {
		if held {
			return ledger.DelegationState{Reason: ipamv1.ReasonDelegationLost,
				Message: fmt.Sprintf("the hub refused to grant %s again (Subnet %s): %v; still serving it", p.Spec.CIDR, key, err)}
		}
		return pending(key, fmt.Sprintf("the hub refused the claim: %v", err))
	}
	return ledger.DelegationState{Reason: ipamv1.ReasonHubUnreachable, Message: fmt.Sprintf("cannot reach the hub: %v", err)}
}

// newClaim is the Subnet that claims the pool's range in the hub: the
// range recorded in spec.cidr (granted before, or asked for explicitly),
// else a range of delegation.prefixLength.
func (r *MemberReconciler) newClaim(p *ipamv1.SubnetPool, key types.NamespacedName) ipamv1.Subnet {
	d := p.Spec.Delegation
	return ipamv1.Subnet{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: key.Namespace, Name: key.Name,
			Labels: map[string]string{ipamv1.LabelMemberCluster: r.ClusterName},
			// The member's finalizer: a claim deleted in the hub keeps
			// holding the range there until the member releases it (its
			// pool deleted), so that nobody else is granted a range the
			// member serves, whatever the member's state meanwhile.
			Finalizers: []string{ipamv1.FinalizerDelegation},
			Annotations: map[string]string{
				ipamv1.AnnotationMemberPool:    p.Namespace + "/" + p.Name,
				ipamv1.AnnotationMemberPoolUID: string(p.UID),
			},
		},
		Spec: ipamv1.SubnetSpec{PoolRef: d.PoolRef, CIDR: p.Spec.CIDR, PrefixLength: d.PrefixLength},
	}
}

// record writes the hub's grant into the pool's spec.cidr, once: a JSON
// patch that tests the UID and that no cidr is there yet, so it never lands
// on another object of that name nor overwrites a range. A spec.cidr
// already there is the grant (claim compared them).
func (r *MemberReconciler) record(ctx context.Context, p *ipamv1.SubnetPool, granted netip.Prefix) error {
	if p.Spec.CIDR != "" {
		return nil
	}
	ops := []map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": string(p.UID)},
		{"op": "add", "path": "/spec/cidr", "value": granted.String()},
	}
	data, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	if err := r.Client.Patch(ctx, p, client.RawPatch(types.JSONPatchType, data)); err != nil {
		return client.IgnoreNotFound(err)
	}
	logf.FromContext(ctx).Info("Recorded the hub's grant in the SubnetPool's spec", "cidr", granted)
	return nil
}

// setCondition writes the Delegated condition if it changed. The patch is
// locked (a merge patch replaces the whole conditions list, which the pool
// status reconciler writes too), and retried from a fresh read on a
// conflict, of the same object only.
func (r *MemberReconciler) setCondition(ctx context.Context, p *ipamv1.SubnetPool, st ledger.DelegationState) error {
	c := metav1.Condition{Type: ipamv1.ConditionDelegated, Status: metav1.ConditionFalse, Reason: st.Reason, Message: st.Message, ObservedGeneration: p.Generation}
	// True only on the hub's standing grant: a pool served on a claim
	// Terminating in the hub is granted its range, and lost it.
	if st.Granted.IsValid() && st.Reason == ipamv1.ReasonDelegated {
		c.Status = metav1.ConditionTrue
	}
	current := p
	return client.IgnoreNotFound(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		before := current.DeepCopy()
		if !meta.SetStatusCondition(&current.Status.Conditions, c) {
			return nil
		}
		err := r.Client.Status().Patch(ctx, current, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		if !apierrors.IsConflict(err) {
			return err
		}
		fresh := &ipamv1.SubnetPool{}
		if getErr := r.APIReader.Get(ctx, client.ObjectKeyFromObject(p), fresh); getErr != nil {
			return getErr
		}
		if fresh.UID != p.UID {
			return nil // another object of that name: its own reconcile
		}
		current = fresh
		return err
	}))
}

// release deletes the pool's claim in the hub once the pool holds nothing
// (its pool-protection finalizer is gone), then lets the pool go.
func (r *MemberReconciler) release(ctx context.Context, p *ipamv1.SubnetPool, key types.NamespacedName) error {
	if !controllerutil.ContainsFinalizer(p, ipamv1.FinalizerDelegation) || controllerutil.ContainsFinalizer(p, ipamv1.FinalizerPoolProtection) {
		return nil // in use: its update when that finalizer goes requeues it
	}
	// The pool-protection finalizer is a tenant's to remove too: the
	// ledger, not the finalizer, says whether Subnets or child pools still
	// hold ranges of the pool. Released while they do, the range could be
	// granted to another member. Retried with back-off: nothing of the
	// pool's own changes when its last user goes.
	if !r.Ledger.Synced() {
		return errors.New("waiting for the ledger to sync before releasing the claim in the hub")
	}
	if _, subnets, children := r.Ledger.Users(p.Namespace, p.Name, 0); subnets+children > 0 {
		return fmt.Errorf("%d Subnets and %d child pools still use the pool: its claim in the hub (Subnet %s) is kept until they are gone", subnets, children, key)
	}
	hctx, cancel := context.WithTimeout(ctx, r.HubTimeout)
	defer cancel()
	var claim ipamv1.Subnet
	err := r.Hub.GetAPIReader().Get(hctx, key, &claim)
	if err == nil {
		// Only this pool's claim: a claim another object of that name made
		// (a pool re-created meanwhile) is that one's.
		if uid := claim.Annotations[ipamv1.AnnotationMemberPoolUID]; uid == "" || uid == string(p.UID) {
			// The finalizer first, and retried on a conflict: a claim left
			// with it would hold its range in the hub for ever.
			if err := r.dropClaimFinalizer(hctx, &claim); err != nil {
				_ = r.setCondition(ctx, p, r.hubFailed(p, key, false, err))
				return err
			}
			err = r.Hub.GetClient().Delete(hctx, &claim, client.Preconditions{UID: &claim.UID})
		}
	}
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		_ = r.setCondition(ctx, p, r.hubFailed(p, key, false, err))
		return err
	}
	logf.FromContext(ctx).Info("Released the delegated pool's claim in the hub", "hubSubnet", key)
	before := p.DeepCopy()
	controllerutil.RemoveFinalizer(p, ipamv1.FinalizerDelegation)
	return client.IgnoreNotFound(r.Client.Patch(ctx, p, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})))
}

// dropClaimFinalizer removes the member's finalizer from its claim in the
// hub, so that the claim, being deleted, goes and frees its range there.
func (r *MemberReconciler) dropClaimFinalizer(ctx context.Context, claim *ipamv1.Subnet) error {
	if !controllerutil.ContainsFinalizer(claim, ipamv1.FinalizerDelegation) {
		return nil
	}
	before := claim.DeepCopy()
	controllerutil.RemoveFinalizer(claim, ipamv1.FinalizerDelegation)
	return r.Hub.GetClient().Patch(ctx, claim, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
}
