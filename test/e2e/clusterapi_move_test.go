//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	capiipam "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/test/environment"
)

// machines is how many claims each scenario binds (the report had 40).
const machines = 40

// exported is what a backup tool or clusterctl keeps of a namespace's
// objects: metadata and spec, never status.
type exported struct {
	pool    *ipamv1.SubnetPool
	subnet  *ipamv1.Subnet
	cluster *clusterv1.Cluster
	claims  []*capiipam.IPAddressClaim
	addrs   []*capiipam.IPAddress
	// addressOf is what each machine (claim) uses.
	addressOf map[string]string
}

// The machines of a Cluster keep their addresses when its objects are
// brought back into another place (here: another namespace of the same
// API server, standing in for another management cluster) the way a
// backup tool restores them (Cluster not paused, IPAddresses with their
// owner references dropped, before their claims; once with the Subnet's
// pool first, once with it last), and the way clusterctl move writes them (Cluster paused, the
// Subnet, claims, then IPAddresses owned by the new claims and Subnet,
// then the Cluster resumed). The source's objects go first, as clusterctl
// deletes them (finalizers stripped): the same range cannot be held twice
// in one API server.
func TestClusterAPIRestoreAndMove(t *testing.T) {
	ctx := context.Background()

	t.Run("the Subnet CRD is moved by clusterctl", func(t *testing.T) {
		out := mustKubectl(t, "", "get", "crd", "subnets.ipam.subnet-operator.io", "-o", "jsonpath={.metadata.labels}")
		for _, label := range []string{`"clusterctl.cluster.x-k8s.io":""`, `"clusterctl.cluster.x-k8s.io/move":""`} {
			if !strings.Contains(out, label) {
				t.Errorf("the Subnet CRD's labels %s lack %s", out, label)
			}
		}
	})

	t.Run("backup tool: IPAddresses first, owner references dropped", func(t *testing.T) {
		restoreLikeABackupTool(t, "10.72.0.0/16", "10.72.0.0/23", false)
	})

	t.Run("backup tool: the Subnet's pool last", func(t *testing.T) {
		restoreLikeABackupTool(t, "10.74.0.0/16", "10.74.0.0/23", true)
	})

	t.Run("clusterctl move: claims, then IPAddresses owned by them, Cluster paused", func(t *testing.T) {
		src := bindMachines(t, "10.73.0.0/16", "10.73.0.0/23")
		exp := export(t, src)
		removeLikeClusterctl(t, src, exp)
		dst := scratchNamespace(t, "dst")

		// The pool is not moved: it is prepared on the target first.
		create(t, dst, exp.pool)
		exp.cluster.Spec.Paused = ptr.To(true)
		create(t, dst, exp.cluster, exp.subnet)
		for _, c := range exp.claims {
			create(t, dst, c)
		}
		for _, a := range exp.addrs {
			// clusterctl rewrites owner references to the new UIDs.
			var claim capiipam.IPAddressClaim
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: dst, Name: a.Spec.ClaimRef.Name}, &claim); err != nil {
				t.Fatal(err)
			}
			a.OwnerReferences = []metav1.OwnerReference{
				{APIVersion: capiipam.GroupVersion.String(), Kind: "IPAddressClaim", Name: claim.Name, UID: claim.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)},
				{APIVersion: ipamv1.GroupVersion.String(), Kind: "Subnet", Name: exp.subnet.Name, UID: exp.subnet.UID, BlockOwnerDeletion: ptr.To(true)},
			}
			create(t, dst, a)
		}
		mustKubectl(t, `{"spec":{"paused":false}}`, "patch", "-n", dst, "clusters.cluster.x-k8s.io", exp.cluster.Name, "--type=merge", "--patch-file=/dev/stdin")
		checkKept(t, dst, exp)
	})
}

// scratchNamespace creates a namespace for a subtest (namespace names
// its top-level test).
func scratchNamespace(t *testing.T, role string) string {
	t.Helper()
	name := fmt.Sprintf("e2e-move-%s-%04x", role, rand.IntN(1<<16))
	// Its root pool in an address space of its own: subtests reuse ranges.
	if err := environment.CreateIsolatedNamespace(context.Background(), k8s, name, nil); err != nil {
		t.Fatal(err)
	}
	return name
}

