// Command fleetload times a fleet's delegated pools (docs/fleet.md) from
// create to serving, with 1 and with N asking the hub at once, on a hub and
// a member control plane on 127.0.0.1, each running the manager binary.
//
//	go run ./test/fleetload -n 1,50 -manager bin/manager
//
// Two runs per N:
//
//   - members: N member identities ask the hub at once. Each is a client
//     certificate of the hub's CA with config/fleet-hub's Role in a hub
//     namespace of its own, as a real member's is, and makes the claim a
//     member's manager makes (a Subnet of the hub's plan, labelled with its
//     identity, asking a /16); the time is from its create to the hub's
//     grant (Ready, status.cidr) seen on its own watch. The members are
//     simulated in this process: N member clusters do not fit on a laptop,
//     and the member's own share is measured by the next run.
//   - pools: N delegated pools created at once in the one real member,
//     whose manager claims each in the hub, records the grant in spec.cidr
//     and serves it; the time is from the pool's create to Ready with
//     spec.cidr recorded and served (status.cidr), the whole path.
//
// It needs KUBEBUILDER_ASSETS (bin/assets, `make tools`). Figures are
// printed, never asserted: these machines are shared and noisy.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/test/environment"
)

const (
	platform = "platform" // the hub namespace of the plan
	plan     = "plan"     // the hub pool: 10.0.0.0/8, /16s for members
	// member is the real member's identity and hub namespace.
	member = "member"
)

var scheme = runtime.NewScheme()

func main() {
	sizes := flag.String("n", "1,50", "Comma-separated numbers of members (and of pools) asking at once, one pair of runs each.")
	manager := flag.String("manager", "bin/manager", "The manager binary (a release build: make build).")
	timeout := flag.Duration("timeout", 5*time.Minute, "How long one run may take.")
	flag.Parse()
	ctrllog.SetLogger(logr.Discard())
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := ipamv1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	var ns []int
	for _, f := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "fleetload: -n: %q is not a positive number\n", f)
			os.Exit(2)
		}
		ns = append(ns, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, ns, *manager, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "fleetload:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, sizes []int, manager string, timeout time.Duration) error {
	dir, err := os.MkdirTemp("", "fleetload-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if manager, err = filepath.Abs(manager); err != nil {
		return err
	}
	fmt.Println("Starting a hub and a member control plane, each with the operator ...")
	hub, err := environment.Start(ctx, environment.Options{Dir: filepath.Join(dir, "hub"), Manager: manager})
	if err != nil {
		return fmt.Errorf("the hub: %w", err)
	}
	defer hub.Stop()
	hubAdmin, err := adminClient(hub)
	if err != nil {
		return err
	}
	// The plan is open to every namespace: each member claims from its own.
	if err := hubAdmin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: platform}}); err != nil {
		return err
	}
	if err := hubAdmin.Create(ctx, &ipamv1.SubnetPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: platform, Name: plan},
		Spec: ipamv1.SubnetPoolSpec{CIDR: "10.0.0.0/8", DefaultPrefixLength: ptr.To[int32](16),
			AllowedNamespaces: &ipamv1.AllowedNamespaces{From: ipamv1.FromAll}},
	}); err != nil {
		return err
	}
	memberKubeconfig, err := addMember(ctx, hub, dir, member)
	if err != nil {
		return err
	}
	memberOpts := environment.Options{Dir: filepath.Join(dir, member), Manager: manager}
	memberOpts.AsFleetMember(member, memberKubeconfig)
	memberEnv, err := environment.Start(ctx, memberOpts)
	if err != nil {
		return fmt.Errorf("the member: %w", err)
	}
	defer memberEnv.Stop()
	memberAdmin, err := adminClient(memberEnv)
	if err != nil {
		return err
	}

	fmt.Printf("\n%-8s %4s %10s %10s %10s %10s  %s\n", "RUN", "N", "P50", "P90", "MAX", "WALL", "WHAT")
	for i, n := range sizes {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		times, wall, err := simulatedMembers(rctx, hub, dir, fmt.Sprintf("sim%d", i), n)
		cancel()
		if err != nil {
			return fmt.Errorf("members, N=%d: %w", n, err)
		}
		report("members", n, times, wall, "simulated members' claims: create -> the hub's grant")
		rctx, cancel = context.WithTimeout(ctx, timeout)
		times, wall, err = memberPools(rctx, memberAdmin, fmt.Sprintf("pools%d", i), n)
		cancel()
		if err != nil {
			return fmt.Errorf("pools, N=%d: %w", n, err)
		}
		report("pools", n, times, wall, "delegated pools of the real member: create -> Ready, spec.cidr recorded and served")
	}
	return nil
}

