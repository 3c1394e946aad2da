package ledger

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go4.org/netipx"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

var (
	simSeeds = flag.Int("ledger.sim.seeds", 400, "TestSimulatedHandOvers: number of seeds to run")
	simSeed  = flag.Int64("ledger.sim.seed", 0, "TestSimulatedHandOvers: first seed")
	simTrace = flag.Bool("ledger.sim.trace", false, "TestSimulatedHandOvers: print the trace of each failing seed")
)

// TestSimulatedHandOvers drives two ledgers (a leader and a follower) the
// way two replicas see the API: every write becomes an event on each
// replica's own Subnet and pool queues, delivered at random moments and
// lagging independently; the leader reconciles from its own work queues and
// writes what it decides with the preconditions the controllers use (a
// Subnet's status only for the UID it was decided for, Forget when that
// fails). Users create, delete and re-create Subnets, edit the root pool's
// range and reserved ranges, and create, resize and delete a child pool.
// Now and then the leader hands over: the follower catches up (as CatchUp
// makes it) and leads, and a fresh replica follows, fed from the API.
//
// After every step no two Ready claims of a pool may overlap in what the API
// shows, and Subnets of the child pool must lie inside its status.cidr.
// Once every queue is drained, no claim may wait while its range or a
// fitting block is free, and no reconcile may requeue itself forever.
func TestSimulatedHandOvers(t *testing.T) {
	failures := 0
	for seed := *simSeed; seed < *simSeed+int64(*simSeeds); seed++ {
		if msg, trace := runSimulation(seed); msg != "" {
			failures++
			if failures <= 3 {
				detail := ""
				if *simTrace {
					detail = "\n" + strings.Join(trace, "\n")
				}
				t.Errorf("seed %d (replay with -ledger.sim.seed=%d -ledger.sim.seeds=1 -ledger.sim.trace): %s%s", seed, seed, msg, detail)
			}
		}
	}
	if failures > 0 {
		t.Errorf("%d of %d seeds failed", failures, *simSeeds)
	}
}

// simReplica is one replica: its ledger, its informers' queues and caches,
// and its controllers' work queues.
type simReplica struct {
	name             string
	l                *Ledger
	subnetQ, poolQ   []simEvent
	subnets          map[string]*ipamv1.Subnet
	pools            map[string]*ipamv1.SubnetPool
	subnetWork, pool map[string]bool
}

type simEvent struct {
	typ      EventType
	obj, old any
}

func newSimReplica(name string) *simReplica {
	l := New()
	l.MarkSynced()
	r := &simReplica{name: name, l: l, subnets: map[string]*ipamv1.Subnet{}, pools: map[string]*ipamv1.SubnetPool{},
		subnetWork: map[string]bool{}, pool: map[string]bool{}}
	// The controllers' event mapping (reconcilers/sources.go), in short.
	l.Subscribe(func(e Event) {
		for _, k := range e.Wake {
			if k.Kind == statuscalc.KindSubnet {
				r.subnetWork[k.Name] = true
			} else {
				r.pool[k.Name] = true
			}
		}
		switch e.Kind {
		case statuscalc.KindSubnet:
			s := e.Object.(*ipamv1.Subnet)
			if e.Type != Deleted {
				r.subnetWork[s.Name] = true
			}
			r.pool[s.Spec.PoolRef.Name] = true
		case statuscalc.KindSubnetPool:
			p := e.Object.(*ipamv1.SubnetPool)
			old, _ := e.OldObject.(*ipamv1.SubnetPool)
			changed := e.Type != Updated || old == nil || old.Generation != p.Generation || !old.DeletionTimestamp.Equal(p.DeletionTimestamp)
			if changed || !equality.Semantic.DeepEqual(old.Status, p.Status) {
				r.pool[p.Name] = true
			}
			if p.Spec.ParentRef != nil && (changed || old.Status.CIDR != p.Status.CIDR) {
				r.pool[p.Spec.ParentRef.Name] = true
			}
		}
	})
	return r
}