// restoreLikeABackupTool binds machines in a namespace, exports it, and
// restores it into another as a backup tool does: the Subnet and the
// Cluster (not paused), then the IPAddresses without owner references,
// then the claims. poolLast: the Subnet's pool (in a platform namespace in
// real life) comes back after them, so the Subnet is not Ready meanwhile.
func restoreLikeABackupTool(t *testing.T, poolCIDR, subnetCIDR string, poolLast bool) {
	t.Helper()
	ctx := context.Background()
	src := bindMachines(t, poolCIDR, subnetCIDR)
	exp := export(t, src)
	removeLikeClusterctl(t, src, exp)
	dst := scratchNamespace(t, "dst")
	if !poolLast {
		create(t, dst, exp.pool)
	}
	create(t, dst, exp.subnet, exp.cluster)
	for _, a := range exp.addrs {
		a.OwnerReferences = nil
		create(t, dst, a)
	}
	for _, c := range exp.claims {
		create(t, dst, c)
	}
	if poolLast {
		// The Subnet is not Ready (its pool is missing): no claim takes
		// an address, and every IPAddress stays as it was restored.
		eventually(t, time.Minute, func() error {
			for _, c := range exp.claims {
				if reason, err := claimReason(ctx, dst, c.Name); err != nil || reason != capiipam.IPAddressClaimReadyPoolNotReadyReason {
					return fmt.Errorf("claim %s: reason %q (%v), want PoolNotReady while the Subnet's pool is missing", c.Name, reason, err)
				}
			}
			return nil
		})
		checkRestoredUntouched(t, dst, exp)
		create(t, dst, exp.pool)
	}
	checkKept(t, dst, exp)
}

// bindMachines makes a namespace with a pool, a Subnet of it and a Cluster,
// binds claims for its machines, and releases a few of them, so that the
// addresses in use have gaps a fresh allocation would fill differently.
func bindMachines(t *testing.T, poolCIDR, subnetCIDR string) string {
	t.Helper()
	ctx := context.Background()
	ns := scratchNamespace(t, "src")
	mustKubectl(t, fmt.Sprintf(`
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: SubnetPool
metadata: {name: dc, namespace: %[1]s}
spec: {cidr: %[2]s}
---
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: Subnet
metadata: {name: machines, namespace: %[1]s}
spec: {poolRef: {name: dc}, cidr: %[3]s}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: work, namespace: %[1]s}
spec: {paused: false}
`, ns, poolCIDR, subnetCIDR), "apply", "-f", "-")
	for i := range machines + machines/4 {
		if err := k8s.Create(ctx, newClaim(ns, fmt.Sprintf("m-%03d", i), "machines", "work")); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, time.Minute, func() error {
		for i := range machines + machines/4 {
			if _, err := bound(ctx, ns, fmt.Sprintf("m-%03d", i)); err != nil {
				return err
			}
		}
		return nil
	})
	for i := 0; i < machines+machines/4; i += 5 {
		if err := k8s.Delete(ctx, newClaim(ns, fmt.Sprintf("m-%03d", i), "machines", "work")); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, time.Minute, func() error {
		var list capiipam.IPAddressClaimList
		if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(list.Items) != machines {
			return fmt.Errorf("%d claims, want %d once the released ones are gone", len(list.Items), machines)
		}
		return nil
	})
	return ns
}

// export reads the namespace's objects as a backup tool or clusterctl
// keeps them: metadata (finalizers included) and spec, no status, no
// identity of the source.
func export(t *testing.T, ns string) *exported {
	t.Helper()
	ctx := context.Background()
	exp := &exported{addressOf: map[string]string{}}
	keep := func(m *metav1.ObjectMeta) {
		*m = metav1.ObjectMeta{Name: m.Name, Labels: m.Labels, Annotations: m.Annotations, Finalizers: m.Finalizers, OwnerReferences: m.OwnerReferences}
	}
	var pool ipamv1.SubnetPool
	var subnet ipamv1.Subnet
	var cluster clusterv1.Cluster
	for name, o := range map[string]client.Object{"dc": &pool, "machines": &subnet, "work": &cluster} {
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, o); err != nil {
			t.Fatal(err)
		}
	}
	keep(&pool.ObjectMeta)
	pool.Status = ipamv1.SubnetPoolStatus{}
	keep(&subnet.ObjectMeta)
	subnet.Status = ipamv1.SubnetStatus{}
	// Defaulting wrote the source namespace into the pool reference; the
	// pool comes back beside the Subnet, in the namespace that stands in
	// for the same namespace of another cluster.
	subnet.Spec.PoolRef.Namespace = ""
	// Without its address-protection finalizer (exported before its first
	// address was handed out, or by a tool that drops finalizers): the
	// restored addresses must protect it again.
	subnet.Finalizers = slices.DeleteFunc(subnet.Finalizers, func(f string) bool { return f == ipamv1.FinalizerAddressProtection })
	keep(&cluster.ObjectMeta)
	cluster.Status = clusterv1.ClusterStatus{}
	exp.pool, exp.subnet, exp.cluster = &pool, &subnet, &cluster

	var claims capiipam.IPAddressClaimList
	if err := k8s.List(ctx, &claims, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var addrs capiipam.IPAddressList
	if err := k8s.List(ctx, &addrs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i := range claims.Items {
		c := &claims.Items[i]
		keep(&c.ObjectMeta)
		c.Status = capiipam.IPAddressClaimStatus{}
		exp.claims = append(exp.claims, c)
	}
	for i := range addrs.Items {
		a := &addrs.Items[i]
		if a.DeletionTimestamp != nil {
			continue // a released address cooling down: not a machine's
		}
		keep(&a.ObjectMeta)
		exp.addrs = append(exp.addrs, a)
		exp.addressOf[a.Spec.ClaimRef.Name] = a.Spec.Address
	}
	if len(exp.claims) != machines || len(exp.addressOf) != machines {
		t.Fatalf("exported %d claims and %d addresses in use, want %d", len(exp.claims), len(exp.addressOf), machines)
	}
	return exp
}

// removeLikeClusterctl deletes the source's objects as clusterctl move
// does once the target has them: the Cluster paused first, then each
// object's finalizers removed and the object deleted, owned objects first.
func removeLikeClusterctl(t *testing.T, ns string, exp *exported) {
	t.Helper()
	ctx := context.Background()
	mustKubectl(t, `{"spec":{"paused":true}}`, "patch", "-n", ns, "clusters.cluster.x-k8s.io", "work", "--type=merge", "--patch-file=/dev/stdin")
	var objs []client.Object
	for _, a := range exp.addrs {
		objs = append(objs, &capiipam.IPAddress{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: a.Name}})
	}
	for _, c := range exp.claims {
		objs = append(objs, &capiipam.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: c.Name}})
	}
	objs = append(objs,
		&ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "machines"}},
		&ipamv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dc"}},
		&clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "work"}})
	// Each object is gone before the next is deleted, and a refused or
	// raced removal is tried again, as clusterctl retries it with
	// back-off: between the strip and the delete a controller may put
	// its finalizer back, and the pool's delete is refused while the
	// Subnet is still there.
	strip := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))
	for _, o := range objs {
		eventually(t, time.Minute, func() error {
			if err := k8s.Patch(ctx, o, strip); apierrors.IsNotFound(err) {
				return nil
			} else if err != nil {
				return fmt.Errorf("removing the finalizers of %T %s: %w", o, o.GetName(), err)
			}
			if err := k8s.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting %T %s: %w", o, o.GetName(), err)
			}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T %s still there (%v)", o, o.GetName(), err)
			}
			return nil
		})
	}
}

