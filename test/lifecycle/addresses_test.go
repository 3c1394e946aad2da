package lifecycle

import (
	"math/big"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	capiipam "sigs.k8s.io/cluster-api/api/ipam/v1beta2"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

func TestAddressPlan(t *testing.T) {
	for _, tt := range []struct {
		cidr, gateway              string
		network, broadcast, wantGW string
		usable                     int64
	}{
		{cidr: "10.0.0.0/29", network: "10.0.0.0", broadcast: "10.0.0.7", wantGW: "10.0.0.1", usable: 5},
		{cidr: "10.0.0.0/29", gateway: "10.0.0.6", network: "10.0.0.0", broadcast: "10.0.0.7", wantGW: "10.0.0.6", usable: 5},
		{cidr: "10.0.0.4/30", network: "10.0.0.4", broadcast: "10.0.0.7", wantGW: "10.0.0.5", usable: 1},
		{cidr: "10.0.0.4/31", wantGW: "10.0.0.4", usable: 1},
		{cidr: "10.0.0.4/32", wantGW: "10.0.0.4", usable: 0},
		{cidr: "fd00::/125", network: "fd00::", wantGW: "fd00::1", usable: 6},
		{cidr: "fd00::/126", network: "fd00::", wantGW: "fd00::1", usable: 2},
		{cidr: "fd00::/127", wantGW: "fd00::", usable: 1},
		{cidr: "fd00::/128", wantGW: "fd00::", usable: 0},
		{cidr: "fd00::/127", gateway: "fd00::1", wantGW: "fd00::1", usable: 1},
	} {
		p := planOf(netip.MustParsePrefix(tt.cidr), tt.gateway)
		got := []string{addrString(p.network), addrString(p.broadcast), p.gateway.String(), p.usable().String()}
		want := []string{tt.network, tt.broadcast, tt.wantGW, big.NewInt(tt.usable).String()}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s gateway %q: network, broadcast, gateway, usable (-want +got):\n%s", tt.cidr, tt.gateway, d)
		}
		for _, a := range []string{tt.network, tt.broadcast, tt.wantGW} {
			if a != "" && p.reservedAs(netip.MustParseAddr(a)) == "" {
				t.Errorf("%s: %s is not reserved", tt.cidr, a)
			}
		}
	}
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

// ---- synthetic Cluster API objects ----

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func sec(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Second))) }

func claimOf(name, subnet string) obj {
	ref := capiipam.IPPoolReference{APIGroup: ipamv1.GroupVersion.Group, Kind: kindSubnet, Name: subnet}
	return obj{Kind: kindClaim, Namespace: "ns", Name: name, UID: newUID(), Generation: 1,
		PoolRef: poolRefString(ref), Pool: subnetOf("ns", ref), Finalizers: []string{finalizerReleaseAddress}}
}

func (o obj) bound() obj {
	o.AddressRef = o.Name
	o.Conditions = []metav1.Condition{{Type: capiipam.IPAddressClaimReadyCondition, Status: metav1.ConditionTrue, Reason: "Ready", ObservedGeneration: o.Generation}}
	return o
}

func (o obj) refused(reason string) obj {
	o.Conditions = []metav1.Condition{{Type: capiipam.IPAddressClaimReadyCondition, Status: metav1.ConditionFalse, Reason: reason, ObservedGeneration: o.Generation}}
	return o
}

func (o obj) deleting(at time.Time) obj {
	o.Deleting, o.DeletedAt = true, at
	return o
}

// addressFor is the IPAddress the contract writes for claim c of a Subnet
// holding a /prefix with gateway gw, created at created.
func addressFor(c obj, address string, prefix int32, gw string, created time.Time) obj {
	return obj{Kind: kindAddress, Namespace: c.Namespace, Name: c.Name, UID: newUID(), Generation: 1,
		PoolRef: c.PoolRef, Pool: c.Pool, Address: address, Prefix: ptr.To(prefix), Gateway: gw, ClaimRef: c.Name,
		Owner:      &metav1.OwnerReference{Kind: kindClaim, Name: c.Name, UID: c.UID, Controller: ptr.To(true)},
		Finalizers: []string{finalizerProtectAddress}, Created: created}
}

