package ledger

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/util/resourceversion"

	"github.com/subnet-operator/subnet-operator/statuscalc"
)

// Watermark is what a cheap consistent read (a LIST with limit=1) tells of a
// collection at one moment: its resourceVersion and how many objects of the
// kind the namespace holds.
type Watermark struct {
	Kind            string // statuscalc.KindSubnet or statuscalc.KindSubnetPool
	Namespace       string // "": every namespace (a pool shared across namespaces)
	ResourceVersion string
	Count           int
}

// CaughtUp reports whether the ledger has seen everything the watermark
// saw: either an event of the kind at or after its resourceVersion (the
// informer delivers a kind's events in order), or exactly its number of
// objects in the namespace. The second test is needed because the
// resourceVersion is the store's global revision, which other kinds move
// while ours stay still; it can be fooled only by a create and a delete in
// the same namespace that both arrive between the read and the decision,
// and the arbiter remains the guarantee for that case.
func (l *Ledger) CaughtUp(w Watermark) bool {
	l.freshMu.Lock()
	last := l.lastRV[w.Kind]
	l.freshMu.Unlock()
	if last != "" {
		if cmp, err := resourceversion.CompareResourceVersion(last, w.ResourceVersion); err == nil && cmp >= 0 {
			return true
		}
	}
	count := 0
	l.mu.RLock()
	if w.Namespace == "" {
		count = l.b.subnets
		if w.Kind != statuscalc.KindSubnet {
			count = l.b.pools
		}
	} else if c := l.b.namespaces[w.Namespace]; c != nil {
		if w.Kind == statuscalc.KindSubnet {
			count = c.subnets
		} else {
			count = c.pools
		}
	}
	l.mu.RUnlock()
	return count == w.Count
}

// AwaitCaughtUp waits, at most timeout, until the ledger has caught up with
// every watermark. It reports whether it did.
func (l *Ledger) AwaitCaughtUp(ctx context.Context, timeout time.Duration, marks ...Watermark) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		l.freshMu.Lock()
		changed := l.changed
		l.freshMu.Unlock()
		caughtUp := true
		for _, w := range marks {
			if !l.CaughtUp(w) {
				caughtUp = false
				break
			}
		}
		if caughtUp {
			return true
		}
		select {
		case <-changed:
		case <-deadline.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}
