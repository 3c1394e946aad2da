package capi

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	capiipam "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
)

const testNS = "machines"

// world is a claim controller over a fake API server, with the ledger fed
// as the informer would feed it.
type world struct {
	t      *testing.T
	c      client.Client
	l      *ledger.Ledger
	r      *ClaimReconciler
	events *events.FakeRecorder
}

// subnetObject is a Subnet holding cidr (Ready), or not Ready with reason
// when cidr is empty.
func subnetObject(name, cidr, gateway, reason string) *ipamv1.Subnet {
	s := &ipamv1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, UID: types.UID("subnet-" + name), ResourceVersion: "1", Generation: 1},
		Spec:       ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: "dc"}, CIDR: "10.0.0.0/24", Gateway: gateway},
	}
	if cidr != "" {
		s.Spec.CIDR = cidr
		s.Status.CIDR = cidr
		s.Status.Conditions = []metav1.Condition{{Type: ipamv1.ConditionReady, Status: metav1.ConditionTrue, Reason: ipamv1.ReasonAllocated}}
	} else {
		s.Status.Conditions = []metav1.Condition{{Type: ipamv1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason}}
	}
	return s
}

func newWorld(t *testing.T, subnet *ipamv1.Subnet, objs ...client.Object) *world {
	t.Helper()
	scheme := runtime.NewScheme()
	AddToScheme(scheme)
	if err := ipamv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithStatusSubresource(&capiipam.IPAddressClaim{}, &ipamv1.Subnet{}).
		WithObjects(append(objs, subnet)...).Build()
	l := ledger.New()
	l.MarkSynced()
	l.ApplyPool(&ipamv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "dc", UID: "pool-dc", ResourceVersion: "1"},
		Spec: ipamv1.SubnetPoolSpec{CIDR: "10.0.0.0/8"}}, ledger.Created, nil)
	l.ApplySubnet(subnet, ledger.Created, nil)
	rec := events.NewFakeRecorder(100)
	r := &ClaimReconciler{Client: c, APIReader: c, Ledger: l, Recorder: rec, Options: Options{ReuseAfter: time.Minute, Workers: 1}}
	r.caughtUp = true // the ledger is fed by hand (feed)
	w := &world{t: t, c: c, l: l, r: r, events: rec}
	w.feed()
	return w
}

// feed applies every IPAddress and the Subnet the fake API server holds to
// the ledger, as the informers would.
func (w *world) feed() {
	w.t.Helper()
	var list capiipam.IPAddressList
	if err := w.c.List(context.Background(), &list); err != nil {
		w.t.Fatal(err)
	}
	for i := range list.Items {
		if rec, ok := record(&list.Items[i]); ok {
			w.l.ApplyAddress(rec, ledger.Updated)
		}
	}
	var subnets ipamv1.SubnetList
	if err := w.c.List(context.Background(), &subnets); err != nil {
		w.t.Fatal(err)
	}
	for i := range subnets.Items {
		w.l.ApplySubnet(&subnets.Items[i], ledger.Updated, nil)
	}
}

// settle reconciles the name a few times, feeding the ledger in between,
// as the watches would requeue it; it returns the last result.
func (w *world) settle(name string) reconcile.Result {
	w.t.Helper()
	var res reconcile.Result
	for range 4 {
		var err error
		res, err = w.r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: testNS, Name: name}})
		if err != nil {
			w.t.Logf("reconcile %s: %v", name, err)
		}
		w.feed()
	}
	return res
}

func (w *world) claim(name string) *capiipam.IPAddressClaim {
	w.t.Helper()
	var c capiipam.IPAddressClaim
	if err := w.c.Get(context.Background(), types.NamespacedName{Namespace: testNS, Name: name}, &c); err != nil {
		w.t.Fatal(err)
	}
	return &c
}

func (w *world) address(name string) *capiipam.IPAddress {
	w.t.Helper()
	var a capiipam.IPAddress
	if err := w.c.Get(context.Background(), types.NamespacedName{Namespace: testNS, Name: name}, &a); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		w.t.Fatal(err)
	}
	return &a
}

