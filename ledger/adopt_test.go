package ledger

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// An existing IPAddress is taken only while the Subnet would hand out its
// address; a claim refused because the Subnet is not Ready waits, and is
// woken when the Subnet becomes Ready.
func TestAdoptAddressFollowsTheSubnetsRules(t *testing.T) {
	l, rec := newLedger()
	l.ApplyPool(rootPool("pool", "10.0.0.0/8", 24), Created, nil)
	pending := explicit("m", "pool", "10.1.0.0/24", 1)
	pending.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "PoolNotFound"}}
	l.ApplySubnet(pending, Created, nil)
	restored := func(name, addr string) AddressRecord {
		return AddressRecord{Namespace: ns, Name: name, UID: types.UID("ip-" + name), ResourceVersion: "10", Subnet: "m", Address: netip.MustParseAddr(addr)}
	}
	for _, r := range []AddressRecord{restored("a", "10.1.0.9"), restored("b", "10.1.0.9"), restored("c", "10.1.0.1"), restored("d", "10.1.1.9"), restored("e", "10.1.0.10")} {
		l.ApplyAddress(r, Created)
	}
	if _, err := l.AdoptAddress(ns, "x", "ip-x", claimUID("x"), "m"); !errors.Is(err, ErrAddressNotSeen) {
		t.Errorf("an IPAddress the ledger does not know: %v, want ErrAddressNotSeen", err)
	}
	if _, err := l.AdoptAddress(ns, "e", "ip-other", claimUID("e"), "m"); !errors.Is(err, ErrAddressNotSeen) {
		t.Errorf("another object of the name: %v, want ErrAddressNotSeen", err)
	}
	d, err := l.AdoptAddress(ns, "e", "ip-e", claimUID("e"), "m")
	if err != nil || d.Reason != AddressPoolNotReady || !strings.Contains(d.Message, "not Ready (PoolNotFound)") {
		t.Fatalf("Subnet not Ready: %+v %v", d, err)
	}
	rec.woken()
	l.ApplySubnet(ready(explicit("m", "pool", "10.1.0.0/24", 1), "10.1.0.0/24"), Updated, nil)
	if woken := rec.woken(); !slices.Contains(woken, ClaimKey(KindAddressClaim+"/e")) {
		t.Errorf("the Subnet became Ready; woken %v, want IPAddressClaim/e", woken)
	}
	for name, want := range map[string]struct {
		says string
		err  error
	}{
		"a": {says: "which IPAddress b holds too"}, "b": {says: "which IPAddress a holds too"},
		"c": {says: "the gateway address", err: ErrMustGo}, "d": {says: "outside the range", err: ErrMustGo},
	} {
		d, err := l.AdoptAddress(ns, name, types.UID("ip-"+name), claimUID(name), "m")
		if !errors.Is(err, want.err) || d.Reason != AddressAllocationFailed || !strings.Contains(d.Message, want.says) {
			t.Errorf("%s: %+v %v, want AllocationFailed saying %q (error %v)", name, d, err, want.says, want.err)
		}
	}
	d, err = l.AdoptAddress(ns, "e", "ip-e", claimUID("e"), "m")
	if err != nil || d.Reason != "" || d.Address != netip.MustParseAddr("10.1.0.10") || d.Prefix != 24 || d.Gateway != netip.MustParseAddr("10.1.0.1") || d.Assumed {
		t.Errorf("a valid address: %+v %v", d, err)
	}
	// Taken, it is held: the next grant skips it.
	if g := l.DecideAddress(ns, "new", claimUID("new"), "m"); g.Address == netip.MustParseAddr("10.1.0.10") || g.Address == netip.MustParseAddr("10.1.0.9") {
		t.Errorf("a held address was handed out again: %+v", g)
	}
}

// The lifecycle checker's finding (A6, seed 10136792456178508663): a claim
// bound to the address the arbiter granted it lost it when an IPAddress
// written by hand with the same address came, and a reconcile whose cache
// lagged the bind re-judged its own IPAddress. The grant stands; the
// duplicate is refused.
func TestAGrantWrittenStandsAgainstALaterDuplicate(t *testing.T) {
	l, _ := newLedger()
	l.ApplyPool(rootPool("pool", "10.0.0.0/8", 24), Created, nil)
	l.ApplySubnet(ready(explicit("m", "pool", "10.1.0.0/29", 1), "10.1.0.0/29"), Created, nil)
	d := l.DecideAddress(ns, "a", claimUID("a"), "m")
	if !d.Assumed {
		t.Fatalf("grant: %+v", d)
	}
	written := AddressRecord{Namespace: ns, Name: "a", UID: "ip-a", ResourceVersion: "10", Subnet: "m", Address: d.Address, ClaimUID: claimUID("a")}
	l.ApplyAddress(written, Created)
	dup := AddressRecord{Namespace: ns, Name: "b", UID: "ip-b", ResourceVersion: "11", Subnet: "m", Address: d.Address}
	l.ApplyAddress(dup, Created)
	written.ResourceVersion = "12" // its finalizer, a label: another version
	l.ApplyAddress(written, Updated)
	if got, err := l.AdoptAddress(ns, "a", "ip-a", claimUID("a"), "m"); err != nil || got.Reason != "" {
		t.Errorf("the written grant re-judged: %+v %v", got, err)
	}
	if got, _ := l.AdoptAddress(ns, "b", "ip-b", claimUID("b"), "m"); got.Reason != AddressAllocationFailed {
		t.Errorf("the later duplicate: %+v, want refused", got)
	}
}
