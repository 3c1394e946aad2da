// Package lifecycle is a randomized, model-checked test of subnet-operator
// through a real API server (TestLifecycle, build tag integration): it
// drives seeded random operation sequences — pool and Subnet creates, edits
// and deletes, bursts, manager crashes and leader hand-overs — records every
// object version with watches, and checks the history and the settled state
// against a small independent model of IP space, in the manner of etcd's
// tests/robustness.
//
// Run it (the manager is built from this tree with the race detector):
//
//	KUBEBUILDER_ASSETS=$PWD/bin/assets go test -race -tags integration ./test/lifecycle -run TestLifecycle -v
//	... -lifecycle.ops=20000 -timeout 90m        # a soak
//	... -lifecycle.seed=N -lifecycle.ops=M       # replay the operation sequence of a failed run
//	... -lifecycle.out=DIR                       # keep the operation log and the history (JSON lines)
//
// Files: ops_test.go draws operations from the seed (ops_addresses_test.go
// those at Cluster API's edges: IPAddress informer lag, foreground
// deletes, IPAddresses written by hand or restored); driver_test.go sends
// them, with a client's retries, and injects the faults; lagproxy_test.go
// is the proxy in front of each replica that holds back its IPAddress
// watches; history_test.go records every object version;
// lifecycle_test.go runs the phases and reports. The replicas are fleet
// members of a hub that is the same API server: ops_delegation_test.go
// sets it up and draws the operations on delegated root pools, and
// delegation_checks.go checks them (D1-D5).
//
// This file and checks.go are the model and the checks, and addresses.go
// the model and checks of Cluster API IPAddressClaims answered from
// Subnets: pure functions of object versions and the operation log, built
// on net/netip and go4.org/netipx only. They do not import the operator's ipspace,
// statuscalc, ledger, capi, webhooks or reconcilers: a checker that shares the
// code it checks shares its bugs. They carry no build tag, so
// `go test ./test/lifecycle` runs their unit tests without a control plane.
package lifecycle

