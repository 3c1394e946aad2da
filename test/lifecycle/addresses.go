package lifecycle

// Cluster API IPAM: IPAddressClaims whose spec.poolRef names a Subnet, and
// the IPAddresses that answer them (docs/design/cluster-api-ipam.md). The
// model of a Subnet's addresses is written here from the contract and the
// API's documentation, on net/netip only, like the rest of the model: the
// addresses never handed out, one holder per address, the cool-down, the
// Subnet kept while its addresses are in use.
//
// History (A1-A6, at every revision of the merged history):
//
//   - A1: no two IPAddresses of a Subnet hold the same address at once,
//     terminating ones included (they hold theirs for the cool-down);
//   - A2: an IPAddress, when created, lies in its Subnet's held range
//     (status.cidr of the Subnet at that revision, Ready) and is not its
//     network, broadcast or gateway address;
//   - A3: an address is handed out again no sooner than its last holder's
//     deletionTimestamp plus the cool-down (less a second: timestamps have
//     second precision), and an IPAddress goes only through a terminating
//     version and only once its cool-down has passed;
//   - A4: a Subnet is never gone while an IPAddress of it is in use (not
//     terminating), and it has the address-protection finalizer when one is
//     created;
//   - A5: an IPAddress is written as the contract says: the claim's name,
//     claimRef and poolRef, a controller owner reference to the claim's UID,
//     the Subnet's prefix length and gateway;
//   - A6: a binding is never revoked: a claim is Ready only once its
//     IPAddress exists, stays Ready with it until it is deleted, and its
//     IPAddress is released only after the claim is deleted (or deleted
//     by the garbage collector for a foreground deletion of its Subnet,
//     which the claim survives);
//   - A7: no address is bound to two claims: no two claims of a Subnet
//     are Ready at once with IPAddresses that hold one address;
//   - A8: a claim is Ready only with an address its Subnet would hand out
//     (inside the range the Subnet holds then, not its network, broadcast
//     or gateway address), and an IPAddress the operator did not write
//     (written by hand, or restored from a backup without its owner
//     references) is adopted only if, besides, no other IPAddress of the
//     Subnet holds its address and its claim is the one of its name.
//
// IPAddresses the test writes itself (annotationWrittenBy: by hand, or
// restored) are not the operator's writes: A1-A5 judge only what the
// operator writes, and the test's own duplicates, addresses outside the
// range or on reserved addresses are what A7 and A8 judge the operator's
// answer to. An adopted one is the operator's from its adoption on (A3,
// A6).
//
// At quiescence (L5, L6): every claim is decided, bound if its Subnet is
// Ready, not being deleted and has a free address, and otherwise waits for
// a reason the model justifies (an IPAddress of its name written by hand
// or restored justifies AllocationFailed only if it may not be adopted); a
// bound claim's IPAddress exists, is its own and lies in the Subnet off its
// reserved addresses (it may be terminating: deleted by hand or by a
// foreground deletion of the Subnet, it is kept while the claim lives); no
// IPAddress the operator owns is in use without its claim; a claim of
// another provider's pool is left alone; a Subnet's status.ipAddresses
// counts its IPAddresses, and a Subnet with addresses in use has the
// address-protection finalizer. What is being deleted and not gone is L7
// (checks.go).

