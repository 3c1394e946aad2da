//go:build integration

// Package integration tests the webhooks and controllers through a real
// kube-apiserver: the manager binary (built with the race detector) runs
// against the local control plane with cert-manager issuing its webhook
// certificate, and the tests act as users do, with kubectl and a client.
package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/subnet-operator/subnet-operator/test/environment"
)

var (
	env *environment.Environment
	k8s client.Client
)

func TestMain(m *testing.M) {
	// A short audit interval, so the auditor's findings show within a test.
	// The client budget of the load runs (docs/benchmarks.md): the suite's
	// earlier tests leave ~1,000 dynamic Subnets for this one manager to
	// record in their spec, at 12 a second at the default budget, and the
	// durable tests wait for their own records behind them.
	opts := environment.Options{ManagerArgs: []string{"--audit-interval=1s", "--kube-api-qps=500", "--kube-api-burst=1000"}}
	os.Exit(environment.Main(m, opts, true, func(e *environment.Environment, c client.Client) {
		env, k8s = e, c
	}))
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
	// Its root pools in an address space of its own: tests reuse ranges.
	if err := environment.CreateIsolatedNamespace(context.Background(), k8s, name, nil); err != nil {
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
