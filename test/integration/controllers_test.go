//go:build integration

package integration

import (
	"context"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

func newPool(ns, name, cidr string, defaultLen int32) *ipamv1.SubnetPool {
	p := &ipamv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: ipamv1.SubnetPoolSpec{CIDR: cidr}}
	if defaultLen > 0 {
		p.Spec.DefaultPrefixLength = ptr.To(defaultLen)
	}
	return p
}

func newSubnet(ns, name, pool string, length int32) *ipamv1.Subnet {
	return &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: pool}, PrefixLength: ptr.To(length)}}
}

func explicitSubnet(ns, name, pool, cidr string) *ipamv1.Subnet {
	return &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: pool}, CIDR: cidr}}
}

func create(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := k8s.Create(context.Background(), o); err != nil {
			t.Fatalf("creating %s: %v", o.GetName(), err)
		}
	}
}

func getPool(t *testing.T, ns, name string) *ipamv1.SubnetPool {
	t.Helper()
	var p ipamv1.SubnetPool
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

// edit changes a pool as a user does with kubectl patch: a merge patch of
// only what change changes, with no resourceVersion precondition. A get
// followed by an update would race the controller, which writes the pool's
// status and finalizer meanwhile, and fail with a conflict now and then.
func edit(t *testing.T, ns, name string, change func(*ipamv1.SubnetPool)) {
	t.Helper()
	p := getPool(t, ns, name)
	before := p.DeepCopy()
	change(p)
	if err := k8s.Patch(context.Background(), p, client.MergeFrom(before)); err != nil {
		t.Fatalf("editing SubnetPool %s: %v", name, err)
	}
}

// editStatus writes a pool's status as another client would, with a merge
// patch of what change changes.
func editStatus(t *testing.T, ns, name string, change func(*ipamv1.SubnetPool)) {
	t.Helper()
	p := getPool(t, ns, name)
	before := p.DeepCopy()
	change(p)
	if err := k8s.Status().Patch(context.Background(), p, client.MergeFrom(before)); err != nil {
		t.Fatalf("writing the status of SubnetPool %s: %v", name, err)
	}
}

// poolShows waits until the pool's status matches.
func poolShows(t *testing.T, ns, name string, check func(*ipamv1.SubnetPool) error) {
	t.Helper()
	eventually(t, 20*time.Second, func() error {
		var p ipamv1.SubnetPool
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
			return err
		}
		return check(&p)
	})
}

func allocatedIs(want string) func(*ipamv1.SubnetPool) error {
	return func(p *ipamv1.SubnetPool) error {
		if p.Status.Allocated != want {
			return fmt.Errorf("allocated %q, want %q", p.Status.Allocated, want)
		}
		return nil
	}
}

// subnetReason waits until the Subnet's Ready condition has the reason and
// returns the Subnet.
func subnetReason(t *testing.T, ns, name, reason string) *ipamv1.Subnet {
	t.Helper()
	var s ipamv1.Subnet
	eventually(t, 20*time.Second, func() error {
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(s.Status.Conditions, ipamv1.ConditionReady); c == nil || c.Reason != reason {
			return fmt.Errorf("Ready condition %+v, want reason %s", c, reason)
		}
		return nil
	})
	return &s
}

// The trigger events of the seed design (§10), each seen through a real API
// server: the pool's status follows every change that affects it.
func TestTriggerEvents(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	create(t, newPool(ns, "root", "10.0.0.0/16", 24))

	// 1. Subnet create and delete.
	s := newSubnet(ns, "a", "root", 24)
	create(t, s)
	poolShows(t, ns, "root", allocatedIs("256"))
	if err := k8s.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	poolShows(t, ns, "root", allocatedIs("0"))

	// 2 and 3. A child pool counts as allocated in its parent, follows its
	// own growth, and leaves when it is deleted.
	child := newPool(ns, "child", "10.0.128.0/18", 0)
	child.Spec.ParentRef = &ipamv1.PoolReference{Name: "root"}
	create(t, child)
	poolShows(t, ns, "root", allocatedIs("16384"))
	edit(t, ns, "child", func(p *ipamv1.SubnetPool) { p.Spec.CIDR = "10.0.128.0/17" })
	poolShows(t, ns, "root", allocatedIs("32768"))
	poolShows(t, ns, "child", func(p *ipamv1.SubnetPool) error {
		if p.Status.CIDR != "10.0.128.0/17" || p.Status.Capacity != "32768" {
			return fmt.Errorf("child serves %s (%s)", p.Status.CIDR, p.Status.Capacity)
		}
		return nil
	})
	if err := k8s.Delete(ctx, child); err != nil {
		t.Fatal(err)
	}
	poolShows(t, ns, "root", allocatedIs("0"))

	// 4. Its own spec: the pool grows.
	edit(t, ns, "root", func(p *ipamv1.SubnetPool) { p.Spec.CIDR = "10.0.0.0/15" })
	poolShows(t, ns, "root", func(p *ipamv1.SubnetPool) error {
		if p.Status.Capacity != "131072" || p.Status.ObservedGeneration != p.Generation {
			return fmt.Errorf("capacity %s at generation %d/%d", p.Status.Capacity, p.Status.ObservedGeneration, p.Generation)
		}
		return nil
	})

	// 5. Another client writes a wrong status; the controller corrects it,
	// and the recompute annotation forces a recomputation.
	editStatus(t, ns, "root", func(p *ipamv1.SubnetPool) { p.Status.Free = "12345" })
	poolShows(t, ns, "root", func(p *ipamv1.SubnetPool) error {
		if p.Status.Free != "131072" {
			return fmt.Errorf("free %q", p.Status.Free)
		}
		return nil
	})
	edit(t, ns, "root", func(p *ipamv1.SubnetPool) {
		p.Annotations = map[string]string{ipamv1.AnnotationRecompute: time.Now().Format(time.RFC3339)}
	})
	poolShows(t, ns, "root", func(p *ipamv1.SubnetPool) error {
		if !meta.IsStatusConditionTrue(p.Status.Conditions, ipamv1.ConditionReady) {
			return fmt.Errorf("not Ready: %+v", p.Status.Conditions)
		}
		return nil
	})
}