import (
	"fmt"
	"maps"
	"math/big"
	"net/netip"
	"slices"
	"strings"
	"time"

	"go4.org/netipx"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	capiipam "sigs.k8s.io/cluster-api/api/ipam/v1beta2"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// Kinds of the Cluster API objects, as the checks name them.
const (
	kindClaim   = "IPAddressClaim"
	kindAddress = "IPAddress"
)

// The contract's finalizers (docs/design/cluster-api-ipam.md), written out
// rather than taken from package capi: the model shares no code with what
// it checks.
const (
	finalizerReleaseAddress = "ipam.cluster.x-k8s.io/ReleaseAddress"
	finalizerProtectAddress = "ipam.cluster.x-k8s.io/ProtectAddress"
)

// annotationWrittenBy marks the IPAddresses the test writes itself:
// writtenByHand (an address a person chose) or writtenByRestore (an
// IPAddress a backup tool restored, owner references dropped). A backup
// tool marks what it restores the same way (Velero's restore labels).
const (
	annotationWrittenBy = "lifecycle.ipam.subnet-operator.io/written-by"
	writtenByHand       = "hand"
	writtenByRestore    = "restore"
)

// finalizerForeground is the finalizer the API server puts on an object
// deleted with propagationPolicy Foreground; the garbage collector
// deletes its dependents, then removes it.
const finalizerForeground = "foregroundDeletion"

// addressReuseAfter is the cool-down the test's managers run with
// (--address-reuse-after): short, so that a run sees addresses handed out
// again.
const addressReuseAfter = 2 * time.Second

// timestampSlack: the API server writes timestamps truncated to the second,
// so a time read from one is up to a second early.
const timestampSlack = time.Second

func fromClaim(c *capiipam.IPAddressClaim) obj {
	return obj{
		Kind: kindClaim, Namespace: c.Namespace, Name: c.Name, UID: c.UID, RV: parseRV(c.ResourceVersion),
		Generation: c.Generation, Deleting: c.DeletionTimestamp != nil,
		Finalizers: slices.Clone(c.Finalizers), Created: c.CreationTimestamp.Time, DeletedAt: timeOf(c.DeletionTimestamp),
		PoolRef: poolRefString(c.Spec.PoolRef), Pool: subnetOf(c.Namespace, c.Spec.PoolRef),
		AddressRef: c.Status.AddressRef.Name, Conditions: slices.Clone(c.Status.Conditions),
	}
}

func fromAddress(a *capiipam.IPAddress) obj {
	o := obj{
		Kind: kindAddress, Namespace: a.Namespace, Name: a.Name, UID: a.UID, RV: parseRV(a.ResourceVersion),
		Generation: a.Generation, Deleting: a.DeletionTimestamp != nil,
		Finalizers: slices.Clone(a.Finalizers), Created: a.CreationTimestamp.Time, DeletedAt: timeOf(a.DeletionTimestamp),
		PoolRef: poolRefString(a.Spec.PoolRef), Pool: subnetOf(a.Namespace, a.Spec.PoolRef),
		Address: a.Spec.Address, Prefix: a.Spec.Prefix, Gateway: a.Spec.Gateway, ClaimRef: a.Spec.ClaimRef.Name,
		WrittenBy: a.Annotations[annotationWrittenBy],
	}
	if owner := metav1.GetControllerOf(a); owner != nil {
		o.Owner = owner.DeepCopy()
	}
	for _, ref := range a.OwnerReferences {
		if ref.Kind == kindSubnet && strings.HasPrefix(ref.APIVersion, ipamv1.GroupVersion.Group+"/") {
			o.SubnetUID = ref.UID
		}
	}
	return o
}

func poolRefString(ref capiipam.IPPoolReference) string {
	return ref.APIGroup + "/" + ref.Kind + "/" + ref.Name
}

// subnetOf is the Subnet a pool reference made from namespace names, as
// "namespace/name" (references are local), or "" if it names another kind
// of pool: one the operator must leave alone.
func subnetOf(namespace string, ref capiipam.IPPoolReference) string {
	if ref.APIGroup != ipamv1.GroupVersion.Group || ref.Kind != kindSubnet || ref.Name == "" {
		return ""
	}
	return namespace + "/" + ref.Name
}

// capiString describes a claim or an IPAddress for a report.
func (o *obj) capiString() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s uid=%s rv=%d created=%s", o.key(), shortUID(o.UID), o.RV, o.Created.Format(time.TimeOnly))
	if o.Deleting {
		fmt.Fprintf(&b, " deleted=%s", o.DeletedAt.Format(time.TimeOnly))
	}
	fmt.Fprintf(&b, " finalizers=%v poolRef=%s", o.Finalizers, o.PoolRef)
	if o.Kind == kindAddress {
		fmt.Fprintf(&b, " spec={address:%s prefix:%s gateway:%s claimRef:%s}", o.Address, lengthString(o.Prefix), o.Gateway, o.ClaimRef)
		if o.Owner != nil {
			fmt.Fprintf(&b, " controller=%s/%s(%s)", o.Owner.Kind, o.Owner.Name, shortUID(o.Owner.UID))
		}
		return b.String()
	}
	fmt.Fprintf(&b, " status={addressRef:%q", o.AddressRef)
	if r := o.ready(); r != nil {
		fmt.Fprintf(&b, " Ready:%s/%s %q", r.Status, r.Reason, r.Message)
	}
	b.WriteString("}")
	return b.String()
}

// foreign: an IPAddress the test wrote (by hand or as a restore) that no
// claim has adopted: not the operator's.
func (o *obj) foreign() bool { return o.WrittenBy != "" && o.Owner == nil }

// parseAddr parses an address as the API carries it: invalid on anything
// but a plain address (no zone). An IPv4-mapped IPv6 address stays one, so
// it lies in no IPv4 range.
func parseAddr(s string) netip.Addr {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}
	}
	return a
}

// ---- a Subnet's addresses ----

// addressPlan is what a Subnet's held range offers machines, from the
// Subnet API's documentation: the IPv4 network and broadcast addresses of
// a range of /30 or wider and the IPv6 network address (Subnet-Router
// anycast) of a /126 or wider are never handed out, nor the gateway:
// spec.gateway, else the first usable address (the network address + 1,
// or the network address itself when the range has fewer than two host
// bits).
type addressPlan struct {
	cidr                        netip.Prefix
	network, broadcast, gateway netip.Addr // network, broadcast: invalid when none
}

func planOf(held netip.Prefix, gateway string) addressPlan {
	p := addressPlan{cidr: held}
	if !held.IsValid() {
		return p
	}
	first := held.Addr()
	if held.Addr().BitLen()-held.Bits() >= 2 {
		p.network = held.Addr()
		if held.Addr().Is4() {
			p.broadcast = netipx.PrefixLastIP(held)
		}
		first = first.Next()
	}
	p.gateway = first
	if gw := parseAddr(gateway); gw.IsValid() {
		p.gateway = gw
	}
	return p
}

