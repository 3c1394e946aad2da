//go:build integration

package lifecycle

// A status restored by a backup tool (Velero restores status on request;
// docs/architecture.md, "A restored status is not a grant"):
//
//	operation        weight  exercises
//	restore-status      3    a Ready status written through the status subresource onto a Subnet that waits
//	                         (or was just created), with the range another Subnet of its pool holds, in the form
//	                         the controller writes (its generation observed), as a backup tool restores a stale
//	                         or forged status: the arbiter must take it back (Ready=False, Overlaps) and decide
//	                         the claim again; the holder keeps its range
//
// The test wrote that status, not the operator: the history's checks (S1-S3)
// do not judge it. The versions that still show it exactly are replayed as
// not Ready (maskRestoredStatus); the operator's next status write is judged
// as any. What the status must come to is judged on the settled state: O1,
// one Ready holder per range, beside L1-L2 for the claim decided again.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

const (
	opRestoreStatus   = "restore-status"
	verbRestoreStatus = "update-status"
)

// statusRestoreOp is what a restore-status request needs beyond the
// record: a draw that picks the Subnet and the holder whose range it is
// given among those the API shows when it is sent (the generator does not
// know which Subnets wait or hold).
type statusRestoreOp struct {
	pick uint64
}

// restoreStatus draws a status restore in ns.
func (g *generator) restoreStatus(ns *nsPlan) *operation {
	if len(ns.subnets) < 2 {
		return g.make(opCreateDynamic)
	}
	return &operation{kind: opRestoreStatus, requests: []*request{{
		rec:    opRecord{Op: opRestoreStatus, Verb: verbRestoreStatus, Kind: kindSubnet, Namespace: ns.name},
		status: &statusRestoreOp{pick: g.rng.Uint64()},
	}}}
}

// sendRestoreStatus writes a held range onto a Subnet that is not Ready,
// as a backup tool restores a status; handled is false for any other
// request.
func (d *driver) sendRestoreStatus(ctx context.Context, r *request, rec *opRecord) (handled bool, err error) {
	if r.status == nil {
		return false, nil
	}
	var list ipamv1.SubnetList
	if err := d.c.List(ctx, &list, client.InNamespace(rec.Namespace)); err != nil {
		return true, err
	}
	type pair struct{ victim, holder *ipamv1.Subnet }
	var pairs []pair
	for i := range list.Items {
		v := &list.Items[i]
		if v.DeletionTimestamp != nil || meta.IsStatusConditionTrue(v.Status.Conditions, ipamv1.ConditionReady) {
			continue
		}
		for j := range list.Items {
			h := &list.Items[j]
			if i != j && h.DeletionTimestamp == nil && h.Status.CIDR != "" && h.Spec.PoolRef == v.Spec.PoolRef &&
				meta.IsStatusConditionTrue(h.Status.Conditions, ipamv1.ConditionReady) {
				pairs = append(pairs, pair{v, h})
			}
		}
	}
	if len(pairs) == 0 {
		rec.Outcome, rec.Reason, rec.Message = outcomeFailed, "no-pair", "no Subnet waits beside a Ready one of its pool"
		return true, nil
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		if c := strings.Compare(a.victim.Name, b.victim.Name); c != 0 {
			return c
		}
		return strings.Compare(a.holder.Name, b.holder.Name)
	})
	p := pairs[r.status.pick%uint64(len(pairs))]
	s := p.victim.DeepCopy()
	rec.Name, rec.CIDR, rec.Message = s.Name, p.holder.Status.CIDR, "the range Subnet "+p.holder.Name+" holds"
	// The controller's form: one Ready condition for this generation, so
	// that only the arbiter's judgement, not a stale generation, makes the
	// controller write again.
	s.Status = ipamv1.SubnetStatus{
		CIDR: p.holder.Status.CIDR, Addresses: p.holder.Status.Addresses, ObservedGeneration: s.Generation,
		Conditions: []metav1.Condition{{Type: ipamv1.ConditionReady, Status: metav1.ConditionTrue, Reason: ipamv1.ReasonAllocated,
			Message: "holds " + p.holder.Status.CIDR, ObservedGeneration: s.Generation, LastTransitionTime: metav1.NewTime(time.Now().Truncate(time.Second))}},
	}
	if err := d.c.Status().Update(ctx, s); err != nil {
		return true, err // a conflict (the Subnet changed since the list) is an outcome too
	}
	rec.Outcome = outcomeUpdated
	rec.RV, rec.UID = parseRV(s.ResourceVersion), s.UID
	restoredStatuses.note(fromSubnet(s))
	return true, nil
}