// create creates exported objects in the namespace, recording their new
// identity in them.
func create(t *testing.T, ns string, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		o.SetNamespace(ns)
		o.SetResourceVersion("")
		o.SetUID("")
		if p, ok := o.(*ipamv1.SubnetPool); ok {
			// The target is another cluster's plan in this test's one
			// cluster: the pool goes in the target namespace's address
			// space (its label), not the source's.
			p.Spec.AddressSpace = ""
		}
		if err := k8s.Create(context.Background(), o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}

// checkRestoredUntouched checks that every restored IPAddress is there,
// with its address, not released and not adopted.
func checkRestoredUntouched(t *testing.T, ns string, exp *exported) {
	t.Helper()
	var list capiipam.IPAddressList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != machines {
		t.Fatalf("%d IPAddresses, want the %d restored", len(list.Items), machines)
	}
	for _, a := range list.Items {
		if a.DeletionTimestamp != nil || len(a.OwnerReferences) > 0 || a.Spec.Address != exp.addressOf[a.Name] {
			t.Errorf("IPAddress %s changed while its Subnet was not Ready: address %s (was %s), owners %v, deleted %v",
				a.Name, a.Spec.Address, exp.addressOf[a.Name], a.OwnerReferences, a.DeletionTimestamp)
		}
	}
}

// checkKept waits for every claim to be bound and checks that each machine
// kept its address, with no duplicate, and that the Subnet is protected.
func checkKept(t *testing.T, ns string, exp *exported) {
	t.Helper()
	ctx := context.Background()
	eventually(t, time.Minute, func() error {
		for _, c := range exp.claims {
			if _, err := bound(ctx, ns, c.Name); err != nil {
				return err
			}
		}
		return nil
	})
	changed, seen := 0, map[string]string{}
	for _, c := range exp.claims {
		a, err := bound(ctx, ns, c.Name)
		if err != nil {
			t.Fatal(err)
		}
		if a.Spec.Address != exp.addressOf[c.Name] {
			changed++
			t.Errorf("machine %s had %s, now %s", c.Name, exp.addressOf[c.Name], a.Spec.Address)
		}
		if other, dup := seen[a.Spec.Address]; dup {
			t.Errorf("%s and %s both hold %s", other, c.Name, a.Spec.Address)
		}
		seen[a.Spec.Address] = c.Name
		var claim capiipam.IPAddressClaim
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(c), &claim); err != nil {
			t.Fatal(err)
		}
		if owner := metav1.GetControllerOf(a); owner == nil || owner.UID != claim.UID {
			t.Errorf("IPAddress %s is not controlled by its claim: %v", a.Name, a.OwnerReferences)
		}
		if r := meta.FindStatusCondition(claim.Status.Conditions, capiipam.IPAddressClaimReadyCondition); r == nil || r.Status != metav1.ConditionTrue {
			t.Errorf("claim %s not Ready: %+v", c.Name, claim.Status)
		}
	}
	if changed > 0 {
		t.Errorf("%d of %d machines got another address", changed, len(exp.claims))
	}
	var s ipamv1.Subnet
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: exp.subnet.Name}, &s); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(s.Finalizers, ipamv1.FinalizerAddressProtection) {
		t.Errorf("the Subnet holding restored addresses is not protected: finalizers %v", s.Finalizers)
	}
}