func TestSubnetBeforePool(t *testing.T) {
	ns := namespace(t)
	create(t, newSubnet(ns, "early", "later", 24))
	subnetReason(t, ns, "early", ipamv1.ReasonPoolNotFound)
	create(t, newPool(ns, "later", "10.9.0.0/16", 0))
	s := subnetReason(t, ns, "early", ipamv1.ReasonAllocated)
	if s.Status.CIDR != "10.9.0.0/24" {
		t.Errorf("allocated %s", s.Status.CIDR)
	}
}

func TestExhaustionRecoveryAndGrowth(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	create(t, newPool(ns, "small", "10.1.0.0/28", 30))
	for i := range 4 {
		create(t, newSubnet(ns, fmt.Sprintf("s%d", i), "small", 30))
	}
	granted := map[string]string{}
	for i := range 4 {
		name := fmt.Sprintf("s%d", i)
		granted[name] = subnetReason(t, ns, name, ipamv1.ReasonAllocated).Status.CIDR
	}
	create(t, newSubnet(ns, "late", "small", 30))
	s := subnetReason(t, ns, "late", ipamv1.ReasonPoolExhausted)
	if c := meta.FindStatusCondition(s.Status.Conditions, ipamv1.ConditionReady); c.Message != fmt.Sprintf("no free /30 block in SubnetPool %s/small (10.1.0.0/28); waiting for space to be freed or the pool to grow", ns) {
		t.Errorf("message %q", c.Message)
	}
	poolShows(t, ns, "small", func(p *ipamv1.SubnetPool) error {
		if !meta.IsStatusConditionTrue(p.Status.Conditions, ipamv1.ConditionExhausted) {
			return fmt.Errorf("not Exhausted: %+v", p.Status.Conditions)
		}
		return nil
	})

	// Recovery: a Subnet goes, the waiting one gets its range. (Which range
	// s2 holds depends on the order its reconcile ran among the four.)
	if err := k8s.Delete(ctx, newSubnet(ns, "s2", "small", 30)); err != nil {
		t.Fatal(err)
	}
	if s := subnetReason(t, ns, "late", ipamv1.ReasonAllocated); s.Status.CIDR != granted["s2"] {
		t.Errorf("late got %s, want the freed %s", s.Status.CIDR, granted["s2"])
	}

	// Growth: the pool grows and the next waiter fits.
	create(t, newSubnet(ns, "later", "small", 30))
	subnetReason(t, ns, "later", ipamv1.ReasonPoolExhausted)
	edit(t, ns, "small", func(p *ipamv1.SubnetPool) { p.Spec.CIDR = "10.1.0.0/27" })
	if s := subnetReason(t, ns, "later", ipamv1.ReasonAllocated); s.Status.CIDR != "10.1.0.16/30" {
		t.Errorf("later got %s", s.Status.CIDR)
	}
	poolShows(t, ns, "small", func(p *ipamv1.SubnetPool) error {
		if meta.IsStatusConditionTrue(p.Status.Conditions, ipamv1.ConditionExhausted) {
			return fmt.Errorf("still Exhausted")
		}
		return nil
	})
}

