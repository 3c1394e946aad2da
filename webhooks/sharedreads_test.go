package webhooks

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/subnet-operator/subnet-operator/ledger"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

// blockingReads is a fake API server whose k-th read answers resourceVersion
// k, and only when the test releases it.
type blockingReads struct {
	count   atomic.Int32
	started chan int
	release chan struct{}
}

func newBlockingReads() *blockingReads {
	return &blockingReads{started: make(chan int, 16), release: make(chan struct{})}
}

func (b *blockingReads) read(ctx context.Context, namespace, kind string) (ledger.Watermark, error) {
	k := int(b.count.Add(1))
	b.started <- k
	select {
	case <-b.release:
	case <-ctx.Done():
		return ledger.Watermark{}, ctx.Err()
	}
	return ledger.Watermark{Kind: kind, Namespace: namespace, ResourceVersion: strconv.Itoa(k)}, nil
}

func (b *blockingReads) expectStarted(t *testing.T, want int) {
	t.Helper()
	select {
	case got := <-b.started:
		if got != want {
			t.Fatalf("read %d started, want read %d", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("read %d never started", want)
	}
}

type answer struct {
	mark ledger.Watermark
	err  error
}

func ask(s *sharedReads, ctx context.Context, namespace string) <-chan answer {
	out := make(chan answer, 1)
	go func() {
		m, err := s.watermark(ctx, namespace, statuscalc.KindSubnet)
		out <- answer{m, err}
	}()
	return out
}

// waitForWaiters waits until n admissions wait for key's reads (the one in
// flight and the next): they have arrived, and the test may release the
// read in flight.
func waitForWaiters(t *testing.T, s *sharedReads, namespace string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		got := 0
		if slot := s.calls[readKey{namespace, statuscalc.KindSubnet}]; slot != nil {
			for _, c := range []*readCall{slot.inflight, slot.next} {
				if c != nil {
					got += c.waiters
				}
			}
		}
		s.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d admissions wait for a read, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func expectAnswer(t *testing.T, ch <-chan answer, wantRV string) {
	t.Helper()
	select {
	case a := <-ch:
		if a.err != nil || a.mark.ResourceVersion != wantRV {
			t.Fatalf("answer = %q, %v; want the read that answered %q", a.mark.ResourceVersion, a.err, wantRV)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no answer, want the read that answered %q", wantRV)
	}
}

// The coalescing rule: an admission is served by a read that started after
// it arrived, never by the read in flight when it arrived; the admissions
// that arrive during one read share the next one.
func TestSharedReadsServeOnlyFromAReadStartedAfterArrival(t *testing.T) {
	api := newBlockingReads()
	s := newSharedReads(api.read, time.Minute)
	ctx := context.Background()

	first := ask(s, ctx, ns)
	api.expectStarted(t, 1)

	// Three admissions arrive while read 1 is in flight. Read 1 may have been
	// answered before a create they must see was acknowledged.
	during := []<-chan answer{ask(s, ctx, ns), ask(s, ctx, ns), ask(s, ctx, ns)}
	waitForWaiters(t, s, ns, 1+3)
	api.release <- struct{}{}
	expectAnswer(t, first, "1")

	// Read 2 starts only now, after they arrived, and serves all three.
	api.expectStarted(t, 2)
	late := ask(s, ctx, ns) // arrives while read 2 is in flight
	waitForWaiters(t, s, ns, 3+1)
	api.release <- struct{}{}
	for _, ch := range during {
		expectAnswer(t, ch, "2")
	}

	api.expectStarted(t, 3)
	api.release <- struct{}{}
	expectAnswer(t, late, "3")

	if got := api.count.Load(); got != 3 {
		t.Errorf("%d reads for 5 admissions, want 3", got)
	}
	// The reader forgets the key just after it answered the last read:
	// wait for that, boundedly.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		tracked := len(s.calls)
		s.mu.Unlock()
		if tracked == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d keys still tracked 10 s after every read returned", tracked)
		}
	}
}

// Reads of different namespaces (and kinds) do not wait for each other.
func TestSharedReadsAreIndependentPerNamespace(t *testing.T) {
	api := newBlockingReads()
	s := newSharedReads(api.read, time.Minute)
	ctx := context.Background()
	a := ask(s, ctx, "team-a")
	api.expectStarted(t, 1)
	b := ask(s, ctx, "team-b")
	api.expectStarted(t, 2) // started although team-a's read is in flight
	api.release <- struct{}{}
	api.release <- struct{}{}
	for _, ch := range []<-chan answer{a, b} {
		select {
		case got := <-ch:
			if got.err != nil {
				t.Fatal(got.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no answer")
		}
	}
}

// An admission that gives up does not cancel the read the others share.
func TestSharedReadsOutliveTheAdmissionThatStartedThem(t *testing.T) {
	api := newBlockingReads()
	s := newSharedReads(api.read, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	starter := ask(s, ctx, ns)
	api.expectStarted(t, 1)
	other := ask(s, context.Background(), ns)
	waitForWaiters(t, s, ns, 1+1)
	cancel()
	if a := <-starter; !errors.Is(a.err, context.Canceled) {
		t.Fatalf("the admission that gave up got %v, want its context's error", a.err)
	}
	api.release <- struct{}{}
	api.expectStarted(t, 2)
	api.release <- struct{}{}
	expectAnswer(t, other, "2")
}

// Reads for many namespaces (which forged requests can name at will) run
// at most maxReadsInFlight at once; the others wait for a slot and run
// when one frees.
func TestSharedReadsBoundReadsInFlight(t *testing.T) {
	const asked = maxReadsInFlight + 8
	b := &blockingReads{started: make(chan int, asked), release: make(chan struct{})}
	s := newSharedReads(b.read, 10*time.Second)
	answers := make([]<-chan answer, asked)
	for i := range asked {
		answers[i] = ask(s, context.Background(), "made-up-"+strconv.Itoa(i))
	}
	deadline := time.Now().Add(10 * time.Second)
	for b.count.Load() < maxReadsInFlight || s.queued.Load() < asked-maxReadsInFlight {
		if time.Now().After(deadline) {
			t.Fatalf("%d reads started and %d queued, want %d and %d", b.count.Load(), s.queued.Load(), maxReadsInFlight, asked-maxReadsInFlight)
		}
		time.Sleep(time.Millisecond) // polling a condition, with a deadline
	}
	if got := b.count.Load(); got != maxReadsInFlight {
		t.Fatalf("%d reads in flight, want at most %d", got, maxReadsInFlight)
	}
	close(b.release)
	for i, ch := range answers {
		if a := <-ch; a.err != nil {
			t.Errorf("namespace %d: %v", i, a.err)
		}
	}
}