// reservedAs names the reserved address a is, or "".
func (p addressPlan) reservedAs(a netip.Addr) string {
	switch {
	case p.network.IsValid() && a == p.network:
		return "network"
	case p.broadcast.IsValid() && a == p.broadcast:
		return "broadcast"
	case a == p.gateway:
		return "gateway"
	}
	return ""
}

// usable is the number of addresses that can be handed out at all.
func (p addressPlan) usable() *big.Int {
	if !p.cidr.IsValid() {
		return new(big.Int)
	}
	n := addresses(p.cidr)
	seen := map[netip.Addr]bool{}
	for _, a := range []netip.Addr{p.network, p.broadcast, p.gateway} {
		if a.IsValid() && p.cidr.Contains(a) && !seen[a] {
			seen[a] = true
			n.Sub(n, big.NewInt(1))
		}
	}
	return n
}

// inUse are the IPAddresses of a Subnet ("namespace/name") that are not
// terminating.
func (w *world) inUse(subnet string) []*obj {
	var out []*obj
	for _, a := range w.addrsOf[subnet] {
		if !a.Deleting {
			out = append(out, a)
		}
	}
	return out
}

// freeAddresses is what Subnet s can still hand out: the usable addresses
// of its held range less those its IPAddresses hold, terminating ones
// included (they cool down). Zero while it holds no range.
func (w *world) freeAddresses(s *obj) *big.Int {
	plan := planOf(s.held(), s.Gateway)
	n := plan.usable()
	seen := map[netip.Addr]bool{}
	for _, a := range w.addrsOf[s.path()] {
		x := parseAddr(a.Address)
		if x.IsValid() && plan.cidr.Contains(x) && plan.reservedAs(x) == "" && !seen[x] {
			seen[x] = true
			n.Sub(n, big.NewInt(1))
		}
	}
	return n
}

// ---- at quiescence: L5, L6 ----

// checkAddresses: L5 on every claim and IPAddress, L6 on every Subnet.
func (r *quiescentReport) checkAddresses(w *world) {
	for _, name := range slices.Sorted(maps.Keys(w.addrClaims)) {
		r.checkAddressClaim(w, w.addrClaims[name])
	}
	for _, name := range slices.Sorted(maps.Keys(w.addrs)) {
		r.checkAddressObject(w, w.addrs[name])
	}
	for _, name := range slices.Sorted(maps.Keys(w.subnets)) {
		r.checkAddressUsage(w, w.subnets[name])
	}
}

// checkAddressClaim: L5, a claim settled as the model says.
func (r *quiescentReport) checkAddressClaim(w *world, c *obj) {
	r.checks++
	a := w.addrs[c.path()]
	if c.Pool == "" {
		// Another provider's claim: left alone, whatever it names.
		if slices.Contains(c.Finalizers, finalizerReleaseAddress) || c.ready() != nil || c.AddressRef != "" || (a != nil && a.Owner != nil && a.Owner.UID == c.UID) {
			r.add("L5", id(c, "foreign"), "a claim of another kind of pool was answered (finalizer, status or IPAddress): %s", c)
		}
		return
	}
	switch {
	case c.Deleting:
		return // L7: what is being deleted goes
	case !slices.Contains(c.Finalizers, finalizerReleaseAddress):
		r.add("L5", id(c, "finalizer"), "claim has no %s finalizer: %s", finalizerReleaseAddress, c)
	}
	ready := c.ready()
	if ready == nil {
		r.add("L5", id(c, "undecided"), "claim has no Ready condition: %s", c)
		return
	}
	if ready.ObservedGeneration != c.Generation {
		r.add("L5", id(c, "generation"), "claim's Ready is not for its generation %d: %s", c.Generation, c)
	}
	s := w.subnets[c.Pool]
	if ready.Status == metav1.ConditionTrue {
		var wrong string
		switch {
		case c.AddressRef != c.Name:
			wrong = fmt.Sprintf("status.addressRef is %q, not the claim's name", c.AddressRef)
		case a == nil:
			wrong = "its IPAddress does not exist"
		// Its IPAddress may be terminating: deleted by hand, or by the
		// garbage collector for a foreground deletion of the Subnet, it
		// is kept, with its address, while the claim lives
		// (docs/cluster-api.md).
		case a.Owner == nil || a.Owner.UID != c.UID:
			wrong = "its IPAddress is not controlled by it: " + a.String()
		case s == nil:
			wrong = "its Subnet does not exist"
		case !s.held().Contains(parseAddr(a.Address)):
			wrong = fmt.Sprintf("its address %s is outside the Subnet's range %q", a.Address, s.StatusCIDR)
		default:
			if why := planOf(s.held(), s.Gateway).reservedAs(parseAddr(a.Address)); why != "" {
				wrong = fmt.Sprintf("its address %s is the %s address of the Subnet's range %s", a.Address, why, s.StatusCIDR)
			}
		}
		if wrong != "" {
			r.add("L5", id(c, "bound"), "claim is Ready but %s: %s", wrong, c)
		}
		return
	}
	justified := claimReasons(w, c)
	if _, ok := justified[ready.Reason]; !ok {
		if a != nil && a.foreign() && len(justified) == 0 {
			r.add("L5", id(c, "adopt/"+ready.Reason), "claim waits (%s) while the IPAddress of its name, written by the test (%s) without owner references, may be adopted (an address Subnet %s would hand out, held by no other IPAddress): %s\n\t%s",
				ready.Reason, a.WrittenBy, c.Pool, c, a)
		} else if len(justified) == 0 {
			r.add("L5", id(c, "free/"+ready.Reason), "claim waits (%s) while Subnet %s is Ready with %s free addresses: %s", ready.Reason, c.Pool, w.freeAddresses(s), c)
		} else {
			r.add("L5", id(c, "reason/"+ready.Reason), "claim reason %s is not justified; the model says %s: %s", ready.Reason, describeJustified(justified), c)
		}
	}
}

