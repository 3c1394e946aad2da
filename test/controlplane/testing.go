package controlplane

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// stopMargin is how long before `go test -timeout` strikes the harness stops
// the control plane itself, so that the processes are stopped cleanly and the
// logs are complete when the test binary panics.
const stopMargin = 30 * time.Second

// StartForTest starts a control plane under t.TempDir() (unless opts.Dir is
// set), stops it when the test ends or shortly before the test binary's
// deadline, and fails the test if it cannot start. On failure the last lines
// of each process's log are printed.
func StartForTest(t testing.TB, opts Options) *ControlPlane {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err := Start(ctx, opts)
	if err != nil {
		dumpLogs(t, filepath.Join(opts.Dir, "logs"))
		t.Fatalf("starting the control plane: %v", err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		close(done)
		if t.Failed() {
			dumpLogs(t, cp.logDir)
		}
		cp.Stop()
	})
	if tt, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if deadline, ok := tt.Deadline(); ok {
			go func() {
				select {
				case <-done:
				case <-time.After(time.Until(deadline) - stopMargin):
					t.Log("controlplane: the test binary's deadline is near; stopping the control plane")
					cp.Stop()
				}
			}()
		}
	}
	return cp
}

func dumpLogs(t testing.TB, logDir string) {
	logs, _ := filepath.Glob(filepath.Join(logDir, "*.log"))
	for _, l := range logs {
		data, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		const tail = 4000
		if len(data) > tail {
			data = data[len(data)-tail:]
		}
		t.Logf("--- last lines of %s:\n%s", filepath.Base(l), data)
	}
}
