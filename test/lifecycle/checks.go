package lifecycle

import (
	"cmp"
	"fmt"
	"maps"
	"math/big"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ipspace"
)

// finding is one violation. Key identifies it, so that a violation that
// persists (an overlap that lasts, a claim that keeps waiting) is reported
// once.
type finding struct {
	Check  string // S1..S6 and A1..A8 (safety, on the history), L1..L6 (liveness, at quiescence), H (the recorder itself)
	Key    string
	Detail string
}

func (f finding) String() string { return f.Check + ": " + f.Detail }

// ---- liveness, at quiescence: L1-L4 on one consistent listing ----

// quiescentReport is what checkQuiescent found.
type quiescentReport struct {
	findings []finding
	checks   int
	// grandfathered are held claims lying outside their pool's served range
	// or on its reserved ranges (a pool edit raced a grant), by UID.
	grandfathered map[types.UID]string
}

// id identifies a finding about an object: the object (name and UID, so
// a re-created object is new) and what is wrong.
func id(o *obj, what string) string { return o.key() + "/" + string(o.UID) + "/" + what }

func (r *quiescentReport) add(check, key, format string, args ...any) {
	r.findings = append(r.findings, finding{Check: check, Key: check + "/" + key, Detail: fmt.Sprintf(format, args...)})
}

// checkQuiescent checks a settled system: every object of the test's
// namespaces, from one listing, after all operations returned, and the
// namespaces' labels.
func checkQuiescent(objs []obj, labels map[string]map[string]string) quiescentReport {
	r := quiescentReport{grandfathered: map[types.UID]string{}}
	w := newWorld(objs, labels)
	for _, name := range slices.Sorted(maps.Keys(w.subnets)) {
		r.checkSubnet(w, w.subnets[name])
	}
	for _, name := range slices.Sorted(maps.Keys(w.pools)) {
		r.checkPool(w, w.pools[name])
	}
	r.checkAddresses(w) // L5, L6: addresses.go
	r.checkStuck(w)
	return r
}

// checkStuck is L7, nothing stuck: a Subnet, an IPAddressClaim or an
// IPAddress being deleted, with background or foreground propagation, is
// gone by the end of the phase's settling, unless it is held for a reason
// the documentation gives (docs/cluster-api.md):
//   - a Subnet, while IPAddresses of it exist (its address-protection
//     finalizer: in use, cooling down, or deleted under a live claim,
//     which keeps its address);
//   - an IPAddress, while the claim that owns it lives (deleted by hand or
//     by the garbage collector for a foreground deletion of its Subnet,
//     the machine still uses it), else until its cool-down has passed;
//   - a claim, while its own IPAddress cools down after a foreground
//     deletion (the garbage collector waits for the dependents).
//
// (A pool being deleted is L1's: it waits for its users.)
func (r *quiescentReport) checkStuck(w *world) {
	cooling := func(a *obj) bool { return time.Since(a.DeletedAt) < addressReuseAfter+timestampSlack }
	for _, name := range slices.Sorted(maps.Keys(w.subnets)) {
		s := w.subnets[name]
		if !s.Deleting {
			continue
		}
		if held := w.addrsOf[s.path()]; len(held) > 0 {
			continue
		}
		r.add("L7", id(s, "deleting"), "Subnet is still being deleted (finalizers %v) though no IPAddress of it is left: %s", s.Finalizers, s)
	}
	for _, name := range slices.Sorted(maps.Keys(w.addrClaims)) {
		c := w.addrClaims[name]
		if !c.Deleting || c.Pool == "" {
			continue
		}
		if a := w.addrs[c.path()]; a != nil && a.Owner != nil && a.Owner.UID == c.UID && a.Deleting && cooling(a) &&
			slices.Contains(c.Finalizers, finalizerForeground) && !slices.Contains(c.Finalizers, finalizerReleaseAddress) {
			continue // the garbage collector waits for its IPAddress's cool-down
		}
		r.add("L7", id(c, "deleting"), "claim is still being deleted (finalizers %v), %s after its deletion: %s",
			c.Finalizers, time.Since(c.DeletedAt).Round(time.Second), c)
	}
	for _, name := range slices.Sorted(maps.Keys(w.addrs)) {
		a := w.addrs[name]
		if !a.Deleting || a.Pool == "" {
			continue
		}
		if c := w.addrClaims[a.path()]; c != nil && a.Owner != nil && c.UID == a.Owner.UID && !c.Deleting {
			continue // deleted under its live claim: kept while the claim lives
		}
		// Not a violation while it cools down, but not settled either:
		// the settling waits for it.
		r.add("L7", id(a, "terminating"), "IPAddress is still terminating (finalizers %v), %s after its deletion (cool-down %s): %s",
			a.Finalizers, time.Since(a.DeletedAt).Round(time.Second), addressReuseAfter, a)
	}
}

// checkSubnet: L1 (settled) and L2 (its reason is the model's).
func (r *quiescentReport) checkSubnet(w *world, s *obj) {
	r.checks++
	ready := s.ready()
	switch {
	case s.Deleting:
		// L7. The deletionTimestamp bumped its generation, and the
		// controller leaves a Subnet being deleted alone.
	case ready == nil:
		r.add("L1", id(s, "no-ready"), "Subnet has no Ready condition: %s", s)
		return
	case s.ObservedGeneration != s.Generation || ready.ObservedGeneration != s.Generation:
		r.add("L1", id(s, "generation"), "Subnet status is not for its generation: %s", s)
	case ready.Reason == ipamv1.ReasonPending:
		r.add("L1", id(s, "pending"), "Subnet is still Pending: %s", s)
	}
	if ready == nil {
		return
	}
	if ready.Status == metav1.ConditionTrue {
		// Durable allocations: what a Ready Subnet holds is in its spec,
		// so a restore without status asks for it again (a Subnet that
		// named neither a range nor a length gets both recorded; until
		// then it names neither, which the recorder's pace allows).
		if named := s.CIDR != "" || s.PrefixLength != nil; named && s.CIDR != s.StatusCIDR {
			r.add("L1", id(s, "recorded"), "Subnet holds %s but spec.cidr is %q: %s", s.StatusCIDR, s.CIDR, s)
		}
		return
	}
	justified, fit := subnetReasons(w, s)
	why, ok := justified[ready.Reason]
	switch {
	case len(justified) == 0:
		r.add("L2", id(s, "fits/"+ready.Reason), "Subnet waits (%s) while it fits (%s): %s", ready.Reason, fit, s)
	case !ok:
		r.add("L2", id(s, "reason/"+ready.Reason), "Subnet reason %s is not justified; the model says %s: %s", ready.Reason, describeReasons(justified), s)
	case ready.Reason == ipamv1.ReasonOverlaps && !namesOneOf(ready.Message, s, why):
		r.add("L2", id(s, "message"), "Subnet reason Overlaps names none of the claims that hold an overlapping range (%s): %s", keys(why), s)
	}
}

