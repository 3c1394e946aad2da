//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	capiipam "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// addressReuseAfter is the replicas' --address-reuse-after (main_test.go).
const addressReuseAfter = 3 * time.Second

func subnetRef(name string) capiipam.IPPoolReference {
	return capiipam.IPPoolReference{APIGroup: ipamv1.GroupVersion.Group, Kind: "Subnet", Name: name}
}

func newClaim(ns, name, subnet, cluster string) *capiipam.IPAddressClaim {
	return &capiipam.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       capiipam.IPAddressClaimSpec{ClusterName: cluster, PoolRef: subnetRef(subnet)},
	}
}

// bound returns the claim's IPAddress once the claim is bound: its status
// names the IPAddress and says Ready.
func bound(ctx context.Context, ns, name string) (*capiipam.IPAddress, error) {
	var c capiipam.IPAddressClaim
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &c); err != nil {
		return nil, err
	}
	ready := meta.FindStatusCondition(c.Status.Conditions, capiipam.IPAddressClaimReadyCondition)
	if c.Status.AddressRef.Name == "" || ready == nil || ready.Status != metav1.ConditionTrue {
		return nil, fmt.Errorf("claim %s not bound: %+v", name, c.Status)
	}
	var a capiipam.IPAddress
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: c.Status.AddressRef.Name}, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

func claimReason(ctx context.Context, ns, name string) (string, error) {
	var c capiipam.IPAddressClaim
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &c); err != nil {
		return "", err
	}
	if ready := meta.FindStatusCondition(c.Status.Conditions, capiipam.IPAddressClaimReadyCondition); ready != nil {
		return ready.Reason, nil
	}
	return "", nil
}

