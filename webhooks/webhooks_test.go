package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
)

const ns = "team-a"

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// world is the state a webhook answers from: the ledger, and the API
// server's view of it for the freshness barrier's watermarks.
type world struct {
	ledger *ledger.Ledger
	api    *fakeAPI
}

func newWorld(objects ...client.Object) *world {
	l := ledger.New()
	l.MarkSynced()
	w := &world{ledger: l, api: &fakeAPI{}}
	for _, o := range objects {
		w.add(o)
	}
	return w
}

// add puts an object in both the API server and the ledger, as the informer
// would moments later.
func (w *world) add(o client.Object) {
	w.api.add(o)
	switch obj := o.(type) {
	case *ipamv1.Subnet:
		w.ledger.ApplySubnet(obj, ledger.Created, nil)
	case *ipamv1.SubnetPool:
		w.ledger.ApplyPool(obj, ledger.Created, nil)
	}
}

func (w *world) subnetValidator() *SubnetValidator {
	return &SubnetValidator{Ledger: w.ledger, fresh: w.fresh(time.Second)}
}

func (w *world) poolValidator() *SubnetPoolValidator {
	return &SubnetPoolValidator{Ledger: w.ledger, fresh: w.fresh(time.Second)}
}

func (w *world) fresh(timeout time.Duration) *freshness {
	return newFreshness(w.api, w.ledger, timeout, time.Second)
}

// fakeAPI answers the barrier's LIST with limit=1: the namespace's (or
// every namespace's) count of the kind. (A real API server returns one item and remainingItemCount.)
type fakeAPI struct {
	client.Reader
	mu      sync.Mutex
	subnets map[string]int
	pools   map[string]int
	// onRead, if set, runs at the start of every read with its namespace
	// ("" for every namespace): a test delivers objects to the ledger
	// there, as an informer that lags the API server would.
	onRead func(namespace string)
	// namespaces are the labels of the namespaces the API server has (a
	// Get of another is NotFound).
	namespaces map[string]map[string]string
	// lists and gets count the reads made, for the tests that bound them.
	lists, gets int
}

// reads returns how many LISTs and GETs were made.
func (f *fakeAPI) reads() (lists, gets int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists, f.gets
}

// Get answers a read of a namespace's metadata.
func (f *fakeAPI) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gets++
	set, ok := f.namespaces[key.Name]
	if !ok {
		return apierrors.NewNotFound(corev1.Resource("namespaces"), key.Name)
	}
	obj.SetName(key.Name)
	obj.SetLabels(maps.Clone(set))
	return nil
}

func (f *fakeAPI) add(o client.Object) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.subnets == nil {
		f.subnets, f.pools = map[string]int{}, map[string]int{}
	}
	if _, ok := o.(*ipamv1.Subnet); ok {
		f.subnets[o.GetNamespace()]++
	} else {
		f.pools[o.GetNamespace()]++
	}
}

func (f *fakeAPI) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	o := (&client.ListOptions{}).ApplyOptions(opts)
	if f.onRead != nil {
		f.onRead(o.Namespace)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	inScope := func(counts map[string]int) int {
		if o.Namespace != "" {
			return counts[o.Namespace]
		}
		total := 0 // every namespace
		for _, n := range counts {
			total += n
		}
		return total
	}
	count := inScope(f.pools)
	switch l := list.(type) {
	case *ipamv1.SubnetList:
		count = inScope(f.subnets)
		if count > 0 {
			l.Items = make([]ipamv1.Subnet, 1)
		}
	case *ipamv1.SubnetPoolList:
		if count > 0 {
			l.Items = make([]ipamv1.SubnetPool, 1)
		}
	}
	if count > 1 {
		list.SetRemainingItemCount(ptr.To(int64(count - 1)))
	}
	list.SetResourceVersion("999999") // ahead of anything the ledger saw: counts decide
	return nil
}

func objectMeta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(t0)}
}

func pool(name, cidr string) *ipamv1.SubnetPool {
	return &ipamv1.SubnetPool{ObjectMeta: objectMeta(name), Spec: ipamv1.SubnetPoolSpec{CIDR: cidr}}
}

func child(name, parent, cidr string) *ipamv1.SubnetPool {
	p := pool(name, cidr)
	p.Spec.ParentRef = parentRef(parent)
	return p
}

func subnet(name, poolRef, cidr string) *ipamv1.Subnet {
	return &ipamv1.Subnet{ObjectMeta: objectMeta(name), Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: poolRef, Namespace: ns}, CIDR: cidr}}
}

func dynamicSubnet(name, poolRef string, length int32) *ipamv1.Subnet {
	s := subnet(name, poolRef, "")
	s.Spec.PrefixLength = ptr.To(length)
	return s
}

func allocated(s *ipamv1.Subnet, cidr string) *ipamv1.Subnet {
	s.Status.CIDR = cidr
	s.Status.Conditions = []metav1.Condition{{Type: ipamv1.ConditionReady, Status: metav1.ConditionTrue, Reason: ipamv1.ReasonAllocated}}
	return s
}

func withOp(op admissionv1.Operation) context.Context {
	return admission.NewContextWithRequest(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: op}})
}

// withUpdate is the context of an UPDATE of the stored object old.
func withUpdate(old client.Object) context.Context {
	raw, _ := json.Marshal(old)
	return admission.NewContextWithRequest(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Update, OldObject: runtime.RawExtension{Raw: raw}}})
}

// fieldErrors extracts the causes of an Invalid error as a field.ErrorList.
func fieldErrors(t *testing.T, err error) field.ErrorList {
	t.Helper()
	if err == nil {
		return nil
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || !apierrors.IsInvalid(err) {
		t.Fatalf("want an Invalid API error, got %T: %v", err, err)
	}
	var out field.ErrorList
	for _, c := range status.Status().Details.Causes {
		out = append(out, &field.Error{Type: field.ErrorType(c.Type), Field: c.Field, Detail: c.Message})
	}
	return out
}

// parentRef references the parent pool name in the pool's own namespace;
// none for "".
func parentRef(name string) *ipamv1.PoolReference {
	if name == "" {
		return nil
	}
	return &ipamv1.PoolReference{Name: name, Namespace: ns}
}

// poolDefaulter is the pools' defaulting webhook with a ledger that knows
// the test namespace (without an address-space label).
func poolDefaulter() *SubnetPoolDefaulter {
	l := ledger.New()
	l.ApplyNamespace(ns, nil, ledger.Created)
	return &SubnetPoolDefaulter{Ledger: l}
}