// subnetReasons are the reasons a non-Ready Subnet may show, with the
// claims that justify Overlaps; none means it must be Ready. fit says why
// it fits, for the report.
func subnetReasons(w *world, s *obj) (map[string][]*obj, string) {
	// A pool that does not allow the Subnet's namespace grants it nothing,
	// whatever else is true.
	if p := w.pools[s.Ref]; p != nil && !w.allows(p, s.Namespace) {
		return map[string][]*obj{ipamv1.ReasonNotAllowed: nil}, ""
	}
	served, p, why := w.serving(s.Ref)
	if why != "" {
		return map[string][]*obj{why: nil}, ""
	}
	out := map[string][]*obj{}
	holders := w.holders(s.Ref, s.key())
	if s.CIDR != "" {
		x := s.requested()
		if !inside(served, x) || overlapsAny(x, p.reserved()) || !lengthFits(p, served, x.Bits()) {
			out[ipamv1.ReasonOutOfRange] = nil
		}
		if hs := overlappingHolders(holders, x); len(hs) > 0 {
			out[ipamv1.ReasonOverlaps] = hs
		}
		if overCaps(p, holders, s.Namespace, ipspace.AddressCount(x)) {
			out[ipamv1.ReasonNamespaceQuotaExceeded] = nil
		}
		return out, fmt.Sprintf("%s lies inside %s %s, off reserved %v, in bounds, overlaps no held range and fits its namespace's caps", x, p.key(), served, p.Reserved)
	}
	length := s.PrefixLength
	if length == nil {
		length = p.Default
	}
	if length == nil {
		return map[string][]*obj{ipamv1.ReasonInvalidSpec: nil}, ""
	}
	if !lengthFits(p, served, int(*length)) {
		return map[string][]*obj{ipamv1.ReasonOutOfRange: nil}, ""
	}
	free := freeBlocks(served, p.reserved(), heldRanges(holders))
	if !hasBlock(free, int(*length)) {
		out[ipamv1.ReasonPoolExhausted] = nil
	}
	if overCaps(p, holders, s.Namespace, new(big.Int).Lsh(big.NewInt(1), uint(served.Addr().BitLen()-int(*length)))) {
		out[ipamv1.ReasonNamespaceQuotaExceeded] = nil
	}
	return out, fmt.Sprintf("/%d is in bounds, %s has free blocks %v, and it fits its namespace's caps", *length, p.key(), free)
}

// overCaps: a claim of namespace asking for size addresses would take the
// namespace past pool p's per-namespace caps (the pool's own namespace is
// not capped), given the claims that hold ranges in p.
func overCaps(p *obj, holders []*obj, namespace string, size *big.Int) bool {
	if namespace == p.Namespace {
		return false
	}
	maxClaims, maxAddresses := capsOf(p)
	claims, addresses := int64(1), new(big.Int).Set(size)
	for _, h := range holders {
		if h.Namespace == namespace && h.held().IsValid() {
			claims++
			addresses.Add(addresses, ipspace.AddressCount(h.held()))
		}
	}
	return (maxClaims >= 0 && claims > maxClaims) || (maxAddresses != nil && addresses.Cmp(maxAddresses) > 0)
}

func describeReasons(m map[string][]*obj) string {
	return "one of " + strings.Join(slices.Sorted(maps.Keys(m)), ", ")
}

// namesOneOf reports whether the message of claim s names one of the
// claims: as "<namespace>/<name>" if it is in s's namespace or in the
// pool's, else by its range only ("a claim in another namespace (<range>)":
// a tenant does not learn other tenants' names).
func namesOneOf(message string, s *obj, claims []*obj) bool {
	for _, c := range claims {
		visible := c.Namespace == s.Namespace || c.Namespace == s.refNamespace()
		if visible && strings.Contains(message, c.Namespace+"/"+c.Name) {
			return true
		}
		if !visible && strings.Contains(message, fmt.Sprintf("a claim in another namespace (%s)", c.held())) {
			return true
		}
	}
	return false
}

var claimsOutsideCount = regexp.MustCompile(`(\d+) claims? lies? outside`)

// checkPool: L1 (deletion waits only for users), L3 (status is the model's
// recomputation) and L4 (Ready reason is the model's).
func (r *quiescentReport) checkPool(w *world, p *obj) {
	r.checks++
	users := len(w.claims[p.path()])
	if p.Deleting && users == 0 {
		r.add("L1", id(p, "deleting"), "pool is still being deleted though nothing uses it: %s", p)
	}
	r.checkFigures(w, p)

	ready := p.ready()
	if ready == nil {
		r.add("L4", id(p, "no-ready"), "pool has no Ready condition: %s", p)
		return
	}
	if p.Delegation != "" && !p.Deleting && !p.rootHeld().IsValid() {
		return // waits for the hub: D4 (delegation_checks.go) judges why
	}
	justified, outsideCounts, fits := poolReasons(w, p)
	for _, c := range w.outsideClaims(p, p.servedRange()) {
		r.grandfathered[c.UID] = fmt.Sprintf("%s in %s (%s)", c.key(), p.key(), p.servedRange())
	}
	if fits != "" {
		r.add("L4", id(p, "fits"), "pool has not been granted spec.cidr though it fits (%s): %s", fits, p)
	}
	switch {
	case len(justified) == 0:
		if ready.Status != metav1.ConditionTrue || ready.Reason != ipamv1.ReasonAvailable {
			r.add("L4", id(p, "reason/"+ready.Reason), "pool is not Ready/Available (%s) but the model finds nothing wrong: %s", ready.Reason, p)
		}
	case ready.Status == metav1.ConditionTrue:
		r.add("L4", id(p, "unreported/"+strings.Join(slices.Sorted(maps.Keys(justified)), ",")), "pool is Ready but the model says %s: %s", describeJustified(justified), p)
	default:
		why, ok := justified[ready.Reason]
		if !ok {
			r.add("L4", id(p, "reason/"+ready.Reason), "pool reason %s is not justified; the model says %s: %s", ready.Reason, describeJustified(justified), p)
			return
		}
		if ready.Reason == ipamv1.ReasonClaimsOutside {
			m := claimsOutsideCount.FindStringSubmatch(ready.Message)
			n := -1
			if m != nil {
				n, _ = strconv.Atoi(m[1])
			}
			if !slices.Contains(outsideCounts, n) {
				r.add("L4", id(p, "count"), "pool reports ClaimsOutside with a message without the model's count %v (\"N claims lie outside\"; %s): %s", outsideCounts, why, p)
			}
		}
	}
}

