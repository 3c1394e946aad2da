//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/subnet-operator/subnet-operator/test/controlplane"
	"github.com/subnet-operator/subnet-operator/test/doctest"
	"github.com/subnet-operator/subnet-operator/test/environment"
)

// The promise of docs/fleet.md: `make dev-fleet` brings up a hub and two
// members; each member's delegated pool is granted a /16 of the hub's
// 10.0.0.0/8, the two disjoint, each recorded in its pool's spec.cidr and
// served; the hub shows each member's claim in the member's namespace,
// labelled with its identity; Ctrl-C stops everything.
func TestMakeDevFleet(t *testing.T) {
	ctx := context.Background()
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "dev-fleet")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./hack/devfleet")
	build.Dir = env.RepoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	manager, err := environment.BuildManager(ctx, env.RepoRoot, tmp, false)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(tmp, "fleet")
	cmd, printed := startDevFleet(t, bin, manager, dir)

	kubeconfigs := map[string]string{}
	for _, name := range []string{"hub", "member-1", "member-2"} {
		kubeconfigs[name] = filepath.Join(dir, name, "kubeconfig")
		if !strings.Contains(printed(), name+": ") || !strings.Contains(printed(), kubeconfigs[name]) {
			t.Errorf("make dev-fleet did not print %s's kubeconfig %s:\n%s", name, kubeconfigs[name], printed())
		}
	}

	// Each member's pool: the hub's grant recorded in spec and served.
	plan := netip.MustParsePrefix("10.0.0.0/8")
	granted := map[string]netip.Prefix{}
	for _, member := range []string{"member-1", "member-2"} {
		out, stderr, err := env.KubectlOutput(ctx, kubeconfigs[member], nil, "get", "subnetpool", "pods", "-n", "network", "-o",
			`jsonpath={.spec.cidr} {.status.cidr} {.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Delegated")].reason}`)
		if err != nil {
			t.Fatalf("%s: kubectl get subnetpool: %v %s", member, err, stderr)
		}
		f := strings.Fields(out)
		if len(f) != 4 || f[0] != f[1] || f[2] != "True" || f[3] != "Delegated" {
			t.Errorf("%s's pool network/pods does not serve a recorded grant (spec.cidr status.cidr Ready Delegated): %q", member, out)
			continue
		}
		p, err := netip.ParsePrefix(f[0])
		if err != nil || p.Bits() != 16 || !plan.Contains(p.Addr()) {
			t.Errorf("%s was granted %q, not a /16 of %s", member, f[0], plan)
			continue
		}
		granted[member] = p
	}
	if a, b := granted["member-1"], granted["member-2"]; a.IsValid() && b.IsValid() && a.Overlaps(b) {
		t.Errorf("the members were granted overlapping ranges: %s and %s", a, b)
	}

	// The hub: each member's claim, in its namespace, labelled with its
	// identity, holding the range the member serves.
	out, stderr, err := env.KubectlOutput(ctx, kubeconfigs["hub"], nil, "get", "subnets", "-A", "-o",
		`jsonpath={range .items[*]}{.metadata.namespace} {.metadata.labels.fleet\.ipam\.subnet-operator\.io/member-cluster} {.status.cidr}{"\n"}{end}`)
	if err != nil {
		t.Fatalf("hub: kubectl get subnets: %v %s", err, stderr)
	}
	for member, p := range granted {
		if !hasRow(out, fmt.Sprintf("%s %s %s", member, member, p)) {
			t.Errorf("the hub shows no Subnet in namespace %s labelled %s holding %s:\n%s", member, member, p, out)
		}
	}
	// A member's Subnet from its delegated pool is served.
	out, stderr, err = env.KubectlOutput(ctx, kubeconfigs["member-1"], nil, "get", "subnet", "web", "-n", "network", "-o", "jsonpath={.status.cidr}")
	if p, perr := netip.ParsePrefix(out); err != nil || perr != nil || !granted["member-1"].Contains(p.Addr()) {
		t.Errorf("member-1's Subnet network/web: %q %v %s, want a range of %s", out, err, stderr, granted["member-1"])
	}

	// docs/fleet.md's sessions marked to run in dev-fleet, as a user runs
	// them from the repository's root: .dev/fleet is this run's directory.
	runFleetDocs(ctx, t, dir)

	// A member's manager crashes: it is restarted, as a Deployment's Pod
	// would be, and serves again; the fleet stays up.
	crashMember(ctx, t, manager, filepath.Join(dir, "member-1"), kubeconfigs["member-1"], printed)

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
			t.Errorf("make dev-fleet exited with %v after Ctrl-C", err)
		}
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("make dev-fleet did not stop after Ctrl-C")
	}
	pids := strings.Fields(string(pidData))
	if len(pids) < 3*4 { // etcd, kube-apiserver, cert-manager's and the manager, on three planes
		t.Errorf("the pid file names %d processes: %v", len(pids), pids)
	}
	for _, f := range pids {
		pid, _ := strconv.Atoi(f)
		if err := syscall.Kill(pid, 0); err == nil {
			if stat, _ := os.ReadFile("/proc/" + f + "/stat"); !strings.Contains(string(stat), ") Z ") {
				t.Errorf("process %d still runs after make dev-fleet stopped", pid)
			}
		}
	}
}

