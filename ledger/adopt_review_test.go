package ledger

import (
	"errors"
	"testing"
)

// Review: AdoptAddress is asked about IPAddress "a" (UID ip-a-restored),
// which the ledger has never seen, while it holds an assumed grant for the
// claim (a write that timed out and did not land). It approves, with the
// grant's address: the IPAddress's own address (which may be another
// claim's) is never checked, and admit adopts and binds it.
func TestAdoptAddressApprovesAnIPAddressTheLedgerHasNotSeen(t *testing.T) {
	l, _ := newLedger()
	readyAddressSubnet(l, "m", "10.1.0.0/24", "")
	b := decideAddress(l, "b", "m")
	l.ApplyAddress(written("b", "m", b, 10), Created)
	if g := decideAddress(l, "a", "m"); g.Reason != "" || !g.Assumed {
		t.Fatalf("grant to a: %+v", g)
	}
	d, err := l.AdoptAddress(ns, "a", "ip-a-restored", claimUID("a"), "m")
	if !errors.Is(err, ErrAddressNotSeen) {
		t.Errorf("an IPAddress the ledger never saw is approved: %+v (err %v); its address is not what was checked", d, err)
	}
}