// justifyClaimsOutsideChange: a pool that holds a range and asks for
// another x keeps the old one while its own claims hold ranges outside x
// (ClaimsOutside, with their count, which it returns).
func justifyClaimsOutsideChange(w *world, p *obj, x, held netip.Prefix, justified map[string]string) int {
	if !held.IsValid() {
		return 0
	}
	var out []*obj
	for _, c := range w.holders(p.path(), "") {
		if !inside(x, c.held()) {
			out = append(out, c)
		}
	}
	if len(out) > 0 {
		justified[ipamv1.ReasonClaimsOutside] = fmt.Sprintf("%d held claims lie outside the new %s: %s", len(out), x, keys(out))
	}
	return len(out)
}

func describeJustified(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+" ("+m[k]+")")
	}
	return "one of " + strings.Join(parts, "; ")
}

// poolReasons are the False reasons a pool may show, each with why; none
// means it must be Ready/Available. outsideCounts are the claim counts a
// ClaimsOutside message may give. fits is set (to why) for a child pool
// whose requested change fits but is not granted.
func poolReasons(w *world, p *obj) (justified map[string]string, outsideCounts []int, fits string) {
	if p.Deleting {
		return map[string]string{ipamv1.ReasonTerminating: "being deleted"}, nil, ""
	}
	justified = map[string]string{}
	served := p.servedRange()
	// (b) Claims it holds outside its served range or on its reserved
	// ranges, possible only when a pool edit raced a grant: they keep
	// their ranges and the pool says so.
	if out := w.outsideClaims(p, served); len(out) > 0 {
		justified[ipamv1.ReasonClaimsOutside] = fmt.Sprintf("%d held claims lie outside %s or on reserved %v: %s", len(out), served, p.Reserved, keys(out))
		outsideCounts = append(outsideCounts, len(out))
	}
	if p.Ref == "" {
		// A root pool is a claim on its address space: it waits only for
		// another root pool that holds an overlapping range, or for its
		// own claims to fit a smaller range (the space takes every
		// namespace here).
		x, held := p.requested(), p.rootHeld()
		if x == held {
			return justified, outsideCounts, ""
		}
		changeOK := true
		if rs := w.rootsOverlapping(p, x); len(rs) > 0 {
			justified[ipamv1.ReasonOverlaps] = fmt.Sprintf("%s overlaps root pools %s", x, keys(rs))
			changeOK = false
		}
		if n := justifyClaimsOutsideChange(w, p, x, held, justified); n > 0 {
			outsideCounts = append(outsideCounts, n)
			changeOK = false
		}
		if changeOK {
			fits = fmt.Sprintf("%s overlaps no root pool's held range and holds the pool's claims", x)
		}
		return justified, outsideCounts, fits
	}
	if w.cycle(p.path()) {
		justified[ipamv1.ReasonCycle] = "parentRef chain loops"
	}
	x, held := p.requested(), p.held()
	// A parent that does not allow the pool's namespace grants it nothing
	// new; a range it holds it keeps.
	allowed := true
	if parent := w.pools[p.Ref]; parent != nil && !w.allows(parent, p.Namespace) {
		allowed = false
		if !held.IsValid() {
			justified[ipamv1.ReasonNotAllowed] = "parent " + p.Ref + " does not allow namespace " + p.Namespace
			return justified, outsideCounts, ""
		}
	}
	parentServed, parent, why := w.serving(p.Ref)
	if why != "" {
		justified[why] = "parent " + p.Ref
		return justified, outsideCounts, ""
	}
	if x == held {
		return justified, outsideCounts, ""
	}
	if !allowed {
		justified[ipamv1.ReasonNotAllowed] = "parent " + p.Ref + " no longer allows namespace " + p.Namespace
	}
	// The child asks for a range it does not hold (new, grown or shrunk).
	changeOK := true
	if !inside(parentServed, x) || overlapsAny(x, parent.reserved()) {
		justified[ipamv1.ReasonOutOfRange] = fmt.Sprintf("%s not inside %s %s or on its reserved %v", x, parent.key(), parentServed, parent.Reserved)
		changeOK = false
	}
	siblings := w.holders(p.Ref, p.key())
	if hs := overlappingHolders(siblings, x); len(hs) > 0 {
		justified[ipamv1.ReasonOverlaps] = fmt.Sprintf("%s overlaps %s", x, keys(hs))
		changeOK = false
	}
	if overCaps(parent, siblings, p.Namespace, ipspace.AddressCount(x)) {
		justified[ipamv1.ReasonNamespaceQuotaExceeded] = fmt.Sprintf("%s would take namespace %s past %s's per-namespace caps", x, p.Namespace, parent.key())
		changeOK = false
	}
	if n := justifyClaimsOutsideChange(w, p, x, held, justified); n > 0 {
		outsideCounts = append(outsideCounts, n) // (a) it keeps serving status.cidr
		changeOK = false
	}
	if changeOK && allowed {
		fits = fmt.Sprintf("%s lies inside %s %s, off its reserved, overlaps no other held range, and holds the child's claims", x, parent.key(), parentServed)
	}
	return justified, outsideCounts, fits
}