func (r *simReplica) deliverSubnet() {
	e := r.subnetQ[0]
	r.subnetQ = r.subnetQ[1:]
	s := e.obj.(*ipamv1.Subnet)
	if e.typ == Deleted {
		delete(r.subnets, s.Name)
		r.l.DeleteSubnet(s)
		return
	}
	r.subnets[s.Name] = s
	r.l.ApplySubnet(s, e.typ, e.old)
}

func (r *simReplica) deliverPool() {
	e := r.poolQ[0]
	r.poolQ = r.poolQ[1:]
	p := e.obj.(*ipamv1.SubnetPool)
	if e.typ == Deleted {
		delete(r.pools, p.Name)
		r.l.DeletePool(p)
		return
	}
	r.pools[p.Name] = p
	r.l.ApplyPool(p, e.typ, e.old)
}

func (r *simReplica) drain() {
	for len(r.subnetQ)+len(r.poolQ) > 0 {
		if len(r.subnetQ) > 0 {
			r.deliverSubnet()
		}
		if len(r.poolQ) > 0 {
			r.deliverPool()
		}
	}
}

// simulation is the API server (the objects, resourceVersions) and the two
// replicas.
type simulation struct {
	rng               *rand.Rand
	rv, uid, replicas int
	step              int
	subnets           map[string]*ipamv1.Subnet
	pools             map[string]*ipamv1.SubnetPool
	leader, follower  *simReplica
	trace             []string
}

func (s *simulation) logf(format string, args ...any) {
	s.trace = append(s.trace, fmt.Sprintf("%4d ", s.step)+fmt.Sprintf(format, args...))
}

func (s *simulation) nextRV() string { s.rv++; return strconv.Itoa(s.rv) }

func (s *simulation) emitSubnet(typ EventType, obj, old *ipamv1.Subnet) {
	for _, r := range []*simReplica{s.leader, s.follower} {
		var o any
		if old != nil {
			o = old.DeepCopy()
		}
		r.subnetQ = append(r.subnetQ, simEvent{typ, obj.DeepCopy(), o})
	}
}

func (s *simulation) emitPool(typ EventType, obj, old *ipamv1.SubnetPool) {
	for _, r := range []*simReplica{s.leader, s.follower} {
		var o any
		if old != nil {
			o = old.DeepCopy()
		}
		r.poolQ = append(r.poolQ, simEvent{typ, obj.DeepCopy(), o})
	}
}

func (s *simulation) objectMeta(name string) metav1.ObjectMeta {
	s.uid++
	// Three steps share a creation second: ties are decided by name.
	return metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(fmt.Sprintf("u%d", s.uid)), ResourceVersion: s.nextRV(), Generation: 1,
		CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(s.step/3) * time.Second))}
}

var (
	simRootRanges     = []string{"10.0.0.0/22", "10.0.0.0/23", "10.0.0.0/21", "10.0.2.0/23"}
	simReservedRanges = []string{"10.0.0.0/25", "10.0.1.0/24", "10.0.2.128/25", "10.0.3.0/26"}
	simChildRanges    = []string{"10.0.0.0/24", "10.0.1.0/24", "10.0.0.0/23", "10.0.2.0/24", "10.0.0.0/25"}
	simExplicitRanges = []string{"10.0.0.0/24", "10.0.0.0/25", "10.0.0.128/25", "10.0.1.0/24", "10.0.1.0/26", "10.0.2.0/23", "10.0.2.0/24", "10.0.3.0/24", "10.0.0.64/26", "10.0.0.0/23"}
)

func (s *simulation) createSubnet() {
	name := fmt.Sprintf("s%d", s.rng.IntN(8))
	if s.subnets[name] != nil {
		return
	}
	pool := "p"
	if s.rng.IntN(3) == 0 {
		pool = "c"
	}
	sub := &ipamv1.Subnet{ObjectMeta: s.objectMeta(name), Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: pool}}}
	if s.rng.IntN(2) == 0 {
		sub.Spec.CIDR = simExplicitRanges[s.rng.IntN(len(simExplicitRanges))]
	} else {
		sub.Spec.PrefixLength = ptr.To(int32(23 + s.rng.IntN(4)))
	}
	s.subnets[name] = sub
	s.logf("create Subnet %s in %s cidr=%q length=%d uid=%s", name, pool, sub.Spec.CIDR, ptr.Deref(sub.Spec.PrefixLength, -1), sub.UID)
	s.emitSubnet(Created, sub, nil)
}

