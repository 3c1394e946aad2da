//go:build e2e

// Package plugin tests kubectl ipam as a user runs it: the plugin binary on
// the PATH, found and run by kubectl, against the local control plane with
// the operator, compared with golden outputs in testdata/ (rewrite them with
// SUBNET_OPERATOR_UPDATE_GOLDEN=1 and review the diff).
package plugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ipspace"
	"github.com/subnet-operator/subnet-operator/test/environment"
)

var (
	env     *environment.Environment
	k8s     client.Client
	pathDir string // holds kubectl-ipam, put first on the PATH
)

func TestMain(m *testing.M) {
	os.Exit(environment.Main(m, environment.Options{}, false, func(e *environment.Environment, c client.Client) {
		env, k8s = e, c
	}))
}

// kubectlIPAM runs `kubectl ipam args...` through kubectl's plugin lookup
// and returns stdout, stderr and the exit code.
func kubectlIPAM(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	if pathDir == "" {
		pathDir = t.TempDir()
		root, err := environment.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		build := exec.Command("go", "build", "-o", filepath.Join(pathDir, "kubectl-ipam"), "./cmd/kubectl-ipam")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building kubectl-ipam: %v\n%s", err, out)
		}
		t.Cleanup(func() { pathDir = "" })
	}
	root, _ := environment.RepoRoot()
	cmd := exec.Command(filepath.Join(root, "bin", "assets", "kubectl"), append([]string{"ipam"}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+pathDir+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+env.Kubeconfig)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

// golden compares got with testdata/name.golden, the test's namespace
// (ipam-golden-<4 hex digits>) written as ipam-golden-0000, so that
// the tables keep their alignment.
func golden(t *testing.T, name, ns, got string) {
	t.Helper()
	got = strings.ReplaceAll(got, ns, "ipam-golden-0000")
	path := filepath.Join("testdata", name+".golden")
	if os.Getenv("SUBNET_OPERATOR_UPDATE_GOLDEN") == "1" {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (write it with SUBNET_OPERATOR_UPDATE_GOLDEN=1)", err)
	}
	if got != string(want) {
		t.Errorf("kubectl ipam output differs from %s:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func pool(ns, name, cidr, parent string, defaultLen int32) *ipamv1.SubnetPool {
	p := &ipamv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: ipamv1.SubnetPoolSpec{CIDR: cidr, ParentRef: parentRef(parent)}}
	if defaultLen > 0 {
		p.Spec.DefaultPrefixLength = ptr.To(defaultLen)
	}
	return p
}

func subnet(ns, name, pool, cidr string, length int32) *ipamv1.Subnet {
	s := &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: pool}, CIDR: cidr}}
	if length > 0 {
		s.Spec.PrefixLength = ptr.To(length)
	}
	return s
}

// settled waits until every Subnet of the namespace is Ready and every
// pool's status shows exactly what its Ready claims hold.
func settled(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := func() error {
			var pools ipamv1.SubnetPoolList
			var subnets ipamv1.SubnetList
			if err := k8s.List(ctx, &pools, client.InNamespace(ns)); err != nil {
				return err
			}
			if err := k8s.List(ctx, &subnets, client.InNamespace(ns)); err != nil {
				return err
			}
			held := map[string]*big.Int{}
			count := map[string]int32{}
			add := func(pool, cidr string) {
				if held[pool] == nil {
					held[pool] = new(big.Int)
				}
				held[pool].Add(held[pool], ipspace.AddressCount(netip.MustParsePrefix(cidr)))
			}
			for _, s := range subnets.Items {
				if !meta.IsStatusConditionTrue(s.Status.Conditions, ipamv1.ConditionReady) || s.Spec.CIDR != s.Status.CIDR {
					return fmt.Errorf("Subnet %s not Ready and recorded yet", s.Name)
				}
				add(s.Spec.PoolRef.Name, s.Status.CIDR)
				count[s.Spec.PoolRef.Name]++
			}
			for _, p := range pools.Items {
				if p.Spec.ParentRef != nil {
					if p.Status.CIDR == "" {
						return fmt.Errorf("pool %s not granted yet", p.Name)
					}
					add(p.Spec.ParentRef.Name, p.Status.CIDR)
				}
			}
			for _, p := range pools.Items {
				want := "0"
				if held[p.Name] != nil {
					want = held[p.Name].String()
				}
				if !meta.IsStatusConditionTrue(p.Status.Conditions, ipamv1.ConditionReady) || p.Status.ObservedGeneration != p.Generation ||
					p.Status.Allocated != want || p.Status.Subnets != count[p.Name] {
					return fmt.Errorf("pool %s shows allocated %s and %d Subnets, want %s and %d", p.Name, p.Status.Allocated, p.Status.Subnets, want, count[p.Name])
				}
			}
			return nil
		}()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not settled: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A plan with nested pools and Subnets, seen through every command, in
// table, JSON and YAML form.
func TestKubectlIPAMGolden(t *testing.T) {
	ctx := context.Background()
	ns := fmt.Sprintf("ipam-golden-%04x", rand.IntN(1<<16))
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	plan := pool(ns, "plan", "10.20.0.0/16", "", 24)
	plan.Spec.Reserved = []string{"10.20.255.0/24"}
	west := pool(ns, "west", "10.20.64.0/18", "plan", 0)
	west.Spec.MinPrefixLength, west.Spec.MaxPrefixLength = ptr.To[int32](24), ptr.To[int32](28)
	objs := []client.Object{
		plan, pool(ns, "east", "10.20.0.0/18", "plan", 26), west, pool(ns, "east-lab", "10.20.32.0/20", "east", 28),
		subnet(ns, "gateway", "plan", "10.20.128.0/24", 0), subnet(ns, "web", "plan", "", 24),
	}
	for i := range 3 {
		objs = append(objs, subnet(ns, fmt.Sprintf("db-%d", i), "east", "", 26))
	}
	objs = append(objs, subnet(ns, "cache", "west", "", 28), subnet(ns, "lab-1", "east-lab", "", 28))
	for _, o := range objs {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatalf("creating %s: %v", o.GetName(), err)
		}
	}
	settled(t, ns)

	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"tree", []string{"tree", "-n", ns}, 0},
		{"tree-json", []string{"tree", "-n", ns, "-o", "json"}, 0},
		{"free", []string{"free", "plan", "-n", ns}, 0},
		{"free-length", []string{"free", "east", "--length", "24", "-n", ns}, 0},
		{"free-length-refused", []string{"free", "west", "--length", "20", "-n", ns}, 1},
		{"next", []string{"next", "east", "--length", "26", "-n", ns}, 0},
		{"next-default-json", []string{"next", "plan", "-n", ns, "-o", "json"}, 0},
		{"next-refused", []string{"next", "west", "--length", "30", "-n", ns}, 1},
		{"who-has-ip", []string{"who-has", "10.20.32.5", "-n", ns}, 0},
		{"who-has-cidr-yaml", []string{"who-has", "10.20.128.0/24", "-n", ns, "-o", "yaml"}, 0},
		{"who-has-nothing", []string{"who-has", "192.0.2.1", "-n", ns}, 0},
		{"who-has-bad", []string{"who-has", "10.20.0.1/16", "-n", ns}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := kubectlIPAM(t, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", code, tc.code, stdout, stderr)
			}
			golden(t, tc.name, ns, stdout+stderr)
		})
	}

	// Every namespace: the tree and who-has find this plan among others.
	stdout, stderr, code := kubectlIPAM(t, "tree")
	if code != 0 || !strings.Contains(stdout, ns+"/plan") || !strings.Contains(stdout, "└─ "+ns+"/east-lab") {
		t.Errorf("tree over every namespace: exit %d\n%s%s", code, stdout, stderr)
	}
}