// checkFigures: L3, a pool's status against the model's recomputation.
func (r *quiescentReport) checkFigures(w *world, p *obj) {
	st := p.Figures
	subnets, children := 0, 0
	for _, c := range w.claims[p.path()] {
		if c.Kind == kindSubnet {
			subnets++
		} else {
			children++
		}
	}
	var diffs, fields []string
	diff := func(field string, got, want any) {
		if fmt.Sprint(got) != fmt.Sprint(want) {
			diffs = append(diffs, fmt.Sprintf("%s=%v, want %v", field, got, want))
			fields = append(fields, field)
		}
	}
	diff("observedGeneration", p.ObservedGeneration, p.Generation)
	diff("subnets", st.Subnets, subnets)
	diff("childPools", st.ChildPools, children)
	served := parsePrefix(p.StatusCIDR)
	notAllowed := w.notAllowed(p)
	diff("ClaimsNotAllowed", conditionStatus(p, ipamv1.ConditionClaimsNotAllowed), boolStatus(len(notAllowed) > 0))
	if c := findCondition(p, ipamv1.ConditionClaimsNotAllowed); len(notAllowed) > 0 && c != nil && c.Status == metav1.ConditionTrue &&
		!strings.HasPrefix(c.Message, fmt.Sprintf("%d claims hold ranges", len(notAllowed))) && !strings.HasPrefix(c.Message, fmt.Sprintf("%d claim holds ranges", len(notAllowed))) {
		diffs = append(diffs, fmt.Sprintf("ClaimsNotAllowed message %q, want it to start with \"%d claims hold ranges\" (%s)", c.Message, len(notAllowed), keys(notAllowed)))
		fields = append(fields, "ClaimsNotAllowed.message")
	}
	if served.IsValid() {
		holders := w.holders(p.path(), "")
		f := computeFigures(served, p.reserved(), heldRanges(holders), p.Default, p.Max)
		diff("capacity", st.Capacity, f.Capacity)
		diff("reserved", st.Reserved, f.Reserved)
		diff("allocated", st.Allocated, f.Allocated)
		diff("free", st.Free, f.Free)
		diff("utilization", st.Utilization, f.Utilization)
		diff("largestFreeBlock", st.LargestFreeBlock, f.LargestFreeBlock)
		diff("allocatableBlocks", st.AllocatableBlocks, f.AllocatableBlocks)
		exhausted := conditionStatus(p, ipamv1.ConditionExhausted)
		diff(fmt.Sprintf("Exhausted(/%d)", f.ExhaustionLength), exhausted, boolStatus(f.Exhausted))

		losers := overlapLosers(w, p)
		overlapping := conditionStatus(p, ipamv1.ConditionOverlapping)
		diff("Overlapping", overlapping, boolStatus(len(losers) > 0))
		if c := findCondition(p, ipamv1.ConditionOverlapping); len(losers) > 0 && c != nil && c.Status == metav1.ConditionTrue &&
			!strings.HasPrefix(c.Message, fmt.Sprintf("%d claims lose to overlapping claims", len(losers))) && !strings.HasPrefix(c.Message, fmt.Sprintf("%d claim loses to overlapping claims", len(losers))) {
			diffs = append(diffs, fmt.Sprintf("Overlapping message %q, want it to start with \"%d claims lose to overlapping claims\" (%s)", c.Message, len(losers), keys(losers)))
			fields = append(fields, "Overlapping.message")
		}
		if len(diffs) > 0 {
			diffs = append(diffs, fmt.Sprintf("(held: %s)", keys(holders)))
		}
	}
	if len(diffs) > 0 {
		r.add("L3", id(p, strings.Join(fields, ",")), "pool status differs from the model: %s: %s", strings.Join(diffs, "; "), p)
	}
}

// overlapLosers are the claims of a pool that lose to overlapping claims:
// explicit Subnets that are not Ready and whose spec.cidr overlaps a held
// range; and child pools asking for a spec.cidr other than the one they
// hold that overlaps another claim's held range. (A request that is also
// out of range counts: it overlaps a claim that holds its range.)
func overlapLosers(w *world, p *obj) []*obj {
	var out []*obj
	for _, c := range w.claims[p.path()] {
		x := c.requested()
		switch {
		case !x.IsValid():
		case c.Kind == kindSubnet && c.isReady():
		case c.Kind == kindPool && x == c.held():
		default:
			if len(overlappingHolders(w.holders(p.path(), c.key()), x)) > 0 {
				out = append(out, c)
			}
		}
	}
	return out
}

func findCondition(o *obj, typ string) *metav1.Condition {
	for i := range o.Conditions {
		if o.Conditions[i].Type == typ {
			return &o.Conditions[i]
		}
	}
	return nil
}

func conditionStatus(o *obj, typ string) metav1.ConditionStatus {
	if c := findCondition(o, typ); c != nil {
		return c.Status
	}
	return "<none>"
}

func boolStatus(b bool) metav1.ConditionStatus {
	if b {
		return metav1.ConditionTrue
	}
	return metav1.ConditionFalse
}

// ---- safety, at every revision: S1-S3 on the merged history ----

// event is one watch event (or, after a watch expired, a change found by
// re-listing). Obj.RV is the store revision it happened at.
type event struct {
	Type     string // ADDED, MODIFIED, DELETED
	Obj      obj
	Received time.Time
	// Relisted: synthesised from a listing after the watch expired; the
	// revisions since the last event of its kind were not seen one by one.
	Relisted bool
}

// gap is a span of revisions (From, To) of one kind that the recorder did
// not see event by event (a watch expired at From and was re-listed at To).
type gap struct {
	Kind     string
	From, To uint64
}

// timeline is every version of one object (one UID), in RV order, with
// when the recorder received each.
type timeline struct {
	versions []*obj
	received []time.Time
	deleted  uint64 // RV of its deletion; 0 while it exists
	// readyAt and readyCIDR: when a Subnet first became Ready, with what.
	readyAt   uint64
	readyCIDR netip.Prefix
	// specs are the spec.cidr values a pool has had, statusSet whether
	// its status.cidr was ever set.
	specs     []string
	statusSet bool
	// boundTo: the IPAddress an IPAddressClaim was first Ready with (at
	// readyAt).
	boundTo string
}

// at returns the version in effect at revision rv, or nil if the object
// did not exist then.
func (t *timeline) at(rv uint64) *obj {
	if len(t.versions) == 0 || t.versions[0].RV > rv || (t.deleted != 0 && t.deleted <= rv) {
		return nil
	}
	i, _ := slices.BinarySearchFunc(t.versions, rv, func(v *obj, rv uint64) int { return cmp.Compare(v.RV, rv+1) })
	return t.versions[i-1]
}

// deleteMark is a deletion seen in a namespace, for S4's "in flight" rule.
type deleteMark struct {
	kind     string
	rv       uint64
	received time.Time
}

// replayer replays the merged history in RV order and checks S1-S3 after
// every event.
type replayer struct {
	current   map[string]*obj // by key
	timelines map[types.UID]*timeline
	// claims holds the current claims of each "namespace/pool", by key.
	claims map[string]map[string]*obj
	// claimUIDs lists every claim (UID) that ever referenced a
	// "namespace/pool"; poolVersions every version of each "namespace/name"
	// pool, across re-creations.
	claimUIDs    map[string][]types.UID
	poolVersions map[string][]*obj
	deletes      map[string][]deleteMark

	gaps     []gap
	inGap    bool
	lastRV   uint64
	reported map[string]bool
	findings []finding
	// addr is the state of the Cluster API objects (addresses.go).
	addr addressReplay
	// hubGrants are the ranges a claim in the hub was Ready with, by the
	// member pool UID it was made for (D6, delegation_checks.go).
	hubGrants map[types.UID]map[string]bool

	events, s1Checks, s1Skipped, s2Checks, s3Checks, s5Checks, s6Checks, q1Checks, d6Checks int
	s5Across                                                                                int // grants to claims from another namespace than their pool's
}

func newReplayer() *replayer {
	return &replayer{
		current: map[string]*obj{}, timelines: map[types.UID]*timeline{}, claims: map[string]map[string]*obj{},
		claimUIDs: map[string][]types.UID{}, poolVersions: map[string][]*obj{}, deletes: map[string][]deleteMark{},
		reported: map[string]bool{}, addr: newAddressReplay(), hubGrants: map[types.UID]map[string]bool{},
	}
}