// Fifty clients create overlapping explicit claims at the same moment, with
// the validating webhook out of the way (bypassed, as after a bad upgrade or
// by someone with rights to the webhook configuration): the arbiter is then
// the only guard. Exactly one claim is Ready, every other names it, and the
// grant stands: the first grant is never taken back for an older claim that
// reached the arbiter later.
func TestSimultaneousOverlappingClaims(t *testing.T) {
	ns := namespace(t)
	create(t, newPool(ns, "p", "10.2.0.0/16", 0))
	restore := bypassValidatingWebhook(t)
	createOverlapping(t, ns, "p", 50)
	restore()
	winner := waitForOneWinner(t, ns)
	var first ipamv1.Subnet
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: winner}, &first); err != nil {
		t.Fatal(err)
	}
	// Every loser is decided, and the winner still holds what it was granted.
	if again := waitForOneWinner(t, ns); again != winner {
		t.Errorf("the grant moved from %s to %s", winner, again)
	}
	var now ipamv1.Subnet
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: winner}, &now); err != nil {
		t.Fatal(err)
	}
	if now.Status.CIDR != first.Status.CIDR {
		t.Errorf("the winner's range changed from %s to %s", first.Status.CIDR, now.Status.CIDR)
	}
}

// Claims that are pending together at one decision are decided in winner
// order: the oldest by (creationTimestamp, name) wins. Here twenty
// overlapping claims wait for their pool; when it is created, they are all
// pending at its first decision, whatever order their reconciles run in.
func TestOldestPendingClaimWins(t *testing.T) {
	ns := namespace(t)
	restore := bypassValidatingWebhook(t) // the webhook refuses overlaps among claims waiting for a pool
	names := createOverlapping(t, ns, "later", 20)
	restore()
	for _, name := range names {
		subnetReason(t, ns, name, ipamv1.ReasonPoolNotFound) // the arbiter has seen each one
	}
	create(t, newPool(ns, "later", "10.2.0.0/16", 0))
	winner := waitForOneWinner(t, ns)
	var list ipamv1.SubnetList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(list.Items, func(a, b ipamv1.Subnet) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	if winner != list.Items[0].Name {
		t.Errorf("winner %s, want the oldest by (creationTimestamp, name) %s", winner, list.Items[0].Name)
	}
}

// createOverlapping creates n explicit claims from n clients at once, all
// overlapping 10.2.0.0/24, and returns their names.
func createOverlapping(t *testing.T, ns, pool string, n int) []string {
	t.Helper()
	var wg sync.WaitGroup
	start := make(chan struct{})
	var mu sync.Mutex
	var createdNames []string
	for i := range n {
		wg.Go(func() {
			<-start
			// Nested ranges, all overlapping 10.2.0.0/24.
			cidr := fmt.Sprintf("10.2.0.0/%d", 20+i%9)
			s := explicitSubnet(ns, fmt.Sprintf("c%02d", i), pool, cidr)
			err := k8s.Create(context.Background(), s)
			switch {
			case err == nil:
				mu.Lock()
				createdNames = append(createdNames, s.Name)
				mu.Unlock()
			case !apierrors.IsInvalid(err):
				t.Errorf("create %s: %v", s.Name, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if len(createdNames) != n {
		t.Fatalf("%d of %d claims were created", len(createdNames), n)
	}
	return createdNames
}

// waitForOneWinner waits until every Subnet of ns is decided, exactly one
// is Ready and every other lost to it (Overlaps, naming it), and returns the
// winner.
func waitForOneWinner(t *testing.T, ns string) string {
	t.Helper()
	var winner string
	eventually(t, 30*time.Second, func() error {
		winner = ""
		var list ipamv1.SubnetList
		if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		ready, losers := 0, map[string]string{}
		for _, s := range list.Items {
			c := meta.FindStatusCondition(s.Status.Conditions, ipamv1.ConditionReady)
			switch {
			case c == nil:
				return fmt.Errorf("%s not decided yet", s.Name)
			case c.Reason == ipamv1.ReasonAllocated:
				ready++
				winner = s.Name
			case c.Reason == ipamv1.ReasonOverlaps:
				losers[s.Name] = c.Message
			default:
				return fmt.Errorf("%s: %s", s.Name, c.Reason)
			}
		}
		if ready != 1 || len(losers) != len(list.Items)-1 {
			return fmt.Errorf("%d Ready, %d losers of %d", ready, len(losers), len(list.Items))
		}
		for name, msg := range losers {
			if !strings.Contains(msg, fmt.Sprintf("Subnet %s/%s", ns, winner)) {
				return fmt.Errorf("%s does not name the winner %s: %s", name, winner, msg)
			}
		}
		return nil
	})
	return winner
}

// bypassValidatingWebhook makes the validating webhooks match no operation
// until the returned function restores them.
func bypassValidatingWebhook(t *testing.T) (restore func()) {
	t.Helper()
	probeNS := namespace(t)
	create(t, newPool(probeNS, "probe", "10.250.0.0/16", 0), explicitSubnet(probeNS, "held", "probe", "10.250.0.0/24"))
	// A dry-run create that only the validating webhook rejects tells
	// whether the API server applies the webhook configuration yet.
	overlapping := fmt.Sprintf("apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: Subnet\nmetadata: {name: probe, namespace: %s}\nspec: {poolRef: {name: probe}, cidr: 10.250.0.0/25}\n", probeNS)
	applied := func(want bool) {
		eventually(t, 30*time.Second, func() error {
			_, _, err := kubectl(t, overlapping, "create", "--dry-run=server", "-f", "-")
			if rejected := err != nil; rejected != want {
				return fmt.Errorf("validating webhook applied = %v, want %v", rejected, want)
			}
			return nil
		})
	}
	restoreOperations := setWebhookOperations(t, validatingConfiguration, noOperations)
	applied(false)
	return func() {
		restoreOperations()
		applied(true)
	}
}

// A thousand dynamic Subnets in parallel, with the manager killed and
// restarted in the middle: all end Ready, inside the pool, pairwise
// disjoint; none is lost, none duplicated.
func TestThousandDynamicSubnetsWithARestart(t *testing.T) {
	ns := namespace(t)
	create(t, newPool(ns, "big", "10.100.0.0/16", 26))
	const n = 1000
	subnets := make([]*ipamv1.Subnet, n)
	for i := range subnets {
		subnets[i] = newSubnet(ns, fmt.Sprintf("d%04d", i), "big", 26)
	}
	// A create can fail while the manager (and its webhook) restarts: retry.
	wait := createInParallel(subnets, 20, 100)
	// Kill the manager (SIGKILL: no graceful hand-over) once a third exist.
	eventually(t, time.Minute, func() error {
		var list ipamv1.SubnetList
		if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(list.Items) < n/3 {
			return fmt.Errorf("%d created", len(list.Items))
		}
		return nil
	})
	m := env.Managers[0]
	m.Process.Kill()
	if err := env.StartManager(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	for name, err := range wait() {
		t.Errorf("create %s failed: %v", name, err)
	}

	var list ipamv1.SubnetList
	eventually(t, 2*time.Minute, func() error {
		if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(list.Items) != n {
			return fmt.Errorf("%d Subnets", len(list.Items))
		}
		for _, s := range list.Items {
			if !meta.IsStatusConditionTrue(s.Status.Conditions, ipamv1.ConditionReady) {
				return fmt.Errorf("%s not Ready", s.Name)
			}
		}
		return nil
	})
	pool := netip.MustParsePrefix("10.100.0.0/16")
	var held []netip.Prefix
	for _, s := range list.Items {
		p, err := netip.ParsePrefix(s.Status.CIDR)
		if err != nil || p.Bits() != 26 || !pool.Contains(p.Addr()) {
			t.Fatalf("%s holds %q", s.Name, s.Status.CIDR)
		}
		held = append(held, p)
	}
	slices.SortFunc(held, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	for i := 1; i < len(held); i++ {
		if held[i-1].Overlaps(held[i]) {
			t.Fatalf("duplicate allocation: %s and %s", held[i-1], held[i])
		}
	}
	// The pool's figures agree.
	want := new(big.Int).Mul(big.NewInt(n), big.NewInt(64)).String()
	poolShows(t, ns, "big", allocatedIs(want))
}

// Time from a Subnet's create to the pool's status reflecting it, through
// the real API server, over 200 sequential creates. The figures go to
// docs/benchmarks.md; nothing here asserts on time.
func TestMeasureCreateToPoolStatus(t *testing.T) {
	ns := namespace(t)
	create(t, newPool(ns, "m", "10.200.0.0/16", 28))
	var latencies []time.Duration
	for i := range 200 {
		start := time.Now()
		create(t, newSubnet(ns, fmt.Sprintf("m%03d", i), "m", 28))
		want := fmt.Sprint((i + 1) * 16)
		for {
			var p ipamv1.SubnetPool
			if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "m"}, &p); err == nil && p.Status.Allocated == want {
				break
			}
			if time.Since(start) > 30*time.Second {
				t.Fatalf("create %d: the pool never showed it", i)
			}
			time.Sleep(2 * time.Millisecond)
		}
		latencies = append(latencies, time.Since(start))
	}
	slices.Sort(latencies)
	p := func(q float64) time.Duration { return latencies[int(q*float64(len(latencies)-1))] }
	t.Logf("create -> pool status allocated reflects it, n=%d: p50 %s, p90 %s, p99 %s, max %s",
		len(latencies), p(0.50).Round(time.Millisecond), p(0.90).Round(time.Millisecond), p(0.99).Round(time.Millisecond), latencies[len(latencies)-1].Round(time.Millisecond))
}