func (s *simulation) deleteSubnet() {
	name := fmt.Sprintf("s%d", s.rng.IntN(8))
	sub := s.subnets[name]
	if sub == nil {
		return
	}
	delete(s.subnets, name)
	sub = sub.DeepCopy()
	sub.ResourceVersion = s.nextRV()
	s.logf("delete Subnet %s", name)
	s.emitSubnet(Deleted, sub, nil)
}

// reconcileSubnet is SubnetReconciler.Reconcile, without lastWrites.
func (s *simulation) reconcileSubnet(name string) {
	cached := s.leader.subnets[name]
	if cached == nil {
		return
	}
	d, ok := s.leader.l.DecideSubnet(ns, name, cached.UID)
	if !ok {
		return
	}
	status := *cached.Status.DeepCopy()
	ready := metav1.Condition{Type: ipamv1.ConditionReady, Status: metav1.ConditionFalse, Reason: d.Reason, Message: d.Message}
	status.CIDR = ""
	if d.Ready() {
		ready.Status = metav1.ConditionTrue
		status.CIDR = d.CIDR.String()
	}
	meta.SetStatusCondition(&status.Conditions, ready)
	if equality.Semantic.DeepEqual(cached.Status, status) {
		return
	}
	api := s.subnets[name]
	if api == nil || api.UID != cached.UID { // the JSON patch's UID test fails
		s.logf("write of Subnet %s refused (gone or replaced); forget %s", name, d.CIDR)
		if d.Assumed {
			s.leader.l.Forget(ns, SubnetKey(name), cached.UID, d.CIDR)
		}
		return
	}
	old := api.DeepCopy()
	api.Status = status
	api.ResourceVersion = s.nextRV()
	s.logf("write Subnet %s: %s %s", name, d.Reason, status.CIDR)
	s.emitSubnet(Updated, api, old)
}

// reconcilePool is PoolStatusReconciler.Reconcile: the finalizer, then the
// status with status.cidr from the decision, under the optimistic lock.
func (s *simulation) reconcilePool(name string) {
	cached := s.leader.pools[name]
	if cached == nil {
		return
	}
	api := s.pools[name]
	if api != nil && api.UID == cached.UID && cached.DeletionTimestamp != nil {
		if _, subnets, children := s.leader.l.Users(ns, name, 0); subnets+children == 0 {
			for _, c := range s.leader.subnets { // the cache's index agrees
				if c.Spec.PoolRef.Name == name {
					return
				}
			}
			delete(s.pools, name)
			gone := api.DeepCopy()
			gone.ResourceVersion = s.nextRV()
			s.logf("finalizer of pool %s removed: deleted", name)
			s.emitPool(Deleted, gone, nil)
			return
		}
	}
	d, ok := s.leader.l.DecidePool(ns, name, cached.UID)
	if !ok {
		return
	}
	status := *cached.Status.DeepCopy()
	status.CIDR = ""
	if d.CIDR.IsValid() {
		status.CIDR = d.CIDR.String()
	}
	ready := metav1.Condition{Type: ipamv1.ConditionReady, Status: metav1.ConditionFalse, Reason: d.Reason, Message: d.Message}
	if d.Ready() {
		ready.Status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&status.Conditions, ready)
	if equality.Semantic.DeepEqual(cached.Status, status) || api == nil || api.UID != cached.UID {
		return
	}
	if api.Generation != cached.Generation {
		return // the lock conflicts and the retry sees another spec: give up, the event requeues it
	}
	old := api.DeepCopy()
	api.Status = status
	api.ResourceVersion = s.nextRV()
	s.logf("write pool %s: %s status.cidr=%q", name, d.Reason, status.CIDR)
	s.emitPool(Updated, api, old)
}