func adminClient(env *environment.Environment) (client.WithWatch, error) {
	cfg := *env.Config
	cfg.QPS, cfg.Burst = -1, -1
	return client.NewWithWatch(&cfg, client.Options{Scheme: scheme})
}

// addMember gives member name a namespace in the hub and config/fleet-hub's
// Role bound there to a client certificate of its name, and returns that
// certificate's kubeconfig.
func addMember(ctx context.Context, hub *environment.Environment, dir, name string) ([]byte, error) {
	overlay := filepath.Join(dir, "overlays", name)
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		return nil, err
	}
	component, err := filepath.Rel(overlay, filepath.Join(hub.RepoRoot, "config", "fleet-hub")) // kustomize takes relative paths only
	if err != nil {
		return nil, err
	}
	kustomization := fmt.Sprintf(`namespace: %[1]s
resources:
- namespace.yaml
components:
- %[2]s
patches:
- target: {kind: RoleBinding, name: subnet-operator-fleet-member}
  patch: |-
    - op: replace
      path: /subjects/0/name
      value: %[1]s
`, name, component)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o600); err != nil {
		return nil, err
	}
	namespace := fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata: {name: %s}\n", name)
	if err := os.WriteFile(filepath.Join(overlay, "namespace.yaml"), []byte(namespace), 0o600); err != nil {
		return nil, err
	}
	if out, err := hub.Kubectl(ctx, nil, "apply", "-k", overlay); err != nil {
		return nil, fmt.Errorf("applying config/fleet-hub for %s: %w: %s", name, err, out)
	}
	path, err := hub.AddUser(name)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(path)
}

// simulatedMembers makes n member identities in the hub, then has each
// claim a /16 of the plan at once, as its own user, the way a member's
// manager does, and returns how long each waited for the hub's grant.
func simulatedMembers(ctx context.Context, hub *environment.Environment, dir, prefix string, n int) ([]time.Duration, time.Duration, error) {
	clients := make([]client.WithWatch, n)
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		kubeconfig, err := addMember(ctx, hub, dir, name)
		if err != nil {
			return nil, 0, err
		}
		cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
		if err != nil {
			return nil, 0, err
		}
		if clients[i], err = client.NewWithWatch(cfg, client.Options{Scheme: scheme}); err != nil {
			return nil, 0, err
		}
	}
	// Each member watches its namespace before anyone claims: the grant is
	// seen as a member's manager sees it, by an event.
	watches := make([]watch.Interface, n)
	for i, c := range clients {
		w, err := c.Watch(ctx, &ipamv1.SubnetList{}, client.InNamespace(fmt.Sprintf("%s-%d", prefix, i)))
		if err != nil {
			return nil, 0, err
		}
		defer w.Stop()
		watches[i] = w
	}
	rewatch := func(i int) (watch.Interface, error) {
		return clients[i].Watch(ctx, &ipamv1.SubnetList{}, client.InNamespace(fmt.Sprintf("%s-%d", prefix, i)))
	}
	times := make([]time.Duration, n)
	granted := make([]netip.Prefix, n)
	errs := make([]error, n)
	start := time.Now()
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("%s-%d", prefix, i)
			claim := &ipamv1.Subnet{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: name, Name: name + ".network.pods",
					Labels: map[string]string{ipamv1.LabelMemberCluster: name},
					Annotations: map[string]string{
						ipamv1.AnnotationMemberPool:    "network/pods",
						ipamv1.AnnotationMemberPoolUID: "simulated",
					},
				},
				Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Namespace: platform, Name: plan}, PrefixLength: ptr.To[int32](16)},
			}
			t0 := time.Now()
			if err := c.Create(ctx, claim); err != nil {
				errs[i] = fmt.Errorf("%s: creating its claim: %w", name, err)
				return
			}
			granted[i], errs[i] = waitFor(ctx, watches[i], func() (watch.Interface, error) { return rewatch(i) }, func(o client.Object) (netip.Prefix, bool) {
				s := o.(*ipamv1.Subnet)
				p, err := netip.ParsePrefix(s.Status.CIDR)
				return p, err == nil && meta.IsStatusConditionTrue(s.Status.Conditions, ipamv1.ConditionReady)
			})
			times[i] = time.Since(t0)
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return nil, 0, err
	}
	return times, wall, disjoint(granted)
}

