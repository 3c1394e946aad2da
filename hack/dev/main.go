// Command dev is `make dev`: a live control plane on 127.0.0.1 with
// cert-manager, Cluster API's CRDs, the operator and the samples, in the
// foreground until Ctrl-C. State and logs go to .dev/; a run that crashed is
// cleaned up by the next one.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/test/controlplane"
	"github.com/subnet-operator/subnet-operator/test/environment"
)

// A manager that exits is restarted as the kubelet restarts a Deployment's
// container: after a back-off that doubles on each restart up to 5 min,
// back to the start after 10 min (2×5 min) without a crash. The kubelet
// starts at 10 s; a developer who killed the manager to try a crash is
// waiting for it, so the first restart here comes after 1 s, and a manager
// that crashes on start still reaches the 5 min cap after 9 restarts,
// instead of spinning on a shared machine.
const (
	restartInitial = time.Second
	restartMax     = 5 * time.Minute
)

// metricsReader is the ServiceAccount whose token make dev writes for
// curl; it is bound to the metrics-reader ClusterRole of config/rbac (named
// with config/dev's prefix), as a Prometheus' ServiceAccount would be.
const (
	metricsReader     = "metrics-reader"
	metricsReaderRole = "subnet-operator-metrics-reader"
	// The token outlives any session: the cluster goes with it.
	metricsTokenDuration = "168h"
)

