package ipamcli

import (
	"cmp"
	"context"
	"fmt"
	"math/big"
	"net/netip"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	capiipam "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ipspace"
	"github.com/subnet-operator/subnet-operator/ledger"
)

// PoolNode is one pool of the tree, with the figures its status shows.
type PoolNode struct {
	Namespace          string `json:"namespace"`
	Name               string `json:"name"`
	CIDR               string `json:"cidr"`
	Ready              string `json:"ready"`
	Reason             string `json:"reason,omitempty"`
	Capacity           string `json:"capacity,omitempty"`
	Allocated          string `json:"allocated,omitempty"`
	Free               string `json:"free,omitempty"`
	Utilization        string `json:"utilization,omitempty"`
	UtilizationPercent int32  `json:"utilizationPercent"`
	LargestFreeBlock   string `json:"largestFreeBlock,omitempty"`
	Subnets            int32  `json:"subnets"`
	MissingParent      string `json:"missingParent,omitempty"`
	// ParentNamespace is set when the parent is in a namespace the listing
	// left out (tree -n): it exists there, or cannot be read from here.
	ParentNamespace string     `json:"parentNamespace,omitempty"`
	InCycle         bool       `json:"inCycle,omitempty"`
	Children        []PoolNode `json:"children,omitempty"`
	// Members are the claims member clusters of a fleet made on this pool
	// (on a hub: Subnets labelled with the member cluster; docs/fleet.md).
	Members []MemberClaim `json:"members,omitempty"`
}

// MemberClaim is a Subnet a member cluster's manager made in the hub for
// one of its delegated root pools: which cluster and which of its pools
// holds (or asks for) what.
type MemberClaim struct {
	// Namespace and Name are the Subnet's, in the hub.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Cluster is the member cluster (the Subnet's member-cluster label).
	Cluster string `json:"cluster"`
	// Pool is the member pool, "namespace/name" in the member cluster.
	Pool string `json:"pool,omitempty"`
	// CIDR is the range the hub granted; empty while it grants none.
	CIDR   string `json:"cidr,omitempty"`
	Ready  string `json:"ready"`
	Reason string `json:"reason,omitempty"`
}

// Tree returns the pools of the namespace ("" for every namespace) as
// trees: roots, each with its child pools, in name order. A pool whose
// parent does not exist is shown as a root, naming the missing parent.
func Tree(ctx context.Context, c client.Reader, namespace string) ([]PoolNode, error) {
	var opts []client.ListOption
	if namespace != "" {
		opts = append(opts, client.InNamespace(namespace))
	}
	pools, err := listPools(ctx, c, opts...)
	if err != nil {
		return nil, err
	}
	type key struct{ namespace, name string }
	exists := map[key]bool{}
	children := map[key][]*ipamv1.SubnetPool{}
	for i := range pools {
		p := &pools[i]
		exists[key{p.Namespace, p.Name}] = true
	}
	var roots []*ipamv1.SubnetPool
	for i := range pools {
		p := &pools[i]
		if ref := p.Spec.ParentRef; ref != nil && exists[key{ref.In(p.Namespace), ref.Name}] {
			parent := key{ref.In(p.Namespace), ref.Name}
			children[parent] = append(children[parent], p)
		} else {
			roots = append(roots, p)
		}
	}
	byName := func(a, b *ipamv1.SubnetPool) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	}
	members, err := memberClaims(ctx, c)
	if err != nil {
		return nil, err
	}
	visited := map[key]bool{}
	var build func(p *ipamv1.SubnetPool) PoolNode
	build = func(p *ipamv1.SubnetPool) PoolNode {
		visited[key{p.Namespace, p.Name}] = true
		n := poolNode(p)
		n.Members = members[poolKey{p.Namespace, p.Name}]
		if ref := p.Spec.ParentRef; ref != nil && !exists[key{ref.In(p.Namespace), ref.Name}] {
			if namespace != "" && ref.In(p.Namespace) != namespace && parentOutsideExists(ctx, c, ref.In(p.Namespace), ref.Name) {
				n.ParentNamespace = ref.In(p.Namespace)
			} else {
				n.MissingParent = shortRef(p.Namespace, *ref)
			}
		}
		kids := children[key{p.Namespace, p.Name}]
		slices.SortFunc(kids, byName)
		for _, k := range kids {
			if !visited[key{k.Namespace, k.Name}] {
				n.Children = append(n.Children, build(k))
			}
		}
		return n
	}
	slices.SortFunc(roots, byName)
	out := make([]PoolNode, 0, len(roots))
	for _, r := range roots {
		out = append(out, build(r))
	}
	// Pools on a parentRef cycle (which the webhook refuses, but a bypassed
	// one may store) hang from no root: show each cycle from its first pool.
	var cycles []*ipamv1.SubnetPool
	for i := range pools {
		if !visited[key{pools[i].Namespace, pools[i].Name}] {
			cycles = append(cycles, &pools[i])
		}
	}
	slices.SortFunc(cycles, byName)
	for _, p := range cycles {
		if !visited[key{p.Namespace, p.Name}] {
			n := build(p)
			n.InCycle = true
			out = append(out, n)
		}
	}
	return out, nil
}