func (o obj) protected() obj {
	o.Finalizers = append(slices.Clone(o.Finalizers), ipamv1.FinalizerAddressProtection)
	return o
}

func received(e event, at time.Time) event {
	e.Received = at
	return e
}

func TestAddressSafetyOnSyntheticHistories(t *testing.T) {
	p := pool("p", "", "10.0.0.0/24").serving("10.0.0.0/24")
	s := subnet("s", "p", "10.0.0.0/29", 0).granted("10.0.0.0/29").protected()
	c := claimOf("m1", "s")
	c2 := claimOf("m2", "s")
	a := addressFor(c, "10.0.0.2", 29, "10.0.0.1", sec(0))
	b := addressFor(c2, "10.0.0.3", 29, "10.0.0.1", sec(0))
	// setup: a pool, the Subnet, claim m1 bound to 10.0.0.2.
	setup := []event{added(p.at(1)), added(s.at(2)), added(c.at(3)), added(a.at(4)), modified(c.bound().at(5))}
	// m1 deleted at 10 s: its IPAddress released, gone after the cool-down.
	release := func(went float64) []event {
		return []event{modified(c.bound().deleting(sec(10)).at(6)), modified(a.deleting(sec(10)).at(7)),
			deleted(c.bound().deleting(sec(10)).at(8)), received(deleted(a.deleting(sec(10)).at(9)), sec(went))}
	}
	then := func(evs ...[]event) []event { return slices.Concat(evs...) }
	tests := []struct {
		name   string
		events []event
		want   []string
	}{{
		name: "bound, released, gone after the cool-down, handed out again after it",
		events: then(setup, release(12.5), []event{added(c2.at(10)), added(addressFor(c2, "10.0.0.2", 29, "10.0.0.1", sec(12)).at(11)),
			modified(c2.bound().at(12))}),
	}, {
		name:   "two IPAddresses hold one address",
		events: then(setup, []event{added(c2.at(6)), added(addressFor(c2, "10.0.0.2", 29, "10.0.0.1", sec(1)).at(7))}),
		want:   []string{"A1"},
	}, {
		name: "one terminating still holds its address",
		events: then(setup, []event{modified(c.bound().deleting(sec(10)).at(6)), modified(a.deleting(sec(10)).at(7)),
			added(c2.at(8)), added(addressFor(c2, "10.0.0.2", 29, "10.0.0.1", sec(11)).at(9))}),
		want: []string{"A1"},
	}, {
		name:   "outside the Subnet",
		events: then(setup, []event{added(c2.at(6)), added(addressFor(c2, "10.0.0.9", 29, "10.0.0.1", sec(1)).at(7))}),
		want:   []string{"A2"},
	}, {
		name:   "the network address",
		events: then(setup, []event{added(c2.at(6)), added(addressFor(c2, "10.0.0.0", 29, "10.0.0.1", sec(1)).at(7))}),
		want:   []string{"A2"},
	}, {
		name:   "the broadcast address",
		events: then(setup, []event{added(c2.at(6)), added(addressFor(c2, "10.0.0.7", 29, "10.0.0.1", sec(1)).at(7))}),
		want:   []string{"A2"},
	}, {
		name:   "the default gateway",
		events: then(setup, []event{added(c2.at(6)), added(addressFor(c2, "10.0.0.1", 29, "10.0.0.1", sec(1)).at(7))}),
		want:   []string{"A2"},
	}, {
		name: "spec.gateway, and the first usable address is free to hand out",
		events: func() []event {
			g := s
			g.Gateway = "10.0.0.6"
			return []event{added(p.at(1)), added(g.at(2)), added(c.at(3)), added(addressFor(c, "10.0.0.1", 29, "10.0.0.6", sec(0)).at(4)),
				added(c2.at(5)), added(addressFor(c2, "10.0.0.6", 29, "10.0.0.6", sec(0)).at(6))}
		}(),
		want: []string{"A2"},
	}, {
		name:   "for a Subnet that does not exist",
		events: []event{added(p.at(1)), added(c.at(3)), added(a.at(4))},
		want:   []string{"A2"},
	}, {
		name:   "for a Subnet that is not Ready",
		events: []event{added(p.at(1)), added(subnet("s", "p", "10.0.0.0/29", 0).protected().at(2)), added(c.at(3)), added(a.at(4))},
		want:   []string{"A2"},
	}, {
		name:   "handed out again inside its last holder's cool-down",
		events: then(setup, release(12.5), []event{added(c2.at(10)), added(addressFor(c2, "10.0.0.2", 29, "10.0.0.1", sec(10.5)).at(11))}),
		want:   []string{"A3"},
	}, {
		name:   "gone before its cool-down ended",
		events: then(setup, release(11)),
		want:   []string{"A3"},
	}, {
		name:   "gone without a terminating version",
		events: then(setup, []event{modified(c.bound().deleting(sec(10)).at(6)), received(deleted(a.at(7)), sec(20))}),
		want:   []string{"A3"},
	}, {
		name:   "the Subnet gone while an address of it is in use",
		events: then(setup, []event{deleted(s.at(6))}),
		want:   []string{"A4"},
	}, {
		name:   "the Subnet gone while its addresses cool down",
		events: then(setup, []event{modified(c.bound().deleting(sec(10)).at(6)), modified(a.deleting(sec(10)).at(7)), deleted(s.at(8))}),
	}, {
		name: "created while the Subnet had no address-protection finalizer",
		events: []event{added(p.at(1)), added(subnet("s", "p", "10.0.0.0/29", 0).granted("10.0.0.0/29").at(2)),
			added(c.at(3)), added(a.at(4))},
		want: []string{"A4"},
	}, {
		name:   "another prefix",
		events: then(setup, []event{added(c2.at(6)), added(addressFor(c2, "10.0.0.3", 24, "10.0.0.1", sec(1)).at(7))}),
		want:   []string{"A5"},
	}, {
		name:   "another gateway",
		events: then(setup, []event{added(c2.at(6)), added(addressFor(c2, "10.0.0.3", 29, "10.0.0.6", sec(1)).at(7))}),
		want:   []string{"A5"},
	}, {
		name: "controlled by another claim",
		events: then(setup, []event{added(c2.at(6)), added(func() obj {
			x := b
			x.Owner = &metav1.OwnerReference{Kind: kindClaim, Name: "m2", UID: types.UID("someone-else"), Controller: ptr.To(true)}
			return x
		}().at(7))}),
		want: []string{"A5"},
	}, {
		name: "without the finalizer that keeps it for the cool-down",
		events: then(setup, []event{added(c2.at(6)), added(func() obj {
			x := b
			x.Finalizers = nil
			return x
		}().at(7))}),
		want: []string{"A5"},
	}, {
		name:   "for a claim that does not exist",
		events: then(setup, []event{added(b.at(7))}),
		want:   []string{"A5"},
	}, {
		name:   "a claim Ready before its IPAddress exists",
		events: []event{added(p.at(1)), added(s.at(2)), added(c.at(3)), modified(c.bound().at(4)), added(a.at(5))},
		want:   []string{"A6"},
	}, {
		name:   "a binding revoked",
		events: then(setup, []event{modified(c.refused(capiipam.IPAddressClaimReadyPoolNotReadyReason).at(6))}),
		want:   []string{"A6"},
	}, {
		name:   "an address released while its claim lives",
		events: then(setup, []event{modified(a.deleting(sec(10)).at(6))}),
		want:   []string{"A6"},
	}, {
		name: "another provider's IPAddress in a test namespace",
		events: then(setup, []event{added(func() obj {
			x := b
			x.Pool, x.PoolRef = "", "ipam.cluster.x-k8s.io/InClusterIPPool/elsewhere"
			return x
		}().at(7))}),
		want: []string{"A5"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := replay(tt.events...)
			if d := cmp.Diff(tt.want, checksOf(r.findings)); d != "" {
				t.Errorf("checks (-want +got):\n%s\nfindings: %v", d, r.findings)
			}
		})
	}
}

