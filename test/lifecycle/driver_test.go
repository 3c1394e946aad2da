//go:build integration

package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	capiipam "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/test/environment"
)

// driver runs operations against the environment and keeps the
// operation log.
type driver struct {
	t   *testing.T
	env *environment.Environment
	c   client.Client

	mu  sync.Mutex
	log []*opRecord
	id  int

	handOvers, restarts int
	// The IPAddress informer lag (ops_addresses_test.go): the replicas
	// lagged now, for how many more operations, and how many windows.
	lagged              []string
	lagLeft, lagWindows int
	// unexpected counts replicas that exited on their own (a leader that
	// missed its renew deadline on a loaded machine exits by design).
	unexpected []string
	findings   []finding
	// scanned is how far each replica's log was searched for data races.
	scanned map[string]int64
	broken  error
}

func newDriver(t *testing.T, env *environment.Environment, c client.Client) *driver {
	return &driver{t: t, env: env, c: c, scanned: map[string]int64{}}
}

func (d *driver) logPath(m *environment.Manager) string {
	return filepath.Join(d.env.LogDir(), m.Name+".log")
}

// run executes one operation and applies its outcomes to the generator's
// belief, in request order. It returns how many requests and faults it
// counted.
func (d *driver) run(ctx context.Context, op *operation) int {
	d.ensureReplicas(ctx)
	group := d.nextID()
	if op.lag != nil {
		d.startLag(ctx, op.lag, op.kind, group)
	}
	// chain sends a request and what follows it at once (a re-create).
	chain := func(r *request) {
		for ; r != nil; r = r.then {
			sleep(ctx, r.delay)
			r.out = d.do(ctx, r, group)
		}
	}
	split := len(op.requests) - op.concurrent
	for _, r := range op.requests[:split] {
		chain(r)
	}
	returned := make(chan struct{}, op.concurrent)
	var wg sync.WaitGroup
	for _, r := range op.requests[split:] {
		wg.Go(func() {
			chain(r)
			returned <- struct{}{}
		})
	}
	if op.fault != nil {
		for range op.after {
			<-returned
		}
		d.strike(ctx, op, group)
	} else if op.lag != nil && op.lag.drop >= 0 {
		for range op.lag.drop {
			<-returned
		}
		d.dropLagged(op.lag, op.kind, group)
	}
	wg.Wait()
	// The generator learns the outcomes of requests sent one at a time.
	// Of concurrent ones it assumes success: which of two overlapping
	// creates is admitted is a race, and a belief that followed it would
	// make a replay of the seed draw other requests from there on.
	n := 0
	for i, r := range op.requests {
		for ; r != nil; r = r.then {
			out := r.out
			if i >= split {
				out = intended(r.out)
			}
			if r.apply != nil {
				r.apply(out)
			}
			n++
		}
	}
	if op.fault != nil {
		n++
	}
	if op.lag != nil {
		n++
	}
	d.tickLag(op, group)
	return n
}

// intended is a request's outcome had it succeeded.
func intended(rec *opRecord) *opRecord {
	out := *rec
	switch rec.Verb {
	case "create":
		out.Outcome = outcomeCreated
	case "patch":
		out.Outcome = outcomeUpdated
	case "delete":
		out.Outcome = outcomeDeleted
	}
	return &out
}

func (d *driver) nextID() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.id++
	return d.id
}

