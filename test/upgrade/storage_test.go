//go:build integration

// Package upgrade tests an upgrade over what an earlier release left in
// the cluster: objects stored as v1alpha1, read and decided through
// v1alpha2 (the manager's conversion webhook), and the storage migration
// that lets v1alpha1 go (docs/operations.md, "Upgrading to v1alpha2").
package upgrade

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	ipamv1alpha1 "github.com/subnet-operator/subnet-operator/api/v1alpha1"
	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ipamcli"
	"github.com/subnet-operator/subnet-operator/test/controlplane"
	"github.com/subnet-operator/subnet-operator/test/environment"
)

const ns = "legacy"

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// legacyClient writes and reads v1alpha1, as clients of the earlier
// release do.
func legacyClient(cfg *rest.Config) (client.Client, error) {
	scheme := runtime.NewScheme()
	if err := ipamv1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}

// leaveV1alpha1Objects installs the earlier release's CRDs (v1alpha1 only)
// and leaves what its operator left: pools and Subnets stored as v1alpha1,
// decided (with status) or still waiting.
func leaveV1alpha1Objects(ctx context.Context, cp *controlplane.ControlPlane) error {
	manifest, err := os.ReadFile(filepath.Join("testdata", "v1alpha1-crds.yaml"))
	if err != nil {
		return err
	}
	if _, err := cp.Kubectl(ctx, manifest, "apply", "--server-side", "-f", "-"); err != nil {
		return err
	}
	if _, err := cp.Kubectl(ctx, nil, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/subnetpools.ipam.subnet-operator.io", "crd/subnets.ipam.subnet-operator.io"); err != nil {
		return err
	}
	if _, err := cp.Kubectl(ctx, nil, "create", "namespace", ns); err != nil {
		return err
	}
	c, err := legacyClient(cp.Config)
	if err != nil {
		return err
	}
	ready := func(reason, cidr string) []metav1.Condition {
		return []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: reason, Message: "decided by the earlier release",
			LastTransitionTime: metav1.Now(), ObservedGeneration: 1}}
	}
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: ns, Name: name} }
	objects := []struct {
		obj    client.Object
		status func(client.Object)
	}{
		{&ipamv1alpha1.SubnetPool{ObjectMeta: meta("dc"), Spec: ipamv1alpha1.SubnetPoolSpec{CIDR: "10.0.0.0/16", DefaultPrefixLength: ptr.To[int32](24)}},
			func(o client.Object) {
				o.(*ipamv1alpha1.SubnetPool).Status = ipamv1alpha1.SubnetPoolStatus{CIDR: "10.0.0.0/16", Conditions: ready("Available", "10.0.0.0/16")}
			}},
		{&ipamv1alpha1.SubnetPool{ObjectMeta: meta("team"), Spec: ipamv1alpha1.SubnetPoolSpec{CIDR: "10.0.128.0/17", ParentRef: "dc"}},
			func(o client.Object) {
				o.(*ipamv1alpha1.SubnetPool).Status = ipamv1alpha1.SubnetPoolStatus{CIDR: "10.0.128.0/17", Conditions: ready("Available", "10.0.128.0/17")}
			}},
		{&ipamv1alpha1.Subnet{ObjectMeta: meta("web"), Spec: ipamv1alpha1.SubnetSpec{PoolRef: "dc", CIDR: "10.0.1.0/24"}},
			func(o client.Object) {
				o.(*ipamv1alpha1.Subnet).Status = ipamv1alpha1.SubnetStatus{CIDR: "10.0.1.0/24", Conditions: ready("Allocated", "10.0.1.0/24")}
			}},
		// Not the first free block: a fresh allocation would be 10.0.128.0/24.
		{&ipamv1alpha1.Subnet{ObjectMeta: meta("api"), Spec: ipamv1alpha1.SubnetSpec{PoolRef: "team", PrefixLength: ptr.To[int32](24)}},
			func(o client.Object) {
				o.(*ipamv1alpha1.Subnet).Status = ipamv1alpha1.SubnetStatus{CIDR: "10.0.130.0/24", Conditions: ready("Allocated", "10.0.130.0/24")}
			}},
		{&ipamv1alpha1.Subnet{ObjectMeta: meta("waiting"), Spec: ipamv1alpha1.SubnetSpec{PoolRef: "team", PrefixLength: ptr.To[int32](24)}}, nil},
	}
	for _, o := range objects {
		if err := c.Create(ctx, o.obj); err != nil {
			return err
		}
		if o.status != nil {
			o.status(o.obj)
			if err := c.Status().Update(ctx, o.obj); err != nil {
				return err
			}
		}
	}
	// What the rest of the test starts from, read where it is kept.
	stored, err := storedAPIVersions(ctx, cp.EtcdURL())
	if err != nil {
		return err
	}
	if len(stored) != len(objects) || slices.ContainsFunc(slices.Collect(maps.Values(stored)), func(v string) bool { return v != ipamv1alpha1.GroupVersion.String() }) {
		return fmt.Errorf("stored before the upgrade: %v", stored)
	}
	return nil
}

