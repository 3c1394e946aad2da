package lifecycle

import (
	"testing"
)

// G1 finds a Subnet that holds a range without the gateway in effect, or
// with one that is not spec.gateway or the first usable address.
func TestGatewayCheck(t *testing.T) {
	withGateway := func(o obj, spec, status string) obj {
		o.Gateway, o.StatusGateway = spec, status
		return o
	}
	for _, tc := range []struct {
		name     string
		s        obj
		findings int
	}{
		{"the first usable address", withGateway(subnet("a", "p", "10.0.1.0/24", 0).granted("10.0.1.0/24"), "", "10.0.1.1"), 0},
		{"spec.gateway", withGateway(subnet("a", "p", "10.0.1.0/24", 0).granted("10.0.1.0/24"), "10.0.1.254", "10.0.1.254"), 0},
		{"a /32 is its own gateway", withGateway(subnet("a", "p", "10.0.1.7/32", 0).granted("10.0.1.7/32"), "", "10.0.1.7"), 0},
		{"IPv6", withGateway(subnet("a", "p", "2001:db8::/64", 0).granted("2001:db8::/64"), "", "2001:db8::1"), 0},
		{"waiting: no gateway", subnet("a", "p", "", 24).waiting("PoolExhausted", "no /24 left"), 0},
		{"none shown", withGateway(subnet("a", "p", "10.0.1.0/24", 0).granted("10.0.1.0/24"), "", ""), 1},
		{"the default while spec.gateway is set", withGateway(subnet("a", "p", "10.0.1.0/24", 0).granted("10.0.1.0/24"), "10.0.1.254", "10.0.1.1"), 1},
		{"the network address", withGateway(subnet("a", "p", "10.0.1.0/24", 0).granted("10.0.1.0/24"), "", "10.0.1.0"), 1},
		{"outside the range", withGateway(subnet("a", "p", "10.0.1.0/24", 0).granted("10.0.1.0/24"), "", "10.0.2.1"), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r quiescentReport
			r.checkGateways([]obj{tc.s})
			if len(r.findings) != tc.findings {
				t.Errorf("findings %v, want %d", r.findings, tc.findings)
			}
		})
	}
}

// G2 finds an IPAddress whose gateway is not its Subnet's gateway in effect.
func TestAddressGatewayCheck(t *testing.T) {
	s := subnet("a", "p", "10.0.1.0/24", 0).granted("10.0.1.0/24")
	s.StatusGateway = "10.0.1.1"
	address := func(gateway, writtenBy string) obj {
		return obj{Kind: kindAddress, Namespace: "ns", Name: "m1", UID: newUID(), Pool: "ns/a", SubnetUID: s.UID, Address: "10.0.1.2", Gateway: gateway, WrittenBy: writtenBy}
	}
	for _, tc := range []struct {
		name     string
		a        obj
		findings int
	}{
		{"the Subnet's gateway", address("10.0.1.1", ""), 0},
		{"another gateway", address("10.0.1.254", ""), 1},
		{"written by hand, not adopted", address("10.0.1.254", "hand"), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r quiescentReport
			r.checkGateways([]obj{s, tc.a})
			if len(r.findings) != tc.findings {
				t.Errorf("findings %v, want %d", r.findings, tc.findings)
			}
		})
	}
}