func main() {
	dir := flag.String("dir", ".dev", "State directory: etcd data, certificates, kubeconfig, logs.")
	manager := flag.String("manager", "bin/manager", "The manager binary (make dev builds it).")
	flag.Parse()
	if err := run(*dir, *manager); err != nil {
		fmt.Fprintln(os.Stderr, "dev:", err)
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
	manager, err = filepath.Abs(manager)
	if err != nil {
		return err
	}

	fmt.Println("Starting etcd, kube-apiserver, kube-controller-manager, cert-manager, Cluster API's CRDs and the operator on 127.0.0.1 ...")
	start := time.Now()
	// Cluster API's CRDs go in before the manager starts: it serves
	// IPAddressClaims only if the API server has them when it starts.
	// The manager's flags as the shipped Deployment sets them
	// (config/manager/manager.yaml): root pools in the default address
	// space only from labelled namespaces.
	// The webhook requires the API server's client certificate, as
	// config/webhook-client-auth sets it up in a cluster.
	// A manager that exits is restarted (the pid file then names the new
	// one, for the cleanup of a crashed run); the control plane's
	// processes are not: one that exits ends make dev (below).
	var pids pidRecord
	restart := &environment.RestartPolicy{Initial: restartInitial, Max: restartMax,
		Log: func(line string) { fmt.Println(line) },
		Restarted: func(*environment.Manager) {
			if err := pids.write(); err != nil {
				fmt.Fprintln(os.Stderr, "dev: recording the pids:", err)
			}
		}}
	env, err := environment.Start(ctx, environment.Options{Dir: dir, Manager: manager, ControllerManager: true, ClusterAPI: true,
		WebhookClientAuth: true,
		ManagerArgs:       []string{"--root-pool-namespace-selector=" + ipamv1.LabelRootPools + "=true"},
		RestartManagers:   restart})
	if err != nil {
		return fmt.Errorf("%w (logs in %s)", err, filepath.Join(dir, "logs"))
	}
	defer func() {
		// The pid file goes last: until everything has stopped, a crash
		// of this program leaves the next run something to clean up.
		env.Stop()
		_ = os.Remove(pidFile)
	}()
	if err := pids.start(pidFile, env); err != nil {
		return err
	}
	controlPlane := env.ControlPlaneProcesses()

	// The samples of one namespace, then the plan that a platform
	// namespace shares with tenant namespaces (config/samples/tenancy),
	// then a Cluster API workload cluster's address claims on a Subnet of
	// a tenant of that plan (config/samples/cluster-api).
	for _, samples := range []string{"samples", filepath.Join("samples", "tenancy"), filepath.Join("samples", "cluster-api")} {
		if _, err := env.Kubectl(ctx, nil, "apply", "-k", filepath.Join(env.RepoRoot, "config", samples)); err != nil {
			return fmt.Errorf("applying config/%s: %w", samples, err)
		}
	}
	for _, ns := range []string{"default", "netops", "team-a", "team-b", "machines-demo"} {
		if _, err := env.Kubectl(ctx, nil, "wait", "-n", ns, "--for=condition=Ready", "--timeout=60s", "subnetpools,subnets", "--all"); err != nil {
			return fmt.Errorf("the samples in namespace %s did not become Ready: %w", ns, err)
		}
	}
	tokenFile := filepath.Join(dir, "metrics-token")
	if err := writeMetricsToken(ctx, env, tokenFile); err != nil {
		return err
	}

	rel := func(p string) string {
		if r, err := filepath.Rel(env.RepoRoot, p); err == nil && !strings.HasPrefix(r, "..") {
			return r
		}
		return p
	}
	fmt.Printf(`
Up in %s. Kubeconfig: %s (logs: %s)

Try, in another shell:
  export KUBECONFIG=%s
  kubectl get subnetpools,subnets -A            # or: kubectl get ipam -A
  kubectl get subnetpools -o wide               # utilization, free space, largest free block
  kubectl describe subnetpool datacenter
  kubectl get subnets -n team-a -o wide         # a tenant's Subnet, from the platform's pool netops/corp
  kubectl create -n team-c -f - <<EOF
  apiVersion: ipam.subnet-operator.io/v1alpha2
  kind: Subnet
  metadata: {name: web}
  spec: {poolRef: {name: corp, namespace: netops}}
  EOF
  # ^ rejected: netops/corp allows only namespaces labelled as tenants
  kubectl create -f - <<EOF
  apiVersion: ipam.subnet-operator.io/v1alpha2
  kind: Subnet
  metadata: {name: clash}
  spec: {poolRef: {name: datacenter}, cidr: 10.0.1.0/25}
  EOF
  # ^ rejected by the webhook: it overlaps the sample Subnet "web"
  kubectl get ipaddressclaims,ipaddresses.ipam.cluster.x-k8s.io -n machines-demo
  # ^ Cluster API machines' address claims on the Subnet "machines", and their addresses
  #   (plain "ipaddresses" would be Kubernetes' own networking.k8s.io IPAddresses)
  curl -k https://127.0.0.1:%d/validate-ipam-subnet-operator-io-v1alpha2-subnet
  # ^ refused in the TLS handshake: the webhook answers only the API server's
  #   client certificate (docs/security.md)
  curl --cacert %s -H "Authorization: Bearer $(cat %s)" https://127.0.0.1:%d/metrics
  # ^ the manager's metrics (subnet_operator_*, docs/metrics.md), with the token of the
  #   ServiceAccount %s/%s, bound to the ClusterRole %s
  #   (config/rbac), as Prometheus scrapes them; without a token: 401
  kill -9 $(awk '$2 == "%s" {print $1}' %s)
  # ^ a crash: the manager is restarted after a back-off (%s, doubling up to %s), as a
  #   Deployment's Pod would be, and make dev says so here; the control plane stays up

Ctrl-C stops everything.
ready
`, time.Since(start).Round(time.Second), rel(env.Kubeconfig), rel(env.LogDir()), rel(env.Kubeconfig), env.Managers[0].WebhookPort,
		rel(filepath.Join(env.CertDir("metrics"), "ca.crt")), rel(tokenFile), env.Managers[0].MetricsPort,
		environment.Namespace, metricsReader, metricsReaderRole,
		env.Managers[0].Name, rel(pidFile), restartInitial, restartMax)

	select {
	case <-ctx.Done():
	case p := <-firstExit(controlPlane):
		return fmt.Errorf("%s exited (%v): the control plane is gone; see the logs in %s", p.Name, p.Err(), rel(env.LogDir()))
	}
	fmt.Println("\nStopping ...")
	return nil
}

// firstExit delivers the first of processes to exit.
func firstExit(processes []*controlplane.Process) <-chan *controlplane.Process {
	ch := make(chan *controlplane.Process, len(processes))
	for _, p := range processes {
		go func() {
			<-p.Exited()
			ch <- p
		}()
	}
	return ch
}

// writeMetricsToken creates the ServiceAccount metricsReader, binds it to
// the metrics-reader ClusterRole and writes a token of it to file.
func writeMetricsToken(ctx context.Context, env *environment.Environment, file string) error {
	if _, err := env.Kubectl(ctx, nil, "create", "serviceaccount", "-n", environment.Namespace, metricsReader); err != nil {
		return fmt.Errorf("the metrics reader's ServiceAccount: %w", err)
	}
	if _, err := env.Kubectl(ctx, nil, "create", "clusterrolebinding", "subnet-operator-dev-"+metricsReader,
		"--clusterrole="+metricsReaderRole, "--serviceaccount="+environment.Namespace+":"+metricsReader); err != nil {
		return fmt.Errorf("binding the metrics reader: %w", err)
	}
	token, err := env.Kubectl(ctx, nil, "create", "token", "-n", environment.Namespace, metricsReader, "--duration="+metricsTokenDuration)
	if err != nil {
		return fmt.Errorf("the metrics reader's token: %w", err)
	}
	return os.WriteFile(file, []byte(strings.TrimSpace(token)), 0o600)
}

// pidRecord records the running processes of the environment, "pid name" a
// line, for the next run to stop them if this one crashes; it is rewritten
// when a manager is restarted.
type pidRecord struct {
	mu   sync.Mutex
	path string
	env  *environment.Environment
}

func (f *pidRecord) start(path string, env *environment.Environment) error {
	f.mu.Lock()
	f.path, f.env = path, env
	f.mu.Unlock()
	return f.write()
}

func (f *pidRecord) write() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.env == nil {
		return nil // a restart before start: start writes it
	}
	var data bytes.Buffer
	for _, p := range f.env.Processes() {
		select {
		case <-p.Exited():
		default:
			fmt.Fprintln(&data, p.Pid(), p.Name)
		}
	}
	// Renamed into place: the next run never reads half a file.
	tmp := f.path + ".tmp"
	if err := os.WriteFile(tmp, data.Bytes(), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, f.path)
}