// claimReasons are the Ready=False reasons a claim of a Subnet may show,
// each with why; none means it must be bound.
func claimReasons(w *world, c *obj) map[string]string {
	out := map[string]string{}
	if a := w.addrs[c.path()]; a != nil && (a.Deleting || a.Owner == nil || a.Owner.UID != c.UID) {
		// The IPAddress of an earlier claim of this name keeps the name
		// until it goes; one written by hand or restored is adopted if
		// it may be, else it keeps the name until someone removes it.
		if why := w.adoptable(a, c); !a.foreign() || why != "" {
			out[capiipam.IPAddressClaimReadyAllocationFailedReason] = "the IPAddress of this name is not the claim's: " + a.String() + why
		}
	}
	s := w.subnets[c.Pool]
	switch {
	case s == nil:
		out[capiipam.IPAddressClaimReadyPoolNotReadyReason] = "Subnet " + c.Pool + " does not exist"
	case s.Deleting:
		out[capiipam.IPAddressClaimReadyPoolNotReadyReason] = "Subnet " + c.Pool + " is being deleted"
	case !s.held().IsValid():
		out[capiipam.IPAddressClaimReadyPoolNotReadyReason] = "Subnet " + c.Pool + " is not Ready (" + s.readyReason() + ")"
	case w.freeAddresses(s).Sign() <= 0:
		out[capiipam.IPAddressClaimReadyPoolExhaustedReason] = fmt.Sprintf("Subnet %s (%s) has no free address: %d IPAddresses", c.Pool, s.StatusCIDR, len(w.addrsOf[c.Pool]))
	}
	return out
}

// adoptable says why IPAddress a, which claim c does not own, may not be
// adopted by c (the operator's answer to an IPAddress written by hand or
// restored), or "" if it must be: a claim of its name and pool, an
// address the Subnet would hand out, and no other IPAddress of the Subnet
// holding it.
func (w *world) adoptable(a, c *obj) string {
	s := w.subnets[a.Pool]
	x := parseAddr(a.Address)
	switch {
	case a.Deleting:
		return " (terminating)"
	case a.Pool != c.Pool || a.PoolRef != c.PoolRef:
		return " (of another pool)"
	case s == nil || !s.held().IsValid():
		return " (its Subnet holds no range)"
	case !s.held().Contains(x):
		return " (outside " + s.held().String() + ")"
	case planOf(s.held(), s.Gateway).reservedAs(x) != "":
		return " (the " + planOf(s.held(), s.Gateway).reservedAs(x) + " address)"
	}
	for _, o := range w.addrsOf[a.Pool] {
		if o.UID != a.UID && parseAddr(o.Address) == x {
			return " (" + o.key() + " holds it too)"
		}
	}
	return ""
}

// checkAddressObject: L5, an IPAddress settled: in use only with its
// claim, its address its own. (Terminating ones: L7.)
func (r *quiescentReport) checkAddressObject(w *world, a *obj) {
	r.checks++
	if a.Pool == "" || a.Deleting {
		return // not the operator's (A5 reports one it wrote); L7
	}
	if a.foreign() {
		// Written by the test and not adopted: not the operator's to
		// release (L5 on its claim says whether it should have been
		// adopted).
		return
	}
	if c := w.addrClaims[a.path()]; c == nil || a.Owner == nil || c.UID != a.Owner.UID {
		r.add("L5", id(a, "orphan"), "IPAddress is in use though its claim is gone (not released): %s", a)
	}
	for _, o := range w.addrsOf[a.Pool] {
		if o.foreign() {
			continue // the test's own duplicate: A7, A8
		}
		if o.key() < a.key() && parseAddr(o.Address) == parseAddr(a.Address) {
			r.add("L5", id(a, "duplicate/"+string(o.UID)), "two IPAddresses of Subnet %s hold %s:\n\t%s\n\t%s", a.Pool, a.Address, o, a)
		}
	}
}