// A Subnet serves Cluster API machines: claims made in parallel get unique
// addresses inside it (never the network, broadcast or gateway address), a
// released address comes back only after the cool-down, a small Subnet
// runs out with PoolExhausted and serves the waiting claim once an address
// cools down, a paused Cluster's claims are left alone, IPv6 works, and
// the Subnet cannot go while its addresses are in use. Through the RBAC
// of config/rbac (the replicas run as the Deployment's service account).
func TestClusterAPI(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	mustKubectl(t, fmt.Sprintf(`
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: SubnetPool
metadata: {name: dc, namespace: %[1]s}
spec: {cidr: 10.70.0.0/16, defaultPrefixLength: 24}
---
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: SubnetPool
metadata: {name: dc6, namespace: %[1]s}
spec: {cidr: "fd00:70::/48", defaultPrefixLength: 64}
---
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: Subnet
metadata: {name: machines, namespace: %[1]s}
spec: {poolRef: {name: dc}, cidr: 10.70.0.0/23}
---
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: Subnet
metadata: {name: tiny, namespace: %[1]s}
spec: {poolRef: {name: dc}, cidr: 10.70.4.0/30}
---
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: Subnet
metadata: {name: v6, namespace: %[1]s}
spec: {poolRef: {name: dc6}, cidr: "fd00:70:0:1::/64", gateway: "fd00:70:0:1::fe"}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: work, namespace: %[1]s}
spec: {paused: false}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: frozen, namespace: %[1]s}
spec: {paused: true}
`, ns), "apply", "-f", "-")

	t.Run("gateway validated at admission", func(t *testing.T) {
		for gateway, want := range map[string]string{
			"10.70.9.1":   "is outside spec.cidr 10.70.8.0/24", // the schema's rule, before the webhook
			"10.70.8.0":   "is the network address of 10.70.8.0/24",
			"10.70.8.255": "is the broadcast address of 10.70.8.0/24",
			"fd00::1":     "is outside spec.cidr 10.70.8.0/24: the gateway must be an address in that range, of its family",
		} {
			_, stderr, err := kubectl(t, fmt.Sprintf(`
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: Subnet
metadata: {name: gw, namespace: %s}
spec: {poolRef: {name: dc}, cidr: 10.70.8.0/24, gateway: "%s"}
`, ns, gateway), "create", "-f", "-")
			if err == nil || !strings.Contains(stderr, "spec.gateway") || !strings.Contains(stderr, want) {
				t.Errorf("gateway %s: err %v, stderr %q; want a refusal saying %q", gateway, err, stderr, want)
			}
		}
	})

	// 200 claims at once, from 20 clients.
	const claims = 200
	var wg sync.WaitGroup
	errs := make(chan error, claims)
	for w := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < claims; i += 20 {
				if err := k8s.Create(ctx, newClaim(ns, fmt.Sprintf("m-%03d", i), "machines", "work")); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	subnet := netip.MustParsePrefix("10.70.0.0/23")
	reserved := map[string]string{"10.70.0.0": "network", "10.70.1.255": "broadcast", "10.70.0.1": "gateway"}
	addressOf := map[string]string{}
	eventually(t, 2*time.Minute, func() error {
		for i := range claims {
			name := fmt.Sprintf("m-%03d", i)
			if _, ok := addressOf[name]; ok {
				continue
			}
			a, err := bound(ctx, ns, name)
			if err != nil {
				return err
			}
			addressOf[name] = a.Spec.Address
			if a.Spec.Prefix == nil || *a.Spec.Prefix != 23 || a.Spec.Gateway != "10.70.0.1" || a.Spec.ClaimRef.Name != name ||
				a.Spec.PoolRef != subnetRef("machines") || a.Labels[clusterv1.ClusterNameLabel] != "work" {
				t.Fatalf("IPAddress %s: %+v", name, a.Spec)
			}
			if owner := metav1.GetControllerOf(a); owner == nil || owner.Kind != "IPAddressClaim" || owner.Name != name {
				t.Fatalf("IPAddress %s: owner %+v", name, a.OwnerReferences)
			}
		}
		return nil
	})
	byAddress := map[string]string{}
	for name, addr := range addressOf {
		a, err := netip.ParseAddr(addr)
		if err != nil || !subnet.Contains(a) {
			t.Errorf("%s got %q, outside %s", name, addr, subnet)
		}
		if what, ok := reserved[addr]; ok {
			t.Errorf("%s got the %s address %s", name, what, addr)
		}
		if other, dup := byAddress[addr]; dup {
			t.Errorf("%s and %s both hold %s", name, other, addr)
		}
		byAddress[addr] = name
	}
	eventually(t, time.Minute, func() error {
		var s ipamv1.Subnet
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "machines"}, &s); err != nil {
			return err
		}
		if u := s.Status.IPAddresses; u == nil || u.InUse != claims || u.Free != fmt.Sprint(512-3-claims) {
			return fmt.Errorf("status.ipAddresses %+v", u)
		}
		if !slices.Contains(s.Finalizers, ipamv1.FinalizerAddressProtection) {
			return fmt.Errorf("no address-protection finalizer: %v", s.Finalizers)
		}
		return nil
	})
	out := mustKubectl(t, "", "get", "subnets", "-n", ns, "machines")
	if !strings.Contains(out, "IPS IN USE") || !strings.Contains(out, " 200 ") {
		t.Errorf("kubectl get subnets does not show the addresses in use:\n%s", out)
	}

	t.Run("release and reuse after the cool-down", func(t *testing.T) {
		// m-000 holds the lowest address; deleting its claim releases it.
		first := addressOf["m-000"]
		if err := k8s.Delete(ctx, newClaim(ns, "m-000", "machines", "work")); err != nil {
			t.Fatal(err)
		}
		var released capiipam.IPAddress
		eventually(t, 30*time.Second, func() error {
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "m-000"}, &released); err != nil {
				return err
			}
			if released.DeletionTimestamp == nil {
				return fmt.Errorf("IPAddress m-000 not released yet")
			}
			return nil
		})
		// During the cool-down a new claim gets another address.
		if err := k8s.Create(ctx, newClaim(ns, "during", "machines", "work")); err != nil {
			t.Fatal(err)
		}
		var during *capiipam.IPAddress
		eventually(t, 30*time.Second, func() (err error) { during, err = bound(ctx, ns, "during"); return err })
		if during.Spec.Address == first {
			t.Fatalf("%s handed out again %s after its release, within the cool-down", first, during.CreationTimestamp.Sub(released.DeletionTimestamp.Time))
		}
		// After the cool-down the IPAddress goes and the address is free.
		eventually(t, 30*time.Second, func() error {
			err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "m-000"}, &capiipam.IPAddress{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("IPAddress m-000 still there (%w)", err)
		})
		if err := k8s.Create(ctx, newClaim(ns, "after", "machines", "work")); err != nil {
			t.Fatal(err)
		}
		var after *capiipam.IPAddress
		eventually(t, 30*time.Second, func() (err error) { after, err = bound(ctx, ns, "after"); return err })
		if after.Spec.Address != first {
			t.Errorf("after the cool-down the lowest free address %s should be handed out again, got %s", first, after.Spec.Address)
		}
		if gap := after.CreationTimestamp.Sub(released.DeletionTimestamp.Time); gap < addressReuseAfter-time.Second {
			t.Errorf("reused %s after %s, within the cool-down of %s", first, gap, addressReuseAfter)
		}
	})

	t.Run("an IPAddress deleted under its claim keeps its address", func(t *testing.T) {
		// Someone deletes m-001's IPAddress by hand: the machine still uses
		// it, so it stays (terminating) and its address is not handed out.
		held := addressOf["m-001"]
		if err := k8s.Delete(ctx, &capiipam.IPAddress{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m-001"}}); err != nil {
			t.Fatal(err)
		}
		// A witness released after it: once its cool-down is over, m-001's
		// would have been too.
		if err := k8s.Delete(ctx, newClaim(ns, "m-002", "machines", "work")); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, func() error {
			err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "m-002"}, &capiipam.IPAddress{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("the witness's IPAddress is still there (%w)", err)
		})
		var a capiipam.IPAddress
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "m-001"}, &a); err != nil || a.DeletionTimestamp == nil || a.Spec.Address != held {
			t.Fatalf("m-001's IPAddress should stay, terminating, holding %s: %v %+v", held, err, a.ObjectMeta)
		}
		if err := k8s.Create(ctx, newClaim(ns, "probe", "machines", "work")); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, func() error {
			p, err := bound(ctx, ns, "probe")
			if err == nil && p.Spec.Address == held {
				t.Fatalf("%s handed out while m-001 still holds it", held)
			}
			return err
		})
		// Its claim goes: the address cools down from then on (not from the
		// IPAddress's deletion, long past), then is free.
		released := time.Now()
		if err := k8s.Delete(ctx, newClaim(ns, "m-001", "machines", "work")); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, func() error {
			err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "m-001"}, &capiipam.IPAddress{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("m-001's IPAddress is still there (%w)", err)
		})
		if gone := time.Since(released); gone < addressReuseAfter-time.Second {
			t.Errorf("m-001's address was freed %s after its claim was deleted, within the cool-down of %s", gone, addressReuseAfter)
		}
	})

	t.Run("a small Subnet runs out", func(t *testing.T) {
		// 10.70.4.0/30: .0 network, .1 gateway, .3 broadcast: one address.
		for _, name := range []string{"t-1", "t-2"} {
			if err := k8s.Create(ctx, newClaim(ns, name, "tiny", "")); err != nil {
				t.Fatal(err)
			}
		}
		var holder, waiter string
		eventually(t, 30*time.Second, func() error {
			for _, pair := range [][2]string{{"t-1", "t-2"}, {"t-2", "t-1"}} {
				a, err := bound(ctx, ns, pair[0])
				if err != nil {
					continue
				}
				if a.Spec.Address != "10.70.4.2" {
					t.Fatalf("%s got %s, want 10.70.4.2, the only address", pair[0], a.Spec.Address)
				}
				reason, err := claimReason(ctx, ns, pair[1])
				if err != nil {
					return err
				}
				if reason != capiipam.IPAddressClaimReadyPoolExhaustedReason {
					return fmt.Errorf("%s: reason %q, want PoolExhausted", pair[1], reason)
				}
				holder, waiter = pair[0], pair[1]
				return nil
			}
			return fmt.Errorf("neither claim bound")
		})
		if err := k8s.Delete(ctx, newClaim(ns, holder, "tiny", "")); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, func() error {
			a, err := bound(ctx, ns, waiter)
			if err == nil && a.Spec.Address != "10.70.4.2" {
				t.Fatalf("%s got %s", waiter, a.Spec.Address)
			}
			return err
		})
	})

	t.Run("a paused cluster's claims are left alone", func(t *testing.T) {
		if err := k8s.Create(ctx, newClaim(ns, "frozen-0", "machines", "frozen")); err != nil {
			t.Fatal(err)
		}
		// A claim made after it is bound: the controller has seen both.
		if err := k8s.Create(ctx, newClaim(ns, "witness", "machines", "work")); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, func() error { _, err := bound(ctx, ns, "witness"); return err })
		var c capiipam.IPAddressClaim
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "frozen-0"}, &c); err != nil {
			t.Fatal(err)
		}
		if len(c.Finalizers) > 0 || len(c.Status.Conditions) > 0 || c.Status.AddressRef.Name != "" {
			t.Fatalf("the paused cluster's claim was touched: finalizers %v, status %+v", c.Finalizers, c.Status)
		}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "frozen-0"}, &capiipam.IPAddress{}); !apierrors.IsNotFound(err) {
			t.Fatalf("the paused cluster's claim got an IPAddress (%v)", err)
		}
		// Resumed, it is served.
		mustKubectl(t, `{"spec":{"paused":false}}`, "patch", "-n", ns, "clusters.cluster.x-k8s.io", "frozen", "--type=merge", "--patch-file=/dev/stdin")
		eventually(t, 30*time.Second, func() error { _, err := bound(ctx, ns, "frozen-0"); return err })
	})

	t.Run("a v1beta1 claim", func(t *testing.T) {
		// Cluster API v1.14 still serves v1beta1. Here its CRDs run without
		// Cluster API's conversion webhook (a management cluster has it), and
		// v1beta1's claim has the same shape where the provider looks.
		mustKubectl(t, fmt.Sprintf(`
apiVersion: ipam.cluster.x-k8s.io/v1beta1
kind: IPAddressClaim
metadata: {name: old-api, namespace: %s}
spec:
  clusterName: work
  poolRef: {apiGroup: ipam.subnet-operator.io, kind: Subnet, name: machines}
`, ns), "create", "-f", "-")
		eventually(t, 30*time.Second, func() error { _, err := bound(ctx, ns, "old-api"); return err })
		out := mustKubectl(t, "", "get", "ipaddressclaims.v1beta1.ipam.cluster.x-k8s.io", "-n", ns, "old-api", "-o", "jsonpath={.status.addressRef.name}")
		if out != "old-api" {
			t.Errorf("read as v1beta1, the claim's status.addressRef.name is %q", out)
		}
	})

	t.Run("IPv6", func(t *testing.T) {
		for i := range 3 {
			if err := k8s.Create(ctx, newClaim(ns, fmt.Sprintf("six-%d", i), "v6", "")); err != nil {
				t.Fatal(err)
			}
		}
		got := map[string]bool{}
		eventually(t, 30*time.Second, func() error {
			for i := range 3 {
				a, err := bound(ctx, ns, fmt.Sprintf("six-%d", i))
				if err != nil {
					return err
				}
				if a.Spec.Gateway != "fd00:70:0:1::fe" || ptr.Deref(a.Spec.Prefix, 0) != 64 {
					t.Fatalf("six-%d: %+v", i, a.Spec)
				}
				got[a.Spec.Address] = true
			}
			return nil
		})
		for _, want := range []string{"fd00:70:0:1::1", "fd00:70:0:1::2", "fd00:70:0:1::3"} {
			if !got[want] {
				t.Errorf("IPv6 addresses %v, want ::1, ::2, ::3 (the network address and the gateway are never handed out)", got)
			}
		}
	})

	t.Run("the Subnet stays while its addresses are in use", func(t *testing.T) {
		// kubectl delete is refused, naming the IPAddress and saying what
		// to do, instead of printing "deleted" and leaving it Terminating.
		_, stderr, err := kubectl(t, "", "delete", "-n", ns, "subnet", "tiny", "--wait=false")
		want := "1 IPAddress of this Subnet is in use by Cluster API machines (" + ns + "/"
		if err == nil || !strings.Contains(stderr, want) || !strings.Contains(stderr, "delete their IPAddressClaims (or the Machines that own them) first") {
			t.Fatalf("kubectl delete subnet tiny: %v %q, want refused with %q", err, stderr, want)
		}
		// The refusal is best effort (a claim may bind between the check
		// and the delete; the webhook may be bypassed): the finalizer
		// holds the Subnet then. Bypassed here, for this one delete.
		restore := subnetDeletesUnchecked(t)
		eventually(t, 30*time.Second, func() error {
			return k8s.Delete(ctx, &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tiny"}})
		})
		restore()
		// The guard says why it waits, naming the claim.
		eventually(t, 30*time.Second, func() error {
			out := mustKubectl(t, "", "get", "events.events.k8s.io", "-n", ns, "--field-selector", "regarding.name=tiny,reason=AddressesInUse", "-o", "jsonpath={.items[*].note}")
			if !strings.Contains(out, "in use by IPAddressClaims") {
				return fmt.Errorf("no AddressesInUse event yet: %q", out)
			}
			return nil
		})
		var s ipamv1.Subnet
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "tiny"}, &s); err != nil || s.DeletionTimestamp == nil {
			t.Fatalf("the Subnet should be held, terminating: %v %+v", err, s.ObjectMeta)
		}
		// A new claim on it is refused: it is being deleted.
		if err := k8s.Create(ctx, newClaim(ns, "t-late", "tiny", "")); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, func() error {
			reason, err := claimReason(ctx, ns, "t-late")
			if err == nil && reason != capiipam.IPAddressClaimReadyPoolNotReadyReason {
				err = fmt.Errorf("reason %q, want PoolNotReady", reason)
			}
			return err
		})
		// Its last claim goes: so does the Subnet.
		var list capiipam.IPAddressClaimList
		if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for i := range list.Items {
			if list.Items[i].Spec.PoolRef.Name == "tiny" {
				if err := k8s.Delete(ctx, &list.Items[i]); client.IgnoreNotFound(err) != nil {
					t.Fatal(err)
				}
			}
		}
		eventually(t, time.Minute, func() error {
			err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "tiny"}, &ipamv1.Subnet{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("Subnet tiny still there (%w)", err)
		})
	})
}

