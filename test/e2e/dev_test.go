//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/subnet-operator/subnet-operator/test/controlplane"
	"github.com/subnet-operator/subnet-operator/test/environment"
)

// devRun is a running `make dev` program and what it printed.
type devRun struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
}

// find returns the submatches of the first line printed that matches re.
func (r *devRun) find(re *regexp.Regexp) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, line := range r.lines {
		if m := re.FindStringSubmatch(line); m != nil {
			return m
		}
	}
	return nil
}

// tail returns the last n lines printed.
func (r *devRun) tail(n int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.lines[max(0, len(r.lines)-n):], "\n")
}

// startDev starts the `make dev` program and waits for its "ready" line.
func startDev(t *testing.T, bin, manager, dir string) *devRun {
	t.Helper()
	cmd := exec.Command(bin, "--dir", dir, "--manager", manager)
	cmd.Dir = env.RepoRoot
	cmd.Env = append(os.Environ(), controlplane.AssetsEnv+"="+env.Assets)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// A test that fails on the way leaves no make dev behind (its
	// processes die with it, by Pdeathsig).
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	run := &devRun{cmd: cmd}
	ready := make(chan struct{})
	go func() {
		scan := bufio.NewScanner(stdout)
		for scan.Scan() {
			run.mu.Lock()
			run.lines = append(run.lines, scan.Text())
			run.mu.Unlock()
			if scan.Text() == "ready" {
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(4 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("make dev did not print ready")
	}
	return run
}

// What make dev prints: a curl for its webhook port (the address), a curl
// for the metrics (the command), a kill -9 of the manager (the command),
// and the restart of a manager that exited.
var (
	devCurl        = regexp.MustCompile(`^\s*curl -k https://(127\.0\.0\.1:\d+)/`)
	devMetricsCurl = regexp.MustCompile(`^\s*(curl .*https://127\.0\.0\.1:\d+/metrics)\s*$`)
	devKill        = regexp.MustCompile(`^\s*(kill -9 .*)$`)
	devRestarted   = regexp.MustCompile(`^manager-0 exited \(signal: killed\); restarting in 1s \(restart 1\)$`)
)

// The promise of the README: `make dev` brings up a live system with the
// samples; kubectl works against it; a Subnet that overlaps a sample is
// rejected by the webhook over cert-manager's TLS; the curl it prints for
// the metrics works; a manager killed with kill -9 is restarted, as a
// Deployment's would be, while the control plane stays up; Ctrl-C stops
// everything; and a run that was killed is cleaned up by the next one.
func TestMakeDev(t *testing.T) {
	ctx := context.Background()
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "dev")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./hack/dev")
	build.Dir = env.RepoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	manager, err := environment.BuildManager(ctx, env.RepoRoot, tmp, false)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(tmp, "state")

	// A first run, killed without warning.
	first := startDev(t, bin, manager, dir)
	_ = first.cmd.Process.Signal(syscall.SIGKILL)
	_ = first.cmd.Wait()

	// The second run recovers and works.
	run := startDev(t, bin, manager, dir)
	cmd := run.cmd
	kubeconfig := filepath.Join(dir, "kubeconfig")
	out, _, err := env.KubectlOutput(ctx, kubeconfig, nil, "get", "subnetpools,subnets", "-A")
	if err != nil || !strings.Contains(out, "datacenter") || !strings.Contains(out, "Allocated") {
		t.Errorf("kubectl get: %v\n%s", err, out)
	}
	clash := "apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: Subnet\nmetadata: {name: clash, namespace: default}\nspec: {poolRef: {name: datacenter}, cidr: 10.0.1.0/25}\n"
	_, stderr, err := env.KubectlOutput(ctx, kubeconfig, []byte(clash), "create", "-f", "-")
	if err == nil || !strings.Contains(stderr, "overlaps Subnet default/web (10.0.1.0/24)") {
		t.Errorf("the overlapping Subnet was not rejected: %v %s", err, stderr)
	}
	// The webhook answers only the API server: the curl make dev prints,
	// without a client certificate, fails in the TLS handshake, while
	// kubectl's requests (above) reached it through the API server.
	if m := run.find(devCurl); m == nil {
		t.Error("make dev printed no curl for its webhook port")
	} else if err := tlsHandshake(m[1]); err == nil {
		t.Errorf("a TLS client without a certificate completed a handshake with make dev's webhook at %s", m[1])
	}
	// The metrics: the curl make dev prints works as printed, in a shell
	// in the repository, and shows the operator's own metrics.
	if m := run.find(devMetricsCurl); m == nil {
		t.Error("make dev printed no curl for the metrics")
	} else if out, err := inShell(ctx, m[1]); err != nil || !strings.Contains(out, "\nsubnet_operator_") {
		t.Errorf("%s: %v\n%.2000s", m[1], err, out)
	}

	// The shared plan: a tenant's Subnet from the platform's pool, and a
	// namespace that is not a tenant refused.
	out, _, err = env.KubectlOutput(ctx, kubeconfig, nil, "get", "subnets", "-n", "team-a", "-o", "wide")
	if err != nil || !hasRow(out, "web corp netops") || !strings.Contains(out, "Allocated") {
		t.Errorf("kubectl get subnets -n team-a -o wide: %v\n%s", err, out)
	}
	stranger := "apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: Subnet\nmetadata: {name: web, namespace: team-c}\nspec: {poolRef: {name: corp, namespace: netops}}\n"
	if _, stderr, err := env.KubectlOutput(ctx, kubeconfig, []byte(stranger), "create", "-f", "-"); err == nil || !strings.Contains(stderr, "not from team-c") {
		t.Errorf("a Subnet from a namespace that is not a tenant: %v %s", err, stderr)
	}
	// The machine network: the sample's Cluster API claims get addresses
	// from its Subnet.
	eventually(t, time.Minute, func() error {
		out, _, err := env.KubectlOutput(ctx, kubeconfig, nil, "get", "ipaddresses.ipam.cluster.x-k8s.io", "-n", "machines-demo",
			"-o", "jsonpath={range .items[*]}{.spec.address}{\"\\n\"}{end}")
		if err != nil {
			return err
		}
		if n := len(strings.Fields(out)); n != 3 {
			return fmt.Errorf("the sample's claims hold %d addresses, want 3: %q", n, out)
		}
		return nil
	})
	// Address spaces: a root pool over another root pool's range is
	// refused, in the same namespace (naming it) and from another
	// namespace (without its name); a namespace without the root-pools
	// label gets no root pool at all, and is told which label it lacks.
	overDC := "apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: SubnetPool\nmetadata: {name: over, namespace: default}\nspec: {cidr: 10.0.0.0/24}\n"
	if _, stderr, err := env.KubectlOutput(ctx, kubeconfig, []byte(overDC), "create", "-f", "-"); err == nil ||
		!strings.Contains(stderr, "overlaps SubnetPool default/datacenter (10.0.0.0/16), a root pool of address space default") {
		t.Errorf("a root pool over another in the same namespace: %v %s", err, stderr)
	}
	overCorp := "apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: SubnetPool\nmetadata: {name: over, namespace: default}\nspec: {cidr: 10.100.0.0/24}\n"
	if _, stderr, err := env.KubectlOutput(ctx, kubeconfig, []byte(overCorp), "create", "-f", "-"); err == nil ||
		!strings.Contains(stderr, "overlaps a range held in another namespace (10.100.0.0/16)") || strings.Contains(stderr, "netops") {
		t.Errorf("a root pool over another namespace's: %v %s", err, stderr)
	}
	tenantRoot := "apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: SubnetPool\nmetadata: {name: mine, namespace: team-c}\nspec: {cidr: 192.168.0.0/16}\n"
	if _, stderr, err := env.KubectlOutput(ctx, kubeconfig, []byte(tenantRoot), "create", "-f", "-"); err == nil ||
		!strings.Contains(stderr, "namespace team-c lacks ipam.subnet-operator.io/root-pools=true") {
		t.Errorf("a root pool in a namespace without the label: %v %s", err, stderr)
	}
	// Foreground deletion of a bound claim completes (Argo CD prunes so).
	if _, stderr, err := env.KubectlOutput(ctx, kubeconfig, nil, "delete", "ipaddressclaim", "demo-md-0-a", "-n", "machines-demo",
		"--cascade=foreground", "--timeout=60s"); err != nil {
		t.Errorf("kubectl delete --cascade=foreground of a bound claim: %v %s", err, stderr)
	}
	// Durable allocations, whatever order the samples were applied in
	// (the tenancy sample's Subnets arrive before their pools): every
	// Subnet of every sample shows its range in the CIDR column, which
	// is spec.cidr, what an export keeps. Not fatal: Ctrl-C must still
	// stop what make dev started.
	if err := everySampleSubnetShowsItsCIDR(ctx, kubeconfig); err != nil {
		t.Errorf("kubectl get sn -A: %v", err)
	}
	// A crash of the manager: make dev restarts it, and says so, while
	// the control plane stays up; the webhook answers again within 30 s.
	managerCrashRestarts(ctx, t, run, manager, dir)
	pidData, err := os.ReadFile(filepath.Join(dir, "pids"))
	if err != nil {
		t.Fatal(err)
	}

	// Ctrl-C: everything stops and the program exits 0.
	_ = cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("make dev exited with %v after Ctrl-C", err)
		}
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("make dev did not stop after Ctrl-C")
	}
	for pid := range pidsRecorded(pidData) {
		if err := syscall.Kill(pid, 0); err == nil {
			if stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); !strings.Contains(string(stat), ") Z ") {
				t.Errorf("process %d still runs after make dev stopped", pid)
			}
		}
	}
}

