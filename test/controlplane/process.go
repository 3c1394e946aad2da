package controlplane

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Process is a child process of the harness. It runs in its own process
// group, so stopping it also stops anything it started, and it is killed by
// the kernel (Pdeathsig) if the harness's process dies first, so a test binary
// killed by `go test -timeout` or SIGKILL leaves no etcd or kube-apiserver
// behind.
type Process struct {
	Name    string
	cmd     *exec.Cmd
	logFile *os.File
	exited  chan struct{}
	err     error // set before exited is closed
	// signal delivers Stop's and Kill's signals; nil: to the process group.
	signal func(syscall.Signal)
}

// StartProcess starts name (a binary path) with args, its output appended to
// logDir/<name>.log, and env added to the harness's environment.
func StartProcess(name, binary string, args []string, env []string, logDir string) (*Process, error) {
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(filepath.Join(logDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, cmd: cmd, logFile: logFile, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = logFile.Close()
		close(p.exited)
	}()
	return p, nil
}

// Pid is the process id (also its process group id).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Err is the process's exit error, once Exited is closed.
func (p *Process) Err() error { return p.err }

// SetSignaler makes Stop and Kill deliver their signals with send rather
// than to the process group: for a process that stands for one it does not
// own, as `podman run` for its container (podman cannot pass SIGKILL on).
// Call it before Stop or Kill.
func (p *Process) SetSignaler(send func(syscall.Signal)) { p.signal = send }

func (p *Process) send(sig syscall.Signal) {
	if p.signal != nil {
		p.signal(sig)
		return
	}
	_ = syscall.Kill(-p.Pid(), sig)
}

// Stop sends SIGTERM, waits up to grace, then sends SIGKILL, and waits for
// the exit.
func (p *Process) Stop(grace time.Duration) {
	select {
	case <-p.exited:
		return
	default:
	}
	p.send(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		p.Kill()
	}
}

// Kill sends SIGKILL and waits for the exit: a crash, for fault tests. If a
// signaler's SIGKILL does not end the process within a minute, the process
// group is killed.
func (p *Process) Kill() {
	p.send(syscall.SIGKILL)
	select {
	case <-p.exited:
	case <-time.After(time.Minute):
		_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
		<-p.exited
	}
}

// FreePorts returns n distinct TCP ports on 127.0.0.1 that were free a moment
// ago (holding all listeners open until every port is picked keeps them
// distinct). They are drawn at random from below the kernel's ephemeral
// range: a port from that range (what listening on port 0 gives) can be
// taken, between the pick and the bind, by any outgoing connection of the
// many processes the tests run in parallel, and was (a manager failed with
// "address already in use").
func FreePorts(n int) ([]int, error) {
	low, high := lowestFreePort, portRangeEnd()
	ports := make([]int, 0, n)
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for attempts := 0; len(ports) < n; attempts++ {
		if attempts == 1000 {
			return nil, fmt.Errorf("no free port in %d-%d after %d attempts", low, high, attempts)
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", low+rand.IntN(high-low)))
		if err != nil {
			continue // in use
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// FreePorts draws from lowestFreePort up to portRangeEnd.
const lowestFreePort = 20000

// portRangeEnd is the start of the ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range, 32768 by default).
func portRangeEnd() int {
	high := 32768
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return high
	}
	var first, last int
	if _, err := fmt.Sscan(string(data), &first, &last); err == nil && first > lowestFreePort+1000 {
		high = first
	}
	return high
}

// errExited wraps the exit of a process that should still be running.
func errExited(p *Process, logDir string) error {
	return fmt.Errorf("%s exited: %w (see %s)", p.Name, p.err, filepath.Join(logDir, p.Name+".log"))
}

// waitFor polls check every interval until it returns nil, the process
// exits, or timeout passes.
func waitFor(p *Process, logDir string, timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		select {
		case <-p.exited:
			return errExited(p, logDir)
		default:
		}
		if last = check(); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %w (see %s)", p.Name, timeout, last, filepath.Join(logDir, p.Name+".log"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// processAlive reports whether pid names a live process. A zombie (exited,
// not yet reaped by its new parent) is not alive.
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile("/proc/" + itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name: "pid (comm) S ...".
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z'
	}
	return true
}

// itoa is strconv.Itoa, short for flag building.
func itoa(i int) string { return strconv.Itoa(i) }
