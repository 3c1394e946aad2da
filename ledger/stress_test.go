package ledger

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// TestConcurrentArbitration drives the ledger as the manager does, with the
// race detector on: two feeders apply creates (the informer), reconcile
// workers decide in parallel, and their "status writes" come back as
// updates on other goroutines. At the end no two held ranges overlap, every
// dynamic Subnet holds a range inside the pool, every grant was written once
// and never changed, and each group of overlapping explicit claims has
// exactly one winner, which every loser names. Which member wins depends on
// arrival (the first grant stands); the deterministic order among claims
// pending at one decision is TestExplicitClaimsOldestWins's.
func TestConcurrentArbitration(t *testing.T) {
	const (
		groups      = 40 // explicit claims of one /24 each, five claimants per group
		perGroup    = 5
		dynamicOnes = 600 // /26s
		workers     = 8
	)
	l := New()
	l.MarkSynced()
	l.ApplyPool(rootPool("p", "10.0.0.0/16", 26), Created, nil)

	var subnets []*ipamv1.Subnet
	for g := range groups {
		for m := range perGroup {
			// At the top of the pool, clear of the dynamic ones (best fit
			// fills from the bottom): a dynamic Subnet that got there first
			// would rightly win, and the admission webhook prevents that race.
			subnets = append(subnets, explicit(fmt.Sprintf("g%02d-m%d", g, m), "p", fmt.Sprintf("10.0.%d.0/24", 215+g), m))
		}
	}
	for i := range dynamicOnes {
		subnets = append(subnets, dynamic(fmt.Sprintf("d%03d", i), "p", 26, i))
	}
	byName := map[string]*ipamv1.Subnet{}
	for _, s := range subnets {
		byName[s.Name] = s
	}

	// work counts items queued and not yet handled, so the test waits for
	// exactly the end of the work rather than for a quiet spell.
	var work sync.WaitGroup
	queue := make(chan string, len(subnets)*4)
	writes := make(chan *ipamv1.Subnet, len(subnets))
	enqueue := func(name string) { work.Add(1); queue <- name }
	l.Subscribe(func(e Event) {
		if e.Kind == "Subnet" && e.Type == Created {
			enqueue(e.Name)
		}
		for _, k := range e.Wake {
			enqueue(k.Name)
		}
	})

	var mu sync.Mutex
	written := map[string]netip.Prefix{} // every grant, by name
	var done sync.WaitGroup
	for range 2 { // the informer delivering our status writes
		done.Go(func() {
			for s := range writes {
				l.ApplySubnet(s, Updated, nil)
				work.Done()
			}
		})
	}
	for range workers {
		done.Go(func() {
			for name := range queue {
				s := byName[name]
				if d, ok := l.DecideSubnet(ns, name, s.UID); ok && d.Assumed {
					mu.Lock()
					if prev, again := written[name]; again && prev != d.CIDR {
						t.Errorf("%s granted %s, then %s", name, prev, d.CIDR)
					}
					written[name] = d.CIDR
					mu.Unlock()
					work.Add(1)
					writes <- ready(s, d.CIDR.String())
				}
				work.Done()
			}
		})
	}
	var fed sync.WaitGroup
	for half := range 2 { // two feeders: creates arrive concurrently too
		fed.Go(func() {
			for i := half; i < len(subnets); i += 2 {
				l.ApplySubnet(subnets[i], Created, nil)
			}
		})
	}
	fed.Wait()
	work.Wait()
	close(queue)
	close(writes)
	done.Wait()

	held := map[string]netip.Prefix{}
	for _, s := range subnets {
		d, _ := l.DecideSubnet(ns, s.Name, s.UID)
		if d.Ready() {
			held[s.Name] = d.CIDR
			if d.Assumed {
				t.Errorf("%s: its grant was never written", s.Name)
			}
		}
	}
	pool := netip.MustParsePrefix("10.0.0.0/16")
	names := make([]string, 0, len(held))
	for n := range held {
		names = append(names, n)
	}
	for i, a := range names {
		if !pool.Contains(held[a].Addr()) {
			t.Errorf("%s holds %s outside the pool", a, held[a])
		}
		for _, b := range names[i+1:] {
			if held[a].Overlaps(held[b]) {
				t.Errorf("%s (%s) and %s (%s) both hold overlapping ranges", a, held[a], b, held[b])
			}
		}
	}
	for i := range dynamicOnes {
		if _, ok := held[fmt.Sprintf("d%03d", i)]; !ok {
			t.Errorf("d%03d holds nothing", i)
		}
	}
	for g := range groups {
		var winners []string
		for m := range perGroup {
			if name := fmt.Sprintf("g%02d-m%d", g, m); held[name].IsValid() {
				winners = append(winners, name)
			}
		}
		if len(winners) != 1 {
			t.Errorf("group %d: winners %v, want exactly one", g, winners)
			continue
		}
		for m := range perGroup {
			name := fmt.Sprintf("g%02d-m%d", g, m)
			if name == winners[0] {
				continue
			}
			d, _ := l.DecideSubnet(ns, name, byName[name].UID)
			if d.Reason != ipamv1.ReasonOverlaps || refKey(d.Winner) != SubnetKey(winners[0]) {
				t.Errorf("%s: %s winner %q, want Overlaps naming %s", name, d.Reason, d.Winner, winners[0])
			}
		}
	}
}