// A Subnet's deletion in a gap of the recorder is not judged (the state
// there is a guess); nor is a re-listed one.
func TestAddressChecksSkipGaps(t *testing.T) {
	p := pool("p", "", "10.0.0.0/24").serving("10.0.0.0/24")
	s := subnet("s", "p", "10.0.0.0/29", 0).granted("10.0.0.0/29").protected()
	c := claimOf("m1", "s")
	a := addressFor(c, "10.0.0.2", 29, "10.0.0.1", sec(0))
	r := newReplayer()
	r.noteGap(gap{Kind: kindSubnet, From: 5, To: 10})
	for _, e := range []event{added(p.at(1)), added(s.at(2)), added(c.at(3)), added(a.at(4)), modified(c.bound().at(5)), deleted(s.at(6))} {
		r.apply(e)
	}
	if len(r.findings) != 0 {
		t.Errorf("in a gap: %v", r.findings)
	}
	r = replay(added(p.at(1)), added(s.at(2)), added(c.at(3)), added(a.at(4)), modified(c.bound().at(5)),
		event{Type: "DELETED", Obj: s.at(6), Relisted: true})
	if len(r.findings) != 0 {
		t.Errorf("re-listed: %v", r.findings)
	}
}

// usage is a Subnet's status.ipAddresses.
func (o obj) usage(inUse, coolingDown int64, free string) obj {
	o.IPAddresses = &ipamv1.IPAddressUsage{InUse: inUse, CoolingDown: coolingDown, Free: free}
	return o
}