// drained returns the events recorded so far.
func (w *world) drained() []string {
	var out []string
	for {
		select {
		case e := <-w.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func claimObject(name, subnet string) *capiipam.IPAddressClaim {
	return &capiipam.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, UID: types.UID("claim-" + name), CreationTimestamp: metav1.Now()},
		Spec:       capiipam.IPAddressClaimSpec{PoolRef: capiipam.IPPoolReference{APIGroup: ipamv1.GroupVersion.Group, Kind: subnetKind, Name: subnet}},
	}
}

// restoredAddress is an IPAddress as a backup tool restores it: its owner
// references dropped (owner: nil), or as clusterctl move writes it: owned by
// the claim of today (owner: that claim).
func restoredAddress(name, subnet, address string, prefix int32, gateway string, owner *capiipam.IPAddressClaim) *capiipam.IPAddress {
	a := &capiipam.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, UID: types.UID("ip-" + name), Finalizers: []string{FinalizerProtectAddress}},
		Spec: capiipam.IPAddressSpec{
			ClaimRef: capiipam.IPAddressClaimReference{Name: name},
			PoolRef:  capiipam.IPPoolReference{APIGroup: ipamv1.GroupVersion.Group, Kind: subnetKind, Name: subnet},
			Address:  address, Prefix: ptr.To(prefix), Gateway: gateway,
		},
	}
	if owner != nil {
		a.OwnerReferences = []metav1.OwnerReference{{APIVersion: capiipam.GroupVersion.String(), Kind: "IPAddressClaim", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	}
	return a
}

func ready(c *capiipam.IPAddressClaim) *metav1.Condition {
	return meta.FindStatusCondition(c.Status.Conditions, capiipam.IPAddressClaimReadyCondition)
}

// An IPAddress restored (owner references dropped) or moved (owned by the
// claim) is taken as the claim's address only if the Subnet would hand it
// out: Ready, inside its range, not its network, broadcast or gateway
// address, with the Subnet's prefix and gateway. Otherwise the claim is
// Ready=False saying why, with an event, and the IPAddress is left as it
// was.
func TestAdoptRefusesAddressesTheSubnetNeverHandsOut(t *testing.T) {
	for _, tc := range []struct {
		name, address string
		subnet        *ipamv1.Subnet
		prefix        int32
		gateway       string
		reason, says  string
	}{
		{name: "outside", address: "10.0.1.7", reason: capiipam.IPAddressClaimReadyAllocationFailedReason, says: "outside"},
		{name: "network", address: "10.0.0.0", reason: capiipam.IPAddressClaimReadyAllocationFailedReason, says: "network address"},
		{name: "broadcast", address: "10.0.0.255", reason: capiipam.IPAddressClaimReadyAllocationFailedReason, says: "broadcast address"},
		{name: "gateway", address: "10.0.0.1", reason: capiipam.IPAddressClaimReadyAllocationFailedReason, says: "gateway"},
		{name: "spec-gateway", address: "10.0.0.254", subnet: subnetObject("m", "10.0.0.0/24", "10.0.0.254", ""), gateway: "10.0.0.254",
			reason: capiipam.IPAddressClaimReadyAllocationFailedReason, says: "gateway"},
		{name: "wrong-prefix", address: "10.0.0.9", prefix: 16, reason: capiipam.IPAddressClaimReadyAllocationFailedReason, says: "prefix"},
		{name: "wrong-gateway", address: "10.0.0.9", gateway: "10.0.0.254", reason: capiipam.IPAddressClaimReadyAllocationFailedReason, says: "gateway"},
		{name: "subnet-not-ready", address: "10.0.0.9", subnet: subnetObject("m", "", "", ipamv1.ReasonPoolNotFound),
			reason: capiipam.IPAddressClaimReadyPoolNotReadyReason, says: "not Ready (PoolNotFound)"},
	} {
		for _, moved := range []bool{false, true} {
			order := "backup"
			if moved {
				order = "move"
			}
			t.Run(tc.name+"/"+order, func(t *testing.T) {
				subnet := tc.subnet
				if subnet == nil {
					subnet = subnetObject("m", "10.0.0.0/24", "", "")
				}
				prefix, gateway := tc.prefix, tc.gateway
				if prefix == 0 {
					prefix = 24
				}
				if gateway == "" {
					gateway = "10.0.0.1"
				}
				claim := claimObject("m-0", "m")
				var owner *capiipam.IPAddressClaim
				if moved {
					owner = claim
				}
				addr := restoredAddress("m-0", "m", tc.address, prefix, gateway, owner)
				w := newWorld(t, subnet, claim, addr)
				w.settle("m-0")

				c := w.claim("m-0")
				cond := ready(c)
				if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != tc.reason || !strings.Contains(cond.Message, tc.says) {
					t.Errorf("claim's Ready: %+v, want False, %s, saying %q", cond, tc.reason, tc.says)
				}
				if c.Status.AddressRef.Name != "" {
					t.Errorf("claim bound to %q", c.Status.AddressRef.Name)
				}
				// Refused, the claim is still ours: it carries our release
				// finalizer, as every claim we answer does.
				if !slices.Contains(c.Finalizers, FinalizerReleaseAddress) {
					t.Errorf("a refused claim without %s: %v", FinalizerReleaseAddress, c.Finalizers)
				}
				// What to delete: an IPAddress the claim owns may be in use.
				fix := map[bool]string{false: "delete the IPAddress", true: "delete the claim"}[moved]
				if tc.reason == capiipam.IPAddressClaimReadyAllocationFailedReason && cond != nil && !strings.Contains(cond.Message, fix) {
					t.Errorf("message %q does not say %q", cond.Message, fix)
				}
				got := w.address("m-0")
				if got == nil || !equalRefs(got.OwnerReferences, addr.OwnerReferences) || got.DeletionTimestamp != nil || got.Spec.Address != tc.address {
					t.Errorf("the IPAddress changed: %+v, was %+v", got, addr)
				}
				if ev := strings.Join(w.drained(), "\n"); !strings.Contains(ev, tc.reason) {
					t.Errorf("no %s event: %q", tc.reason, ev)
				}
			})
		}
	}
}

func equalRefs(a, b []metav1.OwnerReference) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].UID != b[i].UID || a[i].Kind != b[i].Kind || a[i].Name != b[i].Name || ptr.Deref(a[i].Controller, false) != ptr.Deref(b[i].Controller, false) {
			return false
		}
	}
	return true
}

