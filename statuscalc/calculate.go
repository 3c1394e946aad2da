package statuscalc

import (
	"fmt"
	"math"
	"math/big"
	"net/netip"
	"slices"
	"strings"

	"go4.org/netipx"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ipspace"
)

// Figures are the measured parts of a pool's status.
type Figures struct {
	// Serving is the range the pool serves; invalid when it serves none.
	Serving netip.Prefix
	Usage   ipspace.Usage
	// Allocatable counts blocks of spec.defaultPrefixLength still free; nil
	// when the pool has no default length.
	Allocatable *big.Int
	// ExhaustionLength is the prefix length Exhausted is measured at, and
	// AllocatableAtExhaustionLength the free blocks of that length.
	ExhaustionLength              int
	AllocatableAtExhaustionLength *big.Int
	// FreeBlocks are the largest free blocks, at most MaxFreeBlocks,
	// largest first and lowest address first among equals.
	FreeBlocks []netip.Prefix
	Subnets    int32
	ChildPools int32
	// Conflicts lists claims that lose to an overlapping claim, in winner
	// order of the losers.
	Conflicts []Conflict
	// NotAllowed names the first claims (at most MaxNotAllowedNamed) that
	// hold a range although the pool no longer allows their namespace,
	// and NotAllowedTotal counts them all.
	NotAllowed      []ClaimRef
	NotAllowedTotal int
}

// MaxNotAllowedNamed bounds the claims the ClaimsNotAllowed condition names.
const MaxNotAllowedNamed = 5

// Readiness is the pool's Ready condition, which the reconciler decides
// (is the range valid, did the parent grant it, is the pool terminating),
// and the range it serves or, a child pool, was granted: status.cidr. A
// child's figures cover only the part of its grant that the API already
// shows, so status.cidr is written from here, not from the figures.
type Readiness struct {
	Status  metav1.ConditionStatus
	Reason  string
	Message string
	CIDR    netip.Prefix
	// Root: the pool has no parent, so it has the AddressSpaceOverlap
	// condition; RootOverlaps is its message when it overlaps another
	// root pool of its space ("" when it does not).
	Root         bool
	RootOverlaps string
	// GrantedTo is a delegated pool's status.grantedToUID: the UID its
	// CIDR was served for on the hub's grant ("" for any other pool).
	GrantedTo types.UID
}

// Measure fills the figures that come from a pool's free-space map. The map
// must hold exactly the claims that hold their ranges. defaultLength and
// maxLength are the pool's spec.defaultPrefixLength and spec.maxPrefixLength,
// -1 when unset: Exhausted is measured at the default length, else at the
// maximum, else at single addresses.
func Measure(defaultLength, maxLength int, space *ipspace.Space) Figures {
	f := Figures{Serving: space.Pool(), Usage: space.Usage(), FreeBlocks: LargestFreeBlocks(space, MaxFreeBlocks)}
	f.ExhaustionLength = f.Serving.Addr().BitLen()
	switch {
	case defaultLength >= 0:
		f.ExhaustionLength = defaultLength
		f.Allocatable = space.AllocatableBlocks(f.ExhaustionLength)
		f.AllocatableAtExhaustionLength = f.Allocatable
		return f
	case maxLength >= 0:
		f.ExhaustionLength = maxLength
	}
	f.AllocatableAtExhaustionLength = space.AllocatableBlocks(f.ExhaustionLength)
	return f
}

// MaxFreeBlocks bounds status.freeBlocks: enough to see where the next
// large allocations come from, few enough that a fragmented pool's status
// stays small and does not change with every small allocation.
const MaxFreeBlocks = 8

// LargestFreeBlocks returns up to limit of the space's largest free blocks,
// largest first, lowest address first among blocks of one size. The free
// map keeps blocks by size, so this reads limit blocks, whatever the size
// of the pool.
func LargestFreeBlocks(space *ipspace.Space, limit int) []netip.Prefix {
	var out []netip.Prefix
	if limit <= 0 {
		return out
	}
	space.FreeBlocks(func(p netip.Prefix) bool {
		out = append(out, p)
		return len(out) < limit
	})
	return out
}

// SubnetSpace is the part of a pool its Subnets use: what is allocatable
// (capacity minus reserved) and not carved into child pools, and what of
// it Subnets hold. A root pool carved into team pools is judged on this,
// not on its whole range: its child pools are judged themselves.
type SubnetSpace struct {
	Carved      *big.Int // addresses of the ranges its child pools serve
	Held        *big.Int // addresses its Subnets hold
	Allocatable *big.Int // allocatable addresses not carved into child pools
}