// checkAddressUsage: L6, a Subnet's status.ipAddresses against its
// IPAddresses, and its protection while they are in use.
func (r *quiescentReport) checkAddressUsage(w *world, s *obj) {
	all, used := w.addrsOf[s.path()], w.inUse(s.path())
	if len(used) > 0 && !slices.Contains(s.Finalizers, ipamv1.FinalizerAddressProtection) {
		r.add("L6", id(s, "unprotected"), "Subnet has %d IPAddresses in use but not the %s finalizer: %s", len(used), ipamv1.FinalizerAddressProtection, s)
	}
	if s.Deleting {
		return // its status is not rewritten while it is being deleted
	}
	u := s.IPAddresses
	if len(all) == 0 {
		if u != nil && (u.InUse != 0 || u.CoolingDown != 0) {
			r.add("L6", id(s, "usage"), "Subnet has no IPAddresses but status.ipAddresses says %+v: %s", *u, s)
		}
		return
	}
	if u == nil {
		r.add("L6", id(s, "usage"), "Subnet has %d IPAddresses but no status.ipAddresses: %s", len(all), s)
		return
	}
	free := "0"
	if f := w.freeAddresses(s); f.Sign() > 0 {
		free = f.String()
	}
	want := ipamv1.IPAddressUsage{InUse: int64(len(used)), CoolingDown: int64(len(all) - len(used)), Free: free}
	if *u != want {
		r.add("L6", id(s, "usage"), "Subnet status.ipAddresses is %+v, want %+v (from its %d IPAddresses): %s", *u, want, len(all), s)
	}
}

// ---- the history: A1-A6 ----

// addressReplay is what the replayer keeps of the Cluster API objects.
type addressReplay struct {
	// bySubnet: the current IPAddresses of each Subnet ("namespace/name"),
	// by key.
	bySubnet map[string]map[string]*obj
	// gone: the last version of every IPAddress gone, by Subnet and
	// address: the previous holders A3 compares a new one with.
	gone map[string]map[netip.Addr][]*obj

	// boundBy: the claims of each Subnet that are Ready, by key: A7.
	boundBy map[string]map[string]*obj

	created, reused, released, went, bound, subnetsGone int
	// written: IPAddresses the test wrote (by hand or restored); adopted:
	// those a claim adopted; foreground: IPAddresses deleted by the
	// garbage collector for a foreground deletion of their Subnet while
	// their claim lived.
	written, adopted, foreground int
	// cooledMax: the longest an IPAddress took to go after its
	// deletionTimestamp (as received), for the summary.
	cooledMax time.Duration
}

func newAddressReplay() addressReplay {
	return addressReplay{bySubnet: map[string]map[string]*obj{}, gone: map[string]map[netip.Addr][]*obj{}, boundBy: map[string]map[string]*obj{}}
}

// applyCAPI replays an event of a claim or an IPAddress; judge is false
// in a gap of the recorder (a state there is a guess) and for events
// synthesised by a re-list.
func (r *replayer) applyCAPI(ev event, v, old *obj, tl *timeline, judge bool) {
	if v.Kind == kindClaim {
		if v.Pool != "" {
			r.noteBound(v, ev.Type == "DELETED")
		}
		if ev.Type == "DELETED" {
			r.remove(v, v.RV)
			return
		}
		r.current[v.key()] = v
		if v.Pool != "" && judge {
			r.checkBinding(v, tl)
			if v.isReady() {
				r.checkBoundOnce(v.Pool, v.RV)
			}
		}
		return
	}
	first := len(tl.versions) == 1
	if first && judge {
		r.addressCreated(v)
	}
	if judge && v.Deleting && (old == nil || !old.Deleting) {
		r.addressReleased(v)
	}
	if ev.Type == "DELETED" {
		if judge {
			r.addressWent(v, ev.Received)
		}
		r.remove(v, v.RV)
		return
	}
	r.current[v.key()] = v
	if old != nil && old.Pool != v.Pool {
		delete(r.addr.bySubnet[old.Pool], old.key())
	}
	if v.Pool != "" {
		if r.addr.bySubnet[v.Pool] == nil {
			r.addr.bySubnet[v.Pool] = map[string]*obj{}
		}
		r.addr.bySubnet[v.Pool][v.key()] = v
	}
	if judge && !first && old != nil && old.Address != v.Address {
		r.checkUnique(v) // its address changed: the contract makes it immutable
	}
	if judge && old != nil && old.Owner == nil && v.Owner != nil && v.WrittenBy != "" {
		r.addressAdopted(v)
	}
	if judge && v.Pool != "" && (old == nil || old.Address != v.Address || old.Pool != v.Pool) {
		r.checkBoundOnce(v.Pool, v.RV)
	}
}

// noteBound keeps the Ready claims of each Subnet for A7.
func (r *replayer) noteBound(v *obj, gone bool) {
	m := r.addr.boundBy[v.Pool]
	if gone || !v.isReady() {
		if m != nil && m[v.key()] != nil && m[v.key()].UID == v.UID {
			delete(m, v.key())
		}
		return
	}
	if m == nil {
		m = map[string]*obj{}
		r.addr.boundBy[v.Pool] = m
	}
	m[v.key()] = v
}

