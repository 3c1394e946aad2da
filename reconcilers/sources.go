package reconcilers

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

// ledgerSource feeds a controller's queue from the ledger's events through
// a mapper. The controllers take their events from the ledger rather than
// from their own informer handlers because the ledger publishes an event
// only after its state includes it: a reconcile never decides on a ledger
// older than the event that triggered it. (Handlers of one informer run in
// no defined order relative to each other.)
type ledgerSource struct {
	ledger *ledger.Ledger
	// reader reads around the cache, for the catch-up before the first
	// decision.
	reader client.Reader
	// mapEvent returns the requests an event calls for.
	mapEvent func(ledger.Event) []reconcile.Request
	// initial returns the requests to enqueue once at start: the events
	// published before the controller started (it starts on the leader,
	// after the informers' initial lists) are not replayed.
	initial func() []reconcile.Request
	// initialLow enqueues the initial requests behind every event's (a
	// backlog that must not delay what happens now), where the queue has
	// priorities (controller-runtime's default queue).
	initialLow bool
	// started, if set, is handed the controller's queue when it starts.
	started func(workqueue.TypedRateLimitingInterface[reconcile.Request])
}

var _ source.SyncingSource = &ledgerSource{}

// Start subscribes to the ledger and enqueues the initial requests.
func (s *ledgerSource) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	if s.started != nil {
		s.started(q)
	}
	unsubscribe := s.ledger.Subscribe(func(e ledger.Event) {
		for _, r := range s.mapEvent(e) {
			q.Add(r)
		}
	})
	go func() {
		<-ctx.Done()
		unsubscribe()
	}()
	go func() {
		// After the ledger's initial sync, which WaitForSync also awaits.
		if s.ledger.WaitForSync(ctx) != nil {
			return
		}
		initial := s.initial()
		if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok && s.initialLow {
			pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(handler.LowPriority)}, initial...)
			return
		}
		for _, r := range initial {
			q.Add(r)
		}
	}()
	return nil
}

// WaitForSync holds the controller's workers until the ledger has the
// informers' initial lists and has caught up with the API server: the
// arbiter decides only on a view that is restored and current. Controllers
// start when this replica becomes the leader; after a graceful hand-over its
// informers may still be delivering the old leader's last writes.
func (s *ledgerSource) WaitForSync(ctx context.Context) error {
	if err := s.ledger.WaitForSync(ctx); err != nil {
		return err
	}
	report, err := s.ledger.CatchUp(ctx, s.reader)
	if err != nil {
		return err
	}
	if report.Listed > 0 {
		logf.FromContext(ctx).Info("Caught up with the API server before the first decision",
			"objects", report.Listed, "behind", report.Behind, "duration", report.Duration)
	}
	return nil
}

func request(namespace, name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: namespace, Name: name}}
}

// wakeRequests turns an event's Wake list into requests for claims of kind.
func wakeRequests(e ledger.Event, kind string) []reconcile.Request {
	var out []reconcile.Request
	for _, k := range e.Wake {
		if k.Kind == kind {
			out = append(out, request(k.Namespace, k.Name))
		}
	}
	return out
}

// unwrapObject returns the object of an informer event, which on delete may
// be a tombstone (cache.DeletedFinalStateUnknown) when the watch missed the
// deletion.
func unwrapObject[T any](obj any) (T, bool) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	t, ok := obj.(T)
	return t, ok
}

// subnetToPool is the parent-requeue mapper of the seed design (§9): a
// Subnet's create, update or delete requeues the pool it claims from, in
// the pool's namespace (the reference's, else the Subnet's own). It returns
// nothing for a Subnet without a poolRef (only possible with the schema
// bypassed) and handles tombstones.
func subnetToPool(obj any) []reconcile.Request {
	s, ok := unwrapObject[*ipamv1.Subnet](obj)
	if !ok || s == nil || s.Spec.PoolRef.Name == "" || s.Namespace == "" {
		return nil
	}
	return []reconcile.Request{request(s.Spec.PoolRef.In(s.Namespace), s.Spec.PoolRef.Name)}
}

// childToParent requeues the parent of a child pool.
func childToParent(obj any) []reconcile.Request {
	p, ok := unwrapObject[*ipamv1.SubnetPool](obj)
	if !ok || p == nil || p.Spec.ParentRef == nil || p.Spec.ParentRef.Name == "" || p.Namespace == "" {
		return nil
	}
	return []reconcile.Request{request(p.Spec.ParentRef.In(p.Namespace), p.Spec.ParentRef.Name)}
}