func (r *replayer) add(check, key, format string, args ...any) {
	key = check + "/" + key
	if r.reported[key] {
		return
	}
	r.reported[key] = true
	r.findings = append(r.findings, finding{Check: check, Key: key, Detail: fmt.Sprintf(format, args...)})
}

// noteGap records revisions the recorder did not see one by one: S1 is not
// checked inside them (a state there is a guess), and the whole state is
// checked once the gap closes.
func (r *replayer) noteGap(g gap) { r.gaps = append(r.gaps, g) }

func (r *replayer) gapCovers(rv uint64) bool {
	for _, g := range r.gaps {
		if rv > g.From && rv < g.To {
			return true
		}
	}
	return false
}

// apply replays one event.
func (r *replayer) apply(ev event) {
	v := ev.Obj
	r.events++
	if v.RV < r.lastRV {
		r.add("H", fmt.Sprintf("order/%d", v.RV), "event out of order: rv %d after %d: %s", v.RV, r.lastRV, &v)
	}
	r.lastRV = max(r.lastRV, v.RV)
	inGap := r.gapCovers(v.RV)
	if r.inGap && !inGap {
		r.checkAllOverlaps() // the gap closed: check what it hid
	}
	r.inGap = inGap
	if isHubClaim(&v) {
		r.noteHubGrant(&v) // a member's claim in the hub: D6's, nothing else's
		return
	}

	k := v.key()
	old := r.current[k]
	if old != nil && old.UID != v.UID {
		// Replaced without a deletion seen (only across a gap).
		r.remove(old, v.RV)
		old = nil
	}
	tl := r.timelines[v.UID]
	if tl == nil {
		tl = &timeline{}
		r.timelines[v.UID] = tl
		if v.isClaim() {
			r.claimUIDs[v.Ref] = append(r.claimUIDs[v.Ref], v.UID)
		}
	}
	tl.versions = append(tl.versions, &v)
	tl.received = append(tl.received, ev.Received)
	if v.Kind == kindClaim || v.Kind == kindAddress {
		r.applyCAPI(ev, &v, old, tl, !inGap && !ev.Relisted)
		return
	}
	if v.Kind == kindPool {
		pk := v.Namespace + "/" + v.Name
		r.poolVersions[pk] = append(r.poolVersions[pk], &v)
	}
	if !inGap && !ev.Relisted {
		r.checkServedAfterGrant(tl, &v)
	}
	r.checkNeverRevoked(tl, &v)

	if ev.Type == "DELETED" {
		if v.Kind == kindSubnet && !inGap && !ev.Relisted {
			r.checkSubnetGone(&v)
		}
		r.remove(&v, v.RV)
		r.deletes[v.Namespace] = append(r.deletes[v.Namespace], deleteMark{kind: v.Kind, rv: v.RV, received: ev.Received})
		return
	}
	r.current[k] = &v
	if h := v.rootHeld(); h.IsValid() && (old == nil || old.rootHeld() != h) && !inGap {
		r.checkRootOverlaps(&v)
	}
	if v.isClaim() {
		ref := v.Ref
		if old != nil && old.Ref != v.Ref {
			delete(r.claims[old.Ref], k)
		}
		if r.claims[ref] == nil {
			r.claims[ref] = map[string]*obj{}
		}
		r.claims[ref][k] = &v
		if h := v.held(); h.IsValid() && (old == nil || old.held() != h) {
			if inGap {
				r.s1Skipped++
			} else {
				r.checkOverlaps(&v)
			}
		}
	}
}

func (r *replayer) remove(v *obj, rv uint64) {
	delete(r.current, v.key())
	if v.isClaim() {
		delete(r.claims[v.Ref], v.key())
	}
	if v.Kind == kindAddress {
		r.addressGone(v)
	}
	if tl := r.timelines[v.UID]; tl != nil && tl.deleted == 0 {
		tl.deleted = rv
	}
}

// checkOverlaps is S1 for a claim whose held range just appeared: it must
// not overlap the held range of another direct claim of the same pool.
func (r *replayer) checkOverlaps(v *obj) {
	r.s1Checks++
	h := v.held()
	for _, other := range r.claims[v.Ref] {
		if other.key() == v.key() || !other.held().Overlaps(h) {
			continue
		}
		a, b := v, other
		if b.UID < a.UID {
			a, b = b, a
		}
		r.add("S1", fmt.Sprintf("%s/%s/%s/%s", a.UID, a.held(), b.UID, b.held()),
			"at rv %d two claims of pool %s hold overlapping ranges: %s holds %s and %s holds %s\n\t%s\n\t%s",
			v.RV, v.Ref, a.key(), a.held(), b.key(), b.held(), a, b)
	}
}

// checkRootOverlaps is S6 for a root pool whose held range just appeared
// or changed: no other root pool of its address space (the default one:
// the test names no other) holds an overlapping range.
func (r *replayer) checkRootOverlaps(v *obj) {
	r.s6Checks++
	h := v.rootHeld()
	for _, k := range slices.Sorted(maps.Keys(r.current)) {
		other := r.current[k]
		if other.key() == v.key() || !other.rootHeld().Overlaps(h) {
			continue
		}
		a, b := v, other
		if b.UID < a.UID {
			a, b = b, a
		}
		r.add("S6", fmt.Sprintf("%s/%s/%s/%s", a.UID, a.rootHeld(), b.UID, b.rootHeld()),
			"at rv %d two root pools of the default address space hold overlapping ranges: %s holds %s and %s holds %s\n\t%s\n\t%s",
			v.RV, a.key(), a.rootHeld(), b.key(), b.rootHeld(), a, b)
	}
}

// checkAllOverlaps is S1 over the whole current state.
func (r *replayer) checkAllOverlaps() {
	for _, ref := range slices.Sorted(maps.Keys(r.claims)) {
		cs := r.claims[ref]
		for _, k := range slices.Sorted(maps.Keys(cs)) {
			if cs[k].held().IsValid() {
				r.checkOverlaps(cs[k])
			}
		}
	}
}

