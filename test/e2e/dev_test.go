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
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/subnet-operator/subnet-operator/test/controlplane"
	"github.com/subnet-operator/subnet-operator/test/environment"
)

// startDev starts the `make dev` program and waits for its "ready" line.
func startDev(t *testing.T, bin, manager, dir string) *exec.Cmd {
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
	ready := make(chan struct{})
	go func() {
		scan := bufio.NewScanner(stdout)
		for scan.Scan() {
			if m := devCurl.FindStringSubmatch(scan.Text()); m != nil {
				devWebhook.Store(m[1])
			}
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
	return cmd
}

// devCurl is the curl make dev prints for its webhook port; devWebhook
// the address it names, from the last run started.
var (
	devCurl    = regexp.MustCompile(`^\s*curl -k https://(127\.0\.0\.1:\d+)/`)
	devWebhook atomic.Value
)

// The promise of the README: `make dev` brings up a live system with the
// samples; kubectl works against it; a Subnet that overlaps a sample is
// rejected by the webhook over cert-manager's TLS; Ctrl-C stops everything;
// and a run that was killed is cleaned up by the next one.
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
	_ = first.Process.Signal(syscall.SIGKILL)
	_ = first.Wait()

	// The second run recovers and works.
	cmd := startDev(t, bin, manager, dir)
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
	if addr, _ := devWebhook.Load().(string); addr == "" {
		t.Error("make dev printed no curl for its webhook port")
	} else if err := tlsHandshake(addr); err == nil {
		t.Errorf("a TLS client without a certificate completed a handshake with make dev's webhook at %s", addr)
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
	for _, f := range strings.Fields(string(pidData)) {
		pid, _ := strconv.Atoi(f)
		if err := syscall.Kill(pid, 0); err == nil {
			if stat, _ := os.ReadFile("/proc/" + f + "/stat"); !strings.Contains(string(stat), ") Z ") {
				t.Errorf("process %d still runs after make dev stopped", pid)
			}
		}
	}
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
