package reconcilers

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
)

var created = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))

// fixture is a pool with a dynamic Subnet, in a fake API and in the ledger.
type fixture struct {
	ledger   *ledger.Ledger
	client   client.Client
	recorder *events.FakeRecorder
	pool     *ipamv1.SubnetPool
	subnet   *ipamv1.Subnet
}

func newFixture(t *testing.T, funcs interceptor.Funcs) *fixture {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := ipamv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	pool := &ipamv1.SubnetPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "dc", UID: "uid-dc", CreationTimestamp: created, Generation: 1},
		Spec:       ipamv1.SubnetPoolSpec{CIDR: "10.0.0.0/24", DefaultPrefixLength: ptr.To[int32](26)},
		Status:     ipamv1.SubnetPoolStatus{CIDR: "10.0.0.0/24"}, // granted by its address space
	}
	sub := &ipamv1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "web", UID: "uid-web", CreationTimestamp: created, Generation: 1},
		Spec:       ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: "dc"}, PrefixLength: ptr.To[int32](26)},
	}
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(pool.DeepCopy(), sub.DeepCopy()).
		WithStatusSubresource(&ipamv1.Subnet{}, &ipamv1.SubnetPool{}).
		// The API server's selectable field, which the fake client serves
		// as an index.
		WithIndex(&ipamv1.Subnet{}, FieldSubnetPoolRef, func(o client.Object) []string {
			return []string{o.(*ipamv1.Subnet).Spec.PoolRef.Name}
		}).
		WithIndex(&ipamv1.SubnetPool{}, IndexPoolParentRef, poolParentRef).
		WithInterceptorFuncs(funcs).
		Build()
	// The ledger gets the objects as stored (with their resourceVersions),
	// as the feed would deliver them.
	for _, o := range []client.Object{pool, sub} {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(o), o); err != nil {
			t.Fatal(err)
		}
	}
	l := ledger.New()
	l.MarkSynced()
	l.ApplyPool(pool, ledger.Created, nil)
	l.ApplySubnet(sub, ledger.Created, nil)
	return &fixture{ledger: l, client: c, recorder: events.NewFakeRecorder(10), pool: pool, subnet: sub}
}

func (f *fixture) subnetReconciler() *SubnetReconciler {
	return &SubnetReconciler{Client: f.client, APIReader: f.client, Ledger: f.ledger, Recorder: f.recorder}
}

func (f *fixture) poolReconciler() *PoolStatusReconciler {
	return &PoolStatusReconciler{Client: f.client, APIReader: f.client, Ledger: f.ledger, Recorder: f.recorder}
}

func reqFor(o client.Object) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}}
}

func TestSubnetReconcileWritesTheDecision(t *testing.T) {
	f := newFixture(t, interceptor.Funcs{})
	if _, err := f.subnetReconciler().Reconcile(context.Background(), reqFor(f.subnet)); err != nil {
		t.Fatal(err)
	}
	var got ipamv1.Subnet
	if err := f.client.Get(context.Background(), client.ObjectKeyFromObject(f.subnet), &got); err != nil {
		t.Fatal(err)
	}
	ready := meta.FindStatusCondition(got.Status.Conditions, ipamv1.ConditionReady)
	if got.Status.CIDR != "10.0.0.0/26" || got.Status.Addresses != "64" || ready == nil || ready.Status != metav1.ConditionTrue ||
		ready.Reason != ipamv1.ReasonAllocated || ready.ObservedGeneration != 1 || got.Status.ObservedGeneration != 1 {
		t.Errorf("status %+v", got.Status)
	}
	if e := <-f.recorder.Events; !strings.Contains(e, "Allocated Holds 10.0.0.0/26") {
		t.Errorf("event %q", e)
	}
}