// checkNeverRevoked is S2 (a Subnet once Ready with X stays Ready with X
// until deleted; a pool's granted status.cidr is never withdrawn, and only
// ever becomes a spec.cidr the pool asked for) and, at a Subnet's first
// Ready version, S3.
func (r *replayer) checkNeverRevoked(tl *timeline, v *obj) {
	r.s2Checks++
	if v.Kind == kindPool {
		if !slices.Contains(tl.specs, v.CIDR) {
			tl.specs = append(tl.specs, v.CIDR)
		}
		granted := v.StatusCIDR
		if v.Delegation != "" && !tl.statusSet && !v.delegatedServes().IsValid() {
			// A delegated pool's range shown before it ever served it is
			// kept, not granted (an unproven status: D1, D6).
			granted = ""
		}
		switch {
		case v.StatusCIDR == "" && tl.statusSet:
			r.add("S2", string(v.UID)+"/cleared", "pool's granted range was withdrawn (status.cidr cleared) at rv %d: %s", v.RV, v)
		case v.StatusCIDR != "" && !slices.Contains(tl.specs, v.StatusCIDR):
			r.add("S2", string(v.UID)+"/"+v.StatusCIDR, "pool serves %s at rv %d, a range it never asked for (spec.cidr so far: %v): %s", v.StatusCIDR, v.RV, tl.specs, v)
		}
		if granted != "" && !tl.statusSet && v.Ref != "" {
			r.checkConsent(v)
			r.checkQuota(v, tl)
		}
		tl.statusSet = tl.statusSet || granted != ""
		return
	}
	if tl.readyAt != 0 {
		if !v.isReady() || v.held() != tl.readyCIDR {
			r.add("S2", string(v.UID), "Subnet Ready with %s since rv %d lost or changed it at rv %d: %s", tl.readyCIDR, tl.readyAt, v.RV, v)
		}
		return
	}
	if !v.isReady() {
		return
	}
	tl.readyAt, tl.readyCIDR = v.RV, v.held()
	r.checkGrant(v)
	r.checkConsent(v)
	r.checkQuota(v, tl)
}

// checkQuota is Q1, at a claim's first grant: a claim from another
// namespace than its pool's does not take its namespace past the pool's
// spec.allowedNamespaces.perNamespace. The arbiter may have decided on any
// version of the pool from the claim's creation to the grant, so the
// most permissive caps among those apply; the namespace's holdings are the
// pool's claims that hold a range at the grant.
func (r *replayer) checkQuota(v *obj, tl *timeline) {
	if v.refNamespace() == v.Namespace || len(tl.versions) == 0 {
		return
	}
	// The versions the arbiter may have decided on: the last one before
	// the claim was created, and every one from then to the grant.
	created := tl.versions[0].RV
	var window []*obj
	for _, p := range r.poolVersions[v.Ref] {
		if p.RV > v.RV {
			break
		}
		if p.RV < created {
			window = window[:0]
		}
		window = append(window, p)
	}
	if len(window) == 0 {
		return
	}
	// The most permissive: a cap counts only if every version had it,
	// at its highest.
	claimsCapped, addressesCapped := true, true
	maxClaims, maxAddresses := int64(0), new(big.Int)
	for _, p := range window {
		n, a := capsOf(p)
		if n < 0 {
			claimsCapped = false
		} else {
			maxClaims = max(maxClaims, n)
		}
		if a == nil {
			addressesCapped = false
		} else if a.Cmp(maxAddresses) > 0 {
			maxAddresses = a
		}
	}
	if !claimsCapped && !addressesCapped {
		return
	}
	r.q1Checks++
	claims := int64(1)
	addresses := ipspace.AddressCount(v.held())
	for k, o := range r.claims[v.Ref] {
		if k == v.key() || o.Namespace != v.Namespace || !o.held().IsValid() {
			continue
		}
		claims++
		addresses.Add(addresses, ipspace.AddressCount(o.held()))
	}
	if claimsCapped && claims > maxClaims {
		r.add("Q1", string(v.UID)+"/claims", "a claim from namespace %s was granted %s at rv %d by pool %s, whose caps allow each namespace %d claims: the namespace now holds %d: %s",
			v.Namespace, v.held(), v.RV, v.Ref, maxClaims, claims, v)
	}
	if addressesCapped && addresses.Cmp(maxAddresses) > 0 {
		r.add("Q1", string(v.UID)+"/addresses", "a claim from namespace %s was granted %s at rv %d by pool %s, whose caps allow each namespace %s addresses: the namespace now holds %s: %s",
			v.Namespace, v.held(), v.RV, v.Ref, maxAddresses, addresses, v)
	}
}

// capsOf reads a pool version's per-namespace caps: -1 and nil where a
// cap is not set.
func capsOf(p *obj) (maxClaims int64, maxAddresses *big.Int) {
	maxClaims = -1
	if p.Allowed == nil || p.Allowed.PerNamespace == nil {
		return maxClaims, nil
	}
	if n := p.Allowed.PerNamespace.MaxClaims; n != nil {
		maxClaims = int64(*n)
	}
	if a, ok := new(big.Int).SetString(p.Allowed.PerNamespace.MaxAddresses, 10); ok {
		maxAddresses = a
	}
	return maxClaims, maxAddresses
}

// checkConsent is S5, at a claim's first grant: a claim from another
// namespace than its pool's is granted only if some version of the pool up
// to the grant allowed other namespaces. (Whether the namespace's labels
// matched at that moment is not in the history: label changes race
// decisions by design, and a grant keeps its range when consent is lost;
// the settled state checks consent against the final labels, L2-L4.)
func (r *replayer) checkConsent(v *obj) {
	r.s5Checks++
	if v.refNamespace() == v.Namespace {
		return
	}
	r.s5Across++
	for _, p := range r.poolVersions[v.Ref] {
		if p.RV > v.RV {
			break
		}
		if p.Allowed != nil && (p.Allowed.From == ipamv1.FromAll || p.Allowed.From == ipamv1.FromSelector) {
			return
		}
	}
	r.add("S5", string(v.UID)+"/consent", "a claim from namespace %s was granted %s at rv %d by pool %s, which never allowed other namespaces: %s",
		v.Namespace, v.held(), v.RV, v.Ref, v)
}

