// Command devfleet is `make dev-fleet`: a fleet on 127.0.0.1 (docs/fleet.md),
// a hub and two member control planes, each with the operator, in the
// foreground until Ctrl-C. The hub holds the plan (platform/plan,
// 10.0.0.0/8); each member's delegated root pool network/pods takes a /16 of
// it, claimed with a Subnet in the member's own namespace of the hub.
// State and logs go to .dev/fleet/; a run that crashed is cleaned up by the
// next one.
//
// Small on purpose (2 cores run three control planes): no
// kube-controller-manager, no Cluster API CRDs and no webhook client
// authentication on any of them; a fleet needs none of these.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/test/controlplane"
	"github.com/subnet-operator/subnet-operator/test/environment"
)

// The members' names: their identities in the hub (--cluster-name, the
// common name of their hub client certificates) and their hub namespaces,
// as config/samples/fleet/hub names them.
var members = []string{"member-1", "member-2"}

// A crashed manager's restart back-off, as make dev's (and the kubelet's
// CrashLoopBackOff, whose first wait is 10 s).
const (
	restartInitial = time.Second
	restartMax     = 5 * time.Minute
)

func main() {
	dir := flag.String("dir", ".dev/fleet", "State directory: one subdirectory per control plane (etcd data, certificates, kubeconfig, logs).")
	manager := flag.String("manager", "bin/manager", "The manager binary (make dev-fleet builds it).")
	flag.Parse()
	ctrllog.SetLogger(logr.Discard()) // the admin clients' logs are not the user's
	if err := run(*dir, *manager); err != nil {
		fmt.Fprintln(os.Stderr, "dev-fleet:", err)
		os.Exit(1)
	}
}

func run(dir, manager string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	pidFile := filepath.Join(dir, "pids")
	if err := environment.CleanUpPreviousRun(dir, pidFile); err != nil {
		return err
	}
	if manager, err = filepath.Abs(manager); err != nil {
		return err
	}
	var (
		mu   sync.Mutex // envs, the pid file
		envs []*environment.Environment
	)
	defer func() {
		mu.Lock()
		stopping := slices.Clone(envs)
		mu.Unlock() // a restart that Stop waits for records its pid
		for _, env := range stopping {
			env.Stop()
		}
		// The pid file goes last: until everything has stopped, a crash
		// of this program leaves the next run something to clean up.
		_ = os.Remove(pidFile)
	}()
	// Every running process's pid, as soon as it runs, and again when a
	// manager is restarted: a run killed while starting leaves nothing
	// behind for the next.
	recordPids := func() error {
		mu.Lock()
		defer mu.Unlock()
		var pids bytes.Buffer
		for _, env := range envs {
			for _, p := range env.Processes() {
				select {
				case <-p.Exited():
				default:
					fmt.Fprintln(&pids, p.Pid())
				}
			}
		}
		tmp := pidFile + ".tmp"
		if err := os.WriteFile(tmp, pids.Bytes(), 0o600); err != nil {
			return err
		}
		return os.Rename(tmp, pidFile) // the next run never reads half a file
	}
	// A manager that crashes is restarted after a back-off, as a
	// Deployment's Pod would be; the control planes stay up.
	restarts := func(plane string) *environment.RestartPolicy {
		return &environment.RestartPolicy{Initial: restartInitial, Max: restartMax,
			Log: func(line string) { fmt.Printf("%s: %s\n", plane, line) },
			Restarted: func(*environment.Manager) {
				if err := recordPids(); err != nil {
					fmt.Fprintln(os.Stderr, "dev-fleet: recording the pids:", err)
				}
			}}
	}

	fmt.Println("Starting a hub and two member control planes (etcd, kube-apiserver, cert-manager, the operator) on 127.0.0.1 ...")
	start := time.Now()
	hub, err := environment.Start(ctx, environment.Options{Dir: filepath.Join(dir, "hub"), Manager: manager, RestartManagers: restarts("hub")})
	if err != nil {
		return fmt.Errorf("the hub: %w (logs in %s)", err, filepath.Join(dir, "hub", "logs"))
	}
	mu.Lock()
	envs = append(envs, hub)
	mu.Unlock()
	if err := recordPids(); err != nil {
		return err
	}
	// The plan, the members' namespaces and config/fleet-hub's RBAC for
	// each member's identity.
	if _, err := hub.Kubectl(ctx, nil, "apply", "-k", filepath.Join(hub.RepoRoot, "config", "samples", "fleet", "hub")); err != nil {
		return fmt.Errorf("applying config/samples/fleet/hub: %w", err)
	}

	// The members start side by side: each needs only the hub's CA to
	// issue its identity.
	started := make([]*environment.Environment, len(members))
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, name := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started[i], errs[i] = startMember(ctx, hub, filepath.Join(dir, name), manager, name, restarts(name))
		}()
	}
	wg.Wait()
	for i, env := range started {
		if env != nil {
			mu.Lock()
			envs = append(envs, env)
			mu.Unlock()
		}
		if errs[i] != nil {
			err = errors.Join(err, fmt.Errorf("%s: %w (logs in %s)", members[i], errs[i], filepath.Join(dir, members[i], "logs")))
		}
	}
	if pidErr := recordPids(); pidErr != nil {
		return errors.Join(err, pidErr)
	}
	if err != nil {
		return err
	}

	// Each member's delegated pool, and a Subnet of it; both serve once
	// the hub granted the pool's /16. One member after the other, so that
	// member-1 holds 10.0.0.0/16 and member-2 10.1.0.0/16 every time, as
	// docs/fleet.md shows (at once, they get the same two in either order).
	for i, member := range started {
		if _, err := member.Kubectl(ctx, nil, "apply", "-k", filepath.Join(member.RepoRoot, "config", "samples", "fleet", "member")); err != nil {
			return fmt.Errorf("applying config/samples/fleet/member to %s: %w", members[i], err)
		}
		if err := waitGranted(ctx, member); err != nil {
			return fmt.Errorf("%s: %w (logs in %s)", members[i], err, member.LogDir())
		}
		if _, err := member.Kubectl(ctx, nil, "wait", "-n", "network", "--for=condition=Ready", "--timeout=60s", "subnet/web"); err != nil {
			return fmt.Errorf("%s: the Subnet network/web did not become Ready: %w", members[i], err)
		}
	}

	cwd, _ := os.Getwd()
	rel := func(p string) string {
		if r, err := filepath.Rel(cwd, p); err == nil && !strings.HasPrefix(r, "..") {
			return r
		}
		return p
	}
	fmt.Printf(`
Up in %[1]s. Kubeconfigs (logs in each one's logs/):
  hub:      %[2]s
  member-1: %[3]s
  member-2: %[4]s

Try, in another shell:
  kubectl --kubeconfig %[3]s get subnetpools,subnets -n network -o wide
  # ^ the delegated pool "pods", its /16 from the hub in the CIDR column (spec.cidr)
  kubectl --kubeconfig %[3]s get subnetpool pods -n network -o jsonpath='{.status.conditions[?(@.type=="Delegated")].message}'
  kubectl ipam tree -n platform --kubeconfig %[2]s
  # ^ the hub's plan and the members' claims (kubectl-ipam: make install-plugin)
  kubectl --kubeconfig %[2]s get subnets -A -L fleet.ipam.subnet-operator.io/member-cluster
  # ^ each claim in its member's namespace, labelled with the member's identity

A manager that crashes is restarted after a back-off (%[5]s, doubling up to %[6]s),
as a Deployment's Pod would be, and dev-fleet says so here.
Ctrl-C stops everything.
ready
`, time.Since(start).Round(time.Second), rel(hub.Kubeconfig), rel(started[0].Kubeconfig), rel(started[1].Kubeconfig), restartInitial, restartMax)

	select {
	case <-ctx.Done():
	case p := <-firstExit(envs):
		return fmt.Errorf("%s exited (%v): a control plane is gone; see the logs in %s", p.Name, p.Err(), rel(dir))
	}
	fmt.Println("\nStopping ...")
	return nil
}