// A valid address is adopted (backup order) or bound (move order), and
// only if no one else holds it.
func TestAdoptTakesAValidAddressOnlyIfNoOneElseHoldsIt(t *testing.T) {
	for _, moved := range []bool{false, true} {
		claim := claimObject("m-0", "m")
		var owner *capiipam.IPAddressClaim
		if moved {
			owner = claim
		}
		w := newWorld(t, subnetObject("m", "10.0.0.0/24", "", ""), claim, restoredAddress("m-0", "m", "10.0.0.9", 24, "10.0.0.1", owner))
		w.settle("m-0")
		c := w.claim("m-0")
		if cond := ready(c); cond == nil || cond.Status != metav1.ConditionTrue || c.Status.AddressRef.Name != "m-0" {
			t.Fatalf("moved=%v: claim not bound: %+v", moved, c.Status)
		}
		if a := w.address("m-0"); !ownedBy(a, claim.UID) || a.Spec.Address != "10.0.0.9" {
			t.Fatalf("moved=%v: IPAddress %+v", moved, a)
		}
	}

	// Another IPAddress, of a claim bound before, holds the address.
	holder := claimObject("holder", "m")
	holder.Finalizers = []string{FinalizerReleaseAddress}
	holder.Status = capiipam.IPAddressClaimStatus{AddressRef: capiipam.IPAddressReference{Name: "holder"},
		Conditions: []metav1.Condition{{Type: capiipam.IPAddressClaimReadyCondition, Status: metav1.ConditionTrue, Reason: "Ready", LastTransitionTime: metav1.Now()}}}
	claim := claimObject("m-0", "m")
	w := newWorld(t, subnetObject("m", "10.0.0.0/24", "", ""), holder, claim,
		restoredAddress("holder", "m", "10.0.0.9", 24, "10.0.0.1", holder), restoredAddress("m-0", "m", "10.0.0.9", 24, "10.0.0.1", nil))
	w.settle("holder")
	w.settle("m-0")
	c := w.claim("m-0")
	if cond := ready(c); cond == nil || cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, "IPAddress holder holds it too") && !strings.Contains(cond.Message, "which IPAddress holder holds too") {
		t.Errorf("claim m-0 with an address IPAddress holder holds: %+v", c.Status)
	}
	if a := w.address("m-0"); a == nil || len(a.OwnerReferences) != 0 || a.DeletionTimestamp != nil {
		t.Errorf("the IPAddress of m-0 was adopted or released: %+v", a)
	}
	if c := w.claim("holder"); c.Status.AddressRef.Name != "holder" || ready(c).Status != metav1.ConditionTrue {
		t.Errorf("claim holder lost its address: %+v", c.Status)
	}
}