// parentOutsideExists reports whether a parent outside the listed namespace
// may exist: it does, or the caller may not read it (a tenant is often not
// allowed to read the platform's namespace, and the parent is then not
// "missing" for all it knows).
func parentOutsideExists(ctx context.Context, c client.Reader, namespace, name string) bool {
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &ipamv1.SubnetPool{})
	return !apierrors.IsNotFound(err)
}

// poolKey is a pool's namespace and name.
type poolKey struct{ namespace, name string }

// memberClaims returns the claims member clusters made in this (hub)
// cluster, by the pool they claim from, in cluster and name order. They are
// Subnets in the members' own namespaces, so they are listed in every
// namespace; a caller who may not do that sees no members, not an error
// (a tenant of the hub has no business with the fleet).
func memberClaims(ctx context.Context, c client.Reader) (map[poolKey][]MemberClaim, error) {
	subnets, err := listSubnets(ctx, c, client.HasLabels{ipamv1.LabelMemberCluster})
	if apierrors.IsForbidden(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[poolKey][]MemberClaim{}
	for _, s := range subnets {
		m := MemberClaim{Namespace: s.Namespace, Name: s.Name, Cluster: s.Labels[ipamv1.LabelMemberCluster],
			Pool: s.Annotations[ipamv1.AnnotationMemberPool], CIDR: s.Status.CIDR, Ready: "Unknown"}
		if ready := meta.FindStatusCondition(s.Status.Conditions, ipamv1.ConditionReady); ready != nil {
			m.Ready, m.Reason = string(ready.Status), ready.Reason
		}
		k := poolKey{s.Spec.PoolRef.In(s.Namespace), s.Spec.PoolRef.Name}
		out[k] = append(out[k], m)
	}
	for _, ms := range out {
		slices.SortFunc(ms, func(a, b MemberClaim) int {
			return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
		})
	}
	return out, nil
}

func poolNode(p *ipamv1.SubnetPool) PoolNode {
	n := PoolNode{
		Namespace: p.Namespace, Name: p.Name, CIDR: p.Spec.CIDR, Ready: "Unknown",
		Capacity: p.Status.Capacity, Allocated: p.Status.Allocated, Free: p.Status.Free,
		Utilization: p.Status.Utilization, LargestFreeBlock: p.Status.LargestFreeBlock, Subnets: p.Status.Subnets,
	}
	if p.Status.UtilizationPercent != nil {
		n.UtilizationPercent = *p.Status.UtilizationPercent
	}
	if c := meta.FindStatusCondition(p.Status.Conditions, ipamv1.ConditionReady); c != nil {
		n.Ready, n.Reason = string(c.Status), c.Reason
	}
	return n
}

// FreeResult is a pool's free space: every free block, largest first, or
// with a length, the blocks that can hold a range of that length and how
// many each holds.
type FreeResult struct {
	Namespace string      `json:"namespace"`
	Pool      string      `json:"pool"`
	CIDR      string      `json:"cidr"`
	Length    *int        `json:"length,omitempty"`
	Blocks    []FreeBlock `json:"blocks"`
	// Total is the free addresses or, with a length, the ranges of that
	// length that can still be allocated (fragmentation-aware).
	Total string `json:"total"`
}

// FreeBlock is one maximal free aligned block.
type FreeBlock struct {
	CIDR      string `json:"cidr"`
	Addresses string `json:"addresses"`
	// Fits is how many ranges of the asked length the block holds.
	Fits string `json:"fits,omitempty"`
}

// Free returns a pool's free blocks from the operator's own free-space map
// rebuilt from the API. With length >= 0 it lists only the blocks that can
// hold a range of that length, and refuses a length the pool's rules do not
// allow, in the words the admission webhook would use.
func Free(ctx context.Context, c client.Reader, namespace, pool string, length int) (FreeResult, error) {
	l, _, err := poolLedger(ctx, c, namespace, pool)
	if err != nil {
		return FreeResult{}, err
	}
	blocks, serving, ok := l.FreeBlocks(namespace, pool, 0)
	if !ok {
		return FreeResult{}, fmt.Errorf("SubnetPool %s/%s serves no range yet (see its Ready condition)", namespace, pool)
	}
	res := FreeResult{Namespace: namespace, Pool: pool, CIDR: serving.String(), Blocks: []FreeBlock{}}
	total := new(big.Int)
	if length >= 0 {
		view, _ := l.Pool(namespace, pool)
		rules := ipspace.Rules{Name: fmt.Sprintf("SubnetPool %s/%s", namespace, pool), Pool: serving, Reserved: view.Reserved, MinLength: view.Min, MaxLength: view.Max}
		if v := rules.CheckLength(length); v != nil {
			return FreeResult{}, fmt.Errorf("%s", v.Detail)
		}
		res.Length = &length
	}
	for _, b := range blocks {
		fb := FreeBlock{CIDR: b.String(), Addresses: ipspace.AddressCount(b).String()}
		switch {
		case length < 0:
			total.Add(total, ipspace.AddressCount(b))
		case b.Bits() > length:
			continue // too small for the length
		default:
			fits := new(big.Int).Lsh(big.NewInt(1), uint(length-b.Bits()))
			fb.Fits = fits.String()
			total.Add(total, fits)
		}
		res.Blocks = append(res.Blocks, fb)
	}
	res.Total = total.String()
	return res, nil
}

// NextResult is the range the next allocation from a pool would get.
type NextResult struct {
	Namespace string `json:"namespace"`
	Pool      string `json:"pool"`
	Length    int    `json:"length"`
	// CIDR is the range, empty when none would be granted (Reason says why).
	CIDR    string `json:"cidr,omitempty"`
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
}

// Next asks the operator's arbiter, in a ledger of its own loaded from the
// API, what a Subnet of the length created now would get: the same best-fit
// choice, rules and messages as the controller, and nothing is allocated.
// A negative length means the pool's defaultPrefixLength. The answer holds
// unless something else is allocated first.
func Next(ctx context.Context, c client.Reader, namespace, pool string, length int) (NextResult, error) {
	l, target, err := poolLedger(ctx, c, namespace, pool)
	if err != nil {
		return NextResult{}, err
	}
	var asked *int32
	switch {
	case length >= 0:
		n := int32(length)
		asked = &n
	case target.Spec.DefaultPrefixLength != nil:
		length = int(*target.Spec.DefaultPrefixLength)
	default:
		return NextResult{}, fmt.Errorf("SubnetPool %s/%s has no spec.defaultPrefixLength: pass --length", namespace, pool)
	}
	s := hypotheticalSubnet(namespace, pool, asked)
	l.ApplySubnet(s, ledger.Created, nil)
	d, _ := l.DecideSubnet(namespace, s.Name, s.UID)
	res := NextResult{Namespace: namespace, Pool: pool, Length: length, Reason: d.Reason, Message: d.Message}
	if d.Ready() {
		res.CIDR = d.CIDR.String()
		res.Message = ""
	}
	return res, nil
}

// Holder is an object whose range overlaps the address or range asked about.
type Holder struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	CIDR      string `json:"cidr"`
	// Pool is the pool it claims from (a Subnet's poolRef, a child pool's
	// parentRef); empty for a root pool.
	Pool string `json:"pool,omitempty"`
	// State is a Subnet's Ready reason (Allocated when it holds CIDR), or a
	// pool's Ready status.
	State string `json:"state"`
	// Holds says whether the object holds CIDR (a Ready Subnet, a serving
	// pool) or only asks for it.
	Holds bool `json:"holds"`
	// Claim is the IPAddressClaim a Cluster API IPAddress was handed to.
	Claim string `json:"claim,omitempty"`
}

