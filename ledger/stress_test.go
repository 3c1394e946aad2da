package ledger

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha1"
)

// TestConcurrentArbitration drives the ledger as the manager does, with the
// race detector on: a feeder applies creates (the informer), reconcile
// workers decide in parallel, and their "status writes" come back as
// updates on other goroutines. At the end no two held ranges overlap, every
// dynamic Subnet holds a range inside the pool, and each group of
// overlapping explicit claims has exactly one winner, its oldest member
// (ties on the second-resolution timestamp go to the smaller name), which
// every loser names.
func TestConcurrentArbitration(t *testing.T) {
	const (
		groups      = 40 // explicit claims of one /24 each, five claimants per group
		perGroup    = 5
		dynamicOnes = 600 // /26s
		workers     = 8
	)
	l := New()
	l.MarkSynced()
	// The margin must cover the feeders' time to deliver every claim of the
	// second (hundreds of milliseconds under the race detector): a claim
	// that arrives after its second has settled is decided against what
	// is held by then, as an informer lag beyond the margin would.
	const margin = time.Second
	l.SetSettleMargin(margin)
	l.ApplyPool(rootPool("p", "10.0.0.0/16", 26), Created, nil)
	// Created "now", all in one second, as simultaneous creates are: the
	// winner of each group is then its smallest name, member 0, whichever
	// arrives or is decided first.
	now := time.Now()
	at := func(s *ipamv1.Subnet) *ipamv1.Subnet {
		s.CreationTimestamp = metav1.NewTime(now.Truncate(time.Second))
		return s
	}

	var subnets []*ipamv1.Subnet
	for g := range groups {
		for m := range perGroup {
			// Ages interleave across groups; within a group member 0 is oldest.
			// At the top of the pool, clear of the dynamic ones (best fit
			// fills from the bottom): a dynamic Subnet that got there first
			// would rightly win, and the admission webhook prevents that race.
			subnets = append(subnets, at(explicit(fmt.Sprintf("g%02d-m%d", g, m), "p", fmt.Sprintf("10.0.%d.0/24", 215+g), 0)))
		}
	}
	for i := range dynamicOnes {
		subnets = append(subnets, at(dynamic(fmt.Sprintf("d%03d", i), "p", 26, 0)))
	}
	byName := map[string]*ipamv1.Subnet{}
	for _, s := range subnets {
		byName[s.Name] = s
	}

	queue := make(chan string, len(subnets)*4)
	writes := make(chan *ipamv1.Subnet, len(subnets))
	l.Subscribe(func(e Event) {
		if e.Kind == "Subnet" && e.Type == Created {
			queue <- e.Name
		}
		for _, k := range e.Wake {
			queue <- k.Name()
		}
	})

	var decided sync.WaitGroup
	var writers sync.WaitGroup
	for range 2 { // the informer delivering our status writes
		writers.Add(1)
		go func() {
			defer writers.Done()
			for s := range writes {
				l.ApplySubnet(s, Updated, nil)
			}
		}()
	}
	stop := make(chan struct{})
	for range workers {
		decided.Add(1)
		go func() {
			defer decided.Done()
			for {
				select {
				case name := <-queue:
					d, ok := l.DecideSubnet(ns, name)
					switch {
					case ok && d.Assumed:
						writes <- ready(byName[name], d.CIDR.String())
					case ok && d.RetryAfter > 0: // the controller's RequeueAfter
						time.AfterFunc(d.RetryAfter, func() { queue <- name })
					}
				case <-stop:
					return
				}
			}
		}()
	}
	var fed sync.WaitGroup
	for half := range 2 { // two feeders: creates arrive concurrently too
		fed.Add(1)
		go func() {
			defer fed.Done()
			for i := half; i < len(subnets); i += 2 {
				l.ApplySubnet(subnets[i], Created, nil)
			}
		}()
	}
	fed.Wait()
	// Let the claims settle and the workers drain the queue and the writes.
	time.Sleep(time.Until(now.Truncate(time.Second).Add(time.Second + margin)))
	for quiet := 0; quiet < 10; {
		time.Sleep(20 * time.Millisecond)
		if len(queue) == 0 && len(writes) == 0 {
			quiet++
		} else {
			quiet = 0
		}
	}
	close(stop)
	decided.Wait()
	close(writes)
	writers.Wait()

	held := map[string]netip.Prefix{}
	for _, s := range subnets {
		d, _ := l.DecideSubnet(ns, s.Name)
		if d.Ready() {
			held[s.Name] = d.CIDR
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
		winner := fmt.Sprintf("g%02d-m0", g)
		if _, ok := held[winner]; !ok {
			t.Errorf("group %d: the oldest claim %s does not hold its range", g, winner)
		}
		for m := 1; m < perGroup; m++ {
			name := fmt.Sprintf("g%02d-m%d", g, m)
			d, _ := l.DecideSubnet(ns, name)
			if d.Reason != ipamv1.ReasonOverlaps || d.Winner != SubnetKey(winner) {
				t.Errorf("%s: %s winner %q, want Overlaps naming %s", name, d.Reason, d.Winner, winner)
			}
		}
	}
}