// do sends one request, retrying what a client would retry: the webhook
// unreachable during a restart, 5xx, 429, timeouts. Webhook rejections are
// outcomes, not errors.
func (d *driver) do(ctx context.Context, r *request, group int) *opRecord {
	rec := r.rec
	rec.ID, rec.Group = d.nextID(), group
	rec.Start = time.Now()
	deadline := rec.Start.Add(45 * time.Second)
	for {
		rec.Attempts++
		err := d.send(ctx, r, &rec)
		if err == nil {
			// This attempt's answer is the outcome, whatever an earlier
			// one did (a create that had landed would now exist).
			rec.Ambiguous = rec.Ambiguous && rec.Verb != "create"
			break
		}
		if transient(err) && time.Now().Before(deadline) && ctx.Err() == nil {
			rec.Ambiguous = rec.Ambiguous || mayHaveLanded(err)
			sleep(ctx, time.Duration(min(rec.Attempts, 10))*100*time.Millisecond)
			continue
		}
		classify(err, &rec)
		break
	}
	rec.End = time.Now()
	d.mu.Lock()
	d.log = append(d.log, &rec)
	d.mu.Unlock()
	return &rec
}

// sleep waits between retries of a request (a client's back-off) or
// before one (shaping a race): never a stand-in for a condition.
func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (d *driver) send(ctx context.Context, r *request, rec *opRecord) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var o client.Object
	switch rec.Kind {
	case kindNamespace:
		o = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rec.Name}}
	case kindSubnet:
		o = &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: rec.Namespace, Name: rec.Name}}
	case kindClaim:
		o = &capiipam.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: rec.Namespace, Name: rec.Name}}
	case kindAddress:
		o = &capiipam.IPAddress{ObjectMeta: metav1.ObjectMeta{Namespace: rec.Namespace, Name: rec.Name}}
	default:
		o = &ipamv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Namespace: rec.Namespace, Name: rec.Name}}
	}
	if handled, err := d.sendAddress(ctx, r, rec); handled {
		return err
	}
	if handled, err := d.sendV1alpha1(ctx, r, rec); handled {
		return err
	}
	if handled, err := d.sendRestoreStatus(ctx, r, rec); handled {
		return err
	}
	if handled, err := d.sendDelegation(ctx, r, rec); handled {
		return err
	}
	var err error
	switch rec.Verb {
	case "await":
		return d.await(ctx, rec)
	case "export":
		return d.export(ctx, r.export, rec)
	case "create":
		if r.restore != nil {
			if r.restore.subnet == nil {
				rec.Outcome, rec.Reason, rec.Message = outcomeFailed, "not-exported", "the export found no Subnet"
				return nil
			}
			s := r.restore.subnet.DeepCopy()
			rec.CIDR, rec.PrefixLength = s.Spec.CIDR, s.Spec.PrefixLength
			o = s
		} else {
			o = r.create.DeepCopyObject().(client.Object)
		}
		if err = d.c.Create(ctx, o); err == nil {
			rec.Outcome = outcomeCreated
		}
	case "patch":
		if err = d.c.Patch(ctx, o, client.RawPatch(types.MergePatchType, r.patch)); err == nil {
			rec.Outcome = outcomeUpdated
		}
	case "delete":
		var opts []client.DeleteOption
		if r.foreground {
			rec.Foreground = true
			opts = append(opts, client.PropagationPolicy(metav1.DeletePropagationForeground))
		}
		if err = d.c.Delete(ctx, o, opts...); err == nil {
			rec.Outcome = outcomeDeleted
		}
	}
	if err == nil {
		rec.RV, rec.UID = parseRV(o.GetResourceVersion()), o.GetUID()
	}
	return err
}

// await waits (boundedly) until a Subnet shows the Ready reason named in
// rec.Message: a scenario step that must follow a state, not a time.
func (d *driver) await(ctx context.Context, rec *opRecord) error {
	want := rec.Message
	rec.Outcome, rec.Message = outcomeFailed, "timed out waiting for reason "+want
	for ctx.Err() == nil {
		var s ipamv1.Subnet
		if err := d.c.Get(ctx, client.ObjectKey{Namespace: rec.Namespace, Name: rec.Name}, &s); err == nil {
			o := fromSubnet(&s)
			if r := o.readyReason(); r == want || r == ipamv1.ReasonAllocated {
				rec.Outcome, rec.Message, rec.Reason = outcomeDone, "", r
				return nil
			}
		}
		if time.Since(rec.Start) > 10*time.Second {
			return nil
		}
		sleep(ctx, 50*time.Millisecond)
	}
	return nil
}

