package ledger

import (
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"time"

	"go4.org/netipx"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ipspace"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

// Addresses in a Subnet: the single addresses that Cluster API
// IPAddressClaims get from a Subnet (package capi), decided here under the
// same decision lock as every range. A Subnet's addresses are an overlap
// domain of their own (no other claim overlaps a Ready Subnet's range), so
// they get a book of their own beside the slots: one entry per address
// held, keyed by the IPAddress's name (the claim's: the contract gives an
// IPAddress its claim's name).
//
// The record is the IPAddress objects, delivered by an informer
// (ApplyAddress, DeleteAddress); a grant is assumed, as a range is, until
// the informer shows its IPAddress. A released address stays held while its
// IPAddress is terminating: package capi keeps it so for the cool-down
// with a finalizer, so the cool-down survives restarts and hand-overs.

// KindAddressClaim is the Kind of the wake-ups for IPAddressClaims (in
// Event.Wake) and of the events about IPAddresses.
const (
	KindAddressClaim = "IPAddressClaim"
	KindAddress      = "IPAddress"
)

// AddressRecord is what the ledger keeps of an IPAddress that a Subnet
// handed out.
type AddressRecord struct {
	Namespace, Name string
	UID             types.UID
	// ResourceVersion orders updates: an older one is ignored.
	ResourceVersion string
	// Subnet is the Subnet (in Namespace) the address is from: spec.poolRef.
	Subnet  string
	Address netip.Addr
	// ClaimUID is the UID of the claim the address was handed to (its
	// controller owner reference).
	ClaimUID types.UID
	// Releasing is when the IPAddress was deleted (its deletionTimestamp);
	// zero while it is in use.
	Releasing time.Time
}

// heldAddress is one address held in a Subnet: by an IPAddress (object) or
// by a grant not shown by the informer yet (assumed).
type heldAddress struct {
	rec     AddressRecord
	object  bool
	granted time.Time // when an assumed grant was made (for the claim's latency metric)
}

// subnetAddresses is the book of one Subnet's addresses.
type subnetAddresses struct {
	// byName holds every address held, by IPAddress (claim) name.
	byName map[string]*heldAddress
	// byAddr names the holder of each address. Two holders of one address
	// happen only if the arbiter was bypassed (a hand-written IPAddress);
	// the address stays held while either exists.
	byAddr map[netip.Addr]string
	// below: every address of belowIn lower than it is held or reserved
	// (the next search starts there), so handing out n addresses costs
	// O(n), not O(n²). It holds only for the range it was found in: a
	// Subnet re-created with another range starts from its base.
	below   netip.Addr
	belowIn netip.Prefix
	// waiting holds the claims (by name) that asked and got nothing: the
	// claims to wake when an address is freed or the Subnet changes.
	waiting map[string]struct{}

	// Counts kept as holders come and go, so that a status or a scrape
	// does not walk every address: in use and cooling down (by holder);
	// shared, the holders whose address another holds too (only a
	// bypassed arbiter); inside, the distinct addresses held within
	// countedIn (the range they were last counted for).
	inUse, cooling, shared, inside int
	countedIn                      netip.Prefix

	// id is the Subnet's claimID, and claims the book-wide index of which
	// Subnets know each IPAddressClaim (book.addressClaims), which this
	// book keeps current as names come and go.
	id     claimID
	claims addressClaims
}

// addressClaims names, for each IPAddressClaim (by "<namespace>/<name>"),
// the Subnets whose book holds an address under its name or has it
// waiting. A decision, a release or a claim's deletion looks up the claim's
// Subnets here instead of walking every book of the namespace or the
// cluster: a tenant's claims that name Subnets which do not exist leave a
// book each (they wait for the Subnet), and must not slow anyone else's
// decisions.
type addressClaims map[string]map[claimID]struct{}

func addressClaimKey(namespace, name string) string { return namespace + "/" + name }

// subnetsOf returns the Subnets that know the claim, in a new slice (the
// caller may change the books while it walks them).
func (ac addressClaims) subnetsOf(namespace, name string) []claimID {
	set := ac[addressClaimKey(namespace, name)]
	out := make([]claimID, 0, len(set))
	for id := range set {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// note records (or, once the book holds nothing under the name and it no
// longer waits, forgets) that the book knows the claim name.
func (sa *subnetAddresses) note(name string) {
	if sa.claims == nil {
		return // a placeholder that is never stored
	}
	key := addressClaimKey(sa.id.namespace(), name)
	_, held := sa.byName[name]
	_, waits := sa.waiting[name]
	if held || waits {
		if sa.claims[key] == nil {
			sa.claims[key] = map[claimID]struct{}{}
		}
		sa.claims[key][sa.id] = struct{}{}
		return
	}
	if delete(sa.claims[key], sa.id); len(sa.claims[key]) == 0 {
		delete(sa.claims, key)
	}
}

// wait records that the claim name waits on this Subnet.
func (sa *subnetAddresses) wait(name string) {
	sa.waiting[name] = struct{}{}
	sa.note(name)
}

// stopWaiting records that the claim name no longer waits on this Subnet.
func (sa *subnetAddresses) stopWaiting(name string) {
	delete(sa.waiting, name)
	sa.note(name)
}

// addressBook is every Subnet's addresses, by the Subnet's claimID.
type addressBook map[claimID]*subnetAddresses

// addressesOf returns the Subnet's book, creating it.
func (b *book) addressesOf(id claimID) *subnetAddresses {
	sa := b.addresses[id]
	if sa == nil {
		sa = &subnetAddresses{byName: map[string]*heldAddress{}, byAddr: map[netip.Addr]string{}, waiting: map[string]struct{}{},
			id: id, claims: b.addressClaims}
		b.addresses[id] = sa
	}
	return sa
}

func (ab addressBook) dropIfEmpty(id claimID) {
	if sa := ab[id]; sa != nil && len(sa.byName) == 0 && len(sa.waiting) == 0 {
		delete(ab, id)
	}
}

func (sa *subnetAddresses) hold(h *heldAddress) {
	sa.byName[h.rec.Name] = h
	sa.note(h.rec.Name)
	if h.rec.Releasing.IsZero() {
		sa.inUse++
	} else {
		sa.cooling++
	}
	if _, taken := sa.byAddr[h.rec.Address]; taken {
		sa.shared++
		return
	}
	sa.byAddr[h.rec.Address] = h.rec.Name
	if sa.countedIn.Contains(h.rec.Address) {
		sa.inside++
	}
}

func (sa *subnetAddresses) drop(name string) {
	h := sa.byName[name]
	if h == nil {
		return
	}
	delete(sa.byName, name)
	sa.note(name)
	if h.rec.Releasing.IsZero() {
		sa.inUse--
	} else {
		sa.cooling--
	}
	if sa.byAddr[h.rec.Address] != name {
		sa.shared--
		return
	}
	delete(sa.byAddr, h.rec.Address)
	if sa.shared > 0 {
		// Another holder of the same address (a bypassed arbiter) keeps it.
		for other, o := range sa.byName {
			if o.rec.Address == h.rec.Address {
				sa.byAddr[h.rec.Address] = other
				sa.shared--
				return
			}
		}
	}
	if sa.countedIn.Contains(h.rec.Address) {
		sa.inside--
	}
	// Only an address of the range the cursor walks lowers it: one outside
	// (an earlier range's, or written by hand) would park it off the range,
	// which reads as "full".
	if sa.below.IsValid() && sa.belowIn.Contains(h.rec.Address) && h.rec.Address.Less(sa.below) {
		sa.below = h.rec.Address
	}
}

// count recounts the distinct addresses held within cidr, if they were
// counted for another range. O(addresses), once per range. The caller
// holds the lock for writing.
func (sa *subnetAddresses) count(cidr netip.Prefix) {
	if sa.countedIn == cidr {
		return
	}
	sa.countedIn, sa.inside = cidr, sa.insideOf(cidr)
}

// insideOf counts the distinct addresses held within cidr.
func (sa *subnetAddresses) insideOf(cidr netip.Prefix) int {
	n := 0
	for a := range sa.byAddr {
		if cidr.Contains(a) {
			n++
		}
	}
	return n
}

// AddressPlan is what a Subnet's range offers to machines: the range, its
// gateway, and the addresses never handed out.
type AddressPlan struct {
	CIDR    netip.Prefix
	Gateway netip.Addr
	// Network and Broadcast are the IPv4 network and broadcast addresses of
	// a range of /30 or wider, and the IPv6 Subnet-Router anycast address
	// (the network address) of a /126 or wider; invalid otherwise.
	Network, Broadcast netip.Addr
}

// PlanAddresses returns the plan of a range with an optional gateway (the
// Subnet's spec.gateway; invalid: the first usable address).
func PlanAddresses(cidr netip.Prefix, gateway netip.Addr) AddressPlan {
	cidr = cidr.Masked()
	p := AddressPlan{CIDR: cidr, Gateway: gateway}
	first := cidr.Addr()
	hostBits := cidr.Addr().BitLen() - cidr.Bits()
	if hostBits >= 2 {
		p.Network = first
		first = first.Next()
		if cidr.Addr().Is4() {
			p.Broadcast = netipx.PrefixLastIP(cidr)
		}
	}
	if !p.Gateway.IsValid() {
		p.Gateway = first
	}
	return p
}

// reserved reports whether a is never handed out.
func (p AddressPlan) reserved(a netip.Addr) bool {
	return a == p.Network || a == p.Broadcast || a == p.Gateway
}

// Usable is the number of addresses that can be handed out at all.
func (p AddressPlan) Usable() *big.Int {
	n := ipspace.AddressCount(p.CIDR)
	for _, a := range []netip.Addr{p.Network, p.Broadcast} {
		if a.IsValid() {
			n.Sub(n, big.NewInt(1))
		}
	}
	if p.Gateway != p.Network && p.Gateway != p.Broadcast && p.CIDR.Contains(p.Gateway) {
		n.Sub(n, big.NewInt(1))
	}
	return n
}

// AddressDecision is the arbiter's verdict on an IPAddressClaim.
type AddressDecision struct {
	// Reason is empty when the claim holds Address, else the claim's Ready
	// reason in the Cluster API contract: PoolNotReady, PoolExhausted or
	// AllocationFailed.
	Reason  string
	Message string
	// Address, Prefix and Gateway are what the IPAddress says.
	Address netip.Addr
	Prefix  int
	Gateway netip.Addr
	// Assumed: granted now, or earlier, and not shown by the informer yet.
	// The caller writes the IPAddress; if that fails for good, it calls
	// ForgetAddress.
	Assumed bool
	// Granted is when the grant was made (zero if the informer showed the
	// IPAddress before this replica granted it).
	Granted time.Time
	// SubnetUID is the UID of the Subnet the address was decided in: the
	// write must go to that object, not to one re-created under its name.
	SubnetUID types.UID
}

// Reasons of an address decision (the Cluster API contract's).
const (
	AddressPoolNotReady     = "PoolNotReady"
	AddressPoolExhausted    = "PoolExhausted"
	AddressAllocationFailed = "AllocationFailed"
)

// DecideAddress decides the IPAddressClaim namespace/name (UID claimUID)
// that asks Subnet namespace/subnet for an address: the address its
// IPAddress holds, else the lowest free one. The Subnet must be Ready and
// not being deleted. The network, broadcast and gateway addresses, every
// address held and every address cooling down (its IPAddress terminating)
// are never handed out.
func (l *Ledger) DecideAddress(namespace, name string, claimUID types.UID, subnet string) AddressDecision {
	sid := idOf(namespace, SubnetKey(subnet))
	l.mu.Lock()
	defer l.mu.Unlock()
	b := &l.b
	sa := b.addressesOf(sid)
	d := b.decideAddress(sa, sid, name, claimUID)
	if d.Reason != "" {
		sa.wait(name)
	} else {
		sa.stopWaiting(name)
	}
	return d
}

func (b *book) decideAddress(sa *subnetAddresses, sid claimID, name string, claimUID types.UID) AddressDecision {
	subnetName := sid.key().Name()
	if h := sa.byName[name]; h != nil {
		switch {
		case !h.rec.Releasing.IsZero():
			return AddressDecision{Reason: AddressAllocationFailed, Message: fmt.Sprintf(
				"the IPAddress %s of an earlier claim of this name still holds %s until its cool-down ends; the claim gets an address then",
				name, h.rec.Address)}
		case h.rec.ClaimUID != claimUID:
			return AddressDecision{Reason: AddressAllocationFailed, Message: fmt.Sprintf(
				"the IPAddress %s belongs to another claim of this name (UID %s); it is released first", name, h.rec.ClaimUID)}
		}
	}
	if other, h := b.addressElsewhere(sid, name); h != nil {
		// An IPAddress name is unique in its namespace: one of an earlier
		// claim of this name, in another Subnet, must go first.
		return AddressDecision{Reason: AddressAllocationFailed, Message: fmt.Sprintf(
			"the IPAddress %s of an earlier claim of this name still holds %s in Subnet %s; the claim gets an address once it is released and cooled down",
			name, h.rec.Address, other.key().Name())}
	}
	c := b.claim(sid)
	switch {
	case c == nil:
		return AddressDecision{Reason: AddressPoolNotReady, Message: fmt.Sprintf("Subnet %s does not exist", subnetName)}
	case c.deleting:
		return AddressDecision{Reason: AddressPoolNotReady, Message: fmt.Sprintf("Subnet %s is being deleted", subnetName)}
	case !c.held.IsValid():
		reason := c.reason
		if reason == "" {
			reason = ipamv1.ReasonPending
		}
		return AddressDecision{Reason: AddressPoolNotReady, Message: fmt.Sprintf("Subnet %s is not Ready (%s)", subnetName, reason)}
	case b.contested(c):
		return AddressDecision{Reason: AddressPoolNotReady, Message: fmt.Sprintf("the range Subnet %s shows is held by another claim (a restored or hand-written status); no address is handed out from it", subnetName)}
	}
	plan := PlanAddresses(c.held, c.gatewayAddr())
	sa.count(plan.CIDR)
	if h := sa.byName[name]; h != nil {
		fits := plan.CIDR.Contains(h.rec.Address) && !plan.reserved(h.rec.Address)
		switch {
		case fits:
			return AddressDecision{Address: h.rec.Address, Prefix: plan.CIDR.Bits(), Gateway: plan.Gateway, Assumed: !h.object, Granted: h.granted, SubnetUID: c.uid}
		case h.object:
			return AddressDecision{Reason: AddressAllocationFailed, Message: fmt.Sprintf(
				"IPAddress %s holds %s, which Subnet %s (%s) does not hand out; delete the claim to release it", name, h.rec.Address, subnetName, plan.CIDR)}
		}
		// A grant never written, made in a Subnet of the same name that
		// is gone: withdrawn.
		sa.drop(name)
	}
	addr, ok := sa.lowestFree(plan)
	if !ok {
		// No figures in the message: a status rewritten at every release
		// would cost a write per waiting claim.
		return AddressDecision{Reason: AddressPoolExhausted, Message: fmt.Sprintf(
			"Subnet %s (%s) has no free address; released addresses are handed out again after their cool-down", subnetName, plan.CIDR)}
	}
	now := time.Now()
	sa.hold(&heldAddress{rec: AddressRecord{Namespace: sid.namespace(), Name: name, Subnet: subnetName, Address: addr, ClaimUID: claimUID}, granted: now})
	return AddressDecision{Address: addr, Prefix: plan.CIDR.Bits(), Gateway: plan.Gateway, Assumed: true, Granted: now, SubnetUID: c.uid}
}

// addressElsewhere returns the holder of an address under this name in
// another Subnet of the same namespace, if any. It looks only at the
// Subnets that know the name (book.addressClaims): one or two.
func (b *book) addressElsewhere(sid claimID, name string) (claimID, *heldAddress) {
	for _, other := range b.addressClaims.subnetsOf(sid.namespace(), name) {
		visit()
		if other == sid {
			continue
		}
		if h := b.addresses[other].byName[name]; h != nil {
			return other, h
		}
	}
	return "", nil
}

// lowestFree returns the lowest address of the plan's range that is neither
// reserved nor held.
func (sa *subnetAddresses) lowestFree(plan AddressPlan) (netip.Addr, bool) {
	a := plan.CIDR.Addr()
	if sa.belowIn != plan.CIDR {
		sa.below, sa.belowIn = netip.Addr{}, plan.CIDR
	}
	if sa.below.IsValid() && sa.below.Less(a) {
		sa.below = netip.Addr{} // below the range: walk it from its base
	}
	if sa.below.IsValid() {
		if !plan.CIDR.Contains(sa.below) {
			// Past the range: full since the last walk, and no address
			// was dropped (drop lowers the cursor). Waiting claims woken
			// by a release do not each walk the whole range again.
			return netip.Addr{}, false
		}
		a = sa.below
	}
	for ; a.IsValid() && plan.CIDR.Contains(a); a = a.Next() {
		if plan.reserved(a) {
			continue
		}
		if _, taken := sa.byAddr[a]; taken {
			continue
		}
		sa.below = a
		return a, true
	}
	sa.below = netip.Addr{}
	if a.IsValid() {
		sa.below = a // one past the range: full until an address is dropped
	}
	return netip.Addr{}, false
}

// ForgetAddress withdraws an assumed grant whose IPAddress could not be
// written (the claim is gone, the write refused); the address is free
// again. An invalid addr withdraws whatever the claim was granted.
func (l *Ledger) ForgetAddress(namespace, name string, claimUID types.UID, subnet string, addr netip.Addr) {
	sid := idOf(namespace, SubnetKey(subnet))
	l.mu.Lock()
	sa := l.b.addresses[sid]
	if sa == nil {
		l.mu.Unlock()
		return
	}
	var wake []string
	h := sa.byName[name]
	forgotten := h != nil && !h.object && h.rec.ClaimUID == claimUID && (!addr.IsValid() || h.rec.Address == addr)
	if forgotten {
		sa.drop(name)
		wake = sa.wakeAll()
	}
	l.b.addresses.dropIfEmpty(sid)
	l.mu.Unlock()
	if forgotten {
		// The address is free again: what waited for it, the Subnet's
		// status and its deletion guard look again.
		l.publishAddress(Deleted, AddressRecord{Namespace: namespace, Name: name, Subnet: subnet}, wake)
	}
}

// StopWaiting forgets a claim that waited for an address (it was deleted,
// or it is no longer ours), in the Subnets that know its name.
func (l *Ledger) StopWaiting(namespace, name string) {
	l.mu.Lock()
	for _, sid := range l.b.addressClaims.subnetsOf(namespace, name) {
		visit()
		l.b.addresses[sid].stopWaiting(name)
		l.b.addresses.dropIfEmpty(sid)
	}
	l.mu.Unlock()
}

// ApplyAddress records an IPAddress that a Subnet handed out, as the
// informer (or a catch-up read) shows it. An update older than what the
// ledger has is ignored.
func (l *Ledger) ApplyAddress(rec AddressRecord, typ EventType) {
	l.applyAddress(rec, typ, false)
}

// applyAddress is ApplyAddress; listed: rec comes from the catch-up read,
// which may be older than what the informer delivered since.
func (l *Ledger) applyAddress(rec AddressRecord, typ EventType, listed bool) {
	sid := idOf(rec.Namespace, SubnetKey(rec.Subnet))
	l.mu.Lock()
	if listed && l.b.goneAddresses != nil {
		// Deleted since the catch-up's read: not resurrected.
		if _, gone := l.b.goneAddresses[rec.UID]; gone {
			l.mu.Unlock()
			return
		}
	}
	sa := l.b.addressesOf(sid)
	prev := sa.byName[rec.Name]
	// resourceVersions order all objects of a kind: an older version, of
	// this object or of one deleted before it was created, changes nothing.
	if prev != nil && prev.object && !newer(rec.ResourceVersion, prev.rec.ResourceVersion) {
		l.mu.Unlock()
		return
	}
	var wake []string
	granted := time.Time{}
	if prev != nil {
		if prev.rec.Address == rec.Address && (!prev.object || prev.rec.UID == rec.UID) {
			granted = prev.granted // this replica's grant, as written: it stays ours
		}
		if prev.rec.Address != rec.Address {
			wake = sa.wakeAll() // the old address is free
		}
		sa.drop(rec.Name)
	}
	sa.hold(&heldAddress{rec: rec, object: true, granted: granted})
	if c := l.b.claim(sid); c != nil && c.held.IsValid() {
		sa.count(c.held.Masked()) // once per range: after a restart no decision may count them
	}
	l.mu.Unlock()
	l.publishAddress(typ, rec, wake)
}

// DeleteAddress records that an IPAddress is gone: its address is free.
func (l *Ledger) DeleteAddress(rec AddressRecord) {
	sid := idOf(rec.Namespace, SubnetKey(rec.Subnet))
	l.mu.Lock()
	if l.b.goneAddresses != nil && rec.UID != "" {
		// By UID: a deleted object never comes back, and a tombstone's
		// resourceVersion may be older than what the LIST read.
		l.b.goneAddresses[rec.UID] = struct{}{}
	}
	sa := l.b.addresses[sid]
	var wake []string
	if sa != nil {
		if h := sa.byName[rec.Name]; h != nil && h.object && (rec.UID == "" || h.rec.UID == rec.UID) {
			sa.drop(rec.Name)
			wake = sa.wakeAll()
		}
		l.b.addresses.dropIfEmpty(sid)
	}
	l.mu.Unlock()
	l.publishAddress(Deleted, rec, wake)
}

// CatchUpAddresses applies a LIST of the IPAddresses read from the API
// server (before a leader's first decision: a standby's informer may lag
// behind what its predecessor wrote). list reads them; an IPAddress the
// informer deletes while the LIST is read and applied is not brought back,
// and an older version never replaces a newer one.
func (l *Ledger) CatchUpAddresses(list func() ([]AddressRecord, error)) error {
	l.mu.Lock()
	l.b.goneAddresses = map[types.UID]struct{}{}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.b.goneAddresses = nil
		l.mu.Unlock()
	}()
	recs, err := list()
	if err != nil {
		return err
	}
	for _, rec := range recs {
		l.applyAddress(rec, Updated, true)
	}
	return nil
}

// wakeAll returns the waiting claims' names (they stay waiting until
// decided).
func (sa *subnetAddresses) wakeAll() []string {
	out := make([]string, 0, len(sa.waiting))
	for name := range sa.waiting {
		out = append(out, name)
	}
	return out
}

// addressWaiters returns the claims waiting on the Subnet id, to wake
// when the Subnet changed. The caller holds the lock.
func (b *book) addressWaiters(id claimID) []string {
	if sa := b.addresses[id]; sa != nil {
		return sa.wakeAll()
	}
	return nil
}

func (l *Ledger) publishAddress(typ EventType, rec AddressRecord, wake []string) {
	ev := Event{Type: typ, Kind: KindAddress, Namespace: rec.Namespace, Name: rec.Name, Subnet: rec.Subnet}
	ev.Wake = claimRefs(rec.Namespace, append(wake, rec.Name))
	l.publish(ev)
}

// claimRefs names IPAddressClaims of one namespace as wake-ups.
func claimRefs(namespace string, names []string) []statuscalc.ClaimRef {
	slices.Sort(names)
	names = slices.Compact(names)
	out := make([]statuscalc.ClaimRef, len(names))
	for i, n := range names {
		out[i] = statuscalc.ClaimRef{Kind: KindAddressClaim, Namespace: namespace, Name: n}
	}
	return out
}

// AddressUsage is what a Subnet's addresses show in its status.
type AddressUsage struct {
	InUse, CoolingDown int64
	// Free is what can still be handed out; nil while the Subnet holds no
	// range.
	Free *big.Int
	// Holders names up to a few claims that hold addresses, in name order.
	Holders []string
}

// AddressUsage returns the Subnet's address counts; false if no address
// was ever held in it (nothing to show).
func (l *Ledger) AddressUsage(namespace, subnet string, holders int) (AddressUsage, bool) {
	sid := idOf(namespace, SubnetKey(subnet))
	l.mu.RLock()
	defer l.mu.RUnlock()
	sa := l.b.addresses[sid]
	c := l.b.claim(sid)
	if (sa == nil || len(sa.byName) == 0) && (c == nil || !c.protected) {
		return AddressUsage{}, false // never served an address
	}
	if sa == nil {
		sa = &subnetAddresses{}
	}
	u := AddressUsage{InUse: int64(sa.inUse), CoolingDown: int64(sa.cooling)}
	if holders > 0 {
		var names []string
		for name, h := range sa.byName {
			if h.rec.Releasing.IsZero() {
				names = append(names, name)
			}
		}
		slices.Sort(names)
		u.Holders = names[:min(holders, len(names))]
	}
	if c != nil && c.held.IsValid() {
		plan := PlanAddresses(c.held, c.gatewayAddr())
		inside := sa.inside
		if sa.countedIn != plan.CIDR {
			inside = sa.insideOf(plan.CIDR) // counted for another range (or not yet): walk once
		}
		// The reserved addresses are never held (only a bypassed arbiter
		// holds one, and then free is one lower than it should be).
		free := plan.Usable()
		free.Sub(free, big.NewInt(int64(inside)))
		if free.Sign() < 0 {
			free.SetInt64(0)
		}
		u.Free = free
	}
	return u, true
}

// AddressSubnets names the Subnets that hold addresses (in use or cooling
// down), for the metrics.
func (l *Ledger) AddressSubnets() []types.NamespacedName {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]types.NamespacedName, 0, len(l.b.addresses))
	for sid, sa := range l.b.addresses {
		if len(sa.byName) > 0 {
			out = append(out, types.NamespacedName{Namespace: sid.namespace(), Name: sid.key().Name()})
		}
	}
	return out
}

