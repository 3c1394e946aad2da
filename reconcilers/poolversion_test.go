package reconcilers

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
)

// The ledger is one of the pool informer's handlers, and the informer
// updates its store before it calls them: a reconcile can read a pool from
// the cache at a version the ledger has not applied yet. A backup tool
// that creates a delegated pool and then restores its status does just
// that. A status written from the ledger's older view (no status yet)
// erased the restored range the pool must keep from local root pools until
// the hub answers: the optimistic lock does not catch it, since the write
// is based on the newest object. The pool waits for the ledger's event.
func TestPoolStatusIsNotWrittenFromAnOlderVersionThanTheCachedOne(t *testing.T) {
	f := newFixture(t, interceptor.Funcs{})
	ctx := context.Background()
	restored := delegatedPool(ipamv1.FinalizerPoolProtection)
	if err := f.client.Create(ctx, restored); err != nil {
		t.Fatal(err)
	}
	// The ledger applies the create: no status yet.
	f.ledger.ApplyPool(restored.DeepCopy(), ledger.Created, nil)
	// The backup tool restores the status: the cache has it, the ledger
	// has not applied it yet.
	restored.Status = ipamv1.SubnetPoolStatus{CIDR: "10.7.0.0/16", GrantedToUID: "uid-of-the-backed-up-pool"}
	if err := f.client.Status().Update(ctx, restored); err != nil {
		t.Fatal(err)
	}

	r := f.poolReconciler()
	if _, err := r.Reconcile(ctx, reqFor(restored)); err != nil {
		t.Fatal(err)
	}
	var got ipamv1.SubnetPool
	if err := f.client.Get(ctx, client.ObjectKeyFromObject(restored), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.CIDR != "10.7.0.0/16" {
		t.Fatalf("a status written from the ledger's view of an older version erased the restored range: status %+v", got.Status)
	}

	// The ledger applies the restored status; its event's reconcile keeps
	// the range, not served: the hub has not granted it to this object.
	f.ledger.ApplyPool(got.DeepCopy(), ledger.Updated, nil)
	if _, err := r.Reconcile(ctx, reqFor(restored)); err != nil {
		t.Fatal(err)
	}
	if err := f.client.Get(ctx, client.ObjectKeyFromObject(restored), &got); err != nil {
		t.Fatal(err)
	}
	ready := meta.FindStatusCondition(got.Status.Conditions, ipamv1.ConditionReady)
	if got.Status.CIDR != "10.7.0.0/16" || ready == nil || ready.Status != metav1.ConditionFalse {
		t.Errorf("the restored range, kept and not served: status.cidr %q, Ready %+v", got.Status.CIDR, ready)
	}
}

// Found by review of 0bb4b34. A delegated pool created without the pool-protection
// finalizer (applied from Git, or by a backup tool), then its status
// restored. The cache and the ledger both still show the create (C). The
// reconciler adds its finalizer with an optimistically locked patch based
// on C: it conflicts (the restore landed), patchFinalizers reads the
// restored version around the cache and patches that (F). The decision the
// ledger made on C then passes the version check (PoolVersion == the
// cached version) and is written onto F, erasing the restored range: the
// very hole 0bb4b34 closes for the cache-ahead case.
func TestPoolStatusIsNotWrittenOntoARestoreTheFinalizerRetryRead(t *testing.T) {
	f := newFixture(t, interceptor.Funcs{})
	ctx := context.Background()
	created := delegatedPool() // no finalizer yet: applied from Git, or by a backup tool
	if err := f.client.Create(ctx, created); err != nil {
		t.Fatal(err)
	}
	atCreate := created.DeepCopy() // what the cache and the ledger show
	f.ledger.ApplyPool(atCreate.DeepCopy(), ledger.Created, nil)

	// The backup tool restores the status; neither the cache nor the
	// ledger has that version yet.
	restored := created.DeepCopy()
	restored.Status = ipamv1.SubnetPoolStatus{CIDR: "10.7.0.0/16", GrantedToUID: "uid-of-the-backed-up-pool"}
	if err := f.client.Status().Update(ctx, restored); err != nil {
		t.Fatal(err)
	}

	// The cache: one version behind the API server.
	cache := interceptor.NewClient(f.client.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if p, ok := obj.(*ipamv1.SubnetPool); ok && key == client.ObjectKeyFromObject(atCreate) {
				atCreate.DeepCopyInto(p)
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	r := &PoolStatusReconciler{Client: cache, APIReader: f.client, Ledger: f.ledger, Recorder: f.recorder}
	if _, err := r.Reconcile(ctx, reqFor(created)); err != nil {
		t.Fatal(err)
	}
	var got ipamv1.SubnetPool
	if err := f.client.Get(ctx, client.ObjectKeyFromObject(created), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.CIDR != "10.7.0.0/16" {
		t.Fatalf("a status from the ledger's view of the create was written onto the restored version read by the finalizer retry: restored range erased, status %+v", got.Status)
	}
}

// delegatedPool is the member pool network/pods, delegated from the hub's
// platform/plan, its grant 10.7.0.0/16 recorded in spec.cidr.
func delegatedPool(finalizers ...string) *ipamv1.SubnetPool {
	return &ipamv1.SubnetPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "network", Name: "pods", UID: "uid-pods", CreationTimestamp: created, Generation: 1,
			Finalizers: finalizers},
		Spec: ipamv1.SubnetPoolSpec{CIDR: "10.7.0.0/16", DefaultPrefixLength: ptr.To[int32](24),
			Delegation: &ipamv1.PoolDelegation{PoolRef: ipamv1.PoolReference{Namespace: "platform", Name: "plan"}, PrefixLength: ptr.To[int32](16)}},
	}
}