// A reconcile that runs before the feed shows our status write (a wake
// from another claim's event, at one client) must not write the same grant
// again, nor announce it twice. The ledger here never sees the write.
func TestSubnetReconcileDoesNotRewriteWhileTheCacheLags(t *testing.T) {
	patches := 0
	f := newFixture(t, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if _, ok := obj.(*ipamv1.Subnet); ok {
				patches++
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	ctx := context.Background()
	r := f.subnetReconciler()
	for range 2 {
		if _, err := r.Reconcile(ctx, reqFor(f.subnet)); err != nil {
			t.Fatal(err)
		}
	}
	if patches != 1 {
		t.Errorf("%d status patches; want 1: the second reconcile should start from our own write", patches)
	}
	if n := len(f.recorder.Events); n != 1 {
		t.Errorf("%d events; want one Allocated", n)
	}
}

// Trigger event 6: a failed write returns the error, so the controller
// requeues with back-off; a failure that may have landed (a timeout) keeps
// the grant, so the retry writes the same range.
func TestSubnetReconcileErrorRequeuesAndKeepsTheGrant(t *testing.T) {
	failures := 1
	f := newFixture(t, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if failures > 0 {
				failures--
				return apierrors.NewTimeoutError("the API server is slow", 1)
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	r := f.subnetReconciler()
	if _, err := r.Reconcile(context.Background(), reqFor(f.subnet)); err == nil {
		t.Fatal("want the write error")
	}
	if d, _ := f.ledger.DecideSubnet("team-a", "web", "uid-web"); !d.Assumed || d.CIDR.String() != "10.0.0.0/26" {
		t.Fatalf("grant lost after a timeout: %+v", d)
	}
	if _, err := r.Reconcile(context.Background(), reqFor(f.subnet)); err != nil {
		t.Fatal(err)
	}
	var got ipamv1.Subnet
	_ = f.client.Get(context.Background(), client.ObjectKeyFromObject(f.subnet), &got)
	if got.Status.CIDR != "10.0.0.0/26" {
		t.Errorf("retry wrote %q", got.Status.CIDR)
	}
}

// A grant that can never be written (the Subnet is gone) is released.
func TestSubnetReconcileForgetsAGrantForAGoneSubnet(t *testing.T) {
	f := newFixture(t, interceptor.Funcs{
		SubResourcePatch: func(context.Context, client.Client, string, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
			return apierrors.NewNotFound(ipamv1.GroupVersion.WithResource("subnets").GroupResource(), "web")
		},
	})
	if _, err := f.subnetReconciler().Reconcile(context.Background(), reqFor(f.subnet)); err != nil {
		t.Fatalf("a gone Subnet is not an error: %v", err)
	}
	figures, _ := f.ledger.PoolFigures("team-a", "dc")
	if figures.Usage.Held.Sign() != 0 {
		t.Errorf("the pool still holds %s for a gone Subnet", figures.Usage.Held)
	}
}

// The user deletes a Subnet and creates it again under the same name while
// the controller's grant for the first object is on its way: the write must
// not land on the second object (the first one's range may already be
// granted to another claim), and the grant is withdrawn.
func TestSubnetGrantNeverLandsOnARecreatedSubnet(t *testing.T) {
	recreated := false
	f := newFixture(t, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if !recreated {
				recreated = true
				s := &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "web"}}
				if err := c.Delete(ctx, s); err != nil {
					return err
				}
				s = &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "web", UID: "uid-web-2"},
					Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: "dc"}, PrefixLength: ptr.To[int32](26)}}
				if err := c.Create(ctx, s); err != nil {
					return err
				}
			}
			if err := uidPrecondition(ctx, c, obj, patch); err != nil {
				return err
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	if _, err := f.subnetReconciler().Reconcile(context.Background(), reqFor(f.subnet)); err != nil {
		t.Fatalf("a replaced Subnet is not an error: %v", err)
	}
	var got ipamv1.Subnet
	if err := f.client.Get(context.Background(), client.ObjectKeyFromObject(f.subnet), &got); err != nil {
		t.Fatal(err)
	}
	if got.UID != "uid-web-2" || got.Status.CIDR != "" || len(got.Status.Conditions) != 0 {
		t.Errorf("the second Subnet got the first one's decision: %+v", got.Status)
	}
	if figures, _ := f.ledger.PoolFigures("team-a", "dc"); figures.Usage.Held.Sign() != 0 {
		t.Errorf("the pool still holds %s for the first Subnet", figures.Usage.Held)
	}
}

// uidPrecondition answers a JSON patch whose "test" of metadata.uid fails as
// kube-apiserver does: 422 Invalid. (The fake client applies the patch but
// returns the JSON-patch library's plain error; the integration test
// TestStatusWriteIsPreconditionedOnTheUID checks the real server.)
func uidPrecondition(ctx context.Context, c client.Client, obj client.Object, patch client.Patch) error {
	if patch.Type() != types.JSONPatchType {
		return nil
	}
	data, err := patch.Data(obj)
	if err != nil {
		return err
	}
	var ops []struct {
		Op, Path string
		Value    any
	}
	if err := json.Unmarshal(data, &ops); err != nil {
		return err
	}
	stored := obj.DeepCopyObject().(client.Object)
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), stored); err != nil {
		return err
	}
	for _, op := range ops {
		if op.Op == "test" && op.Path == "/metadata/uid" && op.Value != string(stored.GetUID()) {
			return apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "patch", schema.GroupResource{}, "", "test failed", 0, false)
		}
	}
	return nil
}

