//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"math/rand/v2"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ipspace"
)

// recorded waits until every dynamic Subnet of the namespace is Ready with
// its range recorded in spec.cidr, and returns each Subnet's range by name.
func recorded(t *testing.T, ns string, want int) map[string]string {
	t.Helper()
	ranges := map[string]string{}
	// Records yield to grants and follow other tests' records in this
	// manager's queue: a minute, not the 30 s of a grant.
	eventually(t, time.Minute, func() error {
		var list ipamv1.SubnetList
		if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(list.Items) != want {
			return fmt.Errorf("%d Subnets, want %d", len(list.Items), want)
		}
		for _, s := range list.Items {
			switch {
			case !meta.IsStatusConditionTrue(s.Status.Conditions, ipamv1.ConditionReady):
				return fmt.Errorf("Subnet %s is not Ready: %+v", s.Name, s.Status.Conditions)
			case s.Spec.CIDR != s.Status.CIDR:
				return fmt.Errorf("Subnet %s holds %s, spec.cidr is %q", s.Name, s.Status.CIDR, s.Spec.CIDR)
			case s.Status.ObservedGeneration != s.Generation:
				return fmt.Errorf("Subnet %s: status observed generation %d of %d", s.Name, s.Status.ObservedGeneration, s.Generation)
			}
			ranges[s.Name] = s.Status.CIDR
		}
		return nil
	})
	return ranges
}

// exportWithoutStatus is what a backup tool keeps of an object by default:
// its metadata as a user wrote it (no UID, resourceVersion, timestamps,
// finalizers or managedFields) and its spec; no status.
func exportWithoutStatus(t *testing.T, obj client.Object) *unstructured.Unstructured {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var u unstructured.Unstructured
	if err := json.Unmarshal(raw, &u.Object); err != nil {
		t.Fatal(err)
	}
	out := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": ipamv1.GroupVersion.String(), "kind": obj.GetObjectKind().GroupVersionKind().Kind,
		"spec": u.Object["spec"],
	}}
	out.SetNamespace(obj.GetNamespace())
	out.SetName(obj.GetName())
	out.SetLabels(obj.GetLabels())
	return out
}

