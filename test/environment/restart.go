package environment

import (
	"context"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/util/flowcontrol"

	"github.com/subnet-operator/subnet-operator/test/controlplane"
)

// RestartPolicy has the environment restart a replica whose process exits,
// after a back-off, as the kubelet restarts a Deployment's crashed container
// (CrashLoopBackOff). `make dev` sets it; the tests leave it nil, so that a
// replica they kill stays down until they restart it themselves.
type RestartPolicy struct {
	// Initial is the wait before the first restart, doubled on each
	// further restart up to Max; a replica that ran for 2×Max without
	// exiting starts again from Initial. The kubelet's are 10 s and 5 min
	// (flowcontrol.Backoff, which it uses too).
	Initial, Max time.Duration
	// Log is told of every exit and every restart, one line each;
	// default: standard error.
	Log func(line string)
	// Restarted, when set, is called with a replica whose new process has
	// just started, before it is ready: `make dev` records its pid.
	Restarted func(m *Manager)
}

func (p *RestartPolicy) logf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	if p.Log == nil {
		fmt.Fprintln(os.Stderr, line)
		return
	}
	p.Log(line)
}

// startFirstAttempts bounds the restarts of a replica that exits while
// the environment starts: a crash loop at start is a bug to report, not to
// wait out.
const startFirstAttempts = 4

// startFirst starts a replica for the first time. Under a RestartPolicy, a
// replica that exits before it is ready is restarted after a back-off, as
// the kubelet restarts a container that crashes at start, and the policy's
// log says why it exited; without one, its exit fails the start.
func (env *Environment) startFirst(ctx context.Context, m *Manager) error {
	policy := env.opts.RestartManagers
	delay := time.Second
	if policy != nil && policy.Initial > 0 {
		delay = policy.Initial
	}
	for attempt := 1; ; attempt++ {
		err := env.StartManager(ctx, m)
		if err == nil || policy == nil || m.Running() || attempt == startFirstAttempts || ctx.Err() != nil {
			return err
		}
		policy.logf("%s exited while starting; restarting in %s (attempt %d of %d): %v", m.Name, delay, attempt+1, startFirstAttempts, err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay *= 2
	}
}

// superviseManagers restarts each replica that exits, until Stop. While
// it runs, a replica's Process changes under it: read it in
// RestartPolicy.Restarted, or after Stop.
func (env *Environment) superviseManagers(policy *RestartPolicy) {
	ctx, cancel := context.WithCancel(context.Background())
	env.stopSupervision = cancel
	// One back-off per replica, by name, as the kubelet keeps one per
	// container.
	backoff := flowcontrol.NewBackOff(policy.Initial, policy.Max)
	for _, m := range env.Managers {
		env.supervision.Add(1)
		go func() {
			defer env.supervision.Done()
			env.supervise(ctx, m, backoff, policy)
		}()
	}
}

func (env *Environment) supervise(ctx context.Context, m *Manager, backoff *flowcontrol.Backoff, policy *RestartPolicy) {
	for restarts := 1; ; restarts++ {
		select {
		case <-ctx.Done():
			return
		case <-m.Process.Exited():
		}
		backoff.Next(m.Name, time.Now())
		delay := backoff.Get(m.Name)
		how := "exit status 0"
		if err := m.Process.Err(); err != nil {
			how = err.Error() // "signal: killed", "exit status 1"
		}
		policy.logf("%s exited (%s); restarting in %s (restart %d)", m.Name, how, delay, restarts)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		// StartManager replaces m.Process as soon as the new one runs
		// (not if it could not start it: then the next turn sees the old
		// one exited and backs off further), then waits until it is ready.
		old := m.Process
		err := env.startManager(ctx, m, func() {
			if policy.Restarted != nil {
				policy.Restarted(m)
			}
		})
		switch {
		case ctx.Err() != nil:
			return
		case m.Process == old:
			policy.logf("%s could not be restarted: %v", m.Name, err)
		case err == nil:
			policy.logf("%s is ready again (restart %d)", m.Name, restarts)
		case m.Running():
			policy.logf("%s restarted but not ready: %v", m.Name, err)
		}
		// If it exited before it was ready, the next turn says so.
	}
}

// ControlPlaneProcesses are the environment's processes but the managers'
// (which a RestartPolicy restarts): etcd, kube-apiserver,
// kube-controller-manager, cert-manager. By name: a manager's Process
// changes when it is restarted.
func (env *Environment) ControlPlaneProcesses() []*controlplane.Process {
	managers := map[string]bool{}
	for _, m := range env.Managers {
		managers[m.Name] = true
	}
	var cp []*controlplane.Process
	for _, p := range env.Processes() {
		if !managers[p.Name] {
			cp = append(cp, p)
		}
	}
	return cp
}