// memberPools creates n delegated pools at once in the real member and
// returns how long each took to serve the range the hub granted.
func memberPools(ctx context.Context, c client.WithWatch, prefix string, n int) ([]time.Duration, time.Duration, error) {
	ns := prefix
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return nil, 0, err
	}
	// One watch, before the creates, for every pool of the namespace.
	watchPools := func() (watch.Interface, error) {
		return c.Watch(ctx, &ipamv1.SubnetPoolList{}, client.InNamespace(ns))
	}
	w, err := watchPools()
	if err != nil {
		return nil, 0, err
	}
	defer func() { w.Stop() }()
	var mu sync.Mutex
	created := map[string]time.Time{}
	errs := make([]error, n)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("pool-%d", i)
			t0 := time.Now()
			errs[i] = c.Create(ctx, &ipamv1.SubnetPool{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec: ipamv1.SubnetPoolSpec{DefaultPrefixLength: ptr.To[int32](24),
					Delegation: &ipamv1.PoolDelegation{PoolRef: ipamv1.PoolReference{Namespace: platform, Name: plan}, PrefixLength: ptr.To[int32](16)}},
			})
			mu.Lock()
			created[name] = t0
			mu.Unlock()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, 0, err
	}
	var times []time.Duration
	var granted []netip.Prefix
	done := map[string]bool{}
	for len(done) < n {
		select {
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("%d of %d pools serve their grant: %w", len(done), n, ctx.Err())
		case ev, ok := <-w.ResultChan():
			if !ok {
				// The API server ends watches now and then (a busy
				// machine's time-outs): a new one starts with every pool.
				if w, err = watchPools(); err != nil {
					return nil, 0, err
				}
				continue
			}
			p, isPool := ev.Object.(*ipamv1.SubnetPool)
			if !isPool || done[p.Name] {
				continue
			}
			cidr, err := netip.ParsePrefix(p.Spec.CIDR)
			if err != nil || p.Status.CIDR != p.Spec.CIDR || !meta.IsStatusConditionTrue(p.Status.Conditions, ipamv1.ConditionReady) {
				continue
			}
			done[p.Name] = true
			times = append(times, time.Since(created[p.Name]))
			granted = append(granted, cidr)
		}
	}
	return times, time.Since(start), disjoint(granted)
}

// waitFor reads the watch until match accepts an object, and returns what
// match made of it. A watch the API server ends is replaced by a new one
// from rewatch, which starts with every object.
func waitFor(ctx context.Context, w watch.Interface, rewatch func() (watch.Interface, error), match func(client.Object) (netip.Prefix, bool)) (netip.Prefix, error) {
	for {
		select {
		case <-ctx.Done():
			return netip.Prefix{}, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				var err error
				if w, err = rewatch(); err != nil {
					return netip.Prefix{}, err
				}
				defer w.Stop()
				continue
			}
			if o, isObject := ev.Object.(client.Object); isObject {
				if p, ok := match(o); ok {
					return p, nil
				}
			}
		}
	}
}

// disjoint checks that no two grants overlap: the figures are of a fleet
// that works.
func disjoint(ps []netip.Prefix) error {
	sorted := slices.Clone(ps)
	slices.SortFunc(sorted, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	for i := 1; i < len(sorted); i++ {
		if sorted[i-1].Overlaps(sorted[i]) {
			return fmt.Errorf("two grants overlap: %s and %s", sorted[i-1], sorted[i])
		}
	}
	return nil
}

func report(what string, n int, times []time.Duration, wall time.Duration, desc string) {
	slices.Sort(times)
	q := func(f float64) time.Duration { return times[int(f*float64(len(times)-1))] }
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	fmt.Printf("%-8s %4d %10s %10s %10s %10s  %s\n", what, n, ms(q(0.5)), ms(q(0.9)), ms(times[len(times)-1]), ms(wall), desc)
}
