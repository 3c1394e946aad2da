package reconcilers

import (
	"context"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
)

func (f *fixture) allocationRecorder() *AllocationRecorder {
	r := &AllocationRecorder{Client: f.client, APIReader: f.client, Ledger: f.ledger, Rate: 1000, Workers: 1, Queued: func() int { return 0 }}
	r.limiter = newRecordLimiter(r.Rate)
	return r
}

// grant runs the Subnet reconciler and hands the stored result to the
// ledger, as the feed would.
func (f *fixture) grant(t *testing.T) *ipamv1.Subnet {
	t.Helper()
	ctx := context.Background()
	if _, err := f.subnetReconciler().Reconcile(ctx, reqFor(f.subnet)); err != nil {
		t.Fatal(err)
	}
	var s ipamv1.Subnet
	if err := f.client.Get(ctx, client.ObjectKeyFromObject(f.subnet), &s); err != nil {
		t.Fatal(err)
	}
	f.ledger.ApplySubnet(&s, ledger.Updated, nil)
	return &s
}

func TestRecorderWritesTheHeldRangeIntoSpec(t *testing.T) {
	f := newFixture(t, interceptor.Funcs{})
	ctx := context.Background()
	r := f.allocationRecorder()
	// Not granted yet: nothing to record.
	if _, err := r.Reconcile(ctx, reqFor(f.subnet)); err != nil {
		t.Fatal(err)
	}
	var s ipamv1.Subnet
	if err := f.client.Get(ctx, client.ObjectKeyFromObject(f.subnet), &s); err != nil {
		t.Fatal(err)
	}
	if s.Spec.CIDR != "" {
		t.Fatalf("recorded %q before any grant", s.Spec.CIDR)
	}
	granted := f.grant(t)
	if _, err := r.Reconcile(ctx, reqFor(f.subnet)); err != nil {
		t.Fatal(err)
	}
	if err := f.client.Get(ctx, client.ObjectKeyFromObject(f.subnet), &s); err != nil {
		t.Fatal(err)
	}
	if s.Spec.CIDR != granted.Status.CIDR || s.Spec.CIDR == "" || *s.Spec.PrefixLength != 26 {
		t.Errorf("spec %+v after recording the grant of %s", s.Spec, granted.Status.CIDR)
	}
}

// A Subnet that named neither a range nor a length (created before its
// pool, so admission could not fill in the pool's default) is recorded
// with the length of its range, in the same write: with cidr alone it
// would read as an explicit claim.
func TestRecorderRecordsTheLengthOfASubnetThatNamedNeither(t *testing.T) {
	var patches atomic.Int64
	f := newFixture(t, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			patches.Add(1)
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	ctx := context.Background()
	neither := f.subnet.DeepCopy()
	neither.Spec.PrefixLength = nil
	if err := f.client.Update(ctx, neither); err != nil {
		t.Fatal(err)
	}
	f.ledger.ApplySubnet(neither, ledger.Updated, nil)
	granted := f.grant(t) // the pool's default, 26
	if granted.Spec.PrefixLength != nil || granted.Status.CIDR == "" {
		t.Fatalf("the fixture needs a granted Subnet that names neither field: %+v, %+v", granted.Spec, granted.Status)
	}
	if _, err := f.allocationRecorder().Reconcile(ctx, reqFor(f.subnet)); err != nil {
		t.Fatal(err)
	}
	var s ipamv1.Subnet
	if err := f.client.Get(ctx, client.ObjectKeyFromObject(f.subnet), &s); err != nil {
		t.Fatal(err)
	}
	if s.Spec.CIDR != granted.Status.CIDR || s.Spec.PrefixLength == nil || *s.Spec.PrefixLength != 26 {
		t.Errorf("spec %+v after recording the grant of %s; want the range and its length", s.Spec, granted.Status.CIDR)
	}
	if n := patches.Load(); n != 1 {
		t.Errorf("recorded in %d spec writes, want 1", n)
	}
}

// The Subnet was deleted and created again under its name after the grant
// the ledger still shows: the first object's range must not be written into
// the second one's spec (that would claim it for an object never granted
// it).
func TestRecorderNeverRecordsOnARecreatedSubnet(t *testing.T) {
	f := newFixture(t, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if err := uidPrecondition(ctx, c, obj, patch); err != nil {
				return err
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	ctx := context.Background()
	f.grant(t)
	if err := f.client.Delete(ctx, &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "web"}}); err != nil {
		t.Fatal(err)
	}
	second := &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "web", UID: "uid-web-2"},
		Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: "dc"}, PrefixLength: ptr.To[int32](26)}}
	if err := f.client.Create(ctx, second); err != nil {
		t.Fatal(err)
	}
	if _, err := f.allocationRecorder().Reconcile(ctx, reqFor(f.subnet)); err != nil {
		t.Fatalf("a replaced Subnet is not an error: %v", err)
	}
	var got ipamv1.Subnet
	if err := f.client.Get(ctx, client.ObjectKeyFromObject(f.subnet), &got); err != nil {
		t.Fatal(err)
	}
	if got.UID != "uid-web-2" || got.Spec.CIDR != "" {
		t.Errorf("the second Subnet got the first one's record: %+v", got.Spec)
	}
}