// Durable allocations: every object of a pool tree exported without status,
// deleted, and created again (in another order, Subnets first, as a restore
// or a GitOps sync may) gets every range back. A dynamic Subnet's range is
// in its spec, recorded by the controller.
func TestBackupWithoutStatusRestoresEveryRange(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	root := newPool(ns, "plan", "10.60.0.0/16", 24)
	team := newPool(ns, "team", "10.60.128.0/18", 26)
	team.Spec.ParentRef = &ipamv1.PoolReference{Name: "plan"}
	// One that names neither and is created before its pool: the
	// controller gives it the pool's default length, and records both.
	early := &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "early"}, Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: "team"}}}
	create(t, early, root, team)
	subnets := []*ipamv1.Subnet{early}
	for i, length := range []int32{24, 26, 25, 28, 24, 27} {
		subnets = append(subnets, newSubnet(ns, fmt.Sprintf("root-%d", i), "plan", length))
	}
	for i, length := range []int32{26, 28, 27, 26} {
		subnets = append(subnets, newSubnet(ns, fmt.Sprintf("team-%d", i), "team", length))
	}
	subnets = append(subnets, explicitSubnet(ns, "explicit", "plan", "10.60.100.0/24"))
	// One that names neither: the webhook fills the pool's default length.
	subnets = append(subnets, &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "defaulted"}, Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: "team"}}})
	for _, s := range subnets[1:] {
		create(t, s)
	}
	before := recorded(t, ns, len(subnets))

	var pools ipamv1.SubnetPoolList
	var list ipamv1.SubnetList
	if err := k8s.List(ctx, &pools, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var backup []*unstructured.Unstructured
	for i := range list.Items {
		list.Items[i].Kind = "Subnet"
		backup = append(backup, exportWithoutStatus(t, &list.Items[i]))
	}
	for i := range pools.Items {
		pools.Items[i].Kind = "SubnetPool"
		backup = append(backup, exportWithoutStatus(t, &pools.Items[i]))
	}

	// Delete everything, claims before the pools they use (the webhook
	// refuses to delete a pool in use).
	for _, o := range backup { // Subnets first, then pools by name: plan, team
		if o.GetKind() == "Subnet" {
			if err := k8s.Delete(ctx, o.DeepCopy()); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
	}
	for _, name := range []string{"team", "plan"} {
		eventually(t, 30*time.Second, func() error {
			err := k8s.Delete(ctx, &ipamv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err // refused while the ledger still counts a user
		})
	}
	eventually(t, 30*time.Second, func() error {
		var pools ipamv1.SubnetPoolList
		var list ipamv1.SubnetList
		if err := k8s.List(ctx, &pools, client.InNamespace(ns)); err != nil {
			return err
		}
		if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		if n := len(pools.Items) + len(list.Items); n > 0 {
			return fmt.Errorf("%d objects left", n)
		}
		return nil
	})

	// Restore the Subnets first, in a shuffled order (they wait for their
	// pools), then the pools, parents before children (admission refuses a
	// child pool whose parent does not exist yet).
	rand.Shuffle(len(backup), func(i, j int) { backup[i], backup[j] = backup[j], backup[i] })
	slices.SortStableFunc(backup, func(a, b *unstructured.Unstructured) int {
		rank := func(o *unstructured.Unstructured) int {
			switch {
			case o.GetKind() == "Subnet":
				return 0
			case o.GetName() == "plan":
				return 1
			}
			return 2
		}
		return rank(a) - rank(b)
	})
	for _, o := range backup {
		if err := k8s.Create(ctx, o.DeepCopy()); err != nil {
			t.Fatalf("restoring %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	after := recorded(t, ns, len(subnets))
	for name, cidr := range before {
		if after[name] != cidr {
			t.Errorf("Subnet %s held %s before the backup, %s after the restore", name, cidr, after[name])
		}
	}
}

// Re-applying the manifests from Git (which never name the allocated range)
// keeps every range, and tools that compare Git with the cluster see no
// drift: a server-side apply by another field manager leaves the
// controller's spec.cidr alone, and a replace with the Git manifest keeps it
// (the defaulting webhook, as the API server keeps a Service's clusterIP).
func TestReapplyFromGitKeepsTheRange(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	create(t, newPool(ns, "plan", "10.61.0.0/16", 24), newSubnet(ns, "web", "plan", 26))
	held := recorded(t, ns, 1)["web"]
	gitManifest := fmt.Sprintf(`{"apiVersion":"ipam.subnet-operator.io/v1alpha2","kind":"Subnet",
		"metadata":{"name":"web","namespace":%q,"labels":{"app":"web"}},"spec":{"poolRef":{"name":"plan"},"prefixLength":26}}`, ns)

	// Flux: server-side apply, forced, dry run first (its drift check),
	// then for real.
	for _, dryRun := range []bool{true, false} {
		opts := []client.PatchOption{client.FieldOwner("kustomize-controller"), client.ForceOwnership}
		if dryRun {
			opts = append(opts, client.DryRunAll)
		}
		var s ipamv1.Subnet
		s.Namespace, s.Name = ns, "web"
		if err := k8s.Patch(ctx, &s, client.RawPatch(types.ApplyPatchType, []byte(gitManifest)), opts...); err != nil {
			t.Fatalf("server-side apply (dry run %v): %v", dryRun, err)
		}
		if s.Spec.CIDR != held {
			t.Errorf("server-side apply (dry run %v) left spec.cidr %q, want %s", dryRun, s.Spec.CIDR, held)
		}
	}

	// kubectl replace / Argo CD's Replace=true: a full update without
	// spec.cidr.
	if _, stderr, err := kubectl(t, strings.Replace(gitManifest, `"labels":{"app":"web"}`, `"labels":{"app":"web","tier":"front"}`, 1), "replace", "-f", "-"); err != nil {
		t.Fatalf("kubectl replace: %v: %s", err, stderr)
	}
	var s ipamv1.Subnet
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &s); err != nil {
		t.Fatal(err)
	}
	if s.Spec.CIDR != held || s.Labels["tier"] != "front" {
		t.Errorf("after kubectl replace: spec.cidr %q (want %s), labels %v", s.Spec.CIDR, held, s.Labels)
	}
	if got := recorded(t, ns, 1)["web"]; got != held {
		t.Errorf("Subnet web holds %s after the re-applies, held %s before", got, held)
	}

	// Removing the record outright keeps it too (a Service's clusterIP
	// behaves the same); with the webhook bypassed, the schema refuses it.
	if err := k8s.Patch(ctx, &s, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cidr":null}}`))); err != nil {
		t.Fatalf("merge patch removing spec.cidr: %v", err)
	}
	if s.Spec.CIDR != held {
		t.Errorf("after a merge patch removing spec.cidr: %q, want %s kept", s.Spec.CIDR, held)
	}
	restore := setWebhookOperations(t, mutatingConfiguration, noOperations)
	defer restore()
	eventually(t, 10*time.Second, func() error {
		err := k8s.Patch(ctx, &s, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cidr":null}}`)))
		if err == nil || !strings.Contains(err.Error(), "cidr cannot be removed") {
			return fmt.Errorf("removing spec.cidr with the webhook bypassed: got %w, want the schema's refusal", err)
		}
		return nil
	})
}

// spec.cidr can be added after creation only to record the range held: a
// user cannot turn a waiting prefixLength claim into a claim on a range of
// their choosing, nor record another range than the one held.
func TestOnlyTheHeldRangeCanBeRecorded(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	// A full pool: the claim waits.
	full := newPool(ns, "full", "10.62.0.0/24", 25)
	create(t, full, explicitSubnet(ns, "all", "full", "10.62.0.0/24"), newSubnet(ns, "waits", "full", 25))
	subnetReason(t, ns, "waits", ipamv1.ReasonPoolExhausted)
	waits := &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "waits"}}
	err := k8s.Patch(ctx, waits, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cidr":"10.62.0.0/25"}}`)))
	if err == nil || !strings.Contains(err.Error(), "only to record the range the Subnet holds") {
		t.Errorf("adding spec.cidr to a waiting claim: got %v, want the schema's refusal", err)
	}

	// A claim that names neither field cannot be given a length either:
	// the length is added only beside the recorded range.
	bare := &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bare"}, Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: "later"}}}
	create(t, bare)
	subnetReason(t, ns, "bare", ipamv1.ReasonPoolNotFound)
	err = k8s.Patch(ctx, bare, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"prefixLength":25}}`)))
	if err == nil || !strings.Contains(err.Error(), "prefixLength cannot be added") {
		t.Errorf("adding spec.prefixLength to a claim that named neither field: got %v, want the schema's refusal", err)
	}

	ns = namespace(t)
	create(t, newPool(ns, "free", "10.63.0.0/24", 26), newSubnet(ns, "holds", "free", 26))
	held := recorded(t, ns, 1)["holds"]
	other := "10.63.0.192/26"
	if held == other {
		other = "10.63.0.128/26"
	}
	holds := &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "holds"}}
	err = k8s.Patch(ctx, holds, client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"cidr":%q}}`, other))))
	if err == nil || !strings.Contains(err.Error(), "immutable") {
		t.Errorf("changing the recorded spec.cidr: got %v, want the schema's refusal", err)
	}
}

