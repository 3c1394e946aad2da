// Package statuscalc computes a pool's status from its claims. It is pure:
// no client, no clock beyond what meta.SetStatusCondition stamps on a
// condition transition. The reconcilers feed it from the in-memory ledger; the
// tests and the auditor feed it from plain lists through Calculate.
package statuscalc

import (
	"cmp"
	"fmt"
	"net/netip"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ipspace"
)

// Kind of a claim: a Subnet or a child SubnetPool.
const (
	KindSubnet     = "Subnet"
	KindSubnetPool = "SubnetPool"
)

// ClaimRef names a claim. Today a claim and its pool share a namespace;
// the type does not assume it (docs/design/tenancy.md).
type ClaimRef struct {
	Kind      string
	Namespace string
	Name      string
}

func (r ClaimRef) String() string {
	return fmt.Sprintf("%s %s/%s", r.Kind, r.Namespace, r.Name)
}

// Claim is a Subnet or a child pool as its pool sees it.
type Claim struct {
	Ref ClaimRef
	// Requested is the explicit range asked for (spec.cidr); invalid for a
	// Subnet that asks for a prefix length.
	Requested netip.Prefix
	// Held is the range the claim holds (status.cidr while Ready); invalid
	// while it holds nothing.
	Held netip.Prefix
	// Created is the creation timestamp, the first key of the winner order.
	Created time.Time
}

// Older is the deterministic winner order of design invariant 1: the older
// creation timestamp wins, then the lexically smaller name (then kind and
// namespace, so the order is total across the namespaces of one pool).
func Older(a, b Claim) int {
	if c := a.Created.Compare(b.Created); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Ref.Name, b.Ref.Name); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Ref.Kind, b.Ref.Kind); c != 0 {
		return c
	}
	// Claims on one pool may live in several namespaces.
	return cmp.Compare(a.Ref.Namespace, b.Ref.Namespace)
}

// Conflict is a claim that does not hold its range because another does. A
// held range outside the pool or on a reserved range (possible only when the
// arbiter was bypassed) is a conflict without a winner.
type Conflict struct {
	Loser       ClaimRef
	LoserRange  netip.Prefix
	Winner      ClaimRef
	WinnerRange netip.Prefix
}

func (c Conflict) String() string {
	if c.Winner == (ClaimRef{}) {
		return fmt.Sprintf("%s holds %s outside the pool or on a reserved range", c.Loser, c.LoserRange)
	}
	return fmt.Sprintf("%s (%s) overlaps %s (%s)", c.Loser, c.LoserRange, c.Winner, c.WinnerRange)
}

// FromSubnet converts a Subnet.
func FromSubnet(s *ipamv1.Subnet) Claim {
	c := Claim{
		Ref:     ClaimRef{Kind: KindSubnet, Namespace: s.Namespace, Name: s.Name},
		Created: s.CreationTimestamp.Time,
	}
	if s.Spec.CIDR != "" {
		c.Requested, _ = ipspace.ParsePrefix(s.Spec.CIDR)
	}
	if meta.IsStatusConditionTrue(s.Status.Conditions, ipamv1.ConditionReady) && s.Status.CIDR != "" {
		c.Held, _ = ipspace.ParsePrefix(s.Status.CIDR)
	}
	return c
}

// FromChildPool converts a child pool: it requests its spec.cidr from the
// parent and holds its status.cidr, the range the parent granted.
func FromChildPool(p *ipamv1.SubnetPool) Claim {
	c := Claim{
		Ref:     ClaimRef{Kind: KindSubnetPool, Namespace: p.Namespace, Name: p.Name},
		Created: p.CreationTimestamp.Time,
	}
	c.Requested, _ = ipspace.ParsePrefix(p.Spec.CIDR)
	if p.Status.CIDR != "" {
		c.Held, _ = ipspace.ParsePrefix(p.Status.CIDR)
	}
	return c
}