// restoredStatuses are the statuses the test wrote, by Subnet UID, in the
// order written.
var restoredStatuses = &restoreLog{byUID: map[types.UID][]*restoredStatus{}}

type restoreLog struct {
	mu    sync.Mutex
	byUID map[types.UID][]*restoredStatus
}

// restoredStatus is one status the test wrote: the version it made, and
// whether a later version showed another status (the operator's).
type restoredStatus struct {
	written obj
	ended   bool
}

func (l *restoreLog) note(v obj) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.byUID[v.UID] = append(l.byUID[v.UID], &restoredStatus{written: v})
}

// maskRestoredStatus returns the event as the history's checks judge it:
// a Subnet or pool version that shows, unchanged, a status the test wrote
// (restore-status, restore-delegated-pool), shows no status (the test's
// write is no grant of the operator's); from its first other status on,
// the versions are the operator's.
func maskRestoredStatus(ev event) event {
	v := &ev.Obj
	if v.Kind != kindSubnet && v.Kind != kindPool {
		return ev
	}
	restoredStatuses.mu.Lock()
	defer restoredStatuses.mu.Unlock()
	var w *restoredStatus
	for _, c := range restoredStatuses.byUID[v.UID] {
		if c.written.RV <= v.RV {
			w = c // the latest written at or before this version
		}
	}
	if w == nil || w.ended {
		return ev
	}
	if !sameStatus(v, &w.written) {
		w.ended = true
		return ev
	}
	v.StatusCIDR, v.Conditions = "", []metav1.Condition{{Type: ipamv1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: "RestoredByTest", Message: "status written by the test (restore-status): " + w.written.StatusCIDR}}
	return ev
}

func sameStatus(a, b *obj) bool {
	ra, rb := a.ready(), b.ready()
	return a.StatusCIDR == b.StatusCIDR && a.ObservedGeneration == b.ObservedGeneration && ra != nil && rb != nil &&
		ra.Status == rb.Status && ra.Reason == rb.Reason && ra.Message == rb.Message &&
		ra.ObservedGeneration == rb.ObservedGeneration && ra.LastTransitionTime.Equal(&rb.LastTransitionTime)
}

// checkOneHolderPerRange is O1, on the settled state: no two Ready Subnets
// of one pool hold overlapping ranges, whatever status was written onto
// them (a restore the arbiter must take back, not believe).
func (r *quiescentReport) checkOneHolderPerRange(objs []obj) {
	byPool := map[string][]*obj{}
	for i := range objs {
		if o := &objs[i]; o.Kind == kindSubnet && o.held().IsValid() {
			byPool[o.Ref] = append(byPool[o.Ref], o)
		}
	}
	for _, pool := range slices.Sorted(maps.Keys(byPool)) {
		holders := byPool[pool]
		slices.SortFunc(holders, func(a, b *obj) int { return strings.Compare(a.key(), b.key()) })
		for i, a := range holders {
			for _, b := range holders[i+1:] {
				if a.held().Overlaps(b.held()) {
					r.add("O1", id(a, "overlaps/"+string(b.UID)), "two Ready Subnets of pool %s hold overlapping ranges once settled%s:\n\t%s\n\t%s",
						pool, restoredNote(a, b), a, b)
				}
			}
		}
	}
}

// restoredNote says which of the Subnets the test restored a status onto.
func restoredNote(subnets ...*obj) string {
	restoredStatuses.mu.Lock()
	defer restoredStatuses.mu.Unlock()
	for _, s := range subnets {
		if ws := restoredStatuses.byUID[s.UID]; len(ws) > 0 {
			return fmt.Sprintf(" (restore-status wrote %s onto %s at rv %d)", ws[len(ws)-1].written.StatusCIDR, s.key(), ws[len(ws)-1].written.RV)
		}
	}
	return ""
}