// kubectl get sorts pools by the numeric status fields: utilizationPercent
// (an integer) and free (a decimal string, which kubectl compares by value).
// The figures are chosen so that sorting their text would order them
// differently. The default columns show Ready, and a waiting explicit
// Subnet shows the range it asks for.
func TestPrinterColumnsSortNumerically(t *testing.T) {
	ns := namespace(t)
	pools := []struct {
		name, cidr string
		holds      []string
	}{
		{"quarter", "10.70.0.0/24", []string{"10.70.0.0/26"}},                        // 25%, 192 free
		{"three-quarters", "10.70.1.0/28", []string{"10.70.1.0/29", "10.70.1.8/30"}}, // 75%, 4 free
		{"sixth", "10.70.16.0/20", []string{"10.70.16.0/24"}},                        // 6%, 3840 free
		{"half", "10.70.2.0/27", []string{"10.70.2.0/28"}},                           // 50%, 16 free
	}
	for _, p := range pools {
		create(t, newPool(ns, p.name, p.cidr, 0))
		for i, h := range p.holds {
			create(t, explicitSubnet(ns, fmt.Sprintf("%s-%d", p.name, i), p.name, h))
		}
	}
	for _, p := range pools {
		want := big.NewInt(0)
		for _, h := range p.holds {
			want.Add(want, ipspace.AddressCount(netip.MustParsePrefix(h)))
		}
		poolShows(t, ns, p.name, allocatedIs(want.String()))
	}
	for _, tc := range []struct{ sortBy, want string }{
		{".status.utilizationPercent", "sixth quarter half three-quarters"},
		{".status.free", "three-quarters half quarter sixth"},
	} {
		out, stderr, err := kubectl(t, "", "get", "subnetpools", "-n", ns, "--sort-by="+tc.sortBy, "-o", "custom-columns=NAME:.metadata.name", "--no-headers")
		if err != nil {
			t.Fatalf("kubectl get --sort-by=%s: %v: %s", tc.sortBy, err, stderr)
		}
		if got := strings.Join(strings.Fields(out), " "); got != tc.want {
			t.Errorf("--sort-by=%s: %s, want %s", tc.sortBy, got, tc.want)
		}
	}

	out, stderr, err := kubectl(t, "", "get", "subnetpools", "-n", ns, "sixth")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	if header := strings.Fields(strings.SplitN(out, "\n", 2)[0]); !slices.Equal(header, []string{"NAME", "CIDR", "PARENT", "READY", "USED%", "FREE", "LARGEST", "FREE", "AGE"}) {
		t.Errorf("kubectl get subnetpools columns: %v", header)
	}
	if !regexp.MustCompile(`sixth\s+10\.70\.16\.0/20\s+True\s+6\s+3840\s+10\.70\.24\.0/21`).MatchString(out) {
		t.Errorf("kubectl get subnetpools:\n%s", out)
	}

	// A waiting explicit claim shows what it asks for.
	create(t, explicitSubnet(ns, "wants", "later", "10.71.0.32/27"))
	subnetReason(t, ns, "wants", ipamv1.ReasonPoolNotFound)
	out, stderr, err = kubectl(t, "", "get", "subnets", "-n", ns, "wants")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	if !regexp.MustCompile(`wants\s+later\s+10\.71\.0\.32/27\s+PoolNotFound`).MatchString(out) {
		t.Errorf("kubectl get subnets should show the waiting claim's range:\n%s", out)
	}
}