// next asks the arbiter and allocates nothing: the pool is unchanged, and
// the Subnet created next gets exactly the range it named.
func TestNextIsWhatTheControllerAllocates(t *testing.T) {
	ctx := context.Background()
	ns := fmt.Sprintf("ipam-next-%04x", rand.IntN(1<<16))
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	p := pool(ns, "frag", "10.30.0.0/22", "", 26)
	objs := []client.Object{p,
		// Holes of several sizes: best fit takes the smallest that holds a /26.
		subnet(ns, "a", "frag", "10.30.0.0/25", 0), subnet(ns, "b", "frag", "10.30.0.192/26", 0),
		subnet(ns, "c", "frag", "10.30.1.0/24", 0), subnet(ns, "d", "frag", "10.30.2.64/26", 0)}
	for _, o := range objs {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	settled(t, ns)
	for i := range 4 {
		stdout, stderr, code := kubectlIPAM(t, "next", "frag", "-n", ns)
		if code != 0 {
			t.Fatalf("next: exit %d: %s", code, stderr)
		}
		again, _, _ := kubectlIPAM(t, "next", "frag", "-n", ns)
		if again != stdout {
			t.Fatalf("next allocated something: %q, then %q", stdout, again)
		}
		name := fmt.Sprintf("n%d", i)
		if err := k8s.Create(ctx, subnet(ns, name, "frag", "", 26)); err != nil {
			t.Fatal(err)
		}
		settled(t, ns)
		var s ipamv1.Subnet
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
			t.Fatal(err)
		}
		if want := strings.TrimSpace(stdout); s.Status.CIDR != want {
			t.Errorf("kubectl ipam next said %s; the controller allocated %s", want, s.Status.CIDR)
		}
	}
}

// A pool that tenants in other namespaces claim from: free and next count
// their claims, which live outside the pool's namespace.
func TestFreeAndNextSeeOtherNamespacesClaims(t *testing.T) {
	ctx := context.Background()
	id := rand.IntN(1 << 16)
	platform, tenant := fmt.Sprintf("ipam-plan-%04x", id), fmt.Sprintf("ipam-tenant-%04x", id)
	for _, ns := range []string{platform, tenant} {
		if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	shared := pool(platform, "shared", "10.40.0.0/24", "", 26)
	shared.Spec.AllowedNamespaces = &ipamv1.AllowedNamespaces{From: ipamv1.FromAll}
	claim := subnet(tenant, "a", "shared", "10.40.0.0/25", 0)
	claim.Spec.PoolRef.Namespace = platform
	kids := pool(tenant, "kids", "10.40.0.128/26", "shared", 0)
	kids.Spec.ParentRef.Namespace = platform
	for _, o := range []client.Object{shared, claim, kids} {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	settled(t, tenant)
	stdout, stderr, code := kubectlIPAM(t, "free", "shared", "-n", platform)
	if code != 0 || !strings.Contains(stdout, "10.40.0.192/26") || strings.Contains(stdout, "10.40.0.0/25") || strings.Contains(stdout, "10.40.0.128/26") {
		t.Errorf("free: exit %d\n%s%s", code, stdout, stderr)
	}
	stdout, stderr, code = kubectlIPAM(t, "next", "shared", "-n", platform)
	if code != 0 || strings.TrimSpace(stdout) != "10.40.0.192/26" {
		t.Errorf("next: exit %d\n%s%s", code, stdout, stderr)
	}
}

// parentRef references the parent pool name in the pool's own namespace;
// none for "".
func parentRef(name string) *ipamv1.PoolReference {
	if name == "" {
		return nil
	}
	return &ipamv1.PoolReference{Name: name}
}
