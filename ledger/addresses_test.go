package ledger

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestPlanAddresses(t *testing.T) {
	for _, tc := range []struct {
		cidr, gateway                   string
		network, broadcast, wantGateway string
		usable                          string
	}{
		{cidr: "10.0.0.0/24", network: "10.0.0.0", broadcast: "10.0.0.255", wantGateway: "10.0.0.1", usable: "253"},
		{cidr: "10.0.0.0/24", gateway: "10.0.0.254", network: "10.0.0.0", broadcast: "10.0.0.255", wantGateway: "10.0.0.254", usable: "253"},
		{cidr: "10.0.0.0/30", network: "10.0.0.0", broadcast: "10.0.0.3", wantGateway: "10.0.0.1", usable: "1"},
		{cidr: "10.0.0.0/31", wantGateway: "10.0.0.0", usable: "1"}, // RFC 3021: no network or broadcast address
		{cidr: "10.0.0.7/32", wantGateway: "10.0.0.7", usable: "0"},
		{cidr: "2001:db8::/64", network: "2001:db8::", wantGateway: "2001:db8::1", usable: "18446744073709551614"},
		{cidr: "2001:db8::/127", wantGateway: "2001:db8::", usable: "1"},
	} {
		var gw netip.Addr
		if tc.gateway != "" {
			gw = netip.MustParseAddr(tc.gateway)
		}
		p := PlanAddresses(netip.MustParsePrefix(tc.cidr), gw)
		if got := addrString(p.Network); got != tc.network {
			t.Errorf("%s: network %q, want %q", tc.cidr, got, tc.network)
		}
		if got := addrString(p.Broadcast); got != tc.broadcast {
			t.Errorf("%s: broadcast %q, want %q", tc.cidr, got, tc.broadcast)
		}
		if got := p.Gateway.String(); got != tc.wantGateway {
			t.Errorf("%s: gateway %s, want %s", tc.cidr, got, tc.wantGateway)
		}
		if got := p.Usable().String(); got != tc.usable {
			t.Errorf("%s: usable %s, want %s", tc.cidr, got, tc.usable)
		}
	}
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

// readyAddressSubnet puts a Ready Subnet holding cidr into the ledger.
func readyAddressSubnet(l *Ledger, name, cidr, gateway string) {
	l.ApplyPool(rootPool("pool", "10.0.0.0/8", 24), Created, nil)
	s := ready(explicit(name, "pool", cidr, 1), cidr)
	s.Spec.Gateway = gateway
	l.ApplySubnet(s, Created, nil)
}

func claimUID(name string) types.UID { return types.UID("claim-" + name) }

func decideAddress(l *Ledger, claim, subnet string) AddressDecision {
	return l.DecideAddress(ns, claim, claimUID(claim), subnet)
}

// written is the IPAddress the informer shows once a grant is written.
func written(claim, subnet string, d AddressDecision, rv int) AddressRecord {
	return AddressRecord{Namespace: ns, Name: claim, UID: types.UID("ip-" + claim), ResourceVersion: fmt.Sprint(rv),
		Subnet: subnet, Address: d.Address, ClaimUID: claimUID(claim)}
}

func TestAddressesLowestFirstNeverReservedExhaustedAndReusedAfterRelease(t *testing.T) {
	l, rec := newLedger()
	if d := decideAddress(l, "early", "m"); d.Reason != AddressPoolNotReady {
		t.Fatalf("a Subnet that does not exist: got %+v, want PoolNotReady", d)
	}
	// A /29 with the gateway in the middle: .0 network, .7 broadcast, .3
	// gateway; five addresses to hand out.
	readyAddressSubnet(l, "m", "10.1.0.0/29", "10.1.0.3")
	var got []string
	for i := range 5 {
		d := decideAddress(l, fmt.Sprintf("c%d", i), "m")
		if d.Reason != "" || !d.Assumed || d.Prefix != 29 || d.Gateway.String() != "10.1.0.3" {
			t.Fatalf("c%d: %+v", i, d)
		}
		got = append(got, d.Address.String())
	}
	if want := "[10.1.0.1 10.1.0.2 10.1.0.4 10.1.0.5 10.1.0.6]"; fmt.Sprint(got) != want {
		t.Fatalf("handed out %v, want %s", got, want)
	}
	// Deciding again gives the same address (a retried write).
	if d := decideAddress(l, "c0", "m"); d.Address.String() != "10.1.0.1" || !d.Assumed {
		t.Fatalf("c0 again: %+v", d)
	}
	full := decideAddress(l, "late", "m")
	if full.Reason != AddressPoolExhausted {
		t.Fatalf("a sixth claim: %+v, want PoolExhausted", full)
	}

	// The informer shows the IPAddresses; c1's claim is deleted and its
	// IPAddress terminates: cooling down, the address is still held.
	d1 := decideAddress(l, "c1", "m")
	for i := range 5 {
		name := fmt.Sprintf("c%d", i)
		l.ApplyAddress(written(name, "m", decideAddress(l, name, "m"), 10+i), Created)
	}
	cooling := written("c1", "m", d1, 20)
	cooling.Releasing = time.Now()
	rec.events = nil
	l.ApplyAddress(cooling, Updated)
	if d := decideAddress(l, "late", "m"); d.Reason != AddressPoolExhausted {
		t.Fatalf("while c1's address cools down: %+v, want PoolExhausted", d)
	}
	if u, _ := l.AddressUsage(ns, "m", 10); u.InUse != 4 || u.CoolingDown != 1 || u.Free.Sign() != 0 {
		t.Fatalf("usage while cooling: %+v", u)
	}
	// The cool-down ends: the IPAddress goes; the waiting claim is woken
	// and gets the address.
	rec.events = nil
	l.DeleteAddress(cooling)
	if !woke(rec, "late") {
		t.Fatalf("the waiting claim was not woken: %+v", rec.events)
	}
	if d := decideAddress(l, "late", "m"); d.Address.String() != "10.1.0.2" {
		t.Fatalf("after the release: %+v, want 10.1.0.2", d)
	}
}

func woke(rec *recorder, claim string) bool {
	for _, e := range rec.events {
		for _, w := range e.Wake {
			if w.Kind == KindAddressClaim && w.Name == claim {
				return true
			}
		}
	}
	return false
}

func TestAddressesOnlyFromAReadySubnet(t *testing.T) {
	l, rec := newLedger()
	l.ApplyPool(rootPool("pool", "10.0.0.0/8", 24), Created, nil)
	pending := explicit("m", "pool", "10.2.0.0/24", 1)
	l.ApplySubnet(pending, Created, nil)
	if d := decideAddress(l, "c", "m"); d.Reason != AddressPoolNotReady {
		t.Fatalf("a Subnet not Ready: %+v", d)
	}
	rec.events = nil
	l.ApplySubnet(ready(pending, "10.2.0.0/24"), Updated, nil)
	if !woke(rec, "c") {
		t.Fatal("the Subnet's Ready did not wake its waiting claim")
	}
	if d := decideAddress(l, "c", "m"); d.Address.String() != "10.2.0.2" {
		t.Fatalf("once Ready: %+v", d)
	}
	deleting := ready(pending, "10.2.0.0/24")
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	l.ApplySubnet(deleting, Updated, nil)
	if d := decideAddress(l, "other", "m"); d.Reason != AddressPoolNotReady {
		t.Fatalf("a Subnet being deleted hands out nothing: %+v", d)
	}
}

// A claim re-created under a name whose old IPAddress still cools down
// waits; one whose IPAddress belongs to another UID never takes it.
func TestAddressesOfAnEarlierClaimOfTheSameName(t *testing.T) {
	l, _ := newLedger()
	readyAddressSubnet(l, "m", "10.3.0.0/24", "")
	old := AddressRecord{Namespace: ns, Name: "c", UID: "ip-old", ResourceVersion: "5", Subnet: "m",
		Address: netip.MustParseAddr("10.3.0.9"), ClaimUID: "old-claim", Releasing: time.Now()}
	l.ApplyAddress(old, Created)
	if d := decideAddress(l, "c", "m"); d.Reason != AddressAllocationFailed {
		t.Fatalf("new claim c while the old IPAddress c cools down: %+v", d)
	}
	l.DeleteAddress(old)
	if d := decideAddress(l, "c", "m"); d.Reason != "" || d.Address.String() != "10.3.0.2" {
		t.Fatalf("after it went: %+v", d)
	}
}

// An update older than what the ledger holds (a catch-up read raced the
// informer) does not undo a newer one.
func TestAddressesIgnoreOlderVersions(t *testing.T) {
	l, _ := newLedger()
	readyAddressSubnet(l, "m", "10.4.0.0/24", "")
	d := decideAddress(l, "c", "m")
	newer := written("c", "m", d, 20)
	newer.Releasing = time.Now()
	l.ApplyAddress(newer, Updated)
	l.ApplyAddress(written("c", "m", d, 10), Updated)
	if u, _ := l.AddressUsage(ns, "m", 0); u.CoolingDown != 1 {
		t.Fatalf("an older version undid the release: %+v", u)
	}
}

func TestAddressesIPv6(t *testing.T) {
	l, _ := newLedger()
	l.ApplyPool(rootPool("pool6", "2001:db8::/32", 64), Created, nil)
	s := ready(explicit("v6", "pool6", "2001:db8:0:1::/64", 1), "2001:db8:0:1::/64")
	s.Spec.Gateway = "2001:db8:0:1::1"
	l.ApplySubnet(s, Created, nil)
	for i, want := range []string{"2001:db8:0:1::2", "2001:db8:0:1::3"} {
		d := decideAddress(l, fmt.Sprintf("c%d", i), "v6")
		if d.Address.String() != want || d.Prefix != 64 || d.Gateway.String() != "2001:db8:0:1::1" {
			t.Fatalf("c%d: %+v, want %s", i, d, want)
		}
	}
}

// Many workers decide at once: every claim gets an address, none twice
// (run with -race).
func TestAddressesUniqueUnderParallelDecisions(t *testing.T) {
	l, _ := newLedger()
	readyAddressSubnet(l, "m", "10.5.0.0/22", "")
	const claims = 400
	addrs := make([]netip.Addr, claims)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < claims; i += 8 {
				d := decideAddress(l, fmt.Sprintf("c%d", i), "m")
				if d.Reason != "" {
					t.Errorf("c%d: %+v", i, d)
				}
				addrs[i] = d.Address
			}
		}()
	}
	wg.Wait()
	seen := map[netip.Addr]int{}
	for i, a := range addrs {
		if j, dup := seen[a]; dup {
			t.Fatalf("c%d and c%d both got %s", i, j, a)
		}
		seen[a] = i
		if a == netip.MustParseAddr("10.5.0.0") || a == netip.MustParseAddr("10.5.0.1") {
			t.Fatalf("handed out reserved %s", a)
		}
	}
	if u, _ := l.AddressUsage(ns, "m", 0); u.InUse != claims || u.Free.String() != fmt.Sprint(1024-3-claims) {
		t.Fatalf("usage %+v", u)
	}
}