// Records yield to grants: while a Subnet waits in the SubnetReconciler's
// queue, none is written.
func TestRecorderWaitsWhileGrantsAreQueued(t *testing.T) {
	f := newFixture(t, interceptor.Funcs{})
	f.grant(t)
	var queued atomic.Int64
	queued.Store(3)
	r := f.allocationRecorder()
	r.Queued = func() int { return int(queued.Load()) }
	ctx, cancel := context.WithTimeout(context.Background(), 3*yieldCheck)
	defer cancel()
	if _, err := r.Reconcile(ctx, reqFor(f.subnet)); err != nil || ctx.Err() == nil {
		t.Fatalf("reconcile with grants queued returned %v before its context ended (%v); want it to wait, then give up quietly", err, ctx.Err())
	}
	var s ipamv1.Subnet
	if err := f.client.Get(context.Background(), client.ObjectKeyFromObject(f.subnet), &s); err != nil {
		t.Fatal(err)
	}
	if s.Spec.CIDR != "" {
		t.Fatalf("recorded %q while grants were queued", s.Spec.CIDR)
	}
	queued.Store(0)
	if _, err := r.Reconcile(context.Background(), reqFor(f.subnet)); err != nil {
		t.Fatal(err)
	}
	if err := f.client.Get(context.Background(), client.ObjectKeyFromObject(f.subnet), &s); err != nil {
		t.Fatal(err)
	}
	if s.Spec.CIDR == "" {
		t.Error("not recorded once the queue was empty")
	}
}

func TestNeedsRecord(t *testing.T) {
	ready := []metav1.Condition{{Type: ipamv1.ConditionReady, Status: metav1.ConditionTrue, Reason: ipamv1.ReasonAllocated}}
	granted := func(spec ipamv1.SubnetSpec) *ipamv1.Subnet {
		return &ipamv1.Subnet{Spec: spec, Status: ipamv1.SubnetStatus{CIDR: "10.0.0.0/26", Conditions: ready}}
	}
	deleting := granted(ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: "dc"}, PrefixLength: ptr.To[int32](26)})
	deleting.DeletionTimestamp = &metav1.Time{}
	for _, tt := range []struct {
		name string
		s    *ipamv1.Subnet
		want bool
	}{
		{"a granted prefixLength claim", granted(ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: "dc"}, PrefixLength: ptr.To[int32](26)}), true},
		{"already recorded", granted(ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: "dc"}, PrefixLength: ptr.To[int32](26), CIDR: "10.0.0.0/26"}), false},
		{"an explicit claim", granted(ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: "dc"}, CIDR: "10.0.0.0/26"}), false},
		// Created before its pool: recorded with its length.
		{"neither field named", granted(ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: "dc"}}), true},
		{"not granted", &ipamv1.Subnet{Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: "dc"}, PrefixLength: ptr.To[int32](26)}}, false},
		{"being deleted", deleting, false},
	} {
		if got := needsRecord(tt.s); got != tt.want {
			t.Errorf("%s: needsRecord %v, want %v", tt.name, got, tt.want)
		}
	}
}