// storeAsV1alpha1 rewrites the Subnet stored under key, in etcd itself, in
// v1alpha1's encoding: what the earlier release's API server wrote.
func storeAsV1alpha1(ctx context.Context, etcdURL, key string) error {
	var got struct {
		KVs []struct{ Value []byte } `json:"kvs"`
	}
	if err := etcdCall(ctx, etcdURL, "range", map[string][]byte{"key": []byte(key)}, &got); err != nil {
		return err
	}
	if len(got.KVs) != 1 {
		return fmt.Errorf("%s: %d values in etcd", key, len(got.KVs))
	}
	var obj map[string]any
	if err := json.Unmarshal(got.KVs[0].Value, &obj); err != nil {
		return err
	}
	obj["apiVersion"] = ipamv1alpha1.GroupVersion.String()
	spec := obj["spec"].(map[string]any)
	spec["poolRef"] = spec["poolRef"].(map[string]any)["name"]
	value, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	return etcdCall(ctx, etcdURL, "put", map[string][]byte{"key": []byte(key), "value": value}, nil)
}

// etcdCall calls etcd's JSON gateway (/v3/kv/<method>); byte fields are
// base64 on the wire, as encoding/json writes []byte.
func etcdCall(ctx context.Context, etcdURL, method string, in map[string][]byte, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, etcdURL+"/v3/kv/"+method, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd %s: %s", method, resp.Status)
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// storedAPIVersions reads from etcd itself the apiVersion every object of
// the API group is stored in, by key.
func storedAPIVersions(ctx context.Context, etcdURL string) (map[string]string, error) {
	const prefix = "/registry/ipam.subnet-operator.io/"
	end := prefix[:len(prefix)-1] + string(prefix[len(prefix)-1]+1)
	var out struct {
		KVs []struct{ Key, Value []byte } `json:"kvs"`
	}
	if err := etcdCall(ctx, etcdURL, "range", map[string][]byte{"key": []byte(prefix), "range_end": []byte(end)}, &out); err != nil {
		return nil, err
	}
	versions := map[string]string{}
	for _, kv := range out.KVs {
		var obj struct {
			APIVersion string `json:"apiVersion"`
		}
		if err := json.Unmarshal(kv.Value, &obj); err != nil {
			return nil, fmt.Errorf("%s: %w", kv.Key, err)
		}
		versions[string(kv.Key)] = obj.APIVersion
	}
	return versions, nil
}

func TestUpgradeFromV1alpha1Storage(t *testing.T) {
	ctrllog.SetLogger(logr.Discard()) // the clients' warnings are v1alpha1's deprecation
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	env, k8s := startUpgraded(ctx, t, environment.Options{
		BeforeInstall: leaveV1alpha1Objects,
	})
	// v1alpha1 is not served by default: its clients are told so.
	unserved, err := legacyClient(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := unserved.List(ctx, &ipamv1alpha1.SubnetList{}, client.InNamespace(ns)); err == nil {
		t.Error("v1alpha1 is served by the default install")
	}

	// Everything the earlier release left is read and decided through
	// v1alpha2: references in the objects' own namespace, held ranges kept,
	// the waiting claim granted, the dynamic one's range recorded.
	// waiting gets the best fit: the smallest free block, beside api.
	want := map[string]string{"web": "10.0.1.0/24", "api": "10.0.130.0/24", "waiting": "10.0.131.0/24"}
	waitFor(ctx, t, "the v1alpha1 objects decided through v1alpha2", func() (bool, string) {
		var subnets ipamv1.SubnetList
		if err := k8s.List(ctx, &subnets, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		got := map[string]string{}
		for _, s := range subnets.Items {
			if s.Spec.PoolRef.Namespace != ns {
				return false, fmt.Sprintf("Subnet %s: poolRef %+v", s.Name, s.Spec.PoolRef)
			}
			if meta.IsStatusConditionTrue(s.Status.Conditions, ipamv1.ConditionReady) && s.Status.ObservedGeneration == s.Generation {
				got[s.Name] = s.Status.CIDR
			}
		}
		return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprintf("held %v, want %v", got, want)
	})
	var team ipamv1.SubnetPool
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "team"}, &team); err != nil {
		t.Fatal(err)
	}
	if team.Spec.ParentRef == nil || *team.Spec.ParentRef != (ipamv1.PoolReference{Namespace: ns, Name: "dc"}) || team.Status.CIDR != "10.0.128.0/17" {
		t.Fatalf("pool team through v1alpha2: parentRef %+v, status.cidr %q", team.Spec.ParentRef, team.Status.CIDR)
	}

	// Served again for clients that still speak it (config/serve-v1alpha1
	// does this patch), reads convert back, and a v1alpha1 client's create
	// is defaulted, validated and decided like any other.
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	serve := []byte(`[{"op":"test","path":"/spec/versions/0/name","value":"v1alpha1"},{"op":"replace","path":"/spec/versions/0/served","value":true}]`)
	for _, name := range []string{"subnetpools.ipam.subnet-operator.io", "subnets.ipam.subnet-operator.io"} {
		if _, err := dyn.Resource(crdResource).Patch(ctx, name, "application/json-patch+json", serve, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var legacy client.Client
	waitFor(ctx, t, "v1alpha1 served", func() (bool, string) {
		if legacy, err = legacyClient(env.Config); err != nil {
			return false, err.Error()
		}
		if err := legacy.List(ctx, &ipamv1alpha1.SubnetList{}, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	var old ipamv1alpha1.SubnetList
	if err := legacy.List(ctx, &old, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, s := range old.Items {
		if s.Spec.PoolRef != "dc" && s.Spec.PoolRef != "team" || len(s.Annotations) > 0 && s.Annotations[ipamv1alpha1.AnnotationPoolRef] != "" {
			t.Errorf("v1alpha1 read of %s: poolRef %q, annotations %v", s.Name, s.Spec.PoolRef, s.Annotations)
		}
	}
	created := &ipamv1alpha1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "from-old-client"},
		Spec: ipamv1alpha1.SubnetSpec{PoolRef: "dc", CIDR: "10.0.1.128/25"}}
	if err := legacy.Create(ctx, created); err == nil {
		t.Error("a v1alpha1 create over web's range was admitted")
	}
	created.Spec = ipamv1alpha1.SubnetSpec{PoolRef: "dc", PrefixLength: ptr.To[int32](26)}
	if err := legacy.Create(ctx, created); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the v1alpha1 client's Subnet decided", func() (bool, string) {
		var s ipamv1.Subnet
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(created), &s); err != nil {
			return false, err.Error()
		}
		return s.Spec.PoolRef == (ipamv1.PoolReference{Namespace: ns, Name: "dc"}) && meta.IsStatusConditionTrue(s.Status.Conditions, ipamv1.ConditionReady),
			fmt.Sprintf("poolRef %+v, status %+v", s.Spec.PoolRef, s.Status)
	})

	// v1alpha1's schema knows only the pool's name: an update that changes
	// the namespace through the annotation that carries it is refused on
	// the converted object.
	spoof := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+ipamv1alpha1.AnnotationPoolRef+`":"elsewhere/dc"}}}`))
	if err := legacy.Patch(ctx, &ipamv1alpha1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}, spoof); err == nil ||
		!strings.Contains(err.Error(), `spec.poolRef: Invalid value: "elsewhere/dc": is immutable`) {
		t.Errorf("moving web to another namespace's pool through v1alpha1: %v", err)
	}

	// An object the controller has no reason to write again stays stored
	// as it was. Put web back into etcd as the earlier release stored it,
	// so that the migration below has one to rewrite whatever the
	// controller did: the test fails unless the tool rewrites it.
	const webKey = "/registry/ipam.subnet-operator.io/subnets/" + ns + "/web"
	var web ipamv1.Subnet
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &web); err != nil {
		t.Fatal(err)
	}
	if err := storeAsV1alpha1(ctx, env.EtcdURL(), webKey); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the API to show web as stored in v1alpha1", func() (bool, string) {
		var now ipamv1.Subnet
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(&web), &now); err != nil {
			return false, err.Error()
		}
		return now.ResourceVersion != web.ResourceVersion && now.Spec.PoolRef == web.Spec.PoolRef && now.Status.CIDR == "10.0.1.0/24",
			fmt.Sprintf("resourceVersion %s, poolRef %+v", now.ResourceVersion, now.Spec.PoolRef)
	})
	if stored, err := storedAPIVersions(ctx, env.EtcdURL()); err != nil || stored[webKey] != ipamv1alpha1.GroupVersion.String() {
		t.Fatalf("before the migration, web is stored as %q (%v)", stored[webKey], err)
	}

	// The storage migration, as an administrator runs it: kubectl ipam
	// migrate-storage rewrites every object (a no-op update stores it in
	// the storage version), then drops v1alpha1 from storedVersions. The
	// controller's first status writes rewrote the others already (each old
	// status lacked what this release writes); web is left to the tool.
	var pools ipamv1.SubnetPoolList
	var subnets ipamv1.SubnetList
	if err := k8s.List(ctx, &pools); err != nil {
		t.Fatal(err)
	}
	if err := k8s.List(ctx, &subnets); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := ipamcli.Main(ctx, []string{"migrate-storage", "--kubeconfig", env.Kubeconfig, "--chunk-size", "2", "-o", "json"}, &stdout, &stderr); code != 0 {
		t.Fatalf("kubectl ipam migrate-storage: exit %d: %s", code, stderr.String())
	}
	var report ipamcli.MigrationReport
	if err := json.Unmarshal(stdout.Bytes(), &report); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	if report.Pools != len(pools.Items) || report.Subnets != len(subnets.Items) ||
		!slices.Equal(report.StoredVersionsBefore["subnets.ipam.subnet-operator.io"], []string{"v1alpha1", "v1alpha2"}) {
		t.Errorf("migration report %+v; the API lists %d pools and %d Subnets", report, len(pools.Items), len(subnets.Items))
	}
	for _, name := range []string{"subnetpools.ipam.subnet-operator.io", "subnets.ipam.subnet-operator.io"} {
		crd, err := dyn.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if stored, _, _ := unstructured.NestedStringSlice(crd.Object, "status", "storedVersions"); !slices.Equal(stored, []string{"v1alpha2"}) {
			t.Errorf("%s: storedVersions %v after the migration", name, stored)
		}
	}

	// Every object is stored as v1alpha2 now, web included.
	stored, err := storedAPIVersions(ctx, env.EtcdURL())
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != len(pools.Items)+len(subnets.Items) {
		t.Fatalf("etcd holds %d objects, the API lists %d", len(stored), len(pools.Items)+len(subnets.Items))
	}
	for key, version := range stored {
		if version != ipamv1.GroupVersion.String() {
			t.Errorf("%s is stored as %s after the migration", key, version)
		}
	}

	// Then nothing needs v1alpha1 to be read: a CRD without it (and without
	// conversion) lists every object. (A cluster keeps it for now: objects'
	// managedFields still name it; docs/operations.md.)
	for _, name := range []string{"subnetpools.ipam.subnet-operator.io", "subnets.ipam.subnet-operator.io"} {
		crd, err := dyn.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		versions = slices.DeleteFunc(versions, func(v any) bool { return v.(map[string]any)["name"] == "v1alpha1" })
		if err := unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions"); err != nil {
			t.Fatal(err)
		}
		if err := unstructured.SetNestedMap(crd.Object, map[string]any{"strategy": "None"}, "spec", "conversion"); err != nil {
			t.Fatal(err)
		}
		if _, err := dyn.Resource(crdResource).Update(ctx, crd, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("removing v1alpha1 from %s: %v", name, err)
		}
	}
	waitFor(ctx, t, "every object read without v1alpha1", func() (bool, string) {
		var after ipamv1.SubnetList
		if err := k8s.List(ctx, &after); err != nil {
			return false, err.Error()
		}
		var afterPools ipamv1.SubnetPoolList
		if err := k8s.List(ctx, &afterPools); err != nil {
			return false, err.Error()
		}
		return len(after.Items) == len(subnets.Items) && len(afterPools.Items) == len(pools.Items),
			fmt.Sprintf("%d Subnets and %d pools, want %d and %d", len(after.Items), len(afterPools.Items), len(subnets.Items), len(pools.Items))
	})
}

func waitFor(ctx context.Context, t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		ok, state := cond()
		last = state
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: %v; last: %s", what, err, last)
	}
}

// startUpgraded starts this release's manager, from the binary built with
// the race detector, over what opts.BeforeInstall left on the bare control
// plane (the earlier release's objects), and returns the environment,
// stopped when the test ends, and an admin client.
func startUpgraded(ctx context.Context, t *testing.T, opts environment.Options) (*environment.Environment, client.Client) {
	t.Helper()
	root, err := environment.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	manager, err := environment.BuildManager(ctx, root, dir, true)
	if err != nil {
		t.Fatal(err)
	}
	opts.Dir, opts.RepoRoot, opts.Manager = filepath.Join(dir, "env"), root, manager
	env, err := environment.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Stop)
	k8s, err := environment.AdminClient(env)
	if err != nil {
		t.Fatal(err)
	}
	return env, k8s
}