// checkGrant is S3: what a Subnet holds when it first becomes Ready. An
// explicit claim holds exactly spec.cidr; a dynamic one a block of its
// spec.prefixLength, or of a defaultPrefixLength its pool had. Either must
// lie inside a range its pool served at some revision up to the grant (the
// arbiter may have decided on a slightly older view of the pool, so not
// necessarily the range served at the grant).
func (r *replayer) checkGrant(v *obj) {
	r.s3Checks++
	h := v.held()
	switch {
	case !h.IsValid():
		r.add("S3", string(v.UID), "Subnet is Ready without a valid status.cidr at rv %d: %s", v.RV, v)
		return
	case v.CIDR != "" && h != v.requested():
		r.add("S3", string(v.UID), "explicit Subnet holds %s, not its spec.cidr, at rv %d: %s", h, v.RV, v)
	case v.PrefixLength != nil && h.Bits() != int(*v.PrefixLength):
		r.add("S3", string(v.UID), "dynamic Subnet holds %s, not a /%d, at rv %d: %s", h, *v.PrefixLength, v.RV, v)
	}
	var defaults []int
	var servedRanges []string
	last, within := "", false
	for _, p := range r.poolVersions[v.Ref] {
		if p.RV > v.RV {
			break
		}
		if p.Default != nil {
			defaults = append(defaults, int(*p.Default))
		}
		within = within || inside(p.servedRange(), h)
		served := "none"
		if p.servedRange().IsValid() {
			served = p.servedRange().String()
		}
		if served != last { // the changes only
			servedRanges = append(servedRanges, fmt.Sprintf("rv %d: %s", p.RV, served))
			last = served
		}
	}
	if !within {
		r.add("S3", string(v.UID)+"/outside", "Subnet holds %s at rv %d, inside no range its pool %s served at or before that revision (%s): %s",
			h, v.RV, v.Ref, strings.Join(servedRanges, ", "), v)
	}
	if v.CIDR == "" && v.PrefixLength == nil && !slices.Contains(defaults, h.Bits()) {
		r.add("S3", string(v.UID)+"/default", "Subnet without prefixLength holds %s at rv %d, not of a defaultPrefixLength its pool had (%v): %s", h, v.RV, defaults, v)
	}
}

// stateAt returns the objects of a kind that existed at revision rv, by
// key, from the timelines: what a listing at rv must show.
func (r *replayer) stateAt(kind string, rv uint64) map[string]*obj {
	out := map[string]*obj{}
	for _, tl := range r.timelines {
		if v := tl.at(rv); v != nil && v.Kind == kind {
			out[v.key()] = v
		}
	}
	return out
}

// ---- invariant 2: S4, admission of explicit creates ----

// outcome of an operation.
type outcome string

const (
	outcomeCreated  outcome = "created"
	outcomeUpdated  outcome = "updated"
	outcomeDeleted  outcome = "deleted"
	outcomeRejected outcome = "rejected"
	outcomeNotFound outcome = "not-found"
	outcomeFailed   outcome = "failed"
	outcomeDone     outcome = "done" // faults: a restart or hand-over completed
)

// opRecord is one request in the operation log (a burst or a
// delete-and-recreate is several, sharing Group).
type opRecord struct {
	ID    int
	Group int
	Op    string // the generator's operation kind
	Verb  string // create, patch, delete, or a fault
	Kind  string
	// Namespace and Name of the object; empty for faults.
	Namespace, Name string
	Start, End      time.Time

	Outcome outcome
	// Reason is the API status reason of a rejection or failure (Invalid,
	// Forbidden, AlreadyExists, ...); Message its message.
	Reason, Message string
	RV              uint64
	UID             types.UID
	// Ambiguous: an earlier attempt failed in a way that may have landed
	// (a timeout); the outcome may be that attempt's.
	Ambiguous bool
	Attempts  int

	// What was asked: Ref (poolRef/parentRef, "namespace/name"), CIDR,
	// PrefixLength.
	Ref string
	// Shared: the claim is on a pool that claims from several namespaces
	// can reach, whose admission takes its freshness reads cluster-wide.
	Shared       bool
	CIDR         string
	PrefixLength *int32
	// Foreground: a delete with propagationPolicy Foreground. Address
	// and AddressKind: the address an IPAddress the test wrote holds, and
	// what kind of address it is for its Subnet (free, held, outside,
	// network, broadcast, gateway).
	Foreground           bool   `json:",omitempty"`
	Address, AddressKind string `json:",omitempty"`
}

func (o *opRecord) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "op#%d(%s) %s %s %s/%s", o.ID, o.Op, o.Verb, o.Kind, o.Namespace, o.Name)
	if o.Ref != "" {
		fmt.Fprintf(&b, " ref=%s", o.Ref)
	}
	if o.CIDR != "" {
		fmt.Fprintf(&b, " cidr=%s", o.CIDR)
	}
	if o.PrefixLength != nil {
		fmt.Fprintf(&b, " prefixLength=%d", *o.PrefixLength)
	}
	fmt.Fprintf(&b, " [%s +%s] -> %s", o.Start.Format("15:04:05.000"), o.End.Sub(o.Start).Round(time.Millisecond), o.Outcome)
	if o.Reason != "" {
		fmt.Fprintf(&b, " %s", o.Reason)
	}
	if o.RV != 0 {
		fmt.Fprintf(&b, " rv=%d uid=%s", o.RV, shortUID(o.UID))
	}
	if o.Ambiguous {
		b.WriteString(" (ambiguous)")
	}
	if o.Message != "" && o.Outcome != outcomeCreated {
		msg := o.Message
		if len(msg) > 300 {
			msg = msg[:300] + "..."
		}
		fmt.Fprintf(&b, " %q", msg)
	}
	return b.String()
}

func (o *opRecord) explicitSubnetCreate() bool {
	return o.Verb == "create" && o.Kind == kindSubnet && o.CIDR != ""
}

// admission settings. An admission slower than the webhook's freshness
// timeout may have decided on a stale view, by design. The webhook's
// freshness check may also be fooled by its informer's object count when a
// create and a delete of one kind in the namespace are both still
// undelivered to it (the design accepts this); lagBound is how far behind
// the recorder's own watch a replica's informer is assumed to be at most.
const (
	freshnessTimeout = 2 * time.Second
	lagBound         = 250 * time.Millisecond
)

// admissionChecker checks S4 over the operation log as it grows.
type admissionChecker struct {
	checked, pairsSkipped int
	skipped               map[string]int
	explicit              map[string][]*opRecord // successful explicit creates by "namespace/pool"
}

func newAdmissionChecker() *admissionChecker {
	return &admissionChecker{skipped: map[string]int{}, explicit: map[string][]*opRecord{}}
}

