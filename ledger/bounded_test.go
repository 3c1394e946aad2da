package ledger

import (
	"fmt"
	"net/netip"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// A tenant's junk must not slow another namespace's decisions
// (docs/architecture.md, "Untrusted callers"). The junk namespace piles up
// claims on the platform's shared pool, which it may or may not claim from,
// and IPAddressClaims naming Subnets that do not exist; the team namespace
// then decides, asks and lists as usual. These helpers set that up for the
// test below and for BenchmarkJunkElsewhere.
const (
	platformNS = "platform"
	teamNS     = "team"
	junkNS     = "junk"
	sharedPool = "shared"
)

// junkLedger returns a ledger with the platform's shared pool, the team's
// claims on it, and junk claims of the junk namespace: junk Subnets on the
// shared pool (refused: the pool does not allow the namespace; else
// allowed, asking for a /16 that never fits) and junk IPAddressClaims on
// missing Subnets.
func junkLedger(tb testing.TB, junk int, allowed bool) *Ledger {
	tb.Helper()
	l := New()
	l.MarkSynced()
	l.ApplyNamespace(teamNS, map[string]string{"tenant": "true"}, Created)
	junkLabels := map[string]string{}
	if allowed {
		junkLabels["tenant"] = "true"
	}
	l.ApplyNamespace(junkNS, junkLabels, Created)
	shared := movePool(rootPool(sharedPool, "10.0.0.0/16", 28), platformNS)
	shared.Spec.AllowedNamespaces = &ipamv1.AllowedNamespaces{From: ipamv1.FromSelector,
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "true"}}}
	l.ApplyPool(shared, Created, nil)

	onShared := func(s *ipamv1.Subnet, namespace string) *ipamv1.Subnet {
		s = moveSubnet(s, namespace)
		s.Spec.PoolRef.Namespace = platformNS
		return s
	}
	for i := range 8 {
		cidr := fmt.Sprintf("10.0.%d.0/28", i)
		l.ApplySubnet(ready(onShared(explicit(fmt.Sprintf("web-%d", i), sharedPool, cidr, i), teamNS), cidr), Created, nil)
	}
	l.ApplySubnet(ready(onShared(explicit("machines", sharedPool, "10.0.100.0/24", 9), teamNS), "10.0.100.0/24"), Created, nil)

	length := int32(28)
	if allowed {
		length = 16 // the team holds part of the /16: it waits for good
	}
	for i := range junk {
		s := onShared(dynamic(fmt.Sprintf("junk-%d", i), sharedPool, length, 10+i), junkNS)
		s.UID = types.UID(fmt.Sprintf("uid-junk-%d", i))
		l.ApplySubnet(s, Created, nil)
		// An IPAddress of a Subnet that is gone (its finalizer removed by
		// hand) or written by hand: held in a book of its own.
		addr := netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)})
		l.ApplyAddress(AddressRecord{Namespace: junkNS, Name: fmt.Sprintf("ip-%d", i), UID: types.UID(fmt.Sprintf("uid-ip-%d", i)),
			ResourceVersion: fmt.Sprint(i + 1), Subnet: fmt.Sprintf("gone-%d", i), Address: addr, ClaimUID: types.UID(fmt.Sprintf("uid-c-%d", i))}, Created)
	}
	// IPAddressClaims that wait for Subnets that do not exist, a book each.
	// Only the first few thousand: before the books were indexed by claim,
	// each of these decisions walked every book, so building 200k of them
	// took quadratic time (BenchmarkJunkElsewhere could not set up).
	for i := range min(junk, maxJunkWaiters) {
		claim := fmt.Sprintf("claim-%d", i)
		if d := l.DecideAddress(junkNS, claim, types.UID("uid-"+claim), fmt.Sprintf("missing-%d", i)); d.Reason != AddressPoolNotReady {
			tb.Fatalf("junk address claim: %+v", d)
		}
	}
	return l
}

// maxJunkWaiters bounds the junk IPAddressClaims that wait (junkLedger).
const maxJunkWaiters = 2_000