// export reads a Subnet as a backup tool keeps it: metadata a user wrote
// and the spec, no status. A Ready dynamic Subnet is read once its range
// is recorded in its spec, if that happens within a bound (the recorder
// yields to grants); otherwise as it is, as a backup taken too early would.
func (d *driver) export(ctx context.Context, box *exported, rec *opRecord) error {
	var s ipamv1.Subnet
	for {
		err := d.c.Get(ctx, client.ObjectKey{Namespace: rec.Namespace, Name: rec.Name}, &s)
		if apierrors.IsNotFound(err) {
			rec.Outcome = outcomeNotFound
			return nil
		}
		if err != nil {
			return err
		}
		waiting := s.Spec.CIDR == "" && meta.IsStatusConditionTrue(s.Status.Conditions, ipamv1.ConditionReady)
		if !waiting || time.Since(rec.Start) > 10*time.Second || ctx.Err() != nil {
			break
		}
		sleep(ctx, 50*time.Millisecond)
	}
	box.subnet = &ipamv1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name, Labels: s.Labels, Annotations: s.Annotations},
		Spec:       *s.Spec.DeepCopy(),
	}
	rec.Outcome, rec.UID = outcomeDone, s.UID
	rec.CIDR, rec.PrefixLength, rec.Ref = s.Spec.CIDR, s.Spec.PrefixLength, refOf(s.Namespace, &s.Spec.PoolRef)
	return nil
}

// transient: errors a client retries.
func transient(err error) bool {
	switch {
	case apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err), apierrors.IsTooManyRequests(err),
		apierrors.IsServerTimeout(err), apierrors.IsTimeout(err), apierrors.IsUnexpectedServerError(err):
		return true
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET):
		return true
	case strings.Contains(err.Error(), "failed calling webhook"):
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	var status apierrors.APIStatus
	return errors.As(err, &status) && status.Status().Code >= 500
}