func TestQuiescentAddresses(t *testing.T) {
	p := poolWithStatus(pool("p", "", "10.0.0.0/24").serving("10.0.0.0/24"), 1, 0, []string{"10.0.0.0/29"})
	s := subnet("s", "p", "10.0.0.0/29", 0).granted("10.0.0.0/29").protected()
	c := claimOf("m1", "s")
	a := addressFor(c, "10.0.0.2", 29, "10.0.0.1", sec(0))
	// A /30 with its one usable address held.
	p30 := poolWithStatus(pool("p", "", "10.0.0.0/24").serving("10.0.0.0/24"), 1, 0, []string{"10.0.0.0/30"})
	s30 := subnet("s", "p", "10.0.0.0/30", 0).granted("10.0.0.0/30").protected()
	a30 := addressFor(c, "10.0.0.2", 30, "10.0.0.1", sec(0))
	c2 := claimOf("m2", "s")
	tests := []struct {
		name string
		objs []obj
		want []string
	}{{
		name: "bound",
		objs: []obj{p, s.usage(1, 0, "4"), c.bound(), a},
	}, {
		name: "exhausted, truly",
		objs: []obj{p30, s30.usage(1, 0, "0"), c.bound(), a30, c2.refused(capiipam.IPAddressClaimReadyPoolExhaustedReason)},
	}, {
		name: "exhausted while an address is free",
		objs: []obj{p, s.usage(1, 0, "4"), c.bound(), a, c2.refused(capiipam.IPAddressClaimReadyPoolExhaustedReason)},
		want: []string{"L5"},
	}, {
		name: "PoolNotReady while the Subnet is Ready, not exhausted",
		objs: []obj{p30, s30.usage(1, 0, "0"), c.bound(), a30, c2.refused(capiipam.IPAddressClaimReadyPoolNotReadyReason)},
		want: []string{"L5"},
	}, {
		name: "PoolNotReady: no such Subnet",
		objs: []obj{p, claimOf("m3", "nowhere").refused(capiipam.IPAddressClaimReadyPoolNotReadyReason)},
	}, {
		name: "PoolNotReady: the Subnet is being deleted (its generation bumped, its status left), held by an address in use",
		objs: []obj{p, func() obj { x := s.usage(1, 0, "4").deleting(sec(0)); x.Generation++; return x }(), c.bound(), a,
			c2.refused(capiipam.IPAddressClaimReadyPoolNotReadyReason)},
	}, {
		name: "a Subnet being deleted with no address in use",
		objs: []obj{p, s.deleting(sec(0))},
		want: []string{"L7"},
	}, {
		name: "AllocationFailed: the IPAddress of its name is an earlier claim's (itself left in use: orphan)",
		objs: []obj{p, s.usage(1, 0, "4"), c2.refused(capiipam.IPAddressClaimReadyAllocationFailedReason), func() obj { x := a; x.Name = "m2"; return x }()},
		want: []string{"L5"}, // the orphan, not the claim
	}, {
		name: "bound without its IPAddress",
		objs: []obj{p, s, c.bound()},
		want: []string{"L5"},
	}, {
		name: "undecided, and without its finalizer",
		objs: []obj{p, s, func() obj { x := c; x.Finalizers = nil; return x }()},
		want: []string{"L5", "L5"},
	}, {
		name: "still being deleted",
		objs: []obj{p, s.usage(1, 0, "4"), c.bound().deleting(sec(0)), a},
		want: []string{"L7"},
	}, {
		name: "another provider's claim, left alone",
		objs: []obj{p, func() obj { x := claimOf("m5", "s"); x.Pool, x.Finalizers = "", nil; return x }()},
	}, {
		name: "another provider's claim, answered",
		objs: []obj{p, func() obj {
			x := claimOf("m5", "s").refused(capiipam.IPAddressClaimReadyPoolNotReadyReason)
			x.Pool = ""
			return x
		}()},
		want: []string{"L5"},
	}, {
		name: "an IPAddress still terminating",
		objs: []obj{p, s.usage(0, 1, "4"), a.deleting(sec(0))},
		want: []string{"L7"},
	}, {
		name: "two IPAddresses hold one address",
		objs: []obj{p, s.usage(2, 0, "4"), c.bound(), a, c2.bound(), addressFor(c2, "10.0.0.2", 29, "10.0.0.1", sec(0))},
		want: []string{"L5"},
	}, {
		name: "status.ipAddresses wrong",
		objs: []obj{p, s.usage(2, 0, "3"), c.bound(), a},
		want: []string{"L6"},
	}, {
		name: "status.ipAddresses missing",
		objs: []obj{p, s, c.bound(), a},
		want: []string{"L6"},
	}, {
		name: "addresses in use, no address-protection finalizer",
		objs: []obj{p, subnet("s", "p", "10.0.0.0/29", 0).granted("10.0.0.0/29").usage(1, 0, "4"), c.bound(), a},
		want: []string{"L6"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := checkQuiescent(recorded(tt.objs), nil)
			var got []string
			for _, f := range r.findings {
				if f.Check != "L3" && f.Check != "L4" {
					got = append(got, f.Check)
				}
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("checks (-want +got):\n%s\nfindings: %v", d, r.findings)
			}
		})
	}
}