// ProtectedSubnets names the Subnets that carry the address-protection
// finalizer and are being deleted: the ones whose finalizer may be due to
// go. O(Subnets); a new leader asks once.
func (l *Ledger) ProtectedSubnets() []types.NamespacedName {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var out []types.NamespacedName
	for _, n := range l.b.namespaces {
		for id, c := range n.claims {
			if c.protected && c.deleting {
				out = append(out, types.NamespacedName{Namespace: id.namespace(), Name: id.key().Name()})
			}
		}
	}
	return out
}

// dropAssumedAddresses withdraws the grants of a Subnet that is gone and
// were never written: the IPAddress is written only after the Subnet got
// its protection finalizer, which it cannot have once gone, so none is in
// flight. IPAddresses that exist stay held. The caller holds the lock.
func (b *book) dropAssumedAddresses(id claimID) {
	sa := b.addresses[id]
	if sa == nil {
		return
	}
	for name, h := range sa.byName {
		if !h.object {
			sa.drop(name)
		}
	}
	sa.below = netip.Addr{}
	b.addresses.dropIfEmpty(id)
}

// ForgetAssumedName withdraws, in every Subnet of the namespace, a grant
// to a claim of this name that was never written: the claim is gone (its
// finalizer removed by hand, or moved away) without being released.
// Writes for one name are serialized (one reconcile per name), so none is
// in flight.
func (l *Ledger) ForgetAssumedName(namespace, name string) {
	l.mu.Lock()
	var forgotten []AddressRecord
	var wake [][]string
	for _, sid := range l.b.addressClaims.subnetsOf(namespace, name) {
		visit()
		sa := l.b.addresses[sid]
		if h := sa.byName[name]; h != nil && !h.object {
			forgotten = append(forgotten, h.rec)
			sa.drop(name)
			wake = append(wake, sa.wakeAll())
			l.b.addresses.dropIfEmpty(sid)
		}
	}
	l.mu.Unlock()
	for i, rec := range forgotten {
		l.publishAddress(Deleted, rec, wake[i])
	}
}
