package lifecycle

import (
	"net/netip"
)

// ---- the gateway in effect (status.gateway) ----

// checkGateways is G1, on a settled system: every Subnet that holds a
// range shows the gateway Cluster API machines get from it, an address of
// that range: spec.gateway when set, else the first usable address. The
// expected gateway is computed here from the range alone, not by the
// operator's own address plan, so that a mistake there is caught.
//
// G2: an IPAddress the operator wrote (or adopted) from a Subnet that holds
// a range has that Subnet's gateway in effect: what kubectl shows is what
// machines get.
func (r *quiescentReport) checkGateways(objs []obj) {
	holding := map[string]*obj{} // Subnets that hold a range, by "namespace/name"
	for i := range objs {
		s := &objs[i]
		if s.Kind != kindSubnet || s.Deleting || !s.isReady() || s.StatusCIDR == "" {
			continue
		}
		holding[s.Namespace+"/"+s.Name] = s
		r.checks++
		held, err := netip.ParsePrefix(s.StatusCIDR)
		if err != nil {
			continue // the range itself is L1's finding
		}
		want := firstUsable(held)
		if s.Gateway != "" {
			want, _ = netip.ParseAddr(s.Gateway)
		}
		got, err := netip.ParseAddr(s.StatusGateway)
		switch {
		case err != nil:
			r.add("G1", id(s, "gateway"), "Subnet holds %s but shows no gateway in effect (status.gateway %q): %s", held, s.StatusGateway, s)
		case !held.Contains(got):
			r.add("G1", id(s, "gateway-outside"), "Subnet shows gateway %s outside the range it holds (%s): %s", got, held, s)
		case got != want:
			r.add("G1", id(s, "gateway-wrong"), "Subnet shows gateway %s, want %s (spec.gateway %q, else the first usable address of %s): %s", got, want, s.Gateway, held, s)
		}
	}
	for i := range objs {
		a := &objs[i]
		if a.Kind != kindAddress || a.Deleting || a.foreign() {
			continue
		}
		s := holding[a.Pool]
		if s == nil || s.UID != a.SubnetUID || s.StatusGateway == "" {
			continue // not from the Subnet that holds the range now; G1 judges a Subnet without a gateway
		}
		r.checks++
		if a.Gateway != s.StatusGateway {
			r.add("G2", id(a, "gateway"), "IPAddress has gateway %q, its Subnet %s shows %s: %s", a.Gateway, s.key(), s.StatusGateway, a)
		}
	}
}

// firstUsable is a range's first address a host can use: the one after the
// network address, or for a range of one or two addresses (/31, /32 and
// their IPv6 peers, which have no network address) its first.
func firstUsable(p netip.Prefix) netip.Addr {
	if p.Addr().BitLen()-p.Bits() < 2 {
		return p.Masked().Addr()
	}
	return p.Masked().Addr().Next()
}