// written is an IPAddress the test writes for claim c (by hand or as a
// restore): the contract's fields, no owner reference, no finalizer.
func written(c obj, by, address string, created time.Time) obj {
	a := addressFor(c, address, 29, "10.0.0.1", created)
	a.Owner, a.Finalizers, a.WrittenBy = nil, nil, by
	return a
}

// adoptedBy is a written IPAddress once claim c has adopted it.
func (o obj) adoptedBy(c obj) obj {
	o.Owner = &metav1.OwnerReference{Kind: kindClaim, Name: c.Name, UID: c.UID, Controller: ptr.To(true)}
	o.Finalizers = []string{finalizerProtectAddress}
	return o
}

func (o obj) withFinalizers(fs ...string) obj {
	o.Finalizers = append(slices.Clone(o.Finalizers), fs...)
	return o
}

// IPAddresses written by hand or restored: the test's own duplicates and
// bad addresses are no violation of A1-A5; adopting them, or a claim Ready
// with them, is (A7, A8). A foreground deletion of a Subnet deletes its
// IPAddresses under live claims (not A6).
func TestWrittenAddressesOnSyntheticHistories(t *testing.T) {
	p := pool("p", "", "10.0.0.0/24").serving("10.0.0.0/24")
	s := subnet("s", "p", "10.0.0.0/29", 0).granted("10.0.0.0/29").protected()
	c := claimOf("m1", "s")
	c2 := claimOf("m2", "s")
	a := addressFor(c, "10.0.0.2", 29, "10.0.0.1", sec(0))
	setup := []event{added(p.at(1)), added(s.at(2)), added(c.at(3)), added(a.at(4)), modified(c.bound().at(5))}
	// w is written for m2 with address x, then adopted by m2, which goes
	// Ready with it.
	adoptAndBind := func(by, x string) []event {
		w := written(c2, by, x, sec(1))
		return []event{added(w.at(6)), added(c2.at(7)), modified(w.adoptedBy(c2).at(8)), modified(c2.bound().at(9))}
	}
	tests := []struct {
		name   string
		events []event
		want   []string
	}{{
		name:   "restored with a free address, adopted, bound",
		events: slices.Concat(setup, adoptAndBind(writtenByRestore, "10.0.0.3")),
	}, {
		name:   "written by hand over a held address, or outside, or on the gateway, and left alone",
		events: slices.Concat(setup, []event{added(written(c2, writtenByHand, "10.0.0.2", sec(1)).at(6)), added(c2.at(7))}),
	}, {
		name: "written by hand, never adopted, removed at once",
		events: slices.Concat(setup, []event{added(written(c2, writtenByHand, "10.0.0.9", sec(1)).at(6)),
			deleted(written(c2, writtenByHand, "10.0.0.9", sec(1)).at(7))}),
	}, {
		name:   "written by hand over another claim's address, adopted and bound",
		events: slices.Concat(setup, adoptAndBind(writtenByHand, "10.0.0.2")),
		want:   []string{"A8", "A7"},
	}, {
		name:   "restored outside the Subnet, adopted and bound",
		events: slices.Concat(setup, adoptAndBind(writtenByRestore, "10.0.0.9")),
		want:   []string{"A8", "A8"},
	}, {
		name:   "written by hand on the gateway, adopted and bound",
		events: slices.Concat(setup, adoptAndBind(writtenByHand, "10.0.0.1")),
		want:   []string{"A8", "A8"},
	}, {
		name:   "written by hand on the broadcast address, adopted and bound",
		events: slices.Concat(setup, adoptAndBind(writtenByHand, "10.0.0.7")),
		want:   []string{"A8", "A8"},
	}, {
		name: "restored, adopted by another claim than the one of its name",
		events: func() []event {
			w := written(c2, writtenByRestore, "10.0.0.3", sec(1))
			return slices.Concat(setup, []event{added(w.at(6)), added(c2.at(7)), modified(w.adoptedBy(c).at(8))})
		}(),
		want: []string{"A8"},
	}, {
		name: "the operator hands out an address a bound claim holds",
		events: slices.Concat(setup, []event{added(c2.at(6)), added(addressFor(c2, "10.0.0.2", 29, "10.0.0.1", sec(1)).at(7)),
			modified(c2.bound().at(8))}),
		want: []string{"A1", "A7"},
	}, {
		name: "a foreground deletion of the Subnet deletes its IPAddresses under live claims",
		events: slices.Concat(setup, []event{modified(s.deleting(sec(10)).withFinalizers(finalizerForeground).at(6)),
			modified(a.deleting(sec(10)).at(7))}),
	}, {
		name:   "the same deletion without a foreground deletion is a release under a live claim",
		events: slices.Concat(setup, []event{modified(s.deleting(sec(10)).at(6)), modified(a.deleting(sec(10)).at(7))}),
		want:   []string{"A6"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := replay(tt.events...)
			if d := cmp.Diff(tt.want, checksOf(r.findings)); d != "" {
				t.Errorf("checks (-want +got):\n%s\nfindings: %v", d, r.findings)
			}
		})
	}
}