// check applies S4 to the explicit Subnet creates among ops[from:]; ops
// holds the whole log so far (every op of ops[from:] has returned, and the
// history r has been replayed past all of them).
//
// S4a: C2 started after C1 (same namespace and pool, overlapping spec.cidr)
// returned success, and C1 still existed when C2 was created: C2 must
// have been rejected. S4b: at the revision R of the last operation that
// returned before C2 started, some claim of the pool held or requested an
// overlapping range and kept doing so until C2 was created: C2 must have
// been rejected.
//
// Sound only where the design promises it. C2 is skipped (and counted)
// when another operation on its namespace ran at the same time, when it
// took longer than the freshness timeout, and when its own outcome is
// ambiguous. A pair is skipped when the webhook's informer may have missed
// both the claim (it appeared within lagBound of C2's start) and a
// deletion of the same kind in the namespace.
func (a *admissionChecker) check(ops []*opRecord, from int, r *replayer) []finding {
	var out []finding
	byEnd := slices.Clone(ops)
	slices.SortFunc(byEnd, func(x, y *opRecord) int { return x.End.Compare(y.End) })
	maxRV := make([]uint64, len(byEnd)) // maxRV[i]: highest RV among byEnd[:i+1]
	var longest time.Duration
	for i, o := range byEnd {
		maxRV[i] = o.RV
		if i > 0 {
			maxRV[i] = max(maxRV[i], maxRV[i-1])
		}
		longest = max(longest, o.End.Sub(o.Start))
	}
	for _, c2 := range ops[from:] {
		if !c2.explicitSubnetCreate() || c2.Outcome != outcomeCreated {
			continue
		}
		if why := a.skip(c2, ops, longest); why != "" {
			a.skipped[why]++
		} else {
			a.checked++
			out = append(out, a.checkOne(c2, byEnd, maxRV, r)...)
		}
		if c2.RV != 0 {
			a.explicit[c2.Ref] = append(a.explicit[c2.Ref], c2)
		}
	}
	return out
}

// skip says why C2 cannot be judged soundly, or "".
func (a *admissionChecker) skip(c2 *opRecord, ops []*opRecord, longest time.Duration) string {
	if c2.Ambiguous || c2.RV == 0 {
		return "ambiguous outcome"
	}
	if c2.End.Sub(c2.Start) >= freshnessTimeout {
		return "slower than the freshness timeout"
	}
	// ops is in ID order, roughly start order: look at the neighbourhood.
	i := slices.Index(ops, c2)
	for j := i - 1; j >= 0 && ops[j].Start.After(c2.Start.Add(-longest-time.Second)); j-- {
		if concurrent(ops[j], c2) {
			return "concurrent with another operation on what its freshness reads count"
		}
	}
	for j := i + 1; j < len(ops) && ops[j].Start.Before(c2.End); j++ {
		if concurrent(ops[j], c2) {
			return "concurrent with another operation on what its freshness reads count"
		}
	}
	return ""
}

// concurrent: o ran at the same time as c2 on what c2's freshness reads
// count: c2's namespace, or every namespace for a claim on a shared pool.
// (Faults and namespace label changes have no namespace, and
// IPAddressClaims are no Subnets or pools: they create and delete none.)
func concurrent(o, c2 *opRecord) bool {
	return o != c2 && o.Namespace != "" && o.Kind != kindClaim && (o.Namespace == c2.Namespace || c2.Shared) &&
		o.Start.Before(c2.End) && c2.Start.Before(o.End)
}

// mayBeUnseen reports whether the webhook's informer may not have had the
// version v of a claim (received by the recorder at seen) when C2 was
// admitted, while a deletion of the same kind was also undelivered to it:
// the case its object count cannot tell apart.
func (a *admissionChecker) mayBeUnseen(c2 *opRecord, kind string, seen time.Time, r *replayer) bool {
	since := c2.Start.Add(-lagBound)
	if seen.Before(since) {
		return false
	}
	scope := []string{c2.Namespace}
	if c2.Shared {
		scope = slices.Collect(maps.Keys(r.deletes))
	}
	for _, ns := range scope {
		for _, d := range r.deletes[ns] {
			if d.kind == kind && d.rv < c2.RV && !d.received.Before(since) {
				return true
			}
		}
	}
	return false
}

// foreignRequestOnly: v is a claim from another namespace than its
// pool's that holds nothing. If the pool refuses its namespace, its request
// keeps nothing from others, and S4 cannot tell (namespace labels are not
// in the history): such a claim is not held against a later create.
func foreignRequestOnly(v *obj) bool {
	return v != nil && v.refNamespace() != v.Namespace && !v.held().IsValid()
}

func (a *admissionChecker) checkOne(c2 *opRecord, byEnd []*opRecord, maxRV []uint64, r *replayer) []finding {
	var out []finding
	x2 := parsePrefix(c2.CIDR)
	ref := c2.Ref
	named := map[types.UID]bool{}
	for _, c1 := range a.explicit[ref] {
		if c1.RV == 0 || !c1.End.Before(c2.Start) || !parsePrefix(c1.CIDR).Overlaps(x2) {
			continue
		}
		tl := r.timelines[c1.UID]
		if tl == nil || (tl.deleted != 0 && tl.deleted < c2.RV) {
			continue
		}
		named[c1.UID] = true
		if foreignRequestOnly(tl.at(c2.RV)) {
			// A claim from another namespace that holds nothing may be
			// one the pool refuses (its labels changed since), which
			// keeps no range from others (docs/architecture.md,
			// "Tenancy"); the label history is not recorded to tell.
			a.pairsSkipped++
			continue
		}
		if a.mayBeUnseen(c2, kindSubnet, tl.received[0], r) {
			a.pairsSkipped++
			continue
		}
		out = append(out, finding{Check: "S4", Key: fmt.Sprintf("S4a/%s/%s", c2.UID, c1.UID), Detail: fmt.Sprintf(
			"back-to-back overlapping explicit creates both admitted: %s started after %s had returned, and that Subnet still existed",
			c2, c1)})
	}

	// R: the revision of the last operation that returned before C2
	// started.
	i, _ := slices.BinarySearchFunc(byEnd, c2.Start, func(o *opRecord, t time.Time) int { return o.End.Compare(t) })
	if i == 0 {
		return out
	}
	rv := maxRV[i-1]
	for _, uid := range r.claimUIDs[ref] {
		tl := r.timelines[uid]
		at := tl.at(rv)
		if uid == c2.UID || named[uid] || at == nil || (tl.deleted != 0 && tl.deleted < c2.RV) {
			continue
		}
		// Every version from R until C2 was created held or requested an
		// overlapping range.
		throughout := true
		var seen time.Time
		for j, v := range tl.versions {
			if v.RV >= c2.RV {
				break
			}
			if v.RV < rv && v != at {
				continue
			}
			if v == at {
				seen = tl.received[j]
			}
			req := v.requested()
			if foreignRequestOnly(v) {
				req = netip.Prefix{} // see foreignRequestOnly
			}
			if !v.held().Overlaps(x2) && (!req.IsValid() || !req.Overlaps(x2)) {
				throughout = false
				break
			}
		}
		if !throughout {
			continue
		}
		if a.mayBeUnseen(c2, at.Kind, seen, r) {
			a.pairsSkipped++
			continue
		}
		out = append(out, finding{Check: "S4", Key: fmt.Sprintf("S4b/%s/%s", c2.UID, uid), Detail: fmt.Sprintf(
			"explicit create admitted over a claim the API showed before it started: %s; at rv %d (the last operation that returned before it started) and until it was created: %s",
			c2, rv, at)})
	}
	return out
}