// startDevFleet starts the `make dev-fleet` program, waits for its "ready"
// line, and returns it and what it has printed so far.
func startDevFleet(t *testing.T, bin, manager, dir string) (*exec.Cmd, func() string) {
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
	var mu sync.Mutex
	var printed strings.Builder
	ready, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended) // stdout closed: the program exited
		scan := bufio.NewScanner(stdout)
		for scan.Scan() {
			mu.Lock()
			printed.WriteString(scan.Text() + "\n")
			mu.Unlock()
			if scan.Text() == "ready" {
				close(ready)
			}
		}
	}()
	// Three control planes on a shared machine: more time than make dev's one.
	select {
	case <-ready:
	case <-ended:
		_ = cmd.Wait()
		t.Fatalf("make dev-fleet exited before it printed ready (%v); it says why above", cmd.ProcessState)
	case <-time.After(8 * time.Minute):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal("make dev-fleet did not print ready")
	}
	return cmd, func() string {
		mu.Lock()
		defer mu.Unlock()
		return printed.String()
	}
}

// runFleetDocs runs the console blocks of docs/fleet.md marked
// <!-- doctest: run in dev-fleet --> against the running fleet, in order,
// from a directory that looks like the repository's root to them: config/
// is the repository's, .dev/fleet is dir.
func runFleetDocs(ctx context.Context, t *testing.T, dir string) {
	t.Helper()
	root := t.TempDir()
	if err := os.Symlink(filepath.Join(env.RepoRoot, "config"), filepath.Join(root, "config")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, ".dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dir, filepath.Join(root, ".dev", "fleet")); err != nil {
		t.Fatal(err)
	}
	const page = "docs/fleet.md"
	f, err := os.Open(filepath.Join(env.RepoRoot, page))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := doctest.Parse(page, f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	sh := shell{dir: root, env: []string{"PATH=" + docsPath(t), "NO_COLOR=1"}}
	ran := 0
	for _, b := range blocks {
		if !b.RunsIn("dev-fleet") {
			continue
		}
		for _, c := range b.Commands {
			t.Run(fmt.Sprintf("%s/line_%d", page, c.Line), func(t *testing.T) {
				runSession(ctx, t, sh, b, c)
			})
			ran++
		}
	}
	if ran == 0 {
		t.Errorf("%s has no session marked to run in dev-fleet", page)
	}
}

// crashMember kills member's manager with SIGKILL and waits until a new one
// serves a create, as TestMakeDev does for make dev.
func crashMember(ctx context.Context, t *testing.T, manager, memberDir, kubeconfig string, printed func() string) {
	t.Helper()
	pid, err := pidOf(manager, memberDir+string(filepath.Separator))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	const subnet = "apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: Subnet\nmetadata: {name: after-crash, namespace: network}\nspec: {poolRef: {name: pods}, prefixLength: 24}\n"
	var last string
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, stderr, err := env.KubectlOutput(ctx, kubeconfig, []byte(subnet), "create", "-f", "-")
		last = fmt.Sprintf("%v %s", err, stderr)
		return err == nil || strings.Contains(stderr, "AlreadyExists"), nil
	}); err != nil {
		t.Errorf("no manager of member-1 served a create within 60 s of kill -9: %s\ndev-fleet printed:\n%s", last, printed())
		return
	}
	if _, stderr, err := env.KubectlOutput(ctx, kubeconfig, nil, "wait", "-n", "network", "--for=condition=Ready", "--timeout=60s", "subnet/after-crash"); err != nil {
		t.Errorf("the Subnet created after the restart is not Ready: %v %s", err, stderr)
	}
	if want := "member-1: manager-0 exited (signal: killed); restarting in 1s (restart 1)"; !strings.Contains(printed(), want) {
		t.Errorf("dev-fleet did not say %q:\n%s", want, printed())
	}
	restarted, err := pidOf(manager, memberDir+string(filepath.Separator))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(filepath.Join(filepath.Dir(memberDir), "pids"))
	if !slices.Contains(strings.Fields(string(data)), strconv.Itoa(restarted)) {
		t.Errorf("the pid file does not name the restarted manager (pid %d):\n%s", restarted, data)
	}
}