// The cache is a moment behind: another client added its finalizer to the
// pool. Adding ours must keep theirs.
func TestPoolFinalizerKeepsAnotherClientsFinalizer(t *testing.T) {
	var stale *ipamv1.SubnetPool
	f := newFixture(t, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if p, ok := obj.(*ipamv1.SubnetPool); ok && stale != nil {
				stale.DeepCopyInto(p)
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	ctx := context.Background()
	var p ipamv1.SubnetPool
	if err := f.client.Get(ctx, client.ObjectKeyFromObject(f.pool), &p); err != nil {
		t.Fatal(err)
	}
	stale = p.DeepCopy()
	p.Finalizers = append(p.Finalizers, "example.com/backup")
	if err := f.client.Update(ctx, &p); err != nil {
		t.Fatal(err)
	}
	r := f.poolReconciler()
	r.APIReader = readerFunc(func(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		cache := stale
		stale = nil
		defer func() { stale = cache }()
		return f.client.Get(ctx, key, obj, opts...)
	})
	if _, err := r.Reconcile(ctx, reqFor(f.pool)); err != nil {
		t.Fatal(err)
	}
	stale = nil
	if err := f.client.Get(ctx, client.ObjectKeyFromObject(f.pool), &p); err != nil {
		t.Fatal(err)
	}
	if want := []string{"example.com/backup", ipamv1.FinalizerPoolProtection}; !slices.Equal(p.Finalizers, want) {
		t.Errorf("finalizers %v, want %v", p.Finalizers, want)
	}
}

func TestPoolReconcileAddsFinalizerAndStatus(t *testing.T) {
	f := newFixture(t, interceptor.Funcs{})
	if _, err := f.poolReconciler().Reconcile(context.Background(), reqFor(f.pool)); err != nil {
		t.Fatal(err)
	}
	var got ipamv1.SubnetPool
	_ = f.client.Get(context.Background(), client.ObjectKeyFromObject(f.pool), &got)
	if len(got.Finalizers) != 1 || got.Finalizers[0] != ipamv1.FinalizerPoolProtection {
		t.Errorf("finalizers %v", got.Finalizers)
	}
	if got.Status.CIDR != "10.0.0.0/24" || got.Status.Capacity != "256" || got.Status.Subnets != 1 || got.Status.AllocatableBlocks != "4" ||
		!meta.IsStatusConditionTrue(got.Status.Conditions, ipamv1.ConditionReady) {
		t.Errorf("status %+v", got.Status)
	}
}

// Another client writes the pool's status between our read and our write:
// the optimistic lock fails. The decision was made without that version,
// so it is not retried on it: the reconcile asks to be requeued, and once
// the ledger has applied the new version, the next reconcile converges.
func TestPoolReconcileConvergesAfterAConflictingWrite(t *testing.T) {
	conflicts := 1
	f := newFixture(t, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if conflicts > 0 {
				conflicts--
				// The other writer lands first.
				var p ipamv1.SubnetPool
				_ = c.Get(ctx, client.ObjectKeyFromObject(obj), &p)
				p.Status.Utilization = "99.99%"
				_ = c.Status().Update(ctx, &p)
				return apierrors.NewConflict(ipamv1.GroupVersion.WithResource("subnetpools").GroupResource(), obj.GetName(), errors.New("modified"))
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	ctx := context.Background()
	r := f.poolReconciler()
	res, err := r.Reconcile(ctx, reqFor(f.pool))
	if err != nil || res.RequeueAfter <= 0 {
		t.Fatalf("after a conflict: %+v %v, want a requeue", res, err)
	}
	var got ipamv1.SubnetPool
	_ = f.client.Get(ctx, client.ObjectKeyFromObject(f.pool), &got)
	if got.Status.Utilization != "99.99%" {
		t.Fatalf("utilization %q: the other writer's version was written over with a decision made without it", got.Status.Utilization)
	}
	f.ledger.ApplyPool(got.DeepCopy(), ledger.Updated, nil) // the informer delivers it
	if _, err := r.Reconcile(ctx, reqFor(f.pool)); err != nil {
		t.Fatal(err)
	}
	_ = f.client.Get(ctx, client.ObjectKeyFromObject(f.pool), &got)
	if got.Status.Utilization != "0.00%" {
		t.Errorf("utilization %q after the conflict; want the controller's 0.00%%", got.Status.Utilization)
	}
}

func TestPoolFinalizerStaysWhileInUse(t *testing.T) {
	f := newFixture(t, interceptor.Funcs{})
	ctx := context.Background()
	r := f.poolReconciler()
	if _, err := r.Reconcile(ctx, reqFor(f.pool)); err != nil { // adds the finalizer
		t.Fatal(err)
	}
	var p ipamv1.SubnetPool
	_ = f.client.Get(ctx, client.ObjectKeyFromObject(f.pool), &p)
	if err := f.client.Delete(ctx, &p); err != nil {
		t.Fatal(err)
	}
	_ = f.client.Get(ctx, client.ObjectKeyFromObject(f.pool), &p)
	f.ledger.ApplyPool(&p, ledger.Updated, nil)
	if _, err := r.Reconcile(ctx, reqFor(f.pool)); err != nil {
		t.Fatal(err)
	}
	if err := f.client.Get(ctx, client.ObjectKeyFromObject(f.pool), &p); err != nil {
		t.Fatalf("the pool went while a Subnet uses it: %v", err)
	}
	if c := meta.FindStatusCondition(p.Status.Conditions, ipamv1.ConditionReady); c == nil || c.Reason != ipamv1.ReasonTerminating {
		t.Errorf("Ready %+v", c)
	}
	// The Subnet goes: the finalizer is removed and the pool with it.
	_ = f.client.Delete(ctx, f.subnet.DeepCopy())
	f.ledger.DeleteSubnet(f.subnet)
	if _, err := r.Reconcile(ctx, reqFor(f.pool)); err != nil {
		t.Fatal(err)
	}
	if err := f.client.Get(ctx, client.ObjectKeyFromObject(f.pool), &p); !apierrors.IsNotFound(err) {
		t.Errorf("the pool is still there: %v", err)
	}
}

// The informer delivers our own status write a moment after the reconcile
// that made it; the next reconcile reads a cached pool one write behind. It
// must start from its own last write, not conflict and read around the
// cache.
func TestPoolReconcileStartsFromItsOwnWriteWhenTheCacheLags(t *testing.T) {
	var lagging *ipamv1.SubnetPool // what the cache shows while it lags
	aroundCache := false           // a read around the cache sees the truth
	conflicts := 0
	f := newFixture(t, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if p, ok := obj.(*ipamv1.SubnetPool); ok && lagging != nil && !aroundCache {
				lagging.DeepCopyInto(p)
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			err := c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			if apierrors.IsConflict(err) {
				conflicts++
			}
			return err
		},
	})
	ctx := context.Background()
	apiReader := func() client.Reader {
		return readerFunc(func(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			aroundCache = true
			defer func() { aroundCache = false }()
			return f.client.Get(ctx, key, obj, opts...)
		})
	}
	r := f.poolReconciler()
	r.APIReader = apiReader()
	claim := func(name string) {
		s := f.subnet.DeepCopy()
		s.Name, s.UID = name, types.UID("uid-"+name)
		f.ledger.ApplySubnet(s, ledger.Created, nil)
		if _, err := r.Reconcile(ctx, reqFor(f.pool)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Reconcile(ctx, reqFor(f.pool)); err != nil {
		t.Fatal(err)
	}
	var p ipamv1.SubnetPool
	if err := f.client.Get(ctx, client.ObjectKeyFromObject(f.pool), &p); err != nil {
		t.Fatal(err)
	}
	lagging = p.DeepCopy() // from now on the cache stays here
	// The ledger is one of the informer's handlers: it has applied what
	// the cache shows.
	f.ledger.ApplyPool(p.DeepCopy(), ledger.Updated, nil)
	claim("web-2") // starts from the cache, which is current: writes
	claim("web-3") // the cache is one write behind
	lagging = nil
	if err := f.client.Get(ctx, client.ObjectKeyFromObject(f.pool), &p); err != nil {
		t.Fatal(err)
	}
	if p.Status.Subnets != 3 {
		t.Errorf("status counts %d Subnets, want 3", p.Status.Subnets)
	}
	if conflicts != 0 {
		t.Errorf("%d status patches conflicted; the reconcile should have started from its own last write", conflicts)
	}

	// Another writer's change is not ours to skip: with a fresh reconciler
	// (a new leader, no own writes) the lock still catches the stale copy.
	lagging = p.DeepCopy()
	f.ledger.ApplyPool(p.DeepCopy(), ledger.Updated, nil)
	p.Status.Utilization = "99.99%"
	if err := f.client.Status().Update(ctx, &p); err != nil {
		t.Fatal(err)
	}
	r = f.poolReconciler()
	r.APIReader = apiReader()
	lagging.Status.Subnets = 0 // the stale copy differs from what the ledger says: a write is due
	if _, err := r.Reconcile(ctx, reqFor(f.pool)); err != nil {
		t.Fatal(err)
	}
	if conflicts != 1 {
		t.Errorf("%d conflicts: the other writer's change should conflict", conflicts)
	}
	// The informer delivers the other writer's version: corrected.
	lagging = nil
	_ = f.client.Get(ctx, client.ObjectKeyFromObject(f.pool), &p)
	f.ledger.ApplyPool(p.DeepCopy(), ledger.Updated, nil)
	if _, err := r.Reconcile(ctx, reqFor(f.pool)); err != nil {
		t.Fatal(err)
	}
	_ = f.client.Get(ctx, client.ObjectKeyFromObject(f.pool), &p)
	if p.Status.Utilization == "99.99%" {
		t.Errorf("utilization %q: the other writer's change should be corrected", p.Status.Utilization)
	}
}

// readerFunc is a client.Reader that can only Get.
type readerFunc func(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error

func (f readerFunc) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return f(ctx, key, obj, opts...)
}

func (readerFunc) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("not implemented in this test")
}

func TestLastWritesUsesOnlyANewerWriteOfTheSamePool(t *testing.T) {
	pool := func(uid, rv, utilization string) *ipamv1.SubnetPool {
		return &ipamv1.SubnetPool{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "dc", UID: types.UID(uid), ResourceVersion: rv},
			Status:     ipamv1.SubnetPoolStatus{Utilization: utilization},
		}
	}
	for _, tc := range []struct {
		name   string
		cached *ipamv1.SubnetPool
		want   string // the utilization the reconcile starts from
	}{
		{"the cache is behind our write", pool("a", "5", "cached"), "ours"},
		{"the cache has caught up", pool("a", "10", "cached"), "cached"},
		{"the cache is ahead", pool("a", "12", "cached"), "cached"},
		{"a new pool of the same name", pool("b", "5", "cached"), "cached"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w lastWrites[*ipamv1.SubnetPool]
			w.record(pool("a", "10", "ours"))
			got := tc.cached
			if own, ok := w.newer(tc.cached); ok {
				got = own
			}
			if got.Status.Utilization != tc.want {
				t.Errorf("starts from %q, want %q", got.Status.Utilization, tc.want)
			}
			if tc.want == "cached" && len(w.objects) != 0 {
				t.Errorf("kept a write the cache has passed: %v", w.objects)
			}
		})
	}
}

func TestLastWritesForgetsAWriteTheInformerDelivered(t *testing.T) {
	subnet := func(rv string) *ipamv1.Subnet {
		return &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "web", UID: "a", ResourceVersion: rv}}
	}
	var w lastWrites[*ipamv1.Subnet]
	w.record(subnet("10"))
	w.seen(subnet("9")) // an older event: our write is still in flight
	if _, ok := w.newer(subnet("9")); !ok {
		t.Fatal("forgot a write the informer has not delivered")
	}
	w.seen(subnet("10"))
	if len(w.objects) != 0 {
		t.Errorf("kept a delivered write: %v", w.objects)
	}
}