// A bound claim deleted in the foreground (kubectl delete
// --cascade=foreground; Argo CD prunes so) goes: the garbage collector
// deletes its IPAddress first and the claim waits for it, so the provider
// must not keep that IPAddress for as long as the claim exists. The
// address still cools down before it is handed out again, and a Subnet
// and namespace deleted the same way go too.
func TestClusterAPIForegroundDeletion(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	mustKubectl(t, fmt.Sprintf(`
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: SubnetPool
metadata: {name: dc, namespace: %[1]s}
spec: {cidr: 10.71.0.0/16, defaultPrefixLength: 24}
---
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: Subnet
metadata: {name: one, namespace: %[1]s}
spec: {poolRef: {name: dc}, cidr: 10.71.0.0/30}
`, ns), "apply", "-f", "-")
	foreground := client.PropagationPolicy(metav1.DeletePropagationForeground)
	gone := func(o client.Object) func() error {
		return func() error {
			err := k8s.Get(ctx, client.ObjectKeyFromObject(o), o)
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("%T %s still there, finalizers %v (%v)", o, o.GetName(), o.GetFinalizers(), err)
		}
	}

	// 10.71.0.0/30 hands out one address: 10.71.0.2.
	if err := k8s.Create(ctx, newClaim(ns, "fg", "one", "")); err != nil {
		t.Fatal(err)
	}
	var first *capiipam.IPAddress
	eventually(t, 30*time.Second, func() (err error) { first, err = bound(ctx, ns, "fg"); return err })
	if err := k8s.Delete(ctx, newClaim(ns, "fg", "one", ""), foreground); err != nil {
		t.Fatal(err)
	}
	// The garbage collector (or the release) deletes its IPAddress; it
	// stays, terminating, for the cool-down.
	var released capiipam.IPAddress
	eventually(t, 30*time.Second, func() error {
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fg"}, &released); err != nil {
			return err
		}
		if released.DeletionTimestamp == nil {
			return fmt.Errorf("IPAddress fg not deleted yet")
		}
		return nil
	})
	eventually(t, 30*time.Second, gone(newClaim(ns, "fg", "one", "")))

	// Cooling down: the next claim waits for the address.
	if err := k8s.Create(ctx, newClaim(ns, "next", "one", "")); err != nil {
		t.Fatal(err)
	}
	var next *capiipam.IPAddress
	eventually(t, 30*time.Second, func() (err error) { next, err = bound(ctx, ns, "next"); return err })
	if next.Spec.Address != first.Spec.Address {
		t.Fatalf("next got %s, want %s once it cooled down", next.Spec.Address, first.Spec.Address)
	}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fg"}, &capiipam.IPAddress{}); !apierrors.IsNotFound(err) {
		t.Fatalf("%s handed out again while IPAddress fg still holds it (%v)", first.Spec.Address, err)
	}
	if gap := next.CreationTimestamp.Sub(released.DeletionTimestamp.Time); gap < addressReuseAfter-time.Second {
		t.Errorf("%s handed out again %s after its release, within the cool-down of %s", first.Spec.Address, gap, addressReuseAfter)
	}

	// The Subnet, then the namespace, in the foreground, with a bound
	// claim: the claim goes first, then its Subnet, then the namespace.
	if err := k8s.Delete(ctx, newClaim(ns, "next", "one", ""), foreground); err != nil {
		t.Fatal(err)
	}
	subnet := &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "one"}}
	// Refused while the claim's IPAddress is in use (the garbage
	// collector may not have deleted it yet); retried, as the garbage
	// collector and namespace deletion retry, it goes through.
	eventually(t, 30*time.Second, func() error {
		err := k8s.Delete(ctx, subnet, foreground)
		if apierrors.IsForbidden(err) && !strings.Contains(err.Error(), "in use by Cluster API machines") {
			t.Fatalf("the Subnet's delete refused for another reason: %v", err)
		}
		return err
	})
	eventually(t, 30*time.Second, gone(newClaim(ns, "next", "one", "")))
	eventually(t, time.Minute, gone(subnet))
	nsObject := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	if err := k8s.Delete(ctx, nsObject, foreground); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, gone(nsObject))
}