import (
	"fmt"
	"maps"
	"math/big"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"go4.org/netipx"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// Kinds, as the checks name them.
const (
	kindSubnet    = "Subnet"
	kindPool      = "SubnetPool"
	kindNamespace = "Namespace"
)

// obj is one version of a Subnet, a SubnetPool, an IPAddressClaim or an
// IPAddress: the fields the model reads, parsed from an object at the
// boundary (fromSubnet, fromPool, fromClaim, fromAddress). The history
// keeps one per watch event, so it is small.
type obj struct {
	Kind       string
	Namespace  string
	Name       string
	UID        types.UID
	RV         uint64
	Generation int64
	Deleting   bool

	// Ref is a Subnet's spec.poolRef or a pool's spec.parentRef, as
	// "namespace/name" (an empty namespace resolved to the object's own).
	Ref          string
	CIDR         string // spec.cidr
	PrefixLength *int32 // Subnet spec.prefixLength
	Default      *int32 // pool spec.defaultPrefixLength
	Min, Max     *int32 // pool spec.minPrefixLength, spec.maxPrefixLength
	Reserved     []string
	// Allowed is a pool's spec.allowedNamespaces; nil means Same.
	Allowed *ipamv1.AllowedNamespaces
	// Delegation is a delegated root pool's hub pool, "namespace/name"
	// (delegation_checks.go); "" for any other pool.
	Delegation string

	StatusCIDR         string
	ObservedGeneration int64
	Conditions         []metav1.Condition
	// Figures is a pool's status without its conditions; nil for a Subnet.
	Figures *ipamv1.SubnetPoolStatus

	// Finalizers, and when the object was created and deleted (its
	// deletionTimestamp; zero while it is not): the cool-down is counted
	// from these, at the API server's second precision.
	Finalizers         []string
	Created, DeletedAt time.Time
	// Gateway is a Subnet's or an IPAddress's spec.gateway.
	Gateway string
	// StatusGateway is a Subnet's status.gateway, the gateway in effect
	// (gateway_checks.go).
	StatusGateway string
	// IPAddresses is a Subnet's status.ipAddresses.
	IPAddresses *ipamv1.IPAddressUsage

	// Cluster API (addresses.go). PoolRef is a claim's or an IPAddress's
	// spec.poolRef as "apiGroup/kind/name"; Pool the Subnet it names, as
	// "namespace/name", or "" if it names another kind of pool.
	PoolRef, Pool string
	// An IPAddress's spec.address, spec.prefix and spec.claimRef.name, its
	// controller owner reference, and the UID its owner reference to a
	// Subnet names.
	Address   string
	Prefix    *int32
	ClaimRef  string
	Owner     *metav1.OwnerReference
	SubnetUID types.UID
	// WrittenBy is an IPAddress's annotationWrittenBy: "" for one the
	// operator wrote, else how the test wrote it (addresses.go).
	WrittenBy string
	// AddressRef is a claim's status.addressRef.name.
	AddressRef string
	// MemberPoolUID is a hub claim's member pool UID annotation
	// (delegation_checks.go); "" on any other Subnet.
	MemberPoolUID types.UID
}

func fromSubnet(s *ipamv1.Subnet) obj {
	return obj{
		Kind: kindSubnet, Namespace: s.Namespace, Name: s.Name, UID: s.UID, RV: parseRV(s.ResourceVersion),
		Generation: s.Generation, Deleting: s.DeletionTimestamp != nil,
		Ref: refOf(s.Namespace, &s.Spec.PoolRef), CIDR: s.Spec.CIDR, PrefixLength: s.Spec.PrefixLength,
		StatusCIDR: s.Status.CIDR, ObservedGeneration: s.Status.ObservedGeneration,
		Conditions: slices.Clone(s.Status.Conditions),
		Finalizers: slices.Clone(s.Finalizers), Created: s.CreationTimestamp.Time, DeletedAt: timeOf(s.DeletionTimestamp),
		Gateway: s.Spec.Gateway, StatusGateway: s.Status.Gateway, IPAddresses: s.Status.IPAddresses.DeepCopy(),
		MemberPoolUID: types.UID(s.Annotations[ipamv1.AnnotationMemberPoolUID]),
	}
}

func timeOf(t *metav1.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.Time
}

// refOf is the model's Ref of a reference made from namespace: the pool's
// "namespace/name", an empty namespace being namespace. The world spans
// namespaces: a platform's pool has claims in tenant namespaces.
func refOf(namespace string, ref *ipamv1.PoolReference) string {
	if ref == nil {
		return ""
	}
	return ref.In(namespace) + "/" + ref.Name
}

func fromPool(p *ipamv1.SubnetPool) obj {
	figures := p.Status.DeepCopy()
	figures.Conditions = nil
	return obj{
		Kind: kindPool, Namespace: p.Namespace, Name: p.Name, UID: p.UID, RV: parseRV(p.ResourceVersion),
		Generation: p.Generation, Deleting: p.DeletionTimestamp != nil,
		Ref: refOf(p.Namespace, p.Spec.ParentRef), CIDR: p.Spec.CIDR, Default: p.Spec.DefaultPrefixLength,
		Min: p.Spec.MinPrefixLength, Max: p.Spec.MaxPrefixLength, Reserved: slices.Clone(p.Spec.Reserved),
		Allowed:    p.Spec.AllowedNamespaces.DeepCopy(),
		Delegation: delegationOf(p),
		StatusCIDR: p.Status.CIDR, ObservedGeneration: p.Status.ObservedGeneration,
		Conditions: slices.Clone(p.Status.Conditions), Figures: figures,
	}
}

// parseRV reads a resourceVersion. Against one etcd it is the store's
// revision, global across kinds, which is what lets the two watches be
// merged into one order. 0 if it does not parse.
func parseRV(rv string) uint64 {
	n, _ := strconv.ParseUint(rv, 10, 64)
	return n
}

// key names an object for as long as it exists under its name.
func (o *obj) key() string { return o.Kind + " " + o.Namespace + "/" + o.Name }

// path is "namespace/name": what a Ref names a pool by.
func (o *obj) path() string { return o.Namespace + "/" + o.Name }

// refNamespace is the namespace of the pool a claim references.
func (o *obj) refNamespace() string {
	ns, _, _ := strings.Cut(o.Ref, "/")
	return ns
}

// String describes a version for a report: enough to find it in the
// operation log and the manager's logs.
func (o *obj) String() string {
	if o.Kind == kindClaim || o.Kind == kindAddress {
		return o.capiString()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s uid=%s rv=%d gen=%d", o.key(), shortUID(o.UID), o.RV, o.Generation)
	if o.Deleting {
		b.WriteString(" deleting")
	}
	if o.Kind == kindSubnet {
		fmt.Fprintf(&b, " spec={pool:%s", o.Ref)
		if o.CIDR != "" {
			fmt.Fprintf(&b, " cidr:%s", o.CIDR)
		}
		if o.PrefixLength != nil {
			fmt.Fprintf(&b, " prefixLength:%d", *o.PrefixLength)
		}
		if o.Gateway != "" {
			fmt.Fprintf(&b, " gateway:%s", o.Gateway)
		}
		b.WriteString("}")
	} else {
		fmt.Fprintf(&b, " spec={cidr:%s", o.CIDR)
		if o.Ref != "" {
			fmt.Fprintf(&b, " parent:%s", o.Ref)
		}
		if len(o.Reserved) > 0 {
			fmt.Fprintf(&b, " reserved:%v", o.Reserved)
		}
		fmt.Fprintf(&b, " lengths:%s/%s/%s}", lengthString(o.Default), lengthString(o.Min), lengthString(o.Max))
	}
	fmt.Fprintf(&b, " status={cidr:%q observedGen:%d", o.StatusCIDR, o.ObservedGeneration)
	if r := o.ready(); r != nil {
		fmt.Fprintf(&b, " Ready:%s/%s %q", r.Status, r.Reason, r.Message)
	}
	b.WriteString("}")
	return b.String()
}

func shortUID(u types.UID) string {
	if len(u) > 8 {
		return string(u[:8])
	}
	return string(u)
}

func lengthString(p *int32) string {
	if p == nil {
		return "-"
	}
	return strconv.Itoa(int(*p))
}

func (o *obj) ready() *metav1.Condition {
	return meta.FindStatusCondition(o.Conditions, ipamv1.ConditionReady)
}

func (o *obj) isReady() bool {
	r := o.ready()
	return r != nil && r.Status == metav1.ConditionTrue
}

func (o *obj) readyReason() string {
	if r := o.ready(); r != nil {
		return r.Reason
	}
	return ""
}

// isClaim: a Subnet, or a child pool (a claim on its parent). (An
// IPAddressClaim is no claim on IP space of a pool: addresses.go.)
func (o *obj) isClaim() bool { return o.Kind == kindSubnet || (o.Kind == kindPool && o.Ref != "") }

// held is the range a claim holds: a Subnet's status.cidr while Ready, a
// child pool's status.cidr whatever its Ready (the range its parent
// granted). Invalid when it holds none.
func (o *obj) held() netip.Prefix {
	switch {
	case o.Kind == kindSubnet && o.isReady():
		return parsePrefix(o.StatusCIDR)
	case o.Kind == kindPool && o.Ref != "":
		return parsePrefix(o.StatusCIDR)
	}
	return netip.Prefix{}
}

// requested is the explicit range a claim asks for: spec.cidr.
func (o *obj) requested() netip.Prefix { return parsePrefix(o.CIDR) }

// servedRange is the range a pool hands out, whatever its state: its
// status.cidr, the grant of its parent or, a root pool, of its address
// space (the test's root pools are all in the default space).
func (o *obj) servedRange() netip.Prefix {
	return parsePrefix(o.StatusCIDR)
}

// rootHeld is what a root pool holds in its address space: its
// status.cidr. Invalid for a child pool (see held) and for a root that
// holds nothing.
func (o *obj) rootHeld() netip.Prefix {
	if o.Kind != kindPool || o.Ref != "" {
		return netip.Prefix{}
	}
	return parsePrefix(o.StatusCIDR)
}

// rootsOverlapping are the root pools other than p whose held range
// overlaps x: what keeps x from p in their address space.
func (w *world) rootsOverlapping(p *obj, x netip.Prefix) []*obj {
	var out []*obj
	for _, name := range slices.Sorted(maps.Keys(w.pools)) {
		o := w.pools[name]
		if o != p && o.rootHeld().Overlaps(x) {
			out = append(out, o)
		}
	}
	return out
}

func (o *obj) reserved() []netip.Prefix {
	out := make([]netip.Prefix, 0, len(o.Reserved))
	for _, r := range o.Reserved {
		if p := parsePrefix(r); p.IsValid() {
			out = append(out, p)
		}
	}
	return out
}

// ---- IP space, on net/netip and netipx only ----

// parsePrefix parses a canonical CIDR; invalid on anything else (host bits
// set included: the schema rejects those).
func parsePrefix(s string) netip.Prefix {
	p, err := netip.ParsePrefix(s)
	if err != nil || p != p.Masked() {
		return netip.Prefix{}
	}
	return p
}

// inside reports whether inner lies entirely inside outer.
func inside(outer, inner netip.Prefix) bool {
	return outer.IsValid() && inner.IsValid() && outer.Addr().BitLen() == inner.Addr().BitLen() &&
		outer.Bits() <= inner.Bits() && outer.Contains(inner.Addr())
}

// overlapsAny reports whether p overlaps one of ranges.
func overlapsAny(p netip.Prefix, ranges []netip.Prefix) bool {
	for _, r := range ranges {
		if r.Overlaps(p) {
			return true
		}
	}
	return false
}

// addresses is the number of addresses in p.
func addresses(p netip.Prefix) *big.Int {
	return new(big.Int).Lsh(big.NewInt(1), uint(p.Addr().BitLen()-p.Bits()))
}

// setSize is the number of addresses in s.
func setSize(s *netipx.IPSet) *big.Int {
	n := new(big.Int)
	for _, p := range s.Prefixes() {
		n.Add(n, addresses(p))
	}
	return n
}

func setOf(ranges ...netip.Prefix) *netipx.IPSet {
	var b netipx.IPSetBuilder
	for _, r := range ranges {
		if r.IsValid() {
			b.AddPrefix(r)
		}
	}
	s, _ := b.IPSet()
	return s
}

// freeBlocks is the free space of a pool as its maximal aligned blocks:
// served minus reserved minus held. netipx decomposes each free range into
// the fewest prefixes, which are exactly the blocks whose buddy-parent is
// not entirely free.
func freeBlocks(served netip.Prefix, reserved, held []netip.Prefix) []netip.Prefix {
	if !served.IsValid() {
		return nil
	}
	var b netipx.IPSetBuilder
	b.AddPrefix(served)
	for _, r := range reserved {
		b.RemovePrefix(r)
	}
	for _, h := range held {
		b.RemovePrefix(h)
	}
	s, _ := b.IPSet()
	return s.Prefixes()
}

// hasBlock reports whether a block of this length can be carved from the
// free blocks: some free block is that long or shorter.
func hasBlock(free []netip.Prefix, length int) bool {
	for _, b := range free {
		if b.Bits() <= length {
			return true
		}
	}
	return false
}

// allocatable counts the blocks of this length the free blocks hold: a free
// block /n with n <= length holds 2^(length-n) of them.
func allocatable(free []netip.Prefix, length int) *big.Int {
	n := new(big.Int)
	for _, b := range free {
		if b.Bits() <= length {
			n.Add(n, new(big.Int).Lsh(big.NewInt(1), uint(length-b.Bits())))
		}
	}
	return n
}

// largestFree is the shortest free block, the lowest address among equals;
// invalid when nothing is free.
func largestFree(free []netip.Prefix) netip.Prefix {
	var best netip.Prefix
	for _, b := range free {
		if !best.IsValid() || b.Bits() < best.Bits() || (b.Bits() == best.Bits() && b.Addr().Less(best.Addr())) {
			best = b
		}
	}
	return best
}

// percent formats part/whole as a percentage with two decimals, truncated;
// "100.00%" when whole is not positive.
func percent(part, whole *big.Int) string {
	if whole.Sign() <= 0 {
		return "100.00%"
	}
	bp := new(big.Int).Quo(new(big.Int).Mul(part, big.NewInt(10000)), whole)
	q, r := new(big.Int).QuoRem(bp, big.NewInt(100), new(big.Int))
	return fmt.Sprintf("%s.%02d%%", q, r.Int64())
}

// figures is a pool's status as the model recomputes it.
type figures struct {
	Capacity, Reserved, Allocated, Free *big.Int
	Utilization                         string
	LargestFreeBlock                    string
	AllocatableBlocks                   string // "" without a default length
	// Exhausted: no block of the exhaustion length is left (the default
	// length, else the maximum, else single addresses).
	Exhausted        bool
	ExhaustionLength int
}

// computeFigures recomputes a pool's figures from the range it serves, its
// spec.reserved, its lengths and the held ranges of its direct claims.
func computeFigures(served netip.Prefix, reserved, held []netip.Prefix, def, maxLen *int32) figures {
	heldSet := setOf(held...)
	allocated := new(big.Int)
	for _, h := range held {
		if inside(served, h) {
			allocated.Add(allocated, addresses(h))
		}
	}
	// Reserved addresses: spec.reserved inside the served range, less
	// what held ranges cover (a claim granted before the range was
	// reserved counts as allocated, once).
	var rb netipx.IPSetBuilder
	for _, r := range reserved {
		rb.AddPrefix(r)
	}
	rb.Intersect(setOf(served))
	rb.RemoveSet(heldSet)
	reservedSet, _ := rb.IPSet()

	f := figures{Capacity: addresses(served), Reserved: setSize(reservedSet), Allocated: allocated}
	f.Free = new(big.Int).Sub(f.Capacity, f.Reserved)
	f.Free.Sub(f.Free, f.Allocated)
	f.Utilization = percent(f.Allocated, new(big.Int).Sub(f.Capacity, f.Reserved))
	free := freeBlocks(served, reserved, held)
	if lf := largestFree(free); lf.IsValid() {
		f.LargestFreeBlock = lf.String()
	}
	f.ExhaustionLength = served.Addr().BitLen()
	switch {
	case def != nil:
		f.ExhaustionLength = int(*def)
		f.AllocatableBlocks = allocatable(free, int(*def)).String()
	case maxLen != nil:
		f.ExhaustionLength = int(*maxLen)
	}
	f.Exhausted = allocatable(free, f.ExhaustionLength).Sign() == 0
	return f
}

// ---- the objects at one moment ----

// world is every namespace's objects at one moment, indexed the way the
// rules read them: pools and Subnets by "namespace/name", claims by the
// pool they reference, wherever they live.
type world struct {
	pools   map[string]*obj
	subnets map[string]*obj
	// claims are the direct claims of a pool (Subnets by poolRef, child
	// pools by parentRef), whether or not the pool exists, by key.
	claims map[string][]*obj
	// labels are the namespaces' labels, for consent.
	labels map[string]map[string]string
	// addrClaims and addrs are the IPAddressClaims and IPAddresses by
	// "namespace/name"; addrsOf the IPAddresses of each Subnet (by its
	// "namespace/name", whether or not it exists), by key.
	addrClaims, addrs map[string]*obj
	addrsOf           map[string][]*obj
}

// newWorld indexes objects; labels are the namespaces' labels.
func newWorld(objs []obj, labels map[string]map[string]string) *world {
	w := &world{pools: map[string]*obj{}, subnets: map[string]*obj{}, claims: map[string][]*obj{}, labels: labels,
		addrClaims: map[string]*obj{}, addrs: map[string]*obj{}, addrsOf: map[string][]*obj{}}
	for i := range objs {
		o := &objs[i]
		switch o.Kind {
		case kindPool:
			w.pools[o.path()] = o
		case kindSubnet:
			w.subnets[o.path()] = o
		case kindClaim:
			w.addrClaims[o.path()] = o
		case kindAddress:
			w.addrs[o.path()] = o
			if o.Pool != "" {
				w.addrsOf[o.Pool] = append(w.addrsOf[o.Pool], o)
			}
		}
		if o.isClaim() {
			w.claims[o.Ref] = append(w.claims[o.Ref], o)
		}
	}
	for _, cs := range w.claims {
		slices.SortFunc(cs, func(a, b *obj) int { return strings.Compare(a.key(), b.key()) })
	}
	for _, as := range w.addrsOf {
		slices.SortFunc(as, func(a, b *obj) int { return strings.Compare(a.key(), b.key()) })
	}
	return w
}

// allows reports whether pool p consents to claims from namespace: its own
// namespace always; All; or a Selector that the namespace's labels match.
// Written from the API's documentation, not from the operator's code.
func (w *world) allows(p *obj, namespace string) bool {
	if p.Namespace == namespace || (p.Allowed != nil && p.Allowed.From == ipamv1.FromAll) {
		return true
	}
	if p.Allowed == nil || p.Allowed.From != ipamv1.FromSelector || p.Allowed.Selector == nil {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(p.Allowed.Selector)
	return err == nil && sel.Matches(labels.Set(w.labels[namespace]))
}

// notAllowed are the holders of a pool whose namespace it no longer
// allows: what its ClaimsNotAllowed condition reports.
func (w *world) notAllowed(p *obj) []*obj {
	var out []*obj
	for _, c := range w.holders(p.path(), "") {
		if !w.allows(p, c.Namespace) {
			out = append(out, c)
		}
	}
	return out
}

// holders are the direct claims of a pool that hold a range, other than
// except (a key, or "").
func (w *world) holders(pool, except string) []*obj {
	var out []*obj
	for _, c := range w.claims[pool] {
		if c.key() != except && c.held().IsValid() {
			out = append(out, c)
		}
	}
	return out
}

func heldRanges(cs []*obj) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.held())
	}
	return out
}