// managerCrashRestarts kills the manager of a make dev run with the kill
// -9 it printed, and checks that a new manager serves a Subnet's create
// (through the webhooks, which fail closed) within 30 s, that make dev
// said it restarted it, and that its pid file names the new one.
func managerCrashRestarts(ctx context.Context, t *testing.T, run *devRun, manager, dir string) {
	kubeconfig := filepath.Join(dir, "kubeconfig")
	// The manager as ps shows it: the process running the binary.
	old, err := pidOf(manager, "")
	if err != nil {
		t.Error(err)
		return
	}
	if m := run.find(devKill); m != nil {
		if out, err := inShell(ctx, m[1]); err != nil {
			t.Errorf("%s: %v %s", m[1], err, out)
		}
	} else {
		t.Error("make dev printed no kill -9 for its manager")
		_ = syscall.Kill(old, syscall.SIGKILL) // still try the crash
	}
	killed := time.Now()
	// Until the old one is gone, it could still answer.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		pid, _ := pidOf(manager, "")
		return pid != old, nil
	}); err != nil {
		t.Errorf("the manager (pid %d) still runs after kill -9", old)
		return
	}
	subnet := "apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: Subnet\nmetadata: {name: after-crash, namespace: default}\nspec: {poolRef: {name: datacenter}}\n"
	var last string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second-time.Since(killed), true, func(context.Context) (bool, error) {
		// Not the poll's context: its deadline would kill kubectl and
		// hide why the last try failed.
		_, stderr, err := env.KubectlOutput(ctx, kubeconfig, []byte(subnet), "create", "-f", "-")
		last = fmt.Sprintf("%v %s", err, stderr)
		// AlreadyExists: an earlier try that timed out went through.
		return err == nil || strings.Contains(stderr, "AlreadyExists"), nil
	}); err != nil {
		t.Errorf("no manager served a Subnet's create within 30 s of kill -9: %s\nmake dev printed last:\n%s", last, run.tail(5))
		return
	}
	t.Logf("a Subnet created %s after kill -9 of the manager", time.Since(killed).Round(100*time.Millisecond))
	if _, stderr, err := env.KubectlOutput(ctx, kubeconfig, nil, "wait", "-n", "default", "--for=condition=Ready", "--timeout=60s", "subnet/after-crash"); err != nil {
		t.Errorf("the Subnet created after the restart is not Ready: %v %s", err, stderr)
	}
	if run.find(devRestarted) == nil {
		t.Errorf("make dev did not say it restarted the manager (%s); it printed last:\n%s", devRestarted, run.tail(5))
	}
	// The next run must be able to stop the new manager if this one
	// crashes: the pid file names it.
	current, err := pidOf(manager, "")
	if err != nil {
		t.Error(err)
		return
	}
	data, _ := os.ReadFile(filepath.Join(dir, "pids"))
	if name := pidsRecorded(data)[current]; name != "manager-0" {
		t.Errorf("the pid file does not name the restarted manager (pid %d) manager-0:\n%s", current, data)
	}
}