// A Subnet that names neither a range nor a length and is created before
// its pool (a GitOps sync in any order) gets the pool's default length from
// the controller, not from admission. Its range is recorded all the same,
// with the length it was given (spec.prefixLength and spec.cidr in one
// write), so that kubectl shows it and an export without status gives it
// back. Its manifest in Git names neither field, and re-applying it keeps
// both: server-side apply, kubectl replace, and a replace in v1alpha1.
func TestSubnetCreatedBeforeItsPoolIsRecorded(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	gitManifest := fmt.Sprintf(`{"apiVersion":"ipam.subnet-operator.io/v1alpha2","kind":"Subnet",
		"metadata":{"name":"early","namespace":%q,"labels":{"app":"web"}},"spec":{"poolRef":{"name":"plan"}}}`, ns)
	if _, stderr, err := kubectl(t, gitManifest, "create", "-f", "-"); err != nil {
		t.Fatalf("kubectl create: %v: %s", err, stderr)
	}
	var early ipamv1.Subnet
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "early"}, &early); err != nil {
		t.Fatal(err)
	}
	if early.Spec.PrefixLength != nil || early.Spec.CIDR != "" {
		t.Fatalf("early was created with spec %+v; the test needs one that names neither field", early.Spec)
	}
	// A sibling that names its length, so that the pool's default is not
	// the only length in play.
	create(t, newPool(ns, "plan", "10.62.0.0/16", 24), newSubnet(ns, "sibling", "plan", 26))
	held := recorded(t, ns, 2)["early"]
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "early"}, &early); err != nil {
		t.Fatal(err)
	}
	if early.Spec.PrefixLength == nil || *early.Spec.PrefixLength != 24 {
		t.Fatalf("early holds %s, recorded with spec %+v; want prefixLength 24 beside the range", held, early.Spec)
	}
	out, stderr, err := kubectl(t, "", "get", "sn", "-n", ns, "early")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	if !regexp.MustCompile(`early\s+plan\s+` + regexp.QuoteMeta(held) + `\s+24\s+Allocated`).MatchString(out) {
		t.Errorf("kubectl get sn should show early's range and length:\n%s", out)
	}

	// keeps waits until early has the labels, and still holds and records
	// its range.
	keeps := func(how string, labels map[string]string) {
		t.Helper()
		eventually(t, 30*time.Second, func() error {
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "early"}, &early); err != nil {
				return err
			}
			for k, v := range labels {
				if early.Labels[k] != v {
					return fmt.Errorf("after %s: labels %v, want %v", how, early.Labels, labels)
				}
			}
			if early.Spec.CIDR != held || early.Spec.PrefixLength == nil || *early.Spec.PrefixLength != 24 ||
				early.Status.CIDR != held || !meta.IsStatusConditionTrue(early.Status.Conditions, ipamv1.ConditionReady) {
				return fmt.Errorf("after %s: spec %+v, holds %q (held %s), %+v", how, early.Spec, early.Status.CIDR, held, early.Status.Conditions)
			}
			return nil
		})
	}

	// Flux: server-side apply, dry run first (its drift check), then for
	// real.
	for _, dryRun := range []bool{true, false} {
		opts := []client.PatchOption{client.FieldOwner("kustomize-controller"), client.ForceOwnership}
		if dryRun {
			opts = append(opts, client.DryRunAll)
		}
		var s ipamv1.Subnet
		s.Namespace, s.Name = ns, "early"
		if err := k8s.Patch(ctx, &s, client.RawPatch(types.ApplyPatchType, []byte(gitManifest)), opts...); err != nil {
			t.Fatalf("server-side apply (dry run %v): %v", dryRun, err)
		}
		if s.Spec.CIDR != held || s.Spec.PrefixLength == nil || *s.Spec.PrefixLength != 24 {
			t.Errorf("server-side apply (dry run %v) left spec %+v, want %s recorded", dryRun, s.Spec, held)
		}
	}
	keeps("a server-side apply", map[string]string{"app": "web"})

	// kubectl replace / Argo CD's Replace=true: a full update without
	// either field.
	if _, stderr, err := kubectl(t, strings.Replace(gitManifest, `{"app":"web"}`, `{"app":"web","tier":"front"}`, 1), "replace", "-f", "-"); err != nil {
		t.Fatalf("kubectl replace with the manifest from Git: %v: %s", err, stderr)
	}
	keeps("kubectl replace", map[string]string{"tier": "front"})

	// The same manifest in v1alpha1, served for the while: the defaulting
	// webhook sees the request converted to v1alpha2, and the v1alpha1
	// schema checks what it returns.
	serveV1alpha1(t)
	legacy := fmt.Sprintf(`{"apiVersion":"ipam.subnet-operator.io/v1alpha1","kind":"Subnet",
		"metadata":{"name":"early","namespace":%q,"labels":{"app":"web","tier":"legacy"}},"spec":{"poolRef":"plan"}}`, ns)
	eventually(t, 30*time.Second, func() error {
		if _, stderr, err := kubectl(t, legacy, "replace", "-f", "-"); err != nil {
			return fmt.Errorf("kubectl replace in v1alpha1: %w: %s", err, stderr)
		}
		return nil
	})
	keeps("kubectl replace in v1alpha1", map[string]string{"tier": "legacy"})

	// Exported without status, deleted and created again: the same range.
	early.Kind = "Subnet"
	backup := exportWithoutStatus(t, &early)
	if err := k8s.Delete(ctx, &early); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "early"}, &ipamv1.Subnet{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("early not gone yet: %v", err)
	})
	if err := k8s.Create(ctx, backup); err != nil {
		t.Fatalf("restoring early: %v", err)
	}
	if got := recorded(t, ns, 2)["early"]; got != held {
		t.Errorf("early held %s before the export, %s after the restore", held, got)
	}
}

// serveV1alpha1 serves the deprecated v1alpha1 of Subnets until the test
// ends (config/serve-v1alpha1 does the same).
func serveV1alpha1(t *testing.T) {
	t.Helper()
	served := func(on bool) string {
		return fmt.Sprintf(`[{"op":"test","path":"/spec/versions/0/name","value":"v1alpha1"},{"op":"replace","path":"/spec/versions/0/served","value":%v}]`, on)
	}
	if _, stderr, err := kubectl(t, "", "patch", "crd", "subnets.ipam.subnet-operator.io", "--type=json", "-p", served(true)); err != nil {
		t.Fatalf("serving v1alpha1: %v: %s", err, stderr)
	}
	t.Cleanup(func() {
		if _, stderr, err := kubectl(t, "", "patch", "crd", "subnets.ipam.subnet-operator.io", "--type=json", "-p", served(false)); err != nil {
			t.Errorf("no longer serving v1alpha1: %v: %s", err, stderr)
		}
	})
}