// mayHaveLanded: the request may have been applied though the client saw
// an error (it timed out, or the connection broke after sending).
func mayHaveLanded(err error) bool {
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// classify records a final error as the request's outcome.
func classify(err error, rec *opRecord) {
	rec.Reason, rec.Message = string(apierrors.ReasonForError(err)), err.Error()
	switch {
	case apierrors.IsAlreadyExists(err) && rec.Ambiguous && rec.Verb == "create":
		rec.Outcome = outcomeCreated // an earlier attempt landed
	case apierrors.IsNotFound(err) && rec.Ambiguous && rec.Verb == "delete":
		rec.Outcome = outcomeDeleted
	case apierrors.IsNotFound(err):
		rec.Outcome = outcomeNotFound
	case transient(err):
		rec.Outcome = outcomeFailed
	default:
		var status apierrors.APIStatus
		if errors.As(err, &status) && status.Status().Code >= 400 && status.Status().Code < 500 {
			rec.Outcome = outcomeRejected
		} else {
			rec.Outcome = outcomeFailed
		}
	}
}

// retryTransient runs f until it succeeds, fails for good, or a minute
// passes.
func retryTransient(ctx context.Context, f func(context.Context) error) error {
	deadline := time.Now().Add(time.Minute)
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err := f(actx)
		cancel()
		if err == nil || !transient(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		sleep(ctx, time.Duration(min(attempt, 10))*100*time.Millisecond)
	}
}

// ---- faults ----

// strike runs an operation's fault while its requests are in flight.
func (d *driver) strike(ctx context.Context, op *operation, group int) {
	rec := &opRecord{ID: d.nextID(), Group: group, Op: op.kind, Start: time.Now()}
	defer func() {
		rec.End = time.Now()
		d.mu.Lock()
		d.log = append(d.log, rec)
		d.mu.Unlock()
	}()
	leader, err := d.env.Leader(ctx, 30*time.Second)
	if err != nil {
		rec.Outcome, rec.Message = outcomeFailed, err.Error()
		d.fail("F", "no leader", "%s: %v", op.kind, err)
		return
	}
	if op.fault.handOver {
		rec.Verb, rec.Name = "sigterm", leader.Name
		d.handOvers++
		// The manager releases its lease on SIGTERM; the other replica
		// takes it at its next retry.
		leader.Process.Stop(15 * time.Second)
		if err := leader.Process.Err(); err != nil {
			d.fail("M", leader.Name+"/stop", "%s exited with %v on SIGTERM (graceful stop; 66 is the race detector)", leader.Name, err)
		}
		d.scanRaces(leader)
		if next, err := d.env.Leader(ctx, 30*time.Second); err != nil || next == leader {
			d.fail("F", "hand-over", "after %s stopped, no other replica took the lease: %v", leader.Name, err)
		}
		d.restart(ctx, leader)
		rec.Outcome = outcomeDone
		return
	}
	victim := leader
	if !op.fault.leader {
		for _, m := range d.env.Managers {
			if m != leader {
				victim = m
			}
		}
	}
	rec.Verb, rec.Name = "sigkill", victim.Name
	d.restarts++
	victim.Process.Kill()
	d.scanRaces(victim)
	d.restart(ctx, victim)
	rec.Outcome = outcomeDone
}

// restart starts a stopped replica again. If it cannot, the run cannot go
// on: broken says why, and the test stops after the operation.
func (d *driver) restart(ctx context.Context, m *environment.Manager) {
	if err := d.env.StartManager(ctx, m); err != nil {
		d.mu.Lock()
		d.broken = fmt.Errorf("restarting %s: %w", m.Name, err)
		d.mu.Unlock()
	}
}

// ensureReplicas restarts a replica that exited on its own, as a kubelet
// would; an exit code of 66 is the race detector.
func (d *driver) ensureReplicas(ctx context.Context) {
	for _, m := range d.env.Managers {
		if m.Process == nil || m.Running() {
			continue
		}
		err := m.Process.Err()
		tail := m.Log()
		if len(tail) > 600 {
			tail = tail[len(tail)-600:]
		}
		d.unexpected = append(d.unexpected, fmt.Sprintf("%s: %v", m.Name, err))
		d.t.Logf("%s exited on its own (%v); restarting it. End of its log:\n%s", m.Name, err, tail)
		d.scanRaces(m)
		d.restart(ctx, m)
	}
}

// scanRaces reports data races the race detector printed in a replica's
// log since the last scan (a SIGKILLed replica never exits with 66).
func (d *driver) scanRaces(m *environment.Manager) {
	path := d.logPath(m)
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer func() { _ = f.Close() }()
	if _, err := f.Seek(d.scanned[m.Name], io.SeekStart); err != nil {
		return
	}
	data, _ := io.ReadAll(f)
	d.scanned[m.Name] += int64(len(data))
	if i := bytes.Index(data, []byte("WARNING: DATA RACE")); i >= 0 {
		d.fail("M", fmt.Sprintf("%s/race/%d", m.Name, d.scanned[m.Name]), "data race in %s:\n%s", m.Name, data[i:min(len(data), i+4000)])
	}
}

func (d *driver) fail(check, key, format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.findings = append(d.findings, finding{Check: check, Key: check + "/" + key, Detail: fmt.Sprintf(format, args...)})
}

// takeFindings returns the driver's findings since the last call.
func (d *driver) takeFindings() []finding {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.findings
	d.findings = nil
	return out
}

// records returns the operation log so far, in ID order.
func (d *driver) records() []*opRecord {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := slices.Clone(d.log)
	slices.SortFunc(out, func(a, b *opRecord) int { return a.ID - b.ID })
	return out
}