// overlappingHolders are the holders whose held range overlaps p.
func overlappingHolders(hs []*obj, p netip.Prefix) []*obj {
	var out []*obj
	for _, h := range hs {
		if h.held().Overlaps(p) {
			out = append(out, h)
		}
	}
	return out
}

// serving is the range the pool at name ("namespace/name") hands out to
// new claims, or why it hands out none: PoolNotFound (no such pool), PoolNotReady (being deleted, or a
// child pool its parent has granted nothing).
func (w *world) serving(name string) (netip.Prefix, *obj, string) {
	p := w.pools[name]
	switch {
	case p == nil:
		return netip.Prefix{}, nil, ipamv1.ReasonPoolNotFound
	case p.Deleting || !p.servedRange().IsValid():
		return netip.Prefix{}, p, ipamv1.ReasonPoolNotReady
	}
	return p.servedRange(), p, ""
}

// lengthFits reports whether a claim of this length may come from a pool
// serving served: inside [served bits, address width] and the pool's
// [minPrefixLength, maxPrefixLength].
func lengthFits(p *obj, served netip.Prefix, length int) bool {
	switch {
	case length < served.Bits() || length > served.Addr().BitLen():
		return false
	case p.Min != nil && length < int(*p.Min):
		return false
	case p.Max != nil && length > int(*p.Max):
		return false
	}
	return true
}

// cycle reports whether the parentRef chain of the pool at name
// ("namespace/name") leads back to it.
func (w *world) cycle(name string) bool {
	seen := map[string]bool{}
	for cur := name; ; {
		p := w.pools[cur]
		if p == nil || p.Ref == "" || seen[cur] {
			return false
		}
		seen[cur] = true
		if p.Ref == name {
			return true
		}
		cur = p.Ref
	}
}

// outsideClaims are a pool's held claims that lie outside r or overlap its
// spec.reserved: what a pool must report as ClaimsOutside.
func (w *world) outsideClaims(p *obj, r netip.Prefix) []*obj {
	var out []*obj
	res := p.reserved()
	for _, c := range w.holders(p.path(), "") {
		if !inside(r, c.held()) || overlapsAny(c.held(), res) {
			out = append(out, c)
		}
	}
	return out
}

func keys(os []*obj) string {
	names := make([]string, 0, len(os))
	for _, o := range os {
		names = append(names, fmt.Sprintf("%s (%s)", o.key(), o.held()))
	}
	return strings.Join(names, ", ")
}