// A bulk create is not turned into as many Allocated events: past the
// burst they are skipped and counted. The status is written for each.
func TestAllocatedEventsArePaced(t *testing.T) {
	f := newFixture(t, interceptor.Funcs{})
	second := f.subnet.DeepCopy()
	second.Name, second.UID, second.ResourceVersion = "db", "uid-db", ""
	if err := f.client.Create(context.Background(), second); err != nil {
		t.Fatal(err)
	}
	f.ledger.ApplySubnet(second, ledger.Created, nil)
	r := f.subnetReconciler()
	r.allocatedEvents = rate.NewLimiter(0, 1) // one, then none
	skippedBefore := testutil.ToFloat64(allocatedEventsSkipped)
	for _, s := range []*ipamv1.Subnet{f.subnet, second} {
		if _, err := r.Reconcile(context.Background(), reqFor(s)); err != nil {
			t.Fatal(err)
		}
		var got ipamv1.Subnet
		if err := f.client.Get(context.Background(), client.ObjectKeyFromObject(s), &got); err != nil {
			t.Fatal(err)
		}
		if !meta.IsStatusConditionTrue(got.Status.Conditions, ipamv1.ConditionReady) {
			t.Errorf("%s not Ready: %+v", s.Name, got.Status)
		}
	}
	if n := len(f.recorder.Events); n != 1 {
		t.Errorf("%d events; want 1", n)
	}
	if d := testutil.ToFloat64(allocatedEventsSkipped) - skippedBefore; d != 1 {
		t.Errorf("skipped counter moved by %v; want 1", d)
	}
}
