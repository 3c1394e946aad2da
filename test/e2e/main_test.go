//go:build e2e

// Package e2e runs the whole system as a user meets it: the manager's
// container image (make image), run as config/default's Deployment runs it,
// two replicas with leader election behind a round-robin proxy
// (standing in for the webhook Service), real cert-manager issuing and
// rotating the webhook's certificate and its CA injector filling the
// webhook configurations, real kube-apiserver, etcd and
// kube-controller-manager, driven by kubectl.
package e2e

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

// Shorter leases than the manager's defaults (15 s, 10 s, 2 s), so a
// killed leader is replaced within seconds; a renew deadline long enough
// for two loaded cores. At 4 s and 3 s, the new leader of a hand-over
// during a burst of creates could not renew in time (the lease read took
// over 3 s) and exited, leaving no replica: every admission then failed
// with EOF and nothing was allocated (TestGracefulHandOverDuringABurst in
// CI, and the tests after it).
const (
	leaseDuration = 10 * time.Second
	renewDeadline = 8 * time.Second
	retryPeriod   = time.Second
)

var (
	env *environment.Environment
	k8s client.Client
	// imageID is the image the replicas run from.
	imageID string
)

func TestMain(m *testing.M) {
	root, err := environment.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	imageID, err = environment.BuildImage(context.Background(), root, environment.TestImage)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	opts := environment.Options{
		RepoRoot: root, Image: imageID,
		Replicas: 2, ControllerManager: true, ClusterAPI: true,
		// config/webhook-client-auth: the API server presents its client
		// certificate, the webhook refuses callers without one.
		WebhookClientAuth: true,
		ManagerArgs: []string{
			"--address-reuse-after=" + addressReuseAfter.String(),
			"--leader-elect-lease-duration=" + leaseDuration.String(),
			"--leader-elect-renew-deadline=" + renewDeadline.String(),
			"--leader-elect-retry-period=" + retryPeriod.String(),
		},
	}
	os.Exit(environment.Main(m, opts, false, func(e *environment.Environment, c client.Client) {
		env, k8s = e, c
	}))
}

func namespace(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("e2e-%s-%04x", strings.ToLower(t.Name()), rand.IntN(1<<16))
	if len(name) > 60 {
		name = name[:55] + name[len(name)-5:]
	}
	// Its root pools in an address space of its own: tests reuse ranges.
	if err := environment.CreateIsolatedNamespace(context.Background(), k8s, name, nil); err != nil {
		t.Fatal(err)
	}
	return name
}

// kubectl runs kubectl as the cluster admin.
func kubectl(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var in []byte
	if stdin != "" {
		in = []byte(stdin)
	}
	return env.KubectlOutput(context.Background(), env.Kubeconfig, in, args...)
}

// mustKubectl runs kubectl and fails the test on error.
func mustKubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, stderr, err := kubectl(t, stdin, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return out
}

func eventually(t *testing.T, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = cond(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("not within %s: %v", timeout, err)
}

// leader returns the replica that holds the lease.
func leader(t *testing.T) *environment.Manager {
	t.Helper()
	m, err := env.Leader(context.Background(), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
