package ledger

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/subnet-operator/subnet-operator/ipspace"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

// benchLedger holds n Ready /28s of one pool in one namespace, each with the
// status the controller writes.
func benchLedger(b *testing.B, n int) *Ledger {
	b.Helper()
	l := New()
	l.ApplyPool(rootPool("p", "10.0.0.0/8", 28), Created, nil)
	base := netip.MustParsePrefix("10.0.0.0/8").Addr().As4()
	for i := range n {
		v := uint32(base[0])<<24 | uint32(i)<<4
		cidr := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), 28)
		s := ready(dynamic(fmt.Sprintf("s-%d", i), "p", 28, i), cidr.String())
		s.Status.Addresses = ipspace.AddressCount(cidr).String()
		s.Status.Conditions[0].LastTransitionTime = metav1.NewTime(time.Unix(1_700_000_000, 0))
		s.Status.Conditions[0].Message = "holds " + cidr.String()
		s.ResourceVersion = fmt.Sprint(i + 10)
		l.ApplySubnet(s, Created, nil)
	}
	return l
}

// What the auditor's pass costs the namespace's lock at 100k Subnets:
// copying the facts of the Ready ones (ReadySubnets) against rebuilding
// every Subnet object under the lock (what it did before).
func BenchmarkAuditRead(b *testing.B) {
	l := benchLedger(b, 100_000)
	n := l.ns(ns, false)
	b.Run("ready-facts", func(b *testing.B) {
		for b.Loop() {
			count := 0
			for range l.ReadySubnets() {
				count++
			}
			if count != 100_000 {
				b.Fatalf("%d Ready Subnets", count)
			}
		}
	})
	b.Run("rebuild-objects", func(b *testing.B) {
		for b.Loop() {
			n.mu.RLock()
			for key, c := range n.claims {
				if key.Kind() == statuscalc.KindSubnet {
					_ = c.subnet(n.name)
				}
			}
			n.mu.RUnlock()
		}
	})
}