// subnetEvents maps ledger events to the SubnetReconciler's requests: every
// Subnet that was created or changed, and every Subnet the ledger woke.
func subnetEvents(e ledger.Event) []reconcile.Request {
	out := wakeRequests(e, statuscalc.KindSubnet)
	if e.Kind == statuscalc.KindSubnet && e.Type != ledger.Deleted {
		out = append(out, request(e.Namespace, e.Name))
	}
	if e.Kind == ledger.KindAddress {
		// Its Subnet's status counts the addresses in use.
		out = append(out, request(e.Namespace, e.Subnet))
	}
	return out
}

// poolEvents maps ledger events to the PoolStatusReconciler's requests, the
// trigger events of the seed design (§10):
//  1. Subnet create/update/delete: its pool (subnetToPool), counted by
//     event type; an update that moved the Subnet (schema bypassed) also
//     requeues the old pool; an update of a Subnet that holds the same
//     range before and after, whose spec changed at most by the record of
//     that range, requeues nothing (ledger.Event.HeldAsBefore: the record and
//     the status write for its generation, two per dynamic Subnet);
//  2. a child pool deleted: its parent;
//  3. a child pool's spec, or the range its parent granted, changed: its
//     parent;
//  4. a pool's own spec changed (generation), it was created, is being
//     deleted, or its finalizers changed: the pool itself;
//  5. the external trigger: the ipam.subnet-operator.io/recompute
//     annotation changed: the pool itself;
//  6. a reconcile error: the controller's rate limiter requeues it;
//  7. a namespace's labels changed: the pools its claims use, whose
//     consent may now refuse them (ledger.Event.Pools).
//
// Unlike the seed, which filtered status-only updates with a generation
// predicate to avoid reconcile loops, a change of the pool's status requeues
// it too: a status that another client wrote is then corrected at once.
// There is no loop: our own write comes back as one reconcile that finds
// nothing to write. Updates that change nothing we look at requeue nothing.
// Child pools the ledger woke (their parent changed under them) are
// requeued too.
func poolEvents(e ledger.Event) []reconcile.Request {
	out := wakeRequests(e, statuscalc.KindSubnetPool)
	switch e.Kind {
	case statuscalc.KindSubnet:
		if e.Type == ledger.Updated && e.HeldAsBefore {
			break
		}
		reqs := subnetToPool(e.Object)
		if e.Type == ledger.Updated {
			if old := subnetToPool(e.OldObject); len(old) == 1 && (len(reqs) == 0 || old[0] != reqs[0]) {
				reqs = append(reqs, old...)
			}
		}
		parentRequeues.WithLabelValues(string(e.Type)).Add(float64(len(reqs)))
		out = append(out, reqs...)
	case ledger.KindNamespace:
		// 7. a namespace's labels changed: the pools its claims use
		// (their ClaimsNotAllowed condition).
		for _, p := range e.Pools {
			out = append(out, request(p.Namespace, p.Name))
		}
	case statuscalc.KindSubnetPool:
		if e.Type != ledger.Updated || poolChanged(e.OldObject, e.Object) {
			out = append(out, request(e.Namespace, e.Name))
		}
		if e.Type != ledger.Updated || childChanged(e.OldObject, e.Object) {
			parents := childToParent(e.Object)
			parentRequeues.WithLabelValues(string(e.Type)).Add(float64(len(parents)))
			out = append(out, parents...)
		}
	}
	return out
}

// poolChanged reports whether an update of a pool needs its own reconcile.
func poolChanged(oldObj, newObj any) bool {
	old, ok1 := oldObj.(*ipamv1.SubnetPool)
	p, ok2 := newObj.(*ipamv1.SubnetPool)
	if !ok1 || !ok2 {
		return true
	}
	return old.Generation != p.Generation ||
		old.Annotations[ipamv1.AnnotationRecompute] != p.Annotations[ipamv1.AnnotationRecompute] ||
		!old.DeletionTimestamp.Equal(p.DeletionTimestamp) ||
		len(old.Finalizers) != len(p.Finalizers) ||
		!equality.Semantic.DeepEqual(old.Status, p.Status)
}

// childChanged reports whether an update of a child pool changes what its
// parent reports: its requested range (spec) or its granted range (status).
func childChanged(oldObj, newObj any) bool {
	old, ok1 := oldObj.(*ipamv1.SubnetPool)
	p, ok2 := newObj.(*ipamv1.SubnetPool)
	if !ok1 || !ok2 {
		return true
	}
	return old.Generation != p.Generation || old.Status.CIDR != p.Status.CIDR || !old.DeletionTimestamp.Equal(p.DeletionTimestamp)
}
