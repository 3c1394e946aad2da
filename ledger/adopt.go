package ledger

import (
	"errors"
	"fmt"
	"net/netip"

	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// Adoption: an IPAddress the provider did not write for this claim (restored
// from a backup, moved by clusterctl, written by hand) becomes the claim's
// address only if the Subnet would hand that address out and no one else
// holds it. The same rules as DecideAddress, asked of an address that
// already exists instead of the lowest free one.

// ErrAddressNotSeen: the ledger does not show the IPAddress yet (the cache
// that read it runs ahead of the ledger's handlers). Its event wakes the
// claim, so the caller just returns.
var ErrAddressNotSeen = errors.New("the ledger does not show the IPAddress yet")

// ErrMustGo comes with a refusal that only the IPAddress's going ends: its
// address is one the Subnet never hands out (outside its range, reserved),
// or it is being deleted. The caller says which object to delete.
var ErrMustGo = errors.New("the IPAddress cannot be the claim's")

// AdoptAddress decides whether the claim namespace/name may take the
// existing IPAddress of its name (UID addrUID) in Subnet subnet (the
// claim's UID, the fourth argument, is not needed: the IPAddress is judged).
// ErrAddressNotSeen unless the ledger holds that very IPAddress.
// It may if the Subnet is Ready and not being deleted, the address lies in
// the range the Subnet holds and is none of its network, broadcast or
// gateway addresses, the IPAddress is not being deleted, and no other
// holder has the address. Otherwise the decision's Reason and Message say
// why (with ErrMustGo if only the IPAddress's going ends it), and the
// claim waits: it is woken when the Subnet changes or an
// address of it is freed.
func (l *Ledger) AdoptAddress(namespace, name string, addrUID, _ types.UID, subnet string) (AddressDecision, error) {
	sid := idOf(namespace, SubnetKey(subnet))
	l.mu.Lock()
	defer l.mu.Unlock()
	b := &l.b
	sa := b.addresses[sid]
	if sa == nil {
		return AddressDecision{}, ErrAddressNotSeen
	}
	// Only the IPAddress itself is judged: a grant of the claim (assumed)
	// or another object of the name holds another address, not its own.
	h := sa.byName[name]
	if h == nil || !h.object || h.rec.UID != addrUID {
		return AddressDecision{}, ErrAddressNotSeen
	}
	d, err := b.adoptAddress(sa, sid, h)
	if d.Reason != "" {
		sa.wait(name)
	} else {
		sa.stopWaiting(name)
	}
	return d, err
}

// adoptAddress runs the checks in order; the first that fails decides.
func (b *book) adoptAddress(sa *subnetAddresses, sid claimID, h *heldAddress) (AddressDecision, error) {
	subnetName := sid.key().Name()
	c := b.claim(sid)
	if reason, msg := subnetNotServing(c, subnetName); reason != "" {
		return AddressDecision{Reason: reason, Message: msg}, nil
	}
	plan := PlanAddresses(c.held, c.gatewayAddr())
	a := h.rec.Address
	refuse := func(format string, args ...any) AddressDecision {
		return AddressDecision{Reason: AddressAllocationFailed, Message: fmt.Sprintf(format, args...)}
	}
	if !h.rec.Releasing.IsZero() {
		return refuse("IPAddress %s is being deleted", h.rec.Name), ErrMustGo
	}
	if !plan.CIDR.Contains(a) {
		return refuse("IPAddress %s holds %s, outside the range of Subnet %s (%s), which never hands it out",
			h.rec.Name, a, subnetName, plan.CIDR), ErrMustGo
	}
	if what := plan.reservedAs(a); what != "" {
		return refuse("IPAddress %s holds %s, the %s address of Subnet %s (%s), which it never hands out",
			h.rec.Name, a, what, subnetName, plan.CIDR), ErrMustGo
	}
	// A duplicate written later does not take an address from the
	// IPAddress this replica granted and wrote (a reconcile whose cache
	// lags its own bind comes here for it): the duplicate is refused.
	if other := sa.otherHolder(h.rec.Name, a); other != "" && h.granted.IsZero() {
		return refuse("IPAddress %s holds %s, which IPAddress %s holds too; delete the one not in use", h.rec.Name, a, other), nil
	}
	sa.count(plan.CIDR)
	return AddressDecision{Address: a, Prefix: plan.CIDR.Bits(), Gateway: plan.Gateway, Assumed: !h.object, Granted: h.granted, SubnetUID: c.uid}, nil
}

// subnetNotServing says why a Subnet hands out no address (the reasons and
// messages of DecideAddress), or nothing if it does.
func subnetNotServing(c *claim, subnetName string) (reason, message string) {
	switch {
	case c == nil:
		return AddressPoolNotReady, fmt.Sprintf("Subnet %s does not exist", subnetName)
	case c.deleting:
		return AddressPoolNotReady, fmt.Sprintf("Subnet %s is being deleted", subnetName)
	case !c.held.IsValid():
		r := c.reason
		if r == "" {
			r = ipamv1.ReasonPending
		}
		return AddressPoolNotReady, fmt.Sprintf("Subnet %s is not Ready (%s)", subnetName, r)
	}
	return "", ""
}

// reservedAs names what a reserved address is (network, broadcast,
// gateway), or "" if it can be handed out.
func (p AddressPlan) reservedAs(a netip.Addr) string {
	switch a {
	case p.Network:
		return "network"
	case p.Broadcast:
		return "broadcast"
	case p.Gateway:
		return "gateway"
	}
	return ""
}

// otherHolder names a holder of address a other than name, if any.
func (sa *subnetAddresses) otherHolder(name string, a netip.Addr) string {
	if holder, ok := sa.byAddr[a]; ok && holder != name {
		return holder
	}
	if sa.shared == 0 {
		return ""
	}
	for other, o := range sa.byName {
		if other != name && o.rec.Address == a {
			return other
		}
	}
	return ""
}

// HoldsAddressFor reports whether the Subnet holds an address under the
// name: an IPAddress of that name, or a grant being written.
func (l *Ledger) HoldsAddressFor(namespace, subnet, name string) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	sa := l.b.addresses[idOf(namespace, SubnetKey(subnet))]
	return sa != nil && sa.byName[name] != nil
}