// SplitCarved separates from a pool's usage the addresses carved into its
// child pools. carved is read from the children's own figures, which can
// lag the parent's for a moment, so neither result goes below zero.
func SplitCarved(u ipspace.Usage, carved *big.Int) SubnetSpace {
	nonNegative := func(x *big.Int) *big.Int {
		if x.Sign() < 0 {
			return x.SetInt64(0)
		}
		return x
	}
	held := nonNegative(new(big.Int).Sub(u.Held, carved))
	allocatable := new(big.Int).Sub(u.Capacity, u.Reserved)
	allocatable = nonNegative(allocatable.Sub(allocatable, carved))
	return SubnetSpace{Carved: new(big.Int).Set(carved), Held: held, Allocatable: allocatable}
}

// Length returns a prefix-length field as an int, -1 when unset.
func Length(p *int32) int {
	if p == nil {
		return -1
	}
	return int(*p)
}

// Calculate computes a pool's figures from plain lists, the slow path
// (O(n log n)) that the auditor and the tests use. Only held ranges count as
// allocated; a pending request that would lose is reported as a conflict.
func Calculate(serving netip.Prefix, pool *ipamv1.SubnetPool, subnets []ipamv1.Subnet, children []ipamv1.SubnetPool) Figures {
	claims := make([]Claim, 0, len(subnets)+len(children))
	for i := range subnets {
		claims = append(claims, FromSubnet(&subnets[i]))
	}
	for i := range children {
		claims = append(claims, FromChildPool(&children[i]))
	}
	var f Figures
	if serving.IsValid() {
		space, conflicts := Arbitrate(serving, ParseReserved(pool.Spec.Reserved), claims)
		f = Measure(Length(pool.Spec.DefaultPrefixLength), Length(pool.Spec.MaxPrefixLength), space)
		f.Conflicts = conflicts
	}
	f.Subnets = int32(len(subnets))
	f.ChildPools = int32(len(children))
	return f
}

// Arbitrate builds the free-space map of a pool from its claims and decides
// who wins, in the winner order of the arbiter:
//   - held ranges are placed first; when two collide (only a bypassed
//     arbiter can cause that) the older keeps it and the younger loses;
//   - a held range is never taken away by the pool's rules: one on a
//     reserved range (a pool edit that raced its grant) is carved out of the
//     reserved space, one outside the pool is not placed; neither is a
//     conflict (the pool reports them as ClaimsOutside);
//   - pending explicit requests are then decided oldest first: a request
//     loses to a held range or an older winning request it overlaps. Winning
//     requests are not placed: they hold nothing until the arbiter grants them.
//
// Requests outside the pool or on reserved ranges are out of range, not in
// conflict, and are not reported.
func Arbitrate(pool netip.Prefix, reserved []netip.Prefix, claims []Claim) (*ipspace.Space, []Conflict) {
	var held []heldRange
	var pending []Claim
	for i, c := range claims {
		switch {
		case c.Held.IsValid() && Contains(pool, c.Held):
			held = append(held, heldRange{p: c.Held, claim: &claims[i]})
		case c.Held.IsValid(): // outside the pool: kept, not placed
		case c.Requested.IsValid() && Contains(pool, c.Requested):
			pending = append(pending, c)
		}
	}
	// Sorted by address, the ranges need no sorting in NewSpaceHolding and
	// serve the overlap lookups below.
	slices.SortFunc(held, func(a, b heldRange) int { return a.p.Addr().Compare(b.p.Addr()) })
	space, err := ipspace.NewSpaceHolding(pool, carveReserved(reserved, held), heldPrefixes(held))
	var conflicts []Conflict
	if err != nil {
		space, held, conflicts = placeOldestFirst(pool, reserved, held)
	}

	slices.SortFunc(pending, Older)
	requests := ipspace.NewIndex[int]() // winning requests, by position in pending
	for i, c := range pending {
		if w, ok := heldOverlapping(held, c.Requested); ok {
			conflicts = append(conflicts, Conflict{Loser: c.Ref, LoserRange: c.Requested, Winner: w.Ref, WinnerRange: w.Held})
			continue
		}
		if w := requests.OverlappingSlice(c.Requested); len(w) > 0 {
			winner := pending[w[0].Owner]
			conflicts = append(conflicts, Conflict{Loser: c.Ref, LoserRange: c.Requested, Winner: winner.Ref, WinnerRange: winner.Requested})
			continue
		}
		if space.IsFree(c.Requested) { // not on a reserved range
			requests.Insert(c.Requested, i)
		}
	}
	return space, conflicts
}

