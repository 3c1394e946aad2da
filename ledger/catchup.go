package ledger

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

// catchUpPageSize bounds one page of the catch-up's metadata LIST, and so
// the memory it takes: only the objects the ledger has not caught up with
// are kept beyond their page.
const catchUpPageSize = 1000

// CatchUpReport says what a catch-up found.
type CatchUpReport struct {
	// Listed is the number of Subnets and pools the API server holds.
	Listed int
	// Behind is how many of them the ledger had not seen at their current
	// resourceVersion when they were listed (and then waited for).
	Behind   int
	Duration time.Duration
}

// CatchUp blocks until the ledger reflects every Subnet and SubnetPool at
// least as the API server shows them now, and then returns at once on
// every later call. A new leader calls it before its first decision: as a
// follower its informers may lag the old leader's last writes by seconds
// during a burst (a graceful hand-over takes only a second or two), and a
// decision on that view could grant a range the old leader has already
// written. The webhooks' freshness barrier (AwaitCaughtUp) is cheaper but
// approximate; this check is exact, and runs once per leadership.
//
// reader must read from the API server, not a cache. It takes one consistent
// LIST of each kind's metadata (paged; at 100k Subnets a few seconds), then
// waits, with no bound but ctx, until the ledger has seen each listed object
// at its listed resourceVersion or later. An object the ledger lacks is
// read again: if it is gone or replaced since the LIST, the ledger is not
// behind on it.
func (l *Ledger) CatchUp(ctx context.Context, reader client.Reader) (CatchUpReport, error) {
	l.catchUpMu.Lock()
	defer l.catchUpMu.Unlock()
	if l.caughtUp {
		return CatchUpReport{}, nil
	}
	start := time.Now()
	var report CatchUpReport
	var behind []listed
	for _, kind := range []string{statuscalc.KindSubnet, statuscalc.KindSubnetPool} {
		count, lagging, err := l.listBehind(ctx, reader, kind)
		if err != nil {
			return report, err
		}
		report.Listed += count
		behind = append(behind, lagging...)
	}
	report.Behind = len(behind)
	for len(behind) > 0 {
		l.freshMu.Lock()
		changed := l.changed
		l.freshMu.Unlock()
		still := behind[:0]
		for _, o := range behind {
			caught, err := l.caughtUpWith(ctx, reader, o)
			if err != nil {
				return report, err
			}
			if !caught {
				still = append(still, o)
			}
		}
		behind = still
		if len(behind) == 0 {
			break
		}
		select {
		case <-changed:
		case <-time.After(time.Second): // an object gone since the LIST gets no event
		case <-ctx.Done():
			return report, fmt.Errorf("catching up with the API server: %d objects not seen yet, for example %s %s/%s: %w",
				len(behind), behind[0].kind, behind[0].namespace, behind[0].name, ctx.Err())
		}
	}
	l.caughtUp = true
	report.Duration = time.Since(start)
	return report, nil
}

// listed is an object as the catch-up LIST showed it.
type listed struct {
	kind, namespace, name string
	uid                   types.UID
	resourceVersion       string
}

// listBehind lists a kind's metadata page by page and returns how many
// objects there are and the ones the ledger has not caught up with.
func (l *Ledger) listBehind(ctx context.Context, reader client.Reader, kind string) (int, []listed, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(ipamv1.GroupVersion.WithKind(kind + "List"))
	count := 0
	var behind []listed
	for cont := ""; ; {
		if err := reader.List(ctx, list, client.Limit(catchUpPageSize), client.Continue(cont)); err != nil {
			if apierrors.IsResourceExpired(err) && cont != "" {
				// The snapshot was compacted away mid-list: start again.
				count, behind, cont = 0, nil, ""
				continue
			}
			return 0, nil, fmt.Errorf("listing %ss to catch up: %w", kind, err)
		}
		for i := range list.Items {
			o := &list.Items[i]
			item := listed{kind: kind, namespace: o.Namespace, name: o.Name, uid: o.UID, resourceVersion: o.ResourceVersion}
			count++
			if !l.reflects(item) {
				behind = append(behind, item)
			}
		}
		if cont = list.Continue; cont == "" {
			return count, behind, nil
		}
	}
}

// caughtUpWith reports whether the ledger reflects o, or o is gone or
// replaced at the API server (read again, consistently).
func (l *Ledger) caughtUpWith(ctx context.Context, reader client.Reader, o listed) (bool, error) {
	if l.reflects(o) {
		return true, nil
	}
	if l.knows(o) {
		return false, nil // it has the object, at an older version: wait
	}
	current := &metav1.PartialObjectMetadata{}
	current.SetGroupVersionKind(ipamv1.GroupVersion.WithKind(o.kind))
	err := reader.Get(ctx, client.ObjectKey{Namespace: o.namespace, Name: o.name}, current)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading %s %s/%s to catch up: %w", o.kind, o.namespace, o.name, err)
	}
	return current.UID != o.uid, nil
}

// reflects reports whether the ledger has seen o at its resourceVersion or
// later.
func (l *Ledger) reflects(o listed) bool {
	rv, ok := l.version(o)
	if !ok {
		return false
	}
	cmp, err := resourceversion.CompareResourceVersion(rv, o.resourceVersion)
	return err == nil && cmp >= 0
}

// knows reports whether the ledger holds the object o (same UID), at any
// version.
func (l *Ledger) knows(o listed) bool {
	_, ok := l.version(o)
	return ok
}

// version returns the resourceVersion at which the ledger last saw the
// object o (same UID).
func (l *Ledger) version(o listed) (string, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if o.kind == statuscalc.KindSubnet {
		if c := l.b.claim(idOf(o.namespace, SubnetKey(o.name))); c != nil && c.uid == o.uid {
			return c.rv, true
		}
		return "", false
	}
	if s := l.b.slots[poolIDOf(o.namespace, o.name)]; s != nil && s.pool != nil && s.pool.uid == o.uid {
		return s.pool.rv, true
	}
	return "", false
}
