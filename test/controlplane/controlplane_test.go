//go:build integration

package controlplane

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/discovery"
)

// TestControlPlane starts the whole control plane, uses every part of it the
// way the other tests do, stops it, and checks that no process is left.
func TestControlPlane(t *testing.T) {
	ctx := context.Background()
	cp := StartForTest(t, Options{ControllerManager: true, CertManager: true})

	// The API server and kubectl report their real version.
	dc, err := discovery.NewDiscoveryClientForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(v.GitVersion, "v1.") || v.GitVersion == "v0.0.0" || v.GitVersion == "v1.0.0" {
		t.Errorf("kube-apiserver reports version %q", v.GitVersion)
	}
	out, err := cp.Kubectl(ctx, nil, "version", "--client", "-o", "yaml")
	if err != nil || !strings.Contains(out, "gitVersion: "+v.GitVersion) {
		t.Errorf("kubectl version: %v\n%s", err, out)
	}

	// kube-controller-manager runs: a deleted namespace finishes deleting.
	if _, err := cp.Kubectl(ctx, nil, "create", "namespace", "doomed"); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Kubectl(ctx, nil, "delete", "namespace", "doomed", "--wait=true", "--timeout=60s"); err != nil {
		t.Fatalf("namespace deletion did not complete: %v", err)
	}

	// cert-manager issues a certificate from a self-signed issuer.
	start := time.Now()
	manifest := `
apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: selfsigned, namespace: default}
spec: {selfSigned: {}}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: probe, namespace: default}
spec:
  secretName: probe-tls
  dnsNames: [probe.default.svc]
  ipAddresses: [127.0.0.1]
  issuerRef: {name: selfsigned, kind: Issuer}
`
	if _, err := cp.Kubectl(ctx, []byte(manifest), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Kubectl(ctx, nil, "wait", "--for=condition=Ready", "--timeout=90s", "-n", "default", "certificate/probe"); err != nil {
		t.Fatalf("certificate not issued: %v", err)
	}
	if out, err := cp.Kubectl(ctx, nil, "get", "secret", "-n", "default", "probe-tls", "-o", "jsonpath={.data.tls\\.crt}"); err != nil || out == "" {
		t.Fatalf("secret probe-tls: %v %q", err, out)
	}
	t.Logf("Certificate to Secret in %s", time.Since(start).Round(time.Millisecond))

	pids := pidsOf(cp)
	if len(pids) != 4 {
		t.Fatalf("want 4 processes (etcd, kube-apiserver, kube-controller-manager, cert-manager), got %d", len(pids))
	}
	cp.Stop()
	for _, pid := range pids {
		if processAlive(pid) {
			t.Errorf("process %d still runs after Stop", pid)
		}
	}
}

// TestNoOrphansWhenKilled runs a control plane in a child test binary, kills
// that binary with SIGKILL (as `go test -timeout` or an OOM kill would), and
// checks that etcd and kube-apiserver die with it.
func TestNoOrphansWhenKilled(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pids")
	child := exec.Command(os.Args[0], "-test.run=^TestHarnessChild$", "-test.v")
	child.Env = append(os.Environ(), "HARNESS_CHILD_PIDS="+pidFile)
	child.Stdout, child.Stderr = os.Stderr, os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	childDone := make(chan error, 1)
	go func() { childDone <- child.Wait() }()
	var pids []int
	deadline := time.After(2 * time.Minute)
	for len(pids) == 0 {
		select {
		case err := <-childDone:
			t.Fatalf("the child exited before it started its control plane: %v", err)
		case <-deadline:
			_ = child.Process.Kill()
			t.Fatal("the child never started its control plane")
		case <-time.After(200 * time.Millisecond):
		}
		data, err := os.ReadFile(pidFile)
		if err != nil || !strings.HasSuffix(string(data), "\n") {
			continue
		}
		for _, f := range strings.Fields(string(data)) {
			pid, _ := strconv.Atoi(f)
			pids = append(pids, pid)
		}
	}
	_ = child.Process.Signal(syscall.SIGKILL)
	if err := <-childDone; err == nil {
		t.Fatal("the child exited cleanly; it should have been killed")
	}

	for _, pid := range pids {
		gone := false
		for range 100 {
			if !processAlive(pid) {
				gone = true
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !gone {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("process %d outlived its killed parent", pid)
		}
	}
}

// TestHarnessChild is the child of TestNoOrphansWhenKilled; it does nothing
// when run on its own.
func TestHarnessChild(t *testing.T) {
	pidFile := os.Getenv("HARNESS_CHILD_PIDS")
	if pidFile == "" {
		return
	}
	// The control plane's files go in the parent's temporary directory: this
	// process is SIGKILLed, so its own t.TempDir() would never be removed
	// (an etcd data dir of ~120 MB left in /tmp per run).
	cp, err := Start(context.Background(), Options{Dir: filepath.Join(filepath.Dir(pidFile), "controlplane")})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, pid := range pidsOf(cp) {
		b.WriteString(strconv.Itoa(pid) + " ")
	}
	if err := os.WriteFile(pidFile, []byte(b.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Minute) // until the parent kills us
}

func pidsOf(cp *ControlPlane) []int {
	var pids []int
	for _, p := range cp.Processes() {
		pids = append(pids, p.Pid())
	}
	return pids
}