// heldRange is a held range and its claim; small, so that sorting 100k of
// them moves little memory.
type heldRange struct {
	p     netip.Prefix
	claim *Claim
}

// placeOldestFirst claims held ranges one by one in winner order; the ones
// that collide lose. It returns the map, the ranges that hold (by address)
// and the losers.
func placeOldestFirst(pool netip.Prefix, reserved []netip.Prefix, held []heldRange) (*ipspace.Space, []heldRange, []Conflict) {
	slices.SortFunc(held, func(a, b heldRange) int { return Older(*a.claim, *b.claim) })
	probe := ipspace.NewSpace(pool, nil)
	winners := ipspace.NewIndex[int]()
	var placed []heldRange
	var conflicts []Conflict
	for _, h := range held {
		if err := probe.Claim(h.p); err != nil {
			conflict := Conflict{Loser: h.claim.Ref, LoserRange: h.p}
			if w := winners.OverlappingSlice(h.p); len(w) > 0 {
				conflict.Winner, conflict.WinnerRange = placed[w[0].Owner].claim.Ref, placed[w[0].Owner].p
			}
			conflicts = append(conflicts, conflict)
			continue
		}
		winners.Insert(h.p, len(placed))
		placed = append(placed, h)
	}
	slices.SortFunc(placed, func(a, b heldRange) int { return a.p.Addr().Compare(b.p.Addr()) })
	space, _ := ipspace.NewSpaceHolding(pool, carveReserved(reserved, placed), heldPrefixes(placed)) // disjoint by construction
	return space, placed, conflicts
}

// carveReserved returns the reserved ranges minus the held ranges that lie
// on them: a range granted before it was reserved stays held.
func carveReserved(reserved []netip.Prefix, held []heldRange) []netip.Prefix {
	var b netipx.IPSetBuilder
	carved := false
	for _, r := range reserved {
		b.AddPrefix(r)
	}
	for _, h := range held {
		for _, r := range reserved {
			if r.Overlaps(h.p) {
				b.RemovePrefix(h.p)
				carved = true
				break
			}
		}
	}
	if !carved {
		return reserved
	}
	set, _ := b.IPSet() // errors only on invalid prefixes
	return set.Prefixes()
}

func heldPrefixes(held []heldRange) []netip.Prefix {
	out := make([]netip.Prefix, len(held))
	for i, h := range held {
		out[i] = h.p
	}
	return out
}

// heldOverlapping finds a claim whose held range overlaps p among disjoint
// ranges sorted by address. Only two can: the last that starts at or before
// p (it may contain p), or the first that starts inside p.
func heldOverlapping(sorted []heldRange, p netip.Prefix) (Claim, bool) {
	i, _ := slices.BinarySearchFunc(sorted, p.Addr(), func(h heldRange, a netip.Addr) int { return h.p.Addr().Compare(a) })
	// sorted[i] is the first that starts at or after p's address.
	if i < len(sorted) && sorted[i].p.Overlaps(p) {
		return *sorted[i].claim, true
	}
	if i > 0 && sorted[i-1].p.Overlaps(p) {
		return *sorted[i-1].claim, true
	}
	return Claim{}, false
}

// Contains reports whether inner lies entirely inside outer (same family).
func Contains(outer, inner netip.Prefix) bool {
	return outer.Bits() <= inner.Bits() && outer.Contains(inner.Addr())
}