// pidOf returns the pid of the one process running binary (its argv[0]),
// as ps would show it, whose command line contains arg (any, if empty).
func pidOf(binary, arg string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		if argv0, _, _ := strings.Cut(string(cmdline), "\x00"); argv0 == binary && strings.Contains(string(cmdline), arg) {
			if stat, _ := os.ReadFile("/proc/" + e.Name() + "/stat"); !strings.Contains(string(stat), ") Z ") {
				pids = append(pids, pid)
			}
		}
	}
	if len(pids) != 1 {
		return 0, fmt.Errorf("%d processes run %s %s, want 1: %v", len(pids), binary, arg, pids)
	}
	return pids[0], nil
}

// pidsRecorded reads make dev's pid file: "pid name" a line.
func pidsRecorded(data []byte) map[int]string {
	pids := map[int]string{}
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if pid, err := strconv.Atoi(fields[0]); err == nil {
			pids[pid] = strings.Join(fields[1:], " ")
		}
	}
	return pids
}

// inShell runs command with sh in the repository, as a user pastes what
// make dev printed, and returns its output.
func inShell(ctx context.Context, command string) (string, error) {
	cmd := exec.CommandContext(ctx, "sh", "-c", command)
	cmd.Dir = env.RepoRoot
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// devSamples are the sample directories `make dev` applies (hack/dev).
var devSamples = []string{"config/samples", "config/samples/tenancy", "config/samples/cluster-api"}

// everySampleSubnetShowsItsCIDR waits up to a minute (records follow
// grants) until `kubectl get sn -A` shows a range in the CIDR column for
// every Subnet of the samples, and returns what is missing if it does not.
func everySampleSubnetShowsItsCIDR(ctx context.Context, kubeconfig string) error {
	var want []string // namespace/name
	for _, dir := range devSamples {
		out, stderr, err := env.KubectlOutput(ctx, kubeconfig, nil, "kustomize", filepath.Join(env.RepoRoot, dir))
		if err != nil {
			return fmt.Errorf("kubectl kustomize %s: %w: %s", dir, err, stderr)
		}
		for _, doc := range strings.Split(out, "\n---\n") {
			var o struct {
				Kind     string            `json:"kind"`
				Metadata metav1.ObjectMeta `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
				return fmt.Errorf("%s: %w", dir, err)
			}
			if o.Kind == "Subnet" {
				want = append(want, o.Metadata.Namespace+"/"+o.Metadata.Name)
			}
		}
	}
	if len(want) == 0 {
		return errors.New("the samples have no Subnets")
	}
	var last error
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		out, stderr, err := env.KubectlOutput(ctx, kubeconfig, nil, "get", "sn", "-A")
		if err != nil {
			last = fmt.Errorf("%w: %s", err, stderr)
			return false, nil
		}
		cidrs, err := cidrColumn(out)
		if err != nil {
			last = err
			return false, nil
		}
		var missing []string
		for _, key := range want {
			if cidr, ok := cidrs[key]; !ok {
				missing = append(missing, key+" (no row)")
			} else if _, err := netip.ParsePrefix(cidr); err != nil {
				missing = append(missing, fmt.Sprintf("%s (CIDR %q)", key, cidr))
			}
		}
		if len(missing) > 0 {
			last = fmt.Errorf("no range shown for %s:\n%s", strings.Join(missing, ", "), out)
			return false, nil
		}
		return true, nil
	})
	return last
}

// cidrColumn reads the CIDR column of `kubectl get sn -A`, by
// namespace/name. kubectl aligns its columns, so each starts where its
// header does (some headers and cells contain spaces: IPS IN USE).
func cidrColumn(table string) (map[string]string, error) {
	lines := strings.Split(strings.TrimRight(table, "\n"), "\n")
	header := lines[0]
	col := regexp.MustCompile(`\bCIDR\b`).FindStringIndex(header)
	if !strings.HasPrefix(header, "NAMESPACE") || col == nil {
		return nil, fmt.Errorf("kubectl get sn -A has no NAMESPACE or CIDR column:\n%s", table)
	}
	out := map[string]string{}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) < 2 || len(line) <= col[0] {
			continue
		}
		cell := strings.Fields(line[col[0]:])
		if len(cell) == 0 {
			continue
		}
		out[f[0]+"/"+f[1]] = cell[0]
	}
	return out, nil
}

// tlsHandshake completes a TLS handshake with addr, presenting no client
// certificate, and reads from the connection: with TLS 1.3 a server that
// requires a certificate sends its refusal after the client's Finished,
// so only the first read shows it.
func tlsHandshake(addr string) error {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // who answers is not the question
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		return err
	}
	_, err = conn.Read(make([]byte, 1))
	return err
}
