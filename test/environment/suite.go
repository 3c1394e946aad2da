package environment

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/capi"
)

// Main runs a test binary's tests against one environment, for TestMain:
// unless opts.Image is set, it builds the manager (with the race detector
// if race); it starts the
// environment with opts, hands it and an admin client to setup, runs the
// tests, stops everything and returns the exit code. A manager that exits
// with an error fails the run: with race, status 66 means the race detector
// found a race in the manager. On failure it prints the end of every log.
func Main(m *testing.M, opts Options, race bool, setup func(*Environment, client.Client)) int {
	ctx := context.Background()
	// The clients' own logs (the API server's warnings) are not the
	// tests': a test that expects a warning reads it from the response.
	// Unset, controller-runtime prints a stack trace the first time.
	ctrllog.SetLogger(logr.Discard())
	dir, err := os.MkdirTemp("", "subnet-operator-tests-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if opts.RepoRoot == "" {
		if opts.RepoRoot, err = RepoRoot(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if opts.Image == "" {
		if opts.Manager, err = BuildManager(ctx, opts.RepoRoot, dir, race); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	opts.Dir = filepath.Join(dir, "env")
	env, err := Start(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the environment:", err)
		dumpLogs(filepath.Join(opts.Dir, "logs"))
		return 1
	}
	c, err := AdminClient(env)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		env.Stop()
		return 1
	}
	setup(env, c)

	code := m.Run()

	var why []string
	if code != 0 {
		why = append(why, "a test failed (its --- FAIL lines are above the logs)")
	}
	for _, mgr := range env.Managers {
		mgr.Process.Stop(15 * time.Second)
		if err := mgr.Process.Err(); err != nil {
			why = append(why, fmt.Sprintf("%s exited with %v (with the race detector, 66 means it found a race)", mgr.Name, err))
			code = 1
		}
	}
	if code != 0 {
		dumpLogs(env.LogDir())
		// Last, where a truncated CI log still shows it.
		fmt.Fprintf(os.Stderr, "environment: the run failed: %s\n", strings.Join(why, "; "))
	}
	env.Stop()
	return code
}

// AdminClient is a client for the cluster admin without a client-side rate
// limit: tests are many clients at once, and the API server's priority and
// fairness still applies.
func AdminClient(env *Environment) (client.Client, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := ipamv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	// Cluster API's types, for the tests of the provider (package capi);
	// registering them needs no CRD.
	capi.AddToScheme(scheme)
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = -1, -1
	return client.New(cfg, client.Options{Scheme: scheme})
}

// dumpLogs prints the end of each log, or from the first data race on.
func dumpLogs(dir string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, l := range logs {
		data, _ := os.ReadFile(l)
		if race := bytes.Index(data, []byte("WARNING: DATA RACE")); race >= 0 {
			data = data[race:min(len(data), race+8000)]
		} else if len(data) > 3000 {
			data = data[len(data)-3000:]
		}
		fmt.Fprintf(os.Stderr, "--- %s:\n%s\n", filepath.Base(l), data)
	}
}
