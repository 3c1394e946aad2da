package environment

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// CleanUpPreviousRun is how `make dev` and `make dev-fleet` start over
// after a run that crashed or was killed: it stops the process groups the
// run recorded in pidFile (one per line, the pid first) that still use
// dir (every process of an environment names a file in it on its command
// line, so a pid reused by an unrelated process is left alone), waits
// until they are gone, and empties dir. A fresh cluster each time: a
// crashed etcd or half-written state is not worth recovering in a
// development environment.
func CleanUpPreviousRun(dir, pidFile string) error {
	data, err := os.ReadFile(pidFile)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	var stopped []int
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		pid, err := strconv.Atoi(fields[0])
		if err != nil || pid <= 1 || !usesDir(pid, dir) {
			continue // gone, or not ours
		}
		fmt.Printf("Stopping process %d left by a previous run\n", pid)
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		stopped = append(stopped, pid)
	}
	// SIGKILL is not instant: etcd must let go of its data directory and
	// the servers of their ports before the new run takes them.
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		for _, pid := range stopped {
			if usesDir(pid, dir) && !zombie(pid) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("processes of a previous run (%v) did not stop: %w", stopped, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.MkdirAll(dir, 0o755)
}

// usesDir reports whether process pid runs and names dir on its command line.
func usesDir(pid int, dir string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && bytes.Contains(cmdline, []byte(dir))
}

// zombie reports whether process pid has exited and waits for its parent.
func zombie(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err != nil || bytes.Contains(stat, []byte(") Z "))
}