// checkBoundOnce is A7: no two Ready claims of a Subnet are bound to
// IPAddresses that hold one address.
func (r *replayer) checkBoundOnce(subnet string, rv uint64) {
	holders := map[netip.Addr]*obj{}
	m := r.addr.boundBy[subnet]
	for _, k := range slices.Sorted(maps.Keys(m)) {
		c := m[k]
		a := r.current[kindAddress+" "+c.Namespace+"/"+c.AddressRef]
		if a == nil {
			continue // A6
		}
		x := parseAddr(a.Address)
		if !x.IsValid() {
			continue
		}
		other := holders[x]
		if other == nil {
			holders[x] = c
			continue
		}
		p, q := other, c
		if q.UID < p.UID {
			p, q = q, p
		}
		r.add("A7", fmt.Sprintf("%s/%s/%s", p.UID, q.UID, x), "at rv %d address %s of Subnet %s is bound to two claims:\n\t%s\n\t%s\n\tIPAddress of %s: %s",
			rv, x, subnet, p, q, c.key(), a)
	}
}

// addressAdopted is A8 at an adoption: an IPAddress the test wrote gets
// a controller owner reference. Only the claim of its name and pool, as
// it is now, may adopt it, and only if its Subnet would hand out its
// address and no other IPAddress of the Subnet holds it.
func (r *replayer) addressAdopted(v *obj) {
	r.addr.adopted++
	var wrong []string
	c := r.current[kindClaim+" "+v.path()]
	switch {
	case c == nil:
		wrong = append(wrong, "no claim of its name exists")
	case v.Owner.Kind != kindClaim || v.Owner.UID != c.UID:
		wrong = append(wrong, fmt.Sprintf("its controller is %s %s (%s), not the claim of its name (%s)", v.Owner.Kind, v.Owner.Name, shortUID(v.Owner.UID), shortUID(c.UID)))
	case c.PoolRef != v.PoolRef:
		wrong = append(wrong, fmt.Sprintf("its poolRef is %s, the claim's %s", v.PoolRef, c.PoolRef))
	}
	if why := r.wouldHandOut(v.Pool, parseAddr(v.Address)); why != "" {
		wrong = append(wrong, why)
	}
	x := parseAddr(v.Address)
	for _, k := range slices.Sorted(maps.Keys(r.addr.bySubnet[v.Pool])) {
		if o := r.addr.bySubnet[v.Pool][k]; o.UID != v.UID && parseAddr(o.Address) == x {
			wrong = append(wrong, "another IPAddress holds its address: "+o.String())
		}
	}
	if len(wrong) > 0 {
		detail := fmt.Sprintf("IPAddress written by %s adopted at rv %d: %s: %s", v.WrittenBy, v.RV, strings.Join(wrong, "; "), v)
		if c != nil {
			detail += "\n\tclaim: " + c.String()
		}
		r.add("A8", string(v.UID)+"/adopted", "%s", detail)
	}
}

// wouldHandOut says why Subnet subnet ("namespace/name") would not hand
// out address x as the history stands, or "".
func (r *replayer) wouldHandOut(subnet string, x netip.Addr) string {
	s := r.current[kindSubnet+" "+subnet]
	switch {
	case !x.IsValid():
		return "its address is no address"
	case s == nil:
		return "its Subnet " + subnet + " does not exist"
	case !s.held().IsValid():
		return "its Subnet " + subnet + " holds no range: " + s.String()
	case !s.held().Contains(x):
		return fmt.Sprintf("%s lies outside its Subnet's range %s", x, s.held())
	}
	if why := planOf(s.held(), s.Gateway).reservedAs(x); why != "" {
		return fmt.Sprintf("%s is the %s address of its Subnet's range %s", x, why, s.held())
	}
	return ""
}

// addressGone moves an IPAddress that is gone to the previous holders.
func (r *replayer) addressGone(v *obj) {
	if cur := r.addr.bySubnet[v.Pool][v.key()]; cur != nil && cur.UID == v.UID {
		delete(r.addr.bySubnet[v.Pool], v.key())
	}
	a := parseAddr(v.Address)
	if v.Pool == "" || !a.IsValid() || v.foreign() {
		return // the test's own, never the operator's: no cool-down to keep
	}
	if r.addr.gone[v.Pool] == nil {
		r.addr.gone[v.Pool] = map[netip.Addr][]*obj{}
	}
	r.addr.gone[v.Pool][a] = append(r.addr.gone[v.Pool][a], v)
}

