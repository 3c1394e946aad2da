package ledger

import (
	"fmt"
	"net/netip"

	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

// A delegated root pool (spec.delegation) takes its range from a pool in a
// hub cluster (package fleet). Its spec.cidr is a request to the hub, not to
// this cluster: whoever may write the pool may write it, at create (a
// restore) or once after (the member's manager recording the grant). So the
// arbiter asks the pool's address space for spec.cidr only once the fleet's
// member reconciler has seen the hub grant exactly that range to this
// pool's claim there (SetDelegation). Until then the pool asks for nothing
// and serves nothing, whatever its spec says; with the webhooks bypassed
// too. A range it already holds it keeps, hub or no hub: a grant is never
// revoked, and a member keeps serving what it holds while the hub is
// unreachable or after a restart, before the hub was asked again. "Holds"
// is a status written by this cluster's operator for this very object:
// status.cidr showing spec.cidr and status.grantedToUID naming the pool's
// UID (HoldsGrant). A status alone is not a grant: a backup tool restores
// it onto a new object (another UID) whose range the hub may since have
// granted to another member. A range a status shows without that proof
// (a restore, or a pool served by a manager from before grantedToUID) is
// kept from this cluster's other roots but not served, until the hub
// grants it: freeing it could let a local root take the range of Subnets
// carved before. The member's own address space still decides as for any
// root: a hub grant that overlaps a local root waits there (Overlaps),
// named.

// DelegationState is what the member reconciler knows of a delegated
// pool's claim in the hub.
type DelegationState struct {
	// UID is the member pool's UID: a state is for one object.
	UID types.UID
	// Granted is the range the hub grants the pool's claim; invalid while
	// it grants none.
	Granted netip.Prefix
	// Reason and Message say why the pool waits, for its Ready condition
	// (a reason of api/v1alpha2/fleet_reasons.go); empty: DelegationPending.
	Reason, Message string
}

// SetDelegation records what the hub says of the claim of the delegated
// pool namespace/name and decides the pool again if that changes what it
// may ask for (its reconcile is requeued).
func (l *Ledger) SetDelegation(namespace, name string, st DelegationState) {
	id := poolIDOf(namespace, name)
	l.mu.Lock()
	b := &l.b
	if b.delegations[id] == st {
		l.mu.Unlock()
		return
	}
	b.delegations[id] = st
	obj := b.delegatedPools[id]
	if obj == nil || obj.UID != st.UID {
		l.mu.Unlock()
		return // its informer event applies the state when it comes
	}
	wake := b.applyPool(obj)
	l.mu.Unlock()
	// OldObject nil: the pool's own reconcile is requeued (its Ready
	// condition carries the state).
	l.publish(Event{Type: Updated, Kind: statuscalc.KindSubnetPool, Namespace: namespace, Name: name, Object: obj, Wake: refs(wake)})
}

// gateDelegation makes a delegated root pool ask its space only for a
// range the hub granted it, or that it already holds.
func (b *book) gateDelegation(p *ipamv1.SubnetPool, pl *pool, c *claim) {
	if p.Spec.Delegation == nil || p.Spec.ParentRef != nil || c == nil {
		delete(b.delegatedPools, pl.id)
		return
	}
	b.delegatedPools[pl.id] = p // the informer's object, never modified
	st, known := b.delegations[pl.id]
	granted := known && st.UID == pl.uid && st.Granted.IsValid() && st.Granted == pl.spec
	if granted || HoldsGrant(p) {
		return
	}
	// Asks for nothing; a range its status shows stays held in the space
	// (see above), and the decision says it is not served.
	pl.awaitingHub = true
	pl.spec = netip.Prefix{}
	c.requested, c.invalidSpec = netip.Prefix{}, false
}

// HoldsGrant reports whether a delegated pool holds the range the hub
// granted it: its status, which this cluster's operator writes, shows its
// spec.cidr served for this very object (status.grantedToUID). A restore
// copies the status onto an object with another UID.
func HoldsGrant(p *ipamv1.SubnetPool) bool {
	return p.Spec.CIDR != "" && p.Status.CIDR == p.Spec.CIDR && p.Status.GrantedToUID == p.UID
}

// forgetDelegation drops what is known of a deleted pool's delegation.
func (b *book) forgetDelegation(id poolID) {
	delete(b.delegations, id)
	delete(b.delegatedPools, id)
}

// awaitingHub is the decision for a delegated pool the hub has not granted
// its range (yet): the member reconciler's reason, or DelegationPending.
func (b *book) awaitingHub(p *pool, granted netip.Prefix) Decision {
	st := b.delegations[p.id]
	if st.UID == p.uid && st.Granted.IsValid() {
		return Decision{Reason: ipamv1.ReasonDelegationPending, CIDR: granted,
			Message: fmt.Sprintf("the hub granted %s; waiting for it to be recorded in spec.cidr", st.Granted)}
	}
	unproven := ""
	if granted.IsValid() {
		unproven = fmt.Sprintf("; its status shows %s, which the hub has not granted to this object (a restored status?): kept from this cluster's other root pools, not served", granted)
	}
	if st.UID != p.uid || st.Reason == "" {
		return Decision{Reason: ipamv1.ReasonDelegationPending, CIDR: granted,
			Message: fmt.Sprintf("waiting for the hub to grant a range to SubnetPool %s (see its %s condition)%s", p.id, ipamv1.ConditionDelegated, unproven)}
	}
	return Decision{Reason: st.Reason, CIDR: granted, Message: st.Message + unproven}
}