// A catch-up read that raced the informer brings back neither an
// IPAddress deleted meanwhile nor an older object of the same name.
func TestAddressCatchUpNeverGoesBack(t *testing.T) {
	l, _ := newLedger()
	readyAddressSubnet(l, "m", "10.6.0.0/24", "")
	old := AddressRecord{Namespace: ns, Name: "a", UID: "uid-1", ResourceVersion: "10", Subnet: "m", Address: netip.MustParseAddr("10.6.0.9"), ClaimUID: "c1"}
	newer := AddressRecord{Namespace: ns, Name: "b", UID: "uid-2", ResourceVersion: "30", Subnet: "m", Address: netip.MustParseAddr("10.6.0.7"), ClaimUID: "c2"}
	replaced := AddressRecord{Namespace: ns, Name: "b", UID: "uid-0", ResourceVersion: "12", Subnet: "m", Address: netip.MustParseAddr("10.6.0.8"), ClaimUID: "c0"}
	l.ApplyAddress(newer, Created)
	err := l.CatchUpAddresses(func() ([]AddressRecord, error) {
		// The LIST shows a (deleted while it is applied) and an older b.
		l.ApplyAddress(old, Created)
		l.DeleteAddress(old)
		return []AddressRecord{old, replaced}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got := addressesOf(l, ns, "m")
	if len(got) != 1 || got[0].UID != "uid-2" {
		t.Fatalf("after the catch-up: %+v, want only b (uid-2)", got)
	}
	// Outside a catch-up, the informer's own order applies.
	l.ApplyAddress(old, Created)
	if len(addressesOf(l, ns, "m")) != 2 {
		t.Fatal("a new object of the informer was ignored")
	}
}

// A grant never written, made in a Subnet that was deleted and created
// again with another range, is withdrawn: the new Subnet hands out its own
// addresses, from the base of its range.
func TestAddressGrantOfAReplacedSubnet(t *testing.T) {
	l, _ := newLedger()
	readyAddressSubnet(l, "m", "10.7.1.0/24", "")
	for i := range 3 {
		decideAddress(l, fmt.Sprintf("c%d", i), "m")
	}
	s := ready(explicit("m", "pool", "10.7.1.0/24", 1), "10.7.1.0/24")
	l.DeleteSubnet(s)
	again := ready(explicit("m", "pool", "10.7.0.0/23", 2), "10.7.0.0/23")
	again.UID = "uid-m-2"
	l.ApplySubnet(again, Created, nil)
	d := decideAddress(l, "c0", "m")
	if d.Address.String() != "10.7.0.2" || d.SubnetUID != "uid-m-2" {
		t.Fatalf("in the new Subnet: %+v, want 10.7.0.2 decided in uid-m-2", d)
	}
}

// A withdrawn grant frees its address for the claims that wait.
func TestForgetAddressWakes(t *testing.T) {
	l, rec := newLedger()
	readyAddressSubnet(l, "m", "10.8.0.0/30", "")
	d := decideAddress(l, "a", "m")
	if w := decideAddress(l, "b", "m"); w.Reason != AddressPoolExhausted {
		t.Fatalf("b: %+v", w)
	}
	rec.events = nil
	l.ForgetAddress(ns, "a", claimUID("a"), "m", d.Address)
	if !woke(rec, "b") {
		t.Fatal("b was not woken")
	}
	if w := decideAddress(l, "b", "m"); w.Address != d.Address {
		t.Fatalf("b after the withdrawal: %+v", w)
	}
}

// An IPAddress name is unique in its namespace: a claim made again under
// a name whose IPAddress still cools down in another Subnet waits for it
// instead of being granted an address it cannot write.
func TestAddressNameHeldInAnotherSubnet(t *testing.T) {
	l, rec := newLedger()
	readyAddressSubnet(l, "a", "10.9.0.0/24", "")
	l.ApplySubnet(ready(explicit("b", "pool", "10.9.1.0/24", 2), "10.9.1.0/24"), Created, nil)
	old := written("m7", "a", decideAddress(l, "m7", "a"), 10)
	old.Releasing = time.Now()
	l.ApplyAddress(old, Created)
	if d := l.DecideAddress(ns, "m7", "new-uid", "b"); d.Reason != AddressAllocationFailed || !strings.Contains(d.Message, "Subnet a") {
		t.Fatalf("m7 again, in Subnet b: %+v", d)
	}
	if u, ok := l.AddressUsage(ns, "b", 0); ok && u.InUse != 0 {
		t.Fatalf("Subnet b counts an address it never granted: %+v", u)
	}
	rec.events = nil
	l.DeleteAddress(old)
	if !woke(rec, "m7") {
		t.Fatal("m7 was not woken when the old IPAddress went")
	}
	if d := l.DecideAddress(ns, "m7", "new-uid", "b"); d.Reason != "" || d.Address.String() != "10.9.1.2" {
		t.Fatalf("m7 once the old IPAddress went: %+v", d)
	}
}

// A tombstone may carry an older resourceVersion than the catch-up's LIST
// read: the deleted object still does not come back.
func TestAddressCatchUpTombstoneOlderThanTheList(t *testing.T) {
	l, _ := newLedger()
	readyAddressSubnet(l, "m", "10.10.0.0/24", "")
	a := AddressRecord{Namespace: ns, Name: "a", UID: "uid-a", ResourceVersion: "10", Subnet: "m", Address: netip.MustParseAddr("10.10.0.5"), ClaimUID: "c"}
	l.ApplyAddress(a, Created)
	listed := a
	listed.ResourceVersion, listed.Releasing = "20", time.Now()
	err := l.CatchUpAddresses(func() ([]AddressRecord, error) {
		l.DeleteAddress(a) // the informer's tombstone: its last state, RV 10
		return []AddressRecord{listed}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := addressesOf(l, ns, "m"); len(got) != 0 {
		t.Fatalf("a deleted IPAddress came back: %+v", got)
	}
}

// A claim gone without a release leaves no grant behind; a grant in
// another Subnet of its name is withdrawn too, and its waiters are woken.
func TestForgetAssumedName(t *testing.T) {
	l, rec := newLedger()
	readyAddressSubnet(l, "m", "10.11.0.0/30", "")
	d := decideAddress(l, "gone", "m")
	if w := decideAddress(l, "next", "m"); w.Reason != AddressPoolExhausted {
		t.Fatalf("next: %+v", w)
	}
	rec.events = nil
	l.ForgetAssumedName(ns, "gone")
	if !woke(rec, "next") {
		t.Fatal("the waiting claim was not woken")
	}
	if w := decideAddress(l, "next", "m"); w.Address != d.Address {
		t.Fatalf("next after the withdrawal: %+v", w)
	}
}

// addressesOf lists the addresses held in a Subnet.
func addressesOf(l *Ledger, namespace, subnet string) []AddressRecord {
	l.mu.RLock()
	defer l.mu.RUnlock()
	sa := l.b.addresses[idOf(namespace, SubnetKey(subnet))]
	if sa == nil {
		return nil
	}
	var out []AddressRecord
	for _, h := range sa.byName {
		out = append(out, h.rec)
	}
	return out
}

// An IPAddress whose address lies outside the Subnet's range (written for
// an earlier range of the name, or by hand) does not stop the search for a
// free address when it goes: the addresses inside are still handed out.
func TestAddressOutOfRangeReleaseKeepsTheSearch(t *testing.T) {
	for _, outside := range []string{"10.0.0.5", "10.99.0.5", "fd00::5"} {
		t.Run(outside, func(t *testing.T) {
			l, _ := newLedger()
			readyAddressSubnet(l, "m", "10.1.0.0/29", "")
			stray := AddressRecord{Namespace: ns, Name: "stray", UID: "ip-stray", ResourceVersion: "5", Subnet: "m",
				Address: netip.MustParseAddr(outside), ClaimUID: "old-claim", Releasing: time.Now()}
			l.ApplyAddress(stray, Created)
			first := decideAddress(l, "c0", "m")
			if first.Address.String() != "10.1.0.2" {
				t.Fatalf("c0: %+v", first)
			}
			l.DeleteAddress(stray)
			if d := decideAddress(l, "c1", "m"); d.Reason != "" || d.Address.String() != "10.1.0.3" {
				t.Fatalf("after the out-of-range IPAddress went: %+v, want 10.1.0.3", d)
			}
			// Full, then a release inside the range: found again.
			for i := 2; i < 5; i++ {
				decideAddress(l, fmt.Sprintf("c%d", i), "m")
			}
			if d := decideAddress(l, "late", "m"); d.Reason != AddressPoolExhausted {
				t.Fatalf("a full /29: %+v", d)
			}
			l.ApplyAddress(stray, Created)
			l.DeleteAddress(stray)
			l.ForgetAddress(ns, "c0", claimUID("c0"), "m", first.Address)
			if d := decideAddress(l, "late", "m"); d.Address != first.Address {
				t.Fatalf("after c0's release: %+v, want %s", d, first.Address)
			}
		})
	}
}
