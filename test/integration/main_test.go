//go:build integration

// Package integration tests the webhooks and controllers through a real
// kube-apiserver: the manager binary (built with the race detector) runs
// against the local control plane with cert-manager issuing its webhook
// certificate, and the tests act as users do, with kubectl and a client.
package integration

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha1"
	"github.com/subnet-operator/subnet-operator/test/environment"
)

var (
	env *environment.Environment
	k8s client.Client
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "subnet-operator-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	root, err := environment.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The race detector watches the manager too: it exits with status 66
	// if it saw a race, which fails the run below.
	manager, err := environment.BuildManager(ctx, root, dir, true)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env, err = environment.Start(ctx, environment.Options{Dir: filepath.Join(dir, "env"), Manager: manager})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the environment:", err)
		dumpLogs(filepath.Join(dir, "env", "logs"))
		return 1
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = ipamv1.AddToScheme(scheme)
	// The tests are many clients at once: no client-side rate limit (the
	// API server's priority and fairness still applies).
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = -1, -1
	if k8s, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		env.Stop()
		return 1
	}

	code := m.Run()

	for _, mgr := range env.Managers {
		mgr.Process.Stop(15 * time.Second)
		if err := mgr.Process.Err(); err != nil {
			fmt.Fprintf(os.Stderr, "%s exited with %v (66: the race detector found a race)\n", mgr.Name, err)
			code = 1
		}
	}
	if code != 0 {
		dumpLogs(env.LogDir())
	}
	env.Stop()
	return code
}

func dumpLogs(dir string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, l := range logs {
		data, _ := os.ReadFile(l)
		if races := bytes.Index(data, []byte("WARNING: DATA RACE")); races >= 0 {
			data = data[races:min(len(data), races+8000)]
		} else if len(data) > 3000 {
			data = data[len(data)-3000:]
		}
		fmt.Fprintf(os.Stderr, "--- %s:\n%s\n", filepath.Base(l), data)
	}
}

// namespace creates a fresh namespace for one test: there is no
// kube-controller-manager here, so namespaces never finish deleting.
func namespace(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("%s-%04x", strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")), rand.IntN(1<<16))
	if len(name) > 60 {
		name = name[len(name)-60:]
	}
	name = strings.Trim(strings.ReplaceAll(name, "_", "-"), "-")
	if err := k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// kubectl runs kubectl as the cluster admin and returns its standard output
// and error output (where warnings go, even on success).
func kubectl(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var in []byte
	if stdin != "" {
		in = []byte(stdin)
	}
	return env.KubectlOutput(context.Background(), env.Kubeconfig, in, args...)
}

// eventually polls cond every 50 ms until it returns nil or timeout passes.
func eventually(t *testing.T, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = cond(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("not within %s: %v", timeout, err)
}
