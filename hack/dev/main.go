// Command dev is `make dev`: a live control plane on 127.0.0.1 with
// cert-manager, Cluster API's CRDs, the operator and the samples, in the
// foreground until Ctrl-C. State and logs go to .dev/; a run that crashed is
// cleaned up by the next one.
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
	"strconv"
	"strings"
	"syscall"
	"time"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/test/environment"
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
	if err := cleanUpPreviousRun(dir, pidFile); err != nil {
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
	env, err := environment.Start(ctx, environment.Options{Dir: dir, Manager: manager, ControllerManager: true, ClusterAPI: true,
		WebhookClientAuth: true,
		ManagerArgs:       []string{"--root-pool-namespace-selector=" + ipamv1.LabelRootPools + "=true"}})
	if err != nil {
		return fmt.Errorf("%w (logs in %s)", err, filepath.Join(dir, "logs"))
	}
	defer env.Stop()
	var pids bytes.Buffer
	for _, p := range env.Processes() {
		fmt.Fprintln(&pids, p.Pid())
	}
	if err := os.WriteFile(pidFile, pids.Bytes(), 0o600); err != nil {
		return err
	}
	defer func() { _ = os.Remove(pidFile) }()

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

Ctrl-C stops everything.
ready
`, time.Since(start).Round(time.Second), rel(env.Kubeconfig), rel(env.LogDir()), rel(env.Kubeconfig), env.Managers[0].WebhookPort)

	select {
	case <-ctx.Done():
	case <-exited(env):
		return errors.New("a process of the dev environment exited; see the logs in " + rel(env.LogDir()))
	}
	fmt.Println("\nStopping ...")
	return nil
}

// exited is closed when any process of the environment exits.
func exited(env *environment.Environment) <-chan struct{} {
	ch := make(chan struct{})
	for _, p := range env.Processes() {
		go func() {
			<-p.Exited()
			select {
			case <-ch:
			default:
				close(ch)
			}
		}()
	}
	return ch
}

// cleanUpPreviousRun stops what a crashed run left behind (its process
// groups, recorded in the pid file, if they still use our state directory:
// every process of the environment names a file in it on its command line,
// so a pid reused by an unrelated process is left alone) and starts from a
// clean state directory.
func cleanUpPreviousRun(dir, pidFile string) error {
	if data, err := os.ReadFile(pidFile); err == nil {
		for _, field := range strings.Fields(string(data)) {
			pid, err := strconv.Atoi(field)
			if err != nil || pid <= 1 {
				continue
			}
			cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if err != nil || !bytes.Contains(cmdline, []byte(dir)) {
				continue // gone, or not ours
			}
			fmt.Printf("Stopping process %d left by a previous run\n", pid)
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// A fresh cluster each time: a crashed etcd or half-written state is
	// not worth recovering in a development environment.
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.MkdirAll(dir, 0o755)
}