// ParseReserved parses spec.reserved, skipping entries the schema would have
// rejected.
func ParseReserved(reserved []string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(reserved))
	for _, r := range reserved {
		if p, err := ipspace.ParsePrefix(r); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// maxConflictsNamed bounds the Overlapping message so it does not grow with
// the pool and does not flap.
const maxConflictsNamed = 3

// Status returns the pool's new status: the figures, and the Ready,
// Exhausted, Overlapping and ClaimsNotAllowed conditions set onto a copy of the current ones
// (so a condition's lastTransitionTime moves only when its status does).
func Status(pool *ipamv1.SubnetPool, f Figures, ready Readiness) ipamv1.SubnetPoolStatus {
	st := ipamv1.SubnetPoolStatus{
		ObservedGeneration: pool.Generation,
		Subnets:            f.Subnets,
		ChildPools:         f.ChildPools,
		Conditions:         slices.Clone(pool.Status.Conditions),
	}
	set := func(c metav1.Condition) {
		c.ObservedGeneration = pool.Generation
		meta.SetStatusCondition(&st.Conditions, c)
	}
	set(metav1.Condition{Type: ipamv1.ConditionReady, Status: ready.Status, Reason: ready.Reason, Message: ready.Message})
	if ready.Root {
		set(rootOverlap(ready.RootOverlaps))
	}
	if ready.CIDR.IsValid() {
		st.CIDR = ready.CIDR.String()
		st.GrantedToUID = ready.GrantedTo
	}

	if !f.Serving.IsValid() {
		set(metav1.Condition{Type: ipamv1.ConditionExhausted, Status: metav1.ConditionUnknown, Reason: ready.Reason,
			Message: "the pool serves no range yet"})
		set(overlapping(f.Conflicts))
		set(claimsNotAllowed(f))
		return st
	}
	u := f.Usage
	st.Capacity = u.Capacity.String()
	st.Reserved = u.Reserved.String()
	st.Allocated = u.Held.String()
	st.Free = u.Free.String()
	st.FreeReadable = ReadableCount(st.Free)
	usable := new(big.Int).Sub(u.Capacity, u.Reserved)
	st.Utilization = FormatPercent(u.Held, usable)
	st.UtilizationPercent = ptr.To(WholePercent(u.Held, usable))
	if u.LargestFree.IsValid() {
		st.LargestFreeBlock = u.LargestFree.String()
	}
	for _, p := range f.FreeBlocks {
		st.FreeBlocks = append(st.FreeBlocks, p.String())
	}
	if f.Allocatable != nil {
		st.AllocatableBlocks = f.Allocatable.String()
	}
	set(exhausted(f))
	set(overlapping(f.Conflicts))
	set(claimsNotAllowed(f))
	return st
}

// claimsNotAllowed says which claims keep ranges that the pool's consent
// no longer gives their namespace: nothing is taken from them, and the
// pool's owners decide (allow the namespace again, or ask its owners to
// release the claims).
func claimsNotAllowed(f Figures) metav1.Condition {
	if f.NotAllowedTotal == 0 {
		return metav1.Condition{Type: ipamv1.ConditionClaimsNotAllowed, Status: metav1.ConditionFalse, Reason: ipamv1.ReasonAllAllowed,
			Message: "every claim's namespace is allowed by spec.allowedNamespaces"}
	}
	named := make([]string, 0, len(f.NotAllowed))
	for _, c := range f.NotAllowed {
		named = append(named, c.String())
	}
	msg := fmt.Sprintf("%s ranges from namespaces that spec.allowedNamespaces no longer allows: %s",
		Count(f.NotAllowedTotal, "claim holds", "claims hold"), strings.Join(named, ", "))
	if extra := f.NotAllowedTotal - len(named); extra > 0 {
		msg += fmt.Sprintf(" and %d more", extra)
	}
	return metav1.Condition{Type: ipamv1.ConditionClaimsNotAllowed, Status: metav1.ConditionTrue, Reason: ipamv1.ReasonNotAllowed,
		Message: msg + "; they keep their ranges, new claims from those namespaces are refused"}
}

func exhausted(f Figures) metav1.Condition {
	if f.AllocatableAtExhaustionLength != nil && f.AllocatableAtExhaustionLength.Sign() > 0 {
		return metav1.Condition{Type: ipamv1.ConditionExhausted, Status: metav1.ConditionFalse, Reason: ipamv1.ReasonFreeBlocksLeft,
			Message: CountBig(f.AllocatableAtExhaustionLength, fmt.Sprintf("free /%d block left", f.ExhaustionLength), fmt.Sprintf("free /%d blocks left", f.ExhaustionLength))}
	}
	msg := fmt.Sprintf("no free /%d block left", f.ExhaustionLength)
	if f.Usage.LargestFree.IsValid() {
		msg += fmt.Sprintf(" (largest free block: %s)", f.Usage.LargestFree)
	}
	return metav1.Condition{Type: ipamv1.ConditionExhausted, Status: metav1.ConditionTrue, Reason: ipamv1.ReasonNoFreeBlock,
		Message: msg + "; grow spec.cidr or release Subnets"}
}

func overlapping(conflicts []Conflict) metav1.Condition {
	if len(conflicts) == 0 {
		return metav1.Condition{Type: ipamv1.ConditionOverlapping, Status: metav1.ConditionFalse, Reason: ipamv1.ReasonNoOverlap,
			Message: "no claims overlap"}
	}
	named := make([]string, 0, maxConflictsNamed)
	for _, c := range conflicts[:min(len(conflicts), maxConflictsNamed)] {
		named = append(named, c.String())
	}
	msg := fmt.Sprintf("%s to overlapping claims: %s", Count(len(conflicts), "claim loses", "claims lose"), strings.Join(named, "; "))
	if extra := len(conflicts) - maxConflictsNamed; extra > 0 {
		msg += fmt.Sprintf("; and %d more", extra)
	}
	return metav1.Condition{Type: ipamv1.ConditionOverlapping, Status: metav1.ConditionTrue, Reason: ipamv1.ReasonClaimsOverlap,
		Message: msg + "; delete the losing claims or pick free ranges"}
}

// Count says how many of something there are, in the grammatical number the
// count asks for: Count(1, "claim loses", "claims lose") is "1 claim loses",
// Count(3, ...) "3 claims lose". The words come in both forms, so verbs
// agree too and no English rules are guessed.
func Count(n int, singular, plural string) string {
	return CountBig(big.NewInt(int64(n)), singular, plural)
}

// CountBig is Count for an address or block count, which may not fit an int.
func CountBig(n *big.Int, singular, plural string) string {
	if n.IsInt64() && n.Int64() == 1 {
		return "1 " + singular
	}
	return n.String() + " " + plural
}

// FormatPercent formats part/whole as a percentage with two decimals,
// truncated (so a pool shows 100.00% only when it is full). A whole of zero
// (everything reserved) reads as full.
func FormatPercent(part, whole *big.Int) string {
	bp := basisPoints(part, whole)
	return fmt.Sprintf("%d.%02d%%", bp/100, bp%100)
}

// WholePercent is FormatPercent's figure without the decimals: 100 only
// when full.
func WholePercent(part, whole *big.Int) int32 {
	return int32(basisPoints(part, whole) / 100)
}

func basisPoints(part, whole *big.Int) int64 {
	if whole.Sign() <= 0 {
		return 10000
	}
	bp := new(big.Int).Mul(part, big.NewInt(10000))
	return bp.Quo(bp, whole).Int64()
}

// Ratio returns part/whole as a float64 for metrics; 1 when whole is zero.
func Ratio(part, whole *big.Int) float64 {
	if whole.Sign() <= 0 {
		return 1
	}
	r, _ := new(big.Rat).SetFrac(part, whole).Float64()
	return r
}

// rootOverlap says whether a root pool overlaps another root pool of its
// address space.
func rootOverlap(message string) metav1.Condition {
	if message == "" {
		return metav1.Condition{Type: ipamv1.ConditionAddressSpaceOverlap, Status: metav1.ConditionFalse, Reason: ipamv1.ReasonNoRootOverlap,
			Message: "no other root pool of its address space overlaps it"}
	}
	return metav1.Condition{Type: ipamv1.ConditionAddressSpaceOverlap, Status: metav1.ConditionTrue, Reason: ipamv1.ReasonRootPoolsOverlap, Message: message}
}

// ReadableCount spells an address or range count for a person: as it is up
// to 2^40, else as a power of two ("2^80", or "≈2^80" when not exact), the
// way IPv6 sizes are spoken. A 25-digit count in a column is unreadable;
// structured output keeps the exact decimal beside it.
func ReadableCount(s string) string {
	n, ok := new(big.Int).SetString(s, 10)
	if !ok || n.Sign() <= 0 || n.BitLen() <= 41 {
		return s
	}
	exp := n.BitLen() - 1
	if new(big.Int).Lsh(big.NewInt(1), uint(exp)).Cmp(n) == 0 {
		return fmt.Sprintf("2^%d", exp)
	}
	// Nearest power: above when n is past 2^exp·√2.
	f, _ := new(big.Float).SetInt(n).Float64()
	return fmt.Sprintf("≈2^%.0f", math.Log2(f))
}