// WhoHas returns the pools, Subnets and Cluster API IPAddresses whose range
// contains or lies inside query (an address or a CIDR), outermost first
// whatever their namespaces: the pools that serve it, down to the Subnet
// that holds it and the IPAddress handed out from it, with its claim.
// Subnets that ask for an overlapping range without holding it are listed
// too, marked so.
func WhoHas(ctx context.Context, c client.Reader, namespace string, query netip.Prefix) ([]Holder, error) {
	var opts []client.ListOption
	if namespace != "" {
		opts = append(opts, client.InNamespace(namespace))
	}
	pools, err := listPools(ctx, c, opts...)
	if err != nil {
		return nil, err
	}
	subnets, err := listSubnets(ctx, c, opts...)
	if err != nil {
		return nil, err
	}
	var out []Holder
	for i := range pools {
		p := &pools[i]
		cidr, holds := p.Status.CIDR, true
		if cidr == "" {
			cidr, holds = p.Spec.CIDR, false
		}
		if r, err := ipspace.ParsePrefix(cidr); err == nil && r.Overlaps(query) {
			h := Holder{Kind: "SubnetPool", Namespace: p.Namespace, Name: p.Name, CIDR: r.String(), State: "Unknown", Holds: holds}
			if ref := p.Spec.ParentRef; ref != nil {
				h.Pool = shortRef(p.Namespace, *ref)
			}
			if c := meta.FindStatusCondition(p.Status.Conditions, ipamv1.ConditionReady); c != nil {
				h.State = "Ready=" + string(c.Status)
				h.Holds = holds && c.Status == "True"
			}
			out = append(out, h)
		}
	}
	for i := range subnets {
		s := &subnets[i]
		cidr, holds := s.Status.CIDR, true
		if cidr == "" || !meta.IsStatusConditionTrue(s.Status.Conditions, ipamv1.ConditionReady) {
			cidr, holds = s.Spec.CIDR, false
		}
		if r, err := ipspace.ParsePrefix(cidr); err == nil && r.Overlaps(query) {
			h := Holder{Kind: "Subnet", Namespace: s.Namespace, Name: s.Name, CIDR: r.String(), Pool: shortRef(s.Namespace, s.Spec.PoolRef), State: "Pending", Holds: holds}
			if c := meta.FindStatusCondition(s.Status.Conditions, ipamv1.ConditionReady); c != nil {
				h.State = c.Reason
			}
			out = append(out, h)
		}
	}
	addresses, err := machineAddresses(ctx, c, query, opts...)
	if err != nil {
		return nil, err
	}
	out = append(out, addresses...)
	// Outermost first; at one length a pool before the Subnet it serves and
	// a Subnet before an IPAddress of the same /32.
	kindOrder := map[string]int{"SubnetPool": 0, "Subnet": 1, "IPAddress": 2}
	slices.SortFunc(out, func(a, b Holder) int {
		pa, pb := netip.MustParsePrefix(a.CIDR), netip.MustParsePrefix(b.CIDR)
		return cmp.Or(cmp.Compare(pa.Bits(), pb.Bits()), cmp.Compare(kindOrder[a.Kind], kindOrder[b.Kind]),
			pa.Addr().Compare(pb.Addr()), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out, nil
}

// machineAddresses returns the Cluster API IPAddresses handed out from our
// Subnets inside query. Without the Cluster API CRDs, or the right to list
// IPAddresses, there are none to show: who-has still answers for the rest.
func machineAddresses(ctx context.Context, c client.Reader, query netip.Prefix, opts ...client.ListOption) ([]Holder, error) {
	var list capiipam.IPAddressList
	if err := c.List(ctx, &list, opts...); err != nil {
		if meta.IsNoMatchError(err) || runtime.IsNotRegisteredError(err) || apierrors.IsForbidden(err) || apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	var out []Holder
	for i := range list.Items {
		a := &list.Items[i]
		ref := a.Spec.PoolRef
		if ref.APIGroup != ipamv1.GroupVersion.Group || ref.Kind != "Subnet" {
			continue
		}
		addr, err := netip.ParseAddr(a.Spec.Address)
		if err != nil || !query.Contains(addr) && !netip.PrefixFrom(addr, addr.BitLen()).Overlaps(query) {
			continue
		}
		h := Holder{Kind: "IPAddress", Namespace: a.Namespace, Name: a.Name, CIDR: netip.PrefixFrom(addr, addr.BitLen()).String(),
			Pool: ref.Name, State: "Bound", Holds: true, Claim: a.Spec.ClaimRef.Name}
		if a.DeletionTimestamp != nil {
			h.State = "Releasing"
		}
		out = append(out, h)
	}
	return out, nil
}

// ParseQuery reads who-has's argument: an address (a /32 or /128) or a CIDR.
func ParseQuery(arg string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(arg); err == nil && a.Zone() == "" {
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := ipspace.ParsePrefix(arg)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is neither an IP address nor a CIDR: %w", arg, err)
	}
	return p, nil
}

// shortRef spells a reference made from namespace: the pool's name when it
// is in that namespace, else namespace/name.
func shortRef(namespace string, ref ipamv1.PoolReference) string {
	if ref.In(namespace) == namespace {
		return ref.Name
	}
	return ref.Namespace + "/" + ref.Name
}
