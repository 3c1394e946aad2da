package webhooks

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/subnet-operator/subnet-operator/ledger"
)

// sharedReads runs at most one watermark read per (namespace, kind) at a
// time on this replica. Every admission that arrives while a read is in
// flight joins the next read, which starts when the one in flight returns;
// all of them share its answer.
//
// An admission never joins the read in flight: that read may have been
// answered by the API server before the create the admission must see was
// acknowledged to its client, and invariant 2 is exactly that such a
// create is seen. The next read starts after the admission arrived, so its
// watermark covers everything acknowledged before the admission was sent.
// Under load, N concurrent admissions of one kind cost about two reads
// instead of N; alone, an admission costs exactly one read, as before.
//
// Across keys, at most maxReadsInFlight reads run at once: a request says
// its own namespace, and forged ones (anything that reaches the webhook
// port) may name a new one each time, so sharing per key alone does not
// bound the LISTs they make the API server serve. A read beyond the bound
// waits for a slot, within its timeout (then the admissions it serves are
// refused with Retry-After, as for any read that does not come back).
type sharedReads struct {
	read    func(ctx context.Context, namespace, kind string) (ledger.Watermark, error)
	timeout time.Duration // bounds each read; it outlives the requests it serves
	// slots holds a token per read in flight, across keys.
	slots chan struct{}
	// queued counts the reads waiting for a slot (for tests).
	queued atomic.Int32

	mu    sync.Mutex
	calls map[readKey]*readSlot // only keys with a read in flight
}

// maxReadsInFlight bounds the watermark reads one replica runs at once.
const maxReadsInFlight = 16

type readKey struct{ namespace, kind string }

// readSlot is one key's read in flight and the read the admissions that
// arrived since wait for.
type readSlot struct{ inflight, next *readCall }

type readCall struct {
	done    chan struct{} // closed when mark and err are set
	mark    ledger.Watermark
	err     error
	waiters int // admissions served, under sharedReads.mu
}

func newSharedReads(read func(ctx context.Context, namespace, kind string) (ledger.Watermark, error), timeout time.Duration) *sharedReads {
	return &sharedReads{read: read, timeout: timeout, slots: make(chan struct{}, maxReadsInFlight), calls: map[readKey]*readSlot{}}
}

// watermark returns the answer of a read that started after it was called.
func (s *sharedReads) watermark(ctx context.Context, namespace, kind string) (ledger.Watermark, error) {
	key := readKey{namespace, kind}
	s.mu.Lock()
	slot := s.calls[key]
	var c *readCall
	switch {
	case slot == nil: // nothing in flight: start one now
		c = &readCall{done: make(chan struct{})}
		s.calls[key] = &readSlot{inflight: c}
		go s.run(key, c)
	case slot.next != nil: // a later read is already waiting to start
		c = slot.next
	default:
		c = &readCall{done: make(chan struct{})}
		slot.next = c
	}
	c.waiters++
	s.mu.Unlock()
	select {
	case <-c.done:
		return c.mark, c.err
	case <-ctx.Done():
		return ledger.Watermark{}, ctx.Err()
	}
}

// run performs key's reads one after another until none is waiting. A read
// is not bound to any one request's context: others share it, and the one
// that started it may give up first.
func (s *sharedReads) run(key readKey, c *readCall) {
	for c != nil {
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		c.mark, c.err = s.boundedRead(ctx, key)
		cancel()
		close(c.done)
		s.mu.Lock()
		slot := s.calls[key]
		c = slot.next
		if c == nil {
			delete(s.calls, key)
		} else {
			slot.inflight, slot.next = c, nil
		}
		s.mu.Unlock()
	}
}

// boundedRead runs one read once a slot is free (maxReadsInFlight).
func (s *sharedReads) boundedRead(ctx context.Context, key readKey) (ledger.Watermark, error) {
	select {
	case s.slots <- struct{}{}:
	default:
		s.queued.Add(1)
		select {
		case s.slots <- struct{}{}:
			s.queued.Add(-1)
		case <-ctx.Done():
			s.queued.Add(-1)
			return ledger.Watermark{}, ctx.Err()
		}
	}
	defer func() { <-s.slots }()
	return s.read(ctx, key.namespace, key.kind)
}