// subnetDeletesUnchecked takes DELETE out of the Subnet validating
// webhook's operations, as a cluster whose webhook configuration was
// edited or removed would have it, and returns the function that puts it
// back (also run at the end of the test).
func subnetDeletesUnchecked(t *testing.T) (restore func()) {
	t.Helper()
	const configuration = "validatingwebhookconfiguration/subnet-operator-validating-webhook-configuration"
	if name := mustKubectl(t, "", "get", configuration, "-o", "jsonpath={.webhooks[0].name}"); name != "vsubnet.ipam.subnet-operator.io" {
		t.Fatalf("the first validating webhook is %q, not the Subnet's", name)
	}
	set := func(ops string) {
		mustKubectl(t, "", "patch", configuration, "--type=json", "-p", `[{"op":"replace","path":"/webhooks/0/rules/0/operations","value":`+ops+`}]`)
	}
	set(`["CREATE","UPDATE"]`)
	var once sync.Once
	restore = func() { once.Do(func() { set(`["CREATE","UPDATE","DELETE"]`) }) }
	t.Cleanup(restore)
	return restore
}

// Deleting a namespace whose Subnet's addresses machines use converges:
// the namespace controller deletes the claims with everything else, and
// retries the Subnet the webhook refuses until the claims have released
// their addresses.
func TestClusterAPINamespaceDeletionWithAddressesInUse(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	mustKubectl(t, fmt.Sprintf(`
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: SubnetPool
metadata: {name: dc, namespace: %[1]s}
spec: {cidr: 10.75.0.0/16}
---
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: Subnet
metadata: {name: machines, namespace: %[1]s}
spec: {poolRef: {name: dc}, cidr: 10.75.0.0/24}
`, ns), "apply", "-f", "-")
	for i := range 5 {
		if err := k8s.Create(ctx, newClaim(ns, fmt.Sprintf("m-%d", i), "machines", "")); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, func() error {
		for i := range 5 {
			if _, err := bound(ctx, ns, fmt.Sprintf("m-%d", i)); err != nil {
				return err
			}
		}
		return nil
	})
	_, stderr, err := kubectl(t, "", "delete", "-n", ns, "subnet", "machines", "--wait=false")
	if err == nil || !strings.Contains(stderr, "5 IPAddresses of this Subnet are in use by Cluster API machines") || !strings.Contains(stderr, "and 2 more") {
		t.Fatalf("kubectl delete subnet machines: %v %q, want refused naming three IPAddresses and 2 more", err, stderr)
	}
	nsObject := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	if err := k8s.Delete(ctx, nsObject); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, func() error {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(nsObject), nsObject)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("namespace %s still there: %v %+v", ns, err, nsObject.Status.Conditions)
	})
}
