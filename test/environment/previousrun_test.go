package environment

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A run killed with kill -9 leaves its processes; the next run stops those
// that still use its state directory, and only those, and starts empty.
func TestCleanUpPreviousRunStopsOnlyThatRunsProcesses(t *testing.T) {
	dir := t.TempDir()
	left := exec.Command("sh", "-c", "sleep 60 # "+dir)
	left.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	other := exec.Command("sh", "-c", "sleep 60 # not ours")
	other.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	for _, c := range []*exec.Cmd{left, other} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL); _ = c.Wait() })
	}
	// The state a crashed run leaves.
	pidFile := filepath.Join(dir, "pids")
	if err := os.WriteFile(pidFile, fmt.Appendf(nil, "%d manager-0\n%d\n", left.Process.Pid, other.Process.Pid), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "etcd.data"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- left.Wait() }()

	if err := CleanUpPreviousRun(dir, pidFile); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited: // killed: only its reaping by this test was left
	case <-time.After(5 * time.Second):
		t.Error("the previous run's process still runs")
	}
	if err := syscall.Kill(other.Process.Pid, 0); err != nil {
		t.Errorf("a process that does not use the directory was stopped: %v", err)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("the state directory is not empty: %v %v", entries, err)
	}
}