// An adopted (or moved) address protects its Subnet with the
// address-protection finalizer, as one the provider wrote does.
func TestAdoptedAddressProtectsTheSubnet(t *testing.T) {
	for _, moved := range []bool{false, true} {
		claim := claimObject("m-0", "m")
		var owner *capiipam.IPAddressClaim
		if moved {
			owner = claim
		}
		w := newWorld(t, subnetObject("m", "10.0.0.0/24", "", ""), claim, restoredAddress("m-0", "m", "10.0.0.9", 24, "10.0.0.1", owner))
		w.settle("m-0")
		var s ipamv1.Subnet
		if err := w.c.Get(context.Background(), types.NamespacedName{Namespace: testNS, Name: "m"}, &s); err != nil {
			t.Fatal(err)
		}
		if !controllerutil.ContainsFinalizer(&s, ipamv1.FinalizerAddressProtection) {
			t.Errorf("moved=%v: the Subnet has no %s finalizer after its address was taken: %v", moved, ipamv1.FinalizerAddressProtection, s.Finalizers)
		}
	}
}

// Adopting points the claim's and the Subnet's references at today's
// objects and leaves every other owner's reference alone; an IPAddress
// controlled by something else is not adopted.
func TestAdoptKeepsOtherOwnersReferences(t *testing.T) {
	claim := claimObject("m-0", "m")
	addr := restoredAddress("m-0", "m", "10.0.0.9", 24, "10.0.0.1", nil)
	machine := metav1.OwnerReference{APIVersion: "infrastructure.example.com/v1", Kind: "ExampleMachine", Name: "m-0", UID: "machine-uid"}
	addr.OwnerReferences = []metav1.OwnerReference{machine}
	w := newWorld(t, subnetObject("m", "10.0.0.0/24", "", ""), claim, addr)
	w.settle("m-0")
	got := w.address("m-0")
	if !ownedBy(got, claim.UID) {
		t.Fatalf("not adopted: %+v", got.OwnerReferences)
	}
	kept := false
	for _, ref := range got.OwnerReferences {
		kept = kept || ref.UID == machine.UID
	}
	if !kept {
		t.Errorf("adoption dropped another owner's reference: %+v", got.OwnerReferences)
	}

	// Controlled by another kind of object: not ours to take.
	claim = claimObject("m-1", "m")
	addr = restoredAddress("m-1", "m", "10.0.0.10", 24, "10.0.0.1", nil)
	ctrlRef := machine
	ctrlRef.Controller = ptr.To(true)
	addr.OwnerReferences = []metav1.OwnerReference{ctrlRef}
	w = newWorld(t, subnetObject("m", "10.0.0.0/24", "", ""), claim, addr)
	w.settle("m-1")
	if got := w.address("m-1"); got == nil || !equalRefs(got.OwnerReferences, addr.OwnerReferences) || got.DeletionTimestamp != nil {
		t.Errorf("an IPAddress controlled by another object was changed: %+v", got)
	}
	if cond := ready(w.claim("m-1")); cond == nil || cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, "ExampleMachine") {
		t.Errorf("claim m-1: %+v, want Ready=False naming the controller", cond)
	}
	// Nor released when no claim asks for it.
	if err := w.c.Delete(context.Background(), w.claim("m-1")); err != nil {
		t.Fatal(err)
	}
	w.settle("m-1")
	if got := w.address("m-1"); got == nil || got.DeletionTimestamp != nil {
		t.Errorf("an IPAddress controlled by another object was released: %+v", got)
	}
}