// junkOps are what the team does while the junk sits there: a Subnet's
// whole life on the shared pool (create, decision, status, delete), an
// address from its Subnet (granted, then withdrawn), the webhooks' overlap
// and shrink queries, the pool's status figures and its user listing.
var junkOps = []struct {
	name string
	op   func(tb testing.TB, l *Ledger)
}{
	{"decide", func(tb testing.TB, l *Ledger) {
		s := moveSubnet(dynamic("new", sharedPool, 28, 100), teamNS)
		s.Spec.PoolRef.Namespace = platformNS
		l.ApplySubnet(s, Created, nil)
		d, ok := l.DecideSubnet(teamNS, s.Name, s.UID)
		if !ok || !d.Ready() {
			tb.Fatalf("decision %+v", d)
		}
		l.ApplySubnet(ready(s, d.CIDR.String()), Updated, nil)
		l.DeleteSubnet(s)
	}},
	{"address", func(tb testing.TB, l *Ledger) {
		d := l.DecideAddress(teamNS, "m-new", "uid-m-new", "machines")
		if d.Reason != "" {
			tb.Fatalf("address decision %+v", d)
		}
		l.ForgetAddress(teamNS, "m-new", "uid-m-new", "machines", d.Address)
	}},
	{"overlap", func(tb testing.TB, l *Ledger) {
		pool := ipamv1.PoolReference{Namespace: platformNS, Name: sharedPool}
		if _, total := l.Overlapping(pool, netip.MustParsePrefix("10.0.0.0/20"), teamNS, SubnetKey("probe"), 3); total != 8 {
			tb.Fatalf("overlap query found %d claims, want the team's 8", total)
		}
	}},
	{"shrink", func(tb testing.TB, l *Ledger) {
		all, low := netip.MustParsePrefix("10.0.0.0/16"), netip.MustParsePrefix("10.0.0.0/18")
		if _, total := l.HeldLeftOutside(platformNS, sharedPool, all, low, 3); total != 1 {
			tb.Fatalf("shrinking the pool leaves %d claims outside, want the team's machines", total)
		}
	}},
	{"figures", func(tb testing.TB, l *Ledger) {
		if _, ok := l.PoolFigures(platformNS, sharedPool); !ok {
			tb.Fatal("no figures")
		}
	}},
	{"users", func(tb testing.TB, l *Ledger) {
		if named, subnets, _ := l.Users(platformNS, sharedPool, 3); len(named) != 3 || subnets < 9 {
			tb.Fatalf("users %v, %d Subnets", named, subnets)
		}
	}},
}

// The property without a clock: each of the team's operations visits as
// many claims and address books with the junk as without it. (Before the
// per-namespace indexes, every one of them but the overlap query with an
// allowed junk namespace walked all the junk.)
func TestJunkInOneNamespaceIsNotWalkedForAnother(t *testing.T) {
	visits := 0
	visitHook = func() { visits++ }
	defer func() { visitHook = nil }()
	for _, allowed := range []bool{false, true} {
		clean, junky := junkLedger(t, 0, allowed), junkLedger(t, 2_000, allowed)
		for _, o := range junkOps {
			visits = 0
			o.op(t, clean)
			want := visits
			visits = 0
			o.op(t, junky)
			if visits > want {
				t.Errorf("allowed=%v %s: %d claims or books visited with 2000 junk claims elsewhere, %d without", allowed, o.name, visits, want)
			}
		}
	}
}

// The junk is still there and still refused or waiting: the indexes hide
// it from others' answers, not from its own.
func TestJunkStillAnswersForItself(t *testing.T) {
	for _, allowed := range []bool{false, true} {
		l := junkLedger(t, 3, allowed)
		d, _ := l.DecideSubnet(junkNS, "junk-0", "uid-junk-0")
		want := ipamv1.ReasonNotAllowed
		if allowed {
			want = ipamv1.ReasonPoolExhausted
		}
		if d.Reason != want {
			t.Errorf("allowed=%v: junk Subnet decided %+v, want %s", allowed, d, want)
		}
		named, subnets, _ := l.Users(platformNS, sharedPool, 100)
		listed := 0
		for _, r := range named {
			if r.Namespace == junkNS {
				listed++
			}
		}
		if wantListed := map[bool]int{false: 0, true: 3}[allowed]; listed != wantListed || subnets != 9+wantListed {
			t.Errorf("allowed=%v: users list %d junk claims of %d Subnets, want %d", allowed, listed, subnets, wantListed)
		}
		// A junk address claim that goes stops waiting on its missing Subnet.
		l.StopWaiting(junkNS, "claim-1")
		if _, still := l.b.addresses[idOf(junkNS, SubnetKey("missing-1"))]; still {
			t.Errorf("allowed=%v: the book of a missing Subnet outlives its last waiter", allowed)
		}
	}
}