// addressCreated checks a new IPAddress against the state at its
// creation: A1, A2, A3 (the new holder side), A4 (protection) and A5.
func (r *replayer) addressCreated(v *obj) {
	r.addr.created++
	if v.Pool == "" {
		r.add("A5", string(v.UID)+"/pool", "an IPAddress in a test namespace whose poolRef (%s) names no Subnet at rv %d: %s", v.PoolRef, v.RV, v)
		return
	}
	if v.WrittenBy != "" {
		// The test's own write: A7 and A8 judge what the operator makes
		// of it.
		r.addr.written++
		return
	}
	a := parseAddr(v.Address)
	s := r.current[kindSubnet+" "+v.Pool]
	switch {
	case !a.IsValid():
		r.add("A2", string(v.UID)+"/parse", "IPAddress's spec.address %q is no address: %s", v.Address, v)
	case s == nil:
		r.add("A2", string(v.UID)+"/subnet", "IPAddress created at rv %d for Subnet %s, which did not exist then: %s", v.RV, v.Pool, v)
	case !s.held().IsValid():
		r.add("A2", string(v.UID)+"/subnet", "IPAddress created at rv %d for Subnet %s, which held no range then: %s\n\t%s", v.RV, v.Pool, v, s)
	case !s.held().Contains(a):
		r.add("A2", string(v.UID)+"/outside", "IPAddress %s created at rv %d outside its Subnet's range %s: %s\n\t%s", a, v.RV, s.held(), v, s)
	default:
		if why := planOf(s.held(), s.Gateway).reservedAs(a); why != "" {
			r.add("A2", string(v.UID)+"/reserved", "IPAddress %s created at rv %d is the %s address of %s: %s\n\t%s", a, v.RV, why, s.held(), v, s)
		}
	}
	if s != nil && !slices.Contains(s.Finalizers, ipamv1.FinalizerAddressProtection) {
		r.add("A4", string(v.UID)+"/unprotected", "IPAddress created at rv %d while its Subnet had no %s finalizer: %s\n\t%s", v.RV, ipamv1.FinalizerAddressProtection, v, s)
	}
	r.checkAddressFields(v, s)
	r.checkUnique(v)
	if !a.IsValid() {
		return
	}
	var previous *obj
	for _, p := range r.addr.gone[v.Pool][a] {
		if p.DeletedAt.IsZero() {
			continue // gone without a deletionTimestamp: A3 said so when it went
		}
		if previous == nil || p.DeletedAt.After(previous.DeletedAt) {
			previous = p
		}
	}
	if previous == nil {
		return
	}
	r.addr.reused++
	if earliest := previous.DeletedAt.Add(addressReuseAfter - timestampSlack); v.Created.Before(earliest) {
		r.add("A3", string(v.UID)+"/reuse", "%s handed out again at %s (IPAddress created), before the cool-down of its last holder, deleted at %s, ended (%s): %s\n\tlast holder: %s",
			a, v.Created.Format(time.TimeOnly), previous.DeletedAt.Format(time.TimeOnly), addressReuseAfter, v, previous)
	}
}

// checkUnique is A1 for an IPAddress whose address just appeared: no
// other IPAddress of its Subnet, terminating or not, holds it.
func (r *replayer) checkUnique(v *obj) {
	a := parseAddr(v.Address)
	if !a.IsValid() {
		return
	}
	for _, k := range slices.Sorted(maps.Keys(r.addr.bySubnet[v.Pool])) {
		o := r.addr.bySubnet[v.Pool][k]
		if o.UID == v.UID || parseAddr(o.Address) != a || o.WrittenBy != "" || v.WrittenBy != "" {
			// The test writes duplicates on purpose: A7 and A8.
			continue
		}
		x, y := v, o
		if y.UID < x.UID {
			x, y = y, x
		}
		r.add("A1", fmt.Sprintf("%s/%s", x.UID, y.UID), "at rv %d two IPAddresses of Subnet %s hold %s:\n\t%s\n\t%s", v.RV, v.Pool, a, x, y)
	}
}

// checkAddressFields is A5: the IPAddress as the contract writes it, for
// its claim as it is at the creation and its Subnet s (nil if none).
func (r *replayer) checkAddressFields(v, s *obj) {
	var wrong []string
	if !slices.Contains(v.Finalizers, finalizerProtectAddress) {
		wrong = append(wrong, "no "+finalizerProtectAddress+" finalizer (nothing keeps it for the cool-down)")
	}
	if v.ClaimRef != v.Name {
		wrong = append(wrong, fmt.Sprintf("spec.claimRef.name is %q", v.ClaimRef))
	}
	c := r.current[kindClaim+" "+v.path()]
	switch {
	case v.Owner == nil || v.Owner.Kind != kindClaim || v.Owner.Name != v.Name:
		wrong = append(wrong, "no controller owner reference to IPAddressClaim "+v.Name)
	case c == nil:
		wrong = append(wrong, "its claim does not exist")
	case v.Owner.UID != c.UID:
		wrong = append(wrong, fmt.Sprintf("its controller owner reference names UID %s, the claim is %s", v.Owner.UID, c.UID))
	}
	if c != nil && c.PoolRef != v.PoolRef {
		wrong = append(wrong, fmt.Sprintf("spec.poolRef is %s, the claim's %s", v.PoolRef, c.PoolRef))
	}
	if s != nil && s.held().IsValid() {
		plan := planOf(s.held(), s.Gateway)
		if v.Prefix == nil || int(*v.Prefix) != s.held().Bits() {
			wrong = append(wrong, fmt.Sprintf("spec.prefix is %s, the Subnet holds %s", lengthString(v.Prefix), s.held()))
		}
		if parseAddr(v.Gateway) != plan.gateway {
			wrong = append(wrong, fmt.Sprintf("spec.gateway is %q, the Subnet's is %s", v.Gateway, plan.gateway))
		}
		if v.SubnetUID != "" && v.SubnetUID != s.UID {
			wrong = append(wrong, fmt.Sprintf("its owner reference to the Subnet names UID %s, the Subnet is %s", v.SubnetUID, s.UID))
		}
	}
	if len(wrong) > 0 {
		detail := fmt.Sprintf("IPAddress created at rv %d: %s: %s", v.RV, strings.Join(wrong, "; "), v)
		if c != nil {
			detail += "\n\tclaim: " + c.String()
		}
		if s != nil {
			detail += "\n\tSubnet: " + s.String()
		}
		r.add("A5", string(v.UID)+"/fields", "%s", detail)
	}
}