// At quiescence: a claim whose name's IPAddress was written by the test
// waits only if that IPAddress may not be adopted (L5); a bound claim's
// address is one the Subnet hands out (L5); and what is being deleted is
// gone unless documented reasons hold it (L7).
func TestQuiescentWrittenAddressesAndStuckDeletions(t *testing.T) {
	p := poolWithStatus(pool("p", "", "10.0.0.0/24").serving("10.0.0.0/24"), 1, 0, []string{"10.0.0.0/29"})
	s := subnet("s", "p", "10.0.0.0/29", 0).granted("10.0.0.0/29").protected()
	c := claimOf("m1", "s")
	a := addressFor(c, "10.0.0.2", 29, "10.0.0.1", sec(0))
	c2 := claimOf("m2", "s")
	failed := c2.refused(capiipam.IPAddressClaimReadyAllocationFailedReason)
	now := time.Now()
	tests := []struct {
		name string
		objs []obj
		want []string
	}{{
		name: "restored with a free address and not adopted",
		objs: []obj{p, s.usage(2, 0, "3"), c.bound(), a, failed, written(c2, writtenByRestore, "10.0.0.3", sec(0))},
		want: []string{"L5"},
	}, {
		name: "written by hand over a held address: not adopted",
		objs: []obj{p, s.usage(2, 0, "4"), c.bound(), a, failed, written(c2, writtenByHand, "10.0.0.2", sec(0))},
	}, {
		name: "written by hand outside the Subnet: not adopted",
		objs: []obj{p, s.usage(2, 0, "4"), c.bound(), a, failed, written(c2, writtenByHand, "10.0.0.9", sec(0))},
	}, {
		name: "written by hand on the network address: not adopted",
		objs: []obj{p, s.usage(2, 0, "4"), c.bound(), a, failed, written(c2, writtenByHand, "10.0.0.0", sec(0))},
	}, {
		name: "bound to the gateway",
		objs: []obj{p, s.usage(2, 0, "4"), c.bound(), a, c2.bound(), written(c2, writtenByHand, "10.0.0.1", sec(0)).adoptedBy(c2)},
		want: []string{"L5"},
	}, {
		name: "a foreground deletion of the Subnet: its IPAddress terminating under the live claim holds it",
		objs: []obj{p, s.deleting(sec(0)).withFinalizers(finalizerForeground), c.bound(), a.deleting(sec(0))},
	}, {
		name: "a claim deleted in the foreground, waiting for its IPAddress's cool-down",
		objs: []obj{p, s.usage(0, 1, "4"), func() obj {
			x := c.bound().deleting(now)
			x.Finalizers = []string{finalizerForeground} // released: the operator's finalizer is gone
			return x
		}(), a.deleting(now)},
		want: []string{"L7"}, // the IPAddress cooling down: not settled yet
	}, {
		name: "a claim deleted in the foreground, its IPAddress gone, still there",
		objs: []obj{p, s.usage(0, 0, "5"), c.bound().deleting(sec(0)).withFinalizers(finalizerForeground)},
		want: []string{"L7"},
	}, {
		name: "a bound claim deleted in the foreground, its finalizers both left (deadlock)",
		objs: []obj{p, s.usage(1, 0, "4"), c.bound().deleting(sec(0)).withFinalizers(finalizerForeground), a},
		want: []string{"L7"},
	}, {
		name: "a Subnet deleted in the foreground with nothing left",
		objs: []obj{p, s.deleting(sec(0)).withFinalizers(finalizerForeground)},
		want: []string{"L7"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := checkQuiescent(recorded(tt.objs), nil)
			var got []string
			for _, f := range r.findings {
				if f.Check != "L3" && f.Check != "L4" {
					got = append(got, f.Check)
				}
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("checks (-want +got):\n%s\nfindings: %v", d, r.findings)
			}
		})
	}
}
