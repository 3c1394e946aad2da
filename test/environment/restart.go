package environment

import (
	"context"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/util/flowcontrol"
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