// addressReleased is A6 at an IPAddress's deletion: its claim is being
// deleted or gone.
func (r *replayer) addressReleased(v *obj) {
	r.addr.released++
	if v.Owner == nil {
		return
	}
	if s := r.current[kindSubnet+" "+v.Pool]; s != nil && s.Deleting && slices.Contains(s.Finalizers, finalizerForeground) {
		// The garbage collector deletes a foreground-deleted Subnet's
		// dependents; the claim keeps its address (docs/cluster-api.md).
		r.addr.foreground++
		return
	}
	if c := r.current[kindClaim+" "+v.path()]; c != nil && c.UID == v.Owner.UID && !c.Deleting {
		r.add("A6", string(v.UID)+"/released", "IPAddress released (deletionTimestamp) at rv %d while its claim was not being deleted: %s\n\t%s", v.RV, v, c)
	}
}

// addressWent is A3 at an IPAddress's end: it was kept terminating, and
// went no sooner than its cool-down allows (its finalizer comes off once
// deletionTimestamp + the cool-down has passed; the recorder's receipt of
// the deletion is later than the deletion).
func (r *replayer) addressWent(v *obj, received time.Time) {
	r.addr.went++
	if v.Pool == "" || v.foreign() {
		return // not the operator's: the test removes its own
	}
	if !v.Deleting {
		r.add("A3", string(v.UID)+"/no-cool-down", "IPAddress went at rv %d without a terminating version (no deletionTimestamp): its address was not kept for the cool-down: %s", v.RV, v)
		return
	}
	const tolerance = 100 * time.Millisecond // reading two clocks of one host
	after := received.Sub(v.DeletedAt)
	r.addr.cooledMax = max(r.addr.cooledMax, after)
	if after < addressReuseAfter-tolerance {
		r.add("A3", string(v.UID)+"/early", "IPAddress went at rv %d, received %s after its deletionTimestamp: before its cool-down (%s) ended: %s",
			v.RV, after.Round(time.Millisecond), addressReuseAfter, v)
	}
}

// checkSubnetGone is A4 at a Subnet's deletion: no IPAddress of it is in
// use at that revision.
func (r *replayer) checkSubnetGone(s *obj) {
	m := r.addr.bySubnet[s.path()]
	if len(m) == 0 {
		return
	}
	r.addr.subnetsGone++
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if a := m[k]; !a.Deleting && !a.foreign() {
			r.add("A4", string(s.UID)+"/"+string(a.UID), "Subnet gone at rv %d while an IPAddress of it was in use: %s\n\t%s", s.RV, s, a)
		}
	}
}

// checkBinding is A6 for a claim: Ready only once its IPAddress exists
// (its own, not terminating); once Ready, Ready with that IPAddress until
// it is deleted.
func (r *replayer) checkBinding(v *obj, tl *timeline) {
	bound := v.isReady()
	switch {
	case tl.readyAt == 0 && bound:
		tl.readyAt, tl.boundTo = v.RV, v.AddressRef
		r.addr.bound++
		a := r.current[kindAddress+" "+v.Namespace+"/"+v.AddressRef]
		if v.AddressRef != v.Name || a == nil || a.Deleting || a.Owner == nil || a.Owner.UID != v.UID {
			shown := "none"
			if a != nil {
				shown = a.String()
			}
			r.add("A6", string(v.UID)+"/bound", "claim Ready at rv %d without its IPAddress (status.addressRef %q; the IPAddress then: %s): %s", v.RV, v.AddressRef, shown, v)
		}
		if a != nil {
			if why := r.wouldHandOut(v.Pool, parseAddr(a.Address)); why != "" {
				r.add("A8", string(v.UID)+"/ready", "claim Ready at rv %d with an address its Subnet would not hand out: %s: %s\n\tIPAddress: %s", v.RV, why, v, a)
			}
		}
	case tl.readyAt != 0 && !v.Deleting && (!bound || v.AddressRef != tl.boundTo):
		r.add("A6", string(v.UID)+"/revoked", "claim Ready with IPAddress %s since rv %d lost or changed it at rv %d: %s", tl.boundTo, tl.readyAt, v.RV, v)
	}
}