// Backup-tool order, IPAddress first: an IPAddress restored without owner
// references before its claim is kept (not released) until the claim
// comes, which then gets its address.
func TestRestoredAddressBeforeItsClaimIsKept(t *testing.T) {
	addr := restoredAddress("m-0", "m", "10.0.0.9", 24, "10.0.0.1", nil)
	w := newWorld(t, subnetObject("m", "10.0.0.0/24", "", ""), addr)
	w.settle("m-0")
	if got := w.address("m-0"); got == nil || got.DeletionTimestamp != nil {
		t.Fatalf("the restored IPAddress was released before its claim came: %+v", got)
	}
	claim := claimObject("m-0", "m")
	claim.Finalizers = []string{FinalizerReleaseAddress} // as exported
	if err := w.c.Create(context.Background(), claim); err != nil {
		t.Fatal(err)
	}
	w.settle("m-0")
	c := w.claim("m-0")
	a := w.address("m-0")
	if c.Status.AddressRef.Name != "m-0" || a == nil || a.Spec.Address != "10.0.0.9" || !ownedBy(a, claim.UID) {
		t.Fatalf("claim %+v, IPAddress %+v: want bound to 10.0.0.9", c.Status, a)
	}
}

// Backup-tool order, claim first: a restored claim (our finalizer, no
// status) is not given a new address at once; its IPAddress, restored a
// moment later, is adopted and keeps the machine's address.
func TestRestoredClaimWaitsForItsAddress(t *testing.T) {
	claim := claimObject("m-0", "m")
	claim.Finalizers = []string{FinalizerReleaseAddress}
	w := newWorld(t, subnetObject("m", "10.0.0.0/24", "", ""), claim)
	res := w.settle("m-0")
	if a := w.address("m-0"); a != nil {
		t.Fatalf("a restored claim got a new address before its IPAddress was restored: %s", a.Spec.Address)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > restoreGrace {
		t.Errorf("requeued after %s, want within the grace %s", res.RequeueAfter, restoreGrace)
	}
	if err := w.c.Create(context.Background(), restoredAddress("m-0", "m", "10.0.0.9", 24, "10.0.0.1", nil)); err != nil {
		t.Fatal(err)
	}
	w.feed()
	w.settle("m-0")
	c := w.claim("m-0")
	if a := w.address("m-0"); c.Status.AddressRef.Name != "m-0" || a.Spec.Address != "10.0.0.9" {
		t.Fatalf("claim %+v with %s, want bound to 10.0.0.9", c.Status, a.Spec.Address)
	}

	// A restored claim whose IPAddress never comes gets one once the
	// grace is over (measured from its creation).
	late := claimObject("m-1", "m")
	late.Finalizers = []string{FinalizerReleaseAddress}
	late.CreationTimestamp = metav1.NewTime(time.Now().Add(-restoreGrace - time.Second))
	if err := w.c.Create(context.Background(), late); err != nil {
		t.Fatal(err)
	}
	w.settle("m-1")
	if c := w.claim("m-1"); c.Status.AddressRef.Name != "m-1" {
		t.Fatalf("a restored claim past the grace is not served: %+v", c.Status)
	}
	// Restored with its status (a tool that restores status): it waits too.
	withStatus := claimObject("m-3", "m")
	withStatus.Finalizers = []string{FinalizerReleaseAddress}
	withStatus.Status = capiipam.IPAddressClaimStatus{AddressRef: capiipam.IPAddressReference{Name: "m-3"},
		Conditions: []metav1.Condition{{Type: capiipam.IPAddressClaimReadyCondition, Status: metav1.ConditionTrue, Reason: "Ready", LastTransitionTime: metav1.Now()}}}
	if err := w.c.Create(context.Background(), withStatus); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Status().Update(context.Background(), withStatus); err != nil {
		t.Fatal(err)
	}
	if res := w.settle("m-3"); w.address("m-3") != nil || res.RequeueAfter <= 0 {
		t.Errorf("a claim restored with its status got a new address before its IPAddress came (requeue %s)", res.RequeueAfter)
	}
	// A new claim (no finalizer yet) does not wait.
	if err := w.c.Create(context.Background(), claimObject("m-2", "m")); err != nil {
		t.Fatal(err)
	}
	w.settle("m-2")
	if c := w.claim("m-2"); c.Status.AddressRef.Name != "m-2" {
		t.Fatalf("a new claim is not served: %+v", c.Status)
	}
}

// Any IPAddress of a Subnet keeps the Subnet, adopted or not: one written
// by hand that the claim refuses (outside the range, say) still names the
// Subnet, and the guard waits for it on deletion, so the Subnet carries
// the protection that makes the guard run. Found by the lifecycle soak
// (L6): a refused IPAddress left at quiescence on an unprotected Subnet.
// An update that drops the finalizer (a replace from a manifest) while an
// IPAddress exists gets it back.
func TestEveryIPAddressProtectsItsSubnet(t *testing.T) {
	claim := claimObject("m-0", "m")
	w := newWorld(t, subnetObject("m", "10.0.0.0/24", "", ""), claim, restoredAddress("m-0", "m", "10.0.1.7", 24, "10.0.0.1", nil))
	w.settle("m-0")
	if cond := ready(w.claim("m-0")); cond == nil || cond.Status != metav1.ConditionFalse {
		t.Fatalf("the claim took an address outside its Subnet: %+v", cond)
	}
	guard := &SubnetGuard{Client: w.c, APIReader: w.c, Ledger: w.l, Recorder: w.events, Claims: w.r, Served: true}
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: testNS, Name: "m"}}
	protected := func() bool {
		t.Helper()
		if _, err := guard.Reconcile(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		w.feed()
		var s ipamv1.Subnet
		if err := w.c.Get(context.Background(), req.NamespacedName, &s); err != nil {
			t.Fatal(err)
		}
		return controllerutil.ContainsFinalizer(&s, ipamv1.FinalizerAddressProtection)
	}
	if !protected() {
		t.Fatalf("Subnet m has IPAddress m-0 (refused, written by hand) but not the %s finalizer", ipamv1.FinalizerAddressProtection)
	}

	var s ipamv1.Subnet
	if err := w.c.Get(context.Background(), req.NamespacedName, &s); err != nil {
		t.Fatal(err)
	}
	s.Finalizers = nil
	if err := w.c.Update(context.Background(), &s); err != nil {
		t.Fatal(err)
	}
	w.feed()
	if !protected() {
		t.Fatalf("the finalizer dropped by an update is not restored while IPAddress m-0 exists")
	}
}

// A guard that starts (a new leader) looks at every Subnet with IPAddresses:
// the last leader may have stopped between an IPAddress and the Subnet's
// protection (the soak's hand-overs found one), and the informer's events
// for them came before the guard subscribed.
func TestGuardAtStartLooksAtSubnetsWithAddresses(t *testing.T) {
	claim := claimObject("m-0", "m")
	w := newWorld(t, subnetObject("m", "10.0.0.0/24", "", ""), claim, restoredAddress("m-0", "m", "10.0.1.7", 24, "10.0.0.1", nil))
	guard := &SubnetGuard{Client: w.c, APIReader: w.c, Ledger: w.l, Recorder: w.events, Claims: w.r, Served: true}
	if got := guard.atStart(); !slices.Contains(got, types.NamespacedName{Namespace: testNS, Name: "m"}) {
		t.Errorf("the guard starts with %v: not Subnet m, which has an IPAddress", got)
	}
}