func (s *simulation) editRoot() {
	api := s.pools["p"]
	old := api.DeepCopy()
	if s.rng.IntN(2) == 0 {
		api.Spec.CIDR = simRootRanges[s.rng.IntN(len(simRootRanges))]
	}
	api.Spec.Reserved = nil
	cidr := netip.MustParsePrefix(api.Spec.CIDR)
	for _, r := range simReservedRanges {
		if s.rng.IntN(3) == 0 && statuscalc.Contains(cidr, netip.MustParsePrefix(r)) {
			api.Spec.Reserved = append(api.Spec.Reserved, r)
		}
	}
	api.Generation++
	api.ResourceVersion = s.nextRV()
	s.logf("edit pool p: cidr=%s reserved=%v", api.Spec.CIDR, api.Spec.Reserved)
	s.emitPool(Updated, api, old)
}

func (s *simulation) childOperation() {
	api := s.pools["c"]
	switch {
	case api == nil:
		c := &ipamv1.SubnetPool{ObjectMeta: s.objectMeta("c"), Spec: ipamv1.SubnetPoolSpec{ParentRef: &ipamv1.PoolReference{Name: "p"},
			CIDR: simChildRanges[s.rng.IntN(len(simChildRanges))], DefaultPrefixLength: ptr.To[int32](26)}}
		s.pools["c"] = c
		s.logf("create child pool c cidr=%s uid=%s", c.Spec.CIDR, c.UID)
		s.emitPool(Created, c, nil)
	case api.DeletionTimestamp == nil && s.rng.IntN(4) == 0:
		old := api.DeepCopy()
		now := metav1.Now()
		api.DeletionTimestamp = &now
		api.ResourceVersion = s.nextRV()
		s.logf("delete child pool c (terminating)")
		s.emitPool(Updated, api, old)
	case api.DeletionTimestamp == nil:
		old := api.DeepCopy()
		api.Spec.CIDR = simChildRanges[s.rng.IntN(len(simChildRanges))]
		api.Generation++
		api.ResourceVersion = s.nextRV()
		s.logf("edit child pool c: cidr=%s", api.Spec.CIDR)
		s.emitPool(Updated, api, old)
	}
}

// handOver makes the follower the leader once it has caught up (CatchUp),
// and starts a fresh follower from the API. The old leader's queued work
// is lost, as a stopping controller's is.
func (s *simulation) handOver() {
	s.follower.drain()
	s.replicas++
	fresh := newSimReplica(fmt.Sprintf("r%d", s.replicas))
	for _, name := range shuffledKeys(s.rng, s.subnets) {
		fresh.subnetQ = append(fresh.subnetQ, simEvent{Created, s.subnets[name].DeepCopy(), nil})
	}
	for _, name := range shuffledKeys(s.rng, s.pools) {
		fresh.poolQ = append(fresh.poolQ, simEvent{Created, s.pools[name].DeepCopy(), nil})
	}
	s.leader, s.follower = s.follower, fresh
	for name := range s.leader.subnets { // the new leader's controllers enqueue everything once
		s.leader.subnetWork[name] = true
	}
	for name := range s.leader.pools {
		s.leader.pool[name] = true
	}
	s.logf("hand-over: %s leads", s.leader.name)
}

func shuffledKeys[V any](rng *rand.Rand, m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	return keys
}