// startMember gives member name its hub identity (a client certificate of
// the hub's CA, common name name, which config/samples/fleet/hub binds
// config/fleet-hub's Role to in the hub namespace name) and starts its
// control plane with that kubeconfig in the Secret the manager's
// --hub-kubeconfig-secret names: the manager reads it once, at start, so
// it goes in before the operator does.
func startMember(ctx context.Context, hub *environment.Environment, dir, manager, name string, restarts *environment.RestartPolicy) (*environment.Environment, error) {
	path, err := hub.AddUser(name)
	if err != nil {
		return nil, err
	}
	kubeconfig, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	opts := environment.Options{Dir: dir, Manager: manager, RestartManagers: restarts}
	opts.AsFleetMember(name, kubeconfig)
	return environment.Start(ctx, opts)
}

// waitGranted waits until the member's delegated pool network/pods serves
// the range the hub granted: recorded in spec.cidr, served (status.cidr,
// Ready) and Delegated.
func waitGranted(ctx context.Context, member *environment.Environment) error {
	c, err := environment.AdminClient(member)
	if err != nil {
		return err
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var p ipamv1.SubnetPool
		if err := c.Get(ctx, client.ObjectKey{Namespace: "network", Name: "pods"}, &p); err != nil {
			last = err.Error()
			return false, nil
		}
		last = fmt.Sprintf("spec.cidr %q, status.cidr %q, conditions %+v", p.Spec.CIDR, p.Status.CIDR, p.Status.Conditions)
		return p.Spec.CIDR != "" && p.Status.CIDR == p.Spec.CIDR &&
			meta.IsStatusConditionTrue(p.Status.Conditions, ipamv1.ConditionReady) &&
			meta.IsStatusConditionTrue(p.Status.Conditions, ipamv1.ConditionDelegated), nil
	})
	if err != nil {
		return fmt.Errorf("the delegated pool network/pods was not granted its range: %s", last)
	}
	return nil
}

// firstExit delivers the first process of the fleet's control planes to
// exit (not a manager's: those are restarted).
func firstExit(envs []*environment.Environment) <-chan *controlplane.Process {
	ch := make(chan *controlplane.Process, 1)
	var once sync.Once
	for _, env := range envs {
		for _, p := range env.ControlPlaneProcesses() {
			go func() {
				<-p.Exited()
				once.Do(func() { ch <- p })
			}()
		}
	}
	return ch
}