func take(rng *rand.Rand, work map[string]bool) (string, bool) {
	if len(work) == 0 {
		return "", false
	}
	keys := make([]string, 0, len(work))
	for k := range work {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	k := keys[rng.IntN(len(keys))]
	delete(work, k)
	return k, true
}

// runSimulation runs one seed and returns what broke, if anything.
func runSimulation(seed int64) (string, []string) {
	s := &simulation{rng: rand.New(rand.NewPCG(uint64(seed), 0)), subnets: map[string]*ipamv1.Subnet{}, pools: map[string]*ipamv1.SubnetPool{},
		leader: newSimReplica("r0"), follower: newSimReplica("r1"), replicas: 1}
	root := &ipamv1.SubnetPool{ObjectMeta: s.objectMeta("p"), Spec: ipamv1.SubnetPoolSpec{CIDR: "10.0.0.0/22", DefaultPrefixLength: ptr.To[int32](24)}}
	s.pools["p"] = root
	s.emitPool(Created, root, nil)
	for s.step = 0; s.step < 200; s.step++ {
		switch k := s.rng.IntN(100); {
		case k < 12:
			s.createSubnet()
		case k < 18:
			s.deleteSubnet()
		case k < 40:
			if name, ok := take(s.rng, s.leader.subnetWork); ok {
				s.reconcileSubnet(name)
			}
		case k < 52:
			if name, ok := take(s.rng, s.leader.pool); ok {
				s.reconcilePool(name)
			}
		case k < 56:
			s.editRoot()
		case k < 62:
			s.childOperation()
		case k < 63:
			s.handOver()
		default:
			r := s.leader
			if s.rng.IntN(2) == 0 {
				r = s.follower
			}
			if s.rng.IntN(2) == 0 && len(r.subnetQ) > 0 {
				r.deliverSubnet()
			} else if len(r.poolQ) > 0 {
				r.deliverPool()
			}
		}
		if v := s.overlap(); v != "" {
			return fmt.Sprintf("step %d: %s", s.step, v), s.trace
		}
	}
	// Quiescence: deliver everything and run the work queues dry.
	for n := 0; ; n++ {
		if n == 3000 {
			return fmt.Sprintf("a reconcile requeues itself forever: Subnets %v, pools %v", s.leader.subnetWork, s.leader.pool), s.trace
		}
		s.leader.drain()
		s.follower.drain()
		if len(s.leader.subnetWork) > 0 && (len(s.leader.pool) == 0 || s.rng.IntN(2) == 0) {
			name, _ := take(s.rng, s.leader.subnetWork)
			s.reconcileSubnet(name)
		} else if name, ok := take(s.rng, s.leader.pool); ok {
			s.reconcilePool(name)
		} else {
			break
		}
		if v := s.overlap(); v != "" {
			return "at quiescence: " + v, s.trace
		}
	}
	if v := s.stuck(); v != "" {
		return "at quiescence: " + v, s.trace
	}
	return "", nil
}

type simHeld struct {
	who, pool string
	p         netip.Prefix
}

// heldRanges are the ranges the API shows held: Ready Subnets' and the
// child pool's status.cidr.
func (s *simulation) heldRanges() []simHeld {
	var out []simHeld
	for _, sub := range s.subnets {
		if meta.IsStatusConditionTrue(sub.Status.Conditions, ipamv1.ConditionReady) && sub.Status.CIDR != "" {
			out = append(out, simHeld{"Subnet/" + sub.Name, sub.Spec.PoolRef.Name, netip.MustParsePrefix(sub.Status.CIDR)})
		}
	}
	if c := s.pools["c"]; c != nil && c.Status.CIDR != "" {
		out = append(out, simHeld{"SubnetPool/c", "p", netip.MustParsePrefix(c.Status.CIDR)})
	}
	return out
}

// overlap checks invariant 1 on what the API shows: no two held ranges
// overlap, except the child pool and its own Subnets, which must lie
// inside the child's range.
func (s *simulation) overlap() string {
	held := s.heldRanges()
	var child netip.Prefix
	if c := s.pools["c"]; c != nil && c.Status.CIDR != "" {
		child = netip.MustParsePrefix(c.Status.CIDR)
	}
	for i, a := range held {
		if a.pool == "c" && !statuscalc.Contains(child, a.p) {
			return fmt.Sprintf("%s %s is Ready in pool c, which the API shows serving %q", a.who, a.p, child)
		}
		for _, b := range held[i+1:] {
			if !a.p.Overlaps(b.p) || (a.who == "SubnetPool/c" && b.pool == "c") || (b.who == "SubnetPool/c" && a.pool == "c") {
				continue
			}
			return fmt.Sprintf("%s %s overlaps %s %s", a.who, a.p, b.who, b.p)
		}
	}
	return ""
}

// serving is what a pool serves as the API shows it, its reserved ranges
// and default length; false when it serves nothing.
func (s *simulation) serving(name string) (netip.Prefix, []netip.Prefix, int, bool) {
	p := s.pools[name]
	if p == nil || p.DeletionTimestamp != nil {
		return netip.Prefix{}, nil, 0, false
	}
	var reserved []netip.Prefix
	for _, r := range p.Spec.Reserved {
		reserved = append(reserved, netip.MustParsePrefix(r))
	}
	if p.Spec.ParentRef == nil {
		// A root pool serves what its address space granted it.
		if p.Status.CIDR == "" {
			return netip.Prefix{}, nil, 0, false
		}
		return netip.MustParsePrefix(p.Status.CIDR), reserved, int(*p.Spec.DefaultPrefixLength), true
	}
	if parent := s.pools[p.Spec.ParentRef.Name]; p.Status.CIDR == "" || parent == nil || parent.DeletionTimestamp != nil {
		return netip.Prefix{}, nil, 0, false
	}
	return netip.MustParsePrefix(p.Status.CIDR), reserved, int(*p.Spec.DefaultPrefixLength), true
}

// stuck finds a claim that waits although what it asks for is free.
func (s *simulation) stuck() string {
	held := s.heldRanges()
	for _, sub := range s.subnets {
		if meta.IsStatusConditionTrue(sub.Status.Conditions, ipamv1.ConditionReady) {
			continue
		}
		serving, reserved, def, ok := s.serving(sub.Spec.PoolRef.Name)
		if !ok {
			continue
		}
		var b netipx.IPSetBuilder
		b.AddPrefix(serving)
		for _, r := range reserved {
			b.RemovePrefix(r)
		}
		for _, h := range held {
			if sub.Spec.PoolRef.Name != "c" || h.who != "SubnetPool/c" {
				b.RemovePrefix(h.p)
			}
		}
		free, _ := b.IPSet()
		why := ""
		if c := meta.FindStatusCondition(sub.Status.Conditions, ipamv1.ConditionReady); c != nil {
			why = c.Reason + ": " + c.Message
		}
		if sub.Spec.CIDR != "" {
			if req := netip.MustParsePrefix(sub.Spec.CIDR); statuscalc.Contains(serving, req) && free.ContainsPrefix(req) {
				return fmt.Sprintf("Subnet %s waits for %s in %s (%s), which is free [%s]", sub.Name, req, sub.Spec.PoolRef.Name, serving, why)
			}
			continue
		}
		length := int(ptr.Deref(sub.Spec.PrefixLength, int32(def)))
		for _, f := range free.Prefixes() {
			if f.Bits() <= length {
				return fmt.Sprintf("Subnet %s waits for a /%d in %s (%s); %s is free [%s]", sub.Name, length, sub.Spec.PoolRef.Name, serving, f, why)
			}
		}
	}
	c := s.pools["c"]
	if c == nil || c.DeletionTimestamp != nil || c.Status.CIDR == c.Spec.CIDR {
		return ""
	}
	serving, reserved, _, ok := s.serving("p")
	req := netip.MustParsePrefix(c.Spec.CIDR)
	if !ok || !statuscalc.Contains(serving, req) || slices.ContainsFunc(reserved, req.Overlaps) {
		return ""
	}
	for _, h := range held {
		if h.who != "SubnetPool/c" && h.pool != "c" && h.p.Overlaps(req) {
			return "" // loses to a held range
		}
		if h.pool == "c" && !statuscalc.Contains(req, h.p) {
			return "" // its own claims do not fit
		}
	}
	return fmt.Sprintf("child pool c waits for %s (status.cidr %q), which is free", req, c.Status.CIDR)
}
