//go:build integration

package lifecycle

// Operations at the edges of the Cluster API provider (docs/cluster-api.md,
// "Restarts and restores"; ../shared/design.md, "Machine addresses"):
//
//	operation                         weight  exercises
//	lag-address-watch                    2    a replica's (the leader's, the other's, or both) IPAddress watch
//	                                          held back 0.2-2.5 s by its lag proxy (lagproxy_test.go) for a claim
//	                                          burst and the 1-4 operations after it; sometimes the watches are
//	                                          dropped mid-burst (and the next refused 410 Gone: a re-list), or the
//	                                          leader hands over under the lag
//	delete-address-claim-foreground      2    propagationPolicy Foreground: the garbage collector deletes the
//	                                          claim's IPAddress first (it cools down), then removes its finalizer
//	delete-subnet-foreground             2    mostly a Subnet with claims: its IPAddresses deleted by the garbage
//	                                          collector under their live claims (kept, terminating, while the
//	                                          claims live); 3 in 10 times its claims are deleted first
//	write-address-by-hand                3    an IPAddress written for a new claim before it (or just after): an
//	                                          address the Subnet would hand out and free (adopted), or outside its
//	                                          range, its network, broadcast or gateway address, or one another
//	                                          claim holds (refused; the claim says why); a mistake is cleaned up
//	                                          as a person would: the claim deleted, then the IPAddress
//	restore-address                      3    a claim and its IPAddress exported as a backup tool keeps them (no
//	                                          owner references, finalizers mostly dropped), the claim deleted and
//	                                          its IPAddress gone, then both created again, the IPAddress before or
//	                                          after its claim: adopted if its address is still free
//
// The claim bursts (address-claim-burst) delete some claims and their
// Subnet in the foreground too. A claim deleted with an IPAddress the test
// wrote is followed by a clean-up of that IPAddress once the claim is gone
// (tidy-address): if no one adopted it, no one else will remove it.

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"go4.org/netipx"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	capiipam "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// Operation kinds.
const (
	opLagAddresses       = "lag-address-watch"
	opDeleteClaimFg      = "delete-address-claim-foreground"
	opDeleteSubnetFg     = "delete-subnet-foreground"
	opWriteAddress       = "write-address-by-hand"
	opRestoreAddress     = "restore-address"
	opLiftLag            = "lift-lag" // the end of a lag window (not drawn)
	opTidyAddress        = "tidy-address"
	verbWriteAddress     = "write-address"
	verbExportAddress    = "export-address"
	verbRestore          = "restore"
	verbAwaitGone        = "await-gone"
	verbTidyAddress      = "tidy-address"
	addressFree          = "free"
	addressHeld          = "held"
	addressOutside       = "outside"
	addressNetwork       = "network"
	addressBroadcast     = "broadcast"
	addressGateway       = "gateway"
	tidyWait             = 15 * time.Second
	awaitGoneWait        = 15 * time.Second
	lagReplicaLeader     = "leader"
	lagReplicaOther      = "other"
	lagReplicaBoth       = "both"
	maxLagWindowDuration = 2500 * time.Millisecond
)

// makeAddressOp draws an operation of these kinds, or returns nil for
// another kind: make() asks here before its own cases, so a new family of
// operations adds a function like this one (in a file of its own) and its
// weights in opMix. (A map of generators would be an initialization
// cycle: they call make.)
func (g *generator) makeAddressOp(kind string, ns *nsPlan) *operation {
	switch kind {
	case opLagAddresses:
		return g.lagAddresses(ns)
	case opDeleteClaimFg:
		return g.deleteClaimForeground(ns)
	case opDeleteSubnetFg:
		return g.deleteSubnetForeground(ns)
	case opWriteAddress:
		return g.writeAddress(ns)
	case opRestoreAddress:
		return g.restoreAddress(ns)
	}
	return nil
}

// lagFault is an IPAddress informer lag: which replicas, how long their
// IPAddress watch events are held, for how many operations (this one and
// span-1 after it), and whether the watches are dropped once drop of the
// concurrent requests have returned (-1: never), the next one refused
// with 410 Gone (expire).
type lagFault struct {
	replica string
	delay   time.Duration
	span    int
	drop    int
	expire  bool
}

// addressOp is what a request on an IPAddress needs beyond the record:
// the Subnet and the kind of address to write, or the export it reads
// and writes.
type addressOp struct {
	subnet  string
	kind    string // addressFree, ...
	highest bool   // the highest free address, else the lowest
	box     *exportedAddress
	// keepFinalizers: the restored IPAddress keeps the finalizers it was
	// exported with (most backup tools drop them).
	keepFinalizers bool
}

// exportedAddress is what a backup tool kept of a claim and its
// IPAddress: metadata a user wrote and the spec, no status, no owner
// references.
type exportedAddress struct {
	claim *capiipam.IPAddressClaim
	addr  *capiipam.IPAddress
}

// between draws a delay of from to to milliseconds.
func (g *generator) between(from, to int) time.Duration {
	return time.Duration(from+g.rng.IntN(to-from)) * time.Millisecond
}

// relabel names every request of op (and what follows each) as kind.
func relabel(op *operation, kind string) {
	op.kind = kind
	for _, r := range op.requests {
		for ; r != nil; r = r.then {
			r.rec.Op = kind
		}
	}
}

// lagAddresses: a claim burst under an IPAddress informer lag.
func (g *generator) lagAddresses(ns *nsPlan) *operation {
	op := g.claimBurst(ns)
	lf := &lagFault{delay: g.between(200, int(maxLagWindowDuration/time.Millisecond)), span: 1 + g.rng.IntN(4), drop: -1}
	switch x := g.rng.Float64(); {
	case x < 0.55:
		lf.replica = lagReplicaLeader
	case x < 0.8:
		lf.replica = lagReplicaOther
	default:
		lf.replica = lagReplicaBoth
	}
	switch {
	case op.concurrent > 0 && op.fault == nil && g.chance(0.35):
		lf.drop, lf.expire = g.rng.IntN(op.concurrent/2+1), g.chance(0.5)
	case op.concurrent > 0 && op.fault == nil && g.chance(0.2):
		op.fault, op.after = &fault{handOver: true}, g.rng.IntN(op.concurrent/2+1)
	}
	relabel(op, opLagAddresses)
	op.lag = lf
	return op
}

func (g *generator) deleteClaimForeground(ns *nsPlan) *operation {
	// Mostly a claim likely bound: of a Subnet whose pool is believed to
	// exist (the garbage collector then deletes its IPAddress first).
	var bound []string
	for _, cn := range sortedKeys(ns.claims) {
		if sn := ns.claims[cn].subnet; sn != "" && ns.subnets[sn] != nil && g.poolBelieved(ns, ns.subnets[sn].pool) {
			bound = append(bound, cn)
		}
	}
	op := &operation{kind: opDeleteClaimFg}
	if len(bound) > 0 && g.chance(0.8) {
		op.requests = []*request{g.deleteClaim(ns, g.pick(bound))}
	} else {
		op = g.make(opDeleteClaim)
	}
	for _, r := range op.requests {
		if r.rec.Verb == "delete" && r.rec.Kind == kindClaim {
			r.foreground = true
		}
	}
	relabel(op, opDeleteClaimFg)
	return op
}

func (g *generator) deleteSubnetForeground(ns *nsPlan) *operation {
	// Mostly a Subnet with claims, left to the garbage collector: it
	// deletes their IPAddresses under the live claims.
	var used []string
	for _, sn := range sortedKeys(ns.subnets) {
		if len(g.claimsOf(ns, sn)) > 0 {
			used = append(used, sn)
		}
	}
	var op *operation
	if len(used) > 0 && g.chance(0.8) {
		name := g.pick(used)
		op = &operation{}
		if g.chance(0.3) { // its claims first
			for _, c := range g.claimsOf(ns, name) {
				op.requests = append(op.requests, g.deleteClaim(ns, c))
			}
		}
		op.requests = append(op.requests, g.deleteSubnet(ns, name))
	} else {
		op = g.make(opDeleteSubnet)
	}
	for _, r := range op.requests {
		if r.rec.Verb == "delete" && r.rec.Kind == kindSubnet {
			r.foreground = true
		}
	}
	relabel(op, opDeleteSubnetFg)
	return op
}

// addressedSubnets are the Subnets of ns believed to exist whose pool is
// believed to exist too (likely Ready).
func (g *generator) addressedSubnets(ns *nsPlan) []string {
	var out []string
	for _, sn := range sortedKeys(ns.subnets) {
		if g.poolBelieved(ns, ns.subnets[sn].pool) {
			out = append(out, sn)
		}
	}
	return out
}

// writeAddress writes an IPAddress by hand for a new claim, mostly before
// the claim exists (a person pinning a machine's address), else just
// after it (racing the operator's own).
func (g *generator) writeAddress(ns *nsPlan) *operation {
	subnets := g.addressedSubnets(ns)
	name, ok := g.freeClaimName(ns, nil)
	if len(subnets) == 0 || !ok {
		return g.make(opCreateClaim)
	}
	subnet := g.pick(subnets)
	var kind string
	switch x := g.rng.Float64(); {
	case x < 0.4:
		kind = addressFree
	case x < 0.55:
		kind = addressHeld
	case x < 0.7:
		kind = addressOutside
	case x < 0.8:
		kind = addressGateway
	case x < 0.9:
		kind = addressNetwork
	default:
		kind = addressBroadcast
	}
	w := &request{
		rec:  opRecord{Op: opWriteAddress, Verb: verbWriteAddress, Kind: kindAddress, Namespace: ns.name, Name: name, Ref: ns.name + "/" + subnet},
		addr: &addressOp{subnet: subnet, kind: kind, highest: g.chance(0.5)},
		apply: func(rec *opRecord) {
			if rec.Outcome == outcomeCreated {
				ns.written[name] = true
			}
		},
	}
	c := g.claimRequest(ns, opWriteAddress, name, subnet)
	op := &operation{kind: opWriteAddress}
	if g.chance(0.75) {
		c.delay = g.between(0, 800)
		op.requests = []*request{w, c}
	} else {
		w.delay = g.between(0, 150)
		op.requests = []*request{c, w}
	}
	if kind != addressFree {
		// A mistake, cleaned up as a person would: the claim goes once it
		// has had its answer, then what they wrote.
		d := g.deleteClaim(ns, name)
		d.rec.Op, d.delay = opWriteAddress, g.between(1000, 3000)
		d.then = g.tidyAddress(ns, name)
		op.requests = append(op.requests, d)
	}
	return op
}

// restoreAddress exports a claim and its IPAddress, deletes the claim,
// waits until its IPAddress is gone (after its cool-down), and creates
// both again from the export, the IPAddress first or the claim first.
func (g *generator) restoreAddress(ns *nsPlan) *operation {
	var claims []string
	for _, cn := range sortedKeys(ns.claims) {
		if ns.claims[cn].subnet != "" {
			claims = append(claims, cn)
		}
	}
	if len(claims) == 0 {
		return g.make(opCreateClaim)
	}
	name := g.pick(claims)
	plan := ns.claims[name]
	box := &exportedAddress{}
	rec := func(verb, kind string) opRecord {
		return opRecord{Op: opRestoreAddress, Verb: verb, Kind: kind, Namespace: ns.name, Name: name, Ref: ns.name + "/" + plan.subnet}
	}
	export := &request{rec: rec(verbExportAddress, kindClaim), addr: &addressOp{box: box}}
	del := g.deleteClaim(ns, name)
	del.rec.Op, del.foreground = opRestoreAddress, g.chance(0.3)
	gone := &request{rec: rec(verbAwaitGone, kindAddress)}
	claim := &request{rec: rec(verbRestore, kindClaim), addr: &addressOp{box: box},
		apply: func(rec *opRecord) {
			if rec.Outcome == outcomeCreated {
				ns.claims[name] = plan
			}
		},
	}
	addr := &request{rec: rec(verbRestore, kindAddress), addr: &addressOp{box: box, keepFinalizers: g.chance(0.3)},
		apply: func(rec *opRecord) {
			if rec.Outcome == outcomeCreated {
				ns.written[name] = true
			}
		},
	}
	op := &operation{kind: opRestoreAddress, requests: []*request{export, del, gone}}
	if g.chance(0.5) { // before its claim
		claim.delay = g.between(0, 1000)
		op.requests = append(op.requests, addr, claim)
	} else {
		addr.delay = g.between(0, 300)
		op.requests = append(op.requests, claim, addr)
	}
	return op
}

// tidyAddress removes what the test wrote under name once its claim is
// gone, unless the operator adopted it (then it is the operator's to
// release) or released it.
func (g *generator) tidyAddress(ns *nsPlan, name string) *request {
	return &request{
		rec: opRecord{Op: opTidyAddress, Verb: verbTidyAddress, Kind: kindAddress, Namespace: ns.name, Name: name},
		apply: func(rec *opRecord) {
			if rec.Outcome == outcomeDone || rec.Outcome == outcomeDeleted {
				delete(ns.written, name)
			}
		},
	}
}

// ---- the driver's side ----

// sendAddress sends the requests of these operations that are not plain
// creates, patches and deletes; handled is false for the others.
func (d *driver) sendAddress(ctx context.Context, r *request, rec *opRecord) (handled bool, err error) {
	switch rec.Verb {
	case verbWriteAddress:
		return true, d.writeAddress(ctx, r.addr, rec)
	case verbExportAddress:
		return true, d.exportAddress(ctx, r.addr.box, rec)
	case verbRestore:
		return true, d.restoreExported(ctx, r.addr, rec)
	case verbAwaitGone:
		return true, d.awaitGone(ctx, rec)
	case verbTidyAddress:
		return true, d.tidyAddress(ctx, rec)
	}
	return false, nil
}

// writeAddress writes an IPAddress for claim rec.Name of Subnet
// a.subnet, as a person would: the contract's fields, no owner
// references, no finalizer. The address is chosen from the Subnet as it
// is now.
func (d *driver) writeAddress(ctx context.Context, a *addressOp, rec *opRecord) error {
	var s ipamv1.Subnet
	if err := d.c.Get(ctx, client.ObjectKey{Namespace: rec.Namespace, Name: a.subnet}, &s); err != nil {
		if apierrors.IsNotFound(err) {
			rec.Outcome, rec.Reason = outcomeFailed, "no-subnet"
			return nil
		}
		return err
	}
	held := parsePrefix(s.Status.CIDR)
	if !meta.IsStatusConditionTrue(s.Status.Conditions, ipamv1.ConditionReady) || !held.IsValid() {
		rec.Outcome, rec.Reason = outcomeFailed, "subnet-not-ready"
		return nil
	}
	var list capiipam.IPAddressList
	if err := d.c.List(ctx, &list, client.InNamespace(rec.Namespace)); err != nil {
		return err
	}
	plan := planOf(held, s.Spec.Gateway)
	taken := map[netip.Addr]bool{}
	var holders []netip.Addr
	for i := range list.Items {
		it := &list.Items[i]
		if subnetOf(it.Namespace, it.Spec.PoolRef) != s.Namespace+"/"+s.Name {
			continue
		}
		x := parseAddr(it.Spec.Address)
		taken[x] = true
		if it.DeletionTimestamp == nil && it.Name != rec.Name && held.Contains(x) {
			holders = append(holders, x)
		}
	}
	kind, x := a.kind, netip.Addr{}
	switch kind {
	case addressFree:
		x = freeAddress(plan, taken, a.highest)
	case addressHeld:
		if len(holders) > 0 {
			slices.SortFunc(holders, netip.Addr.Compare)
			x = holders[0]
		}
	case addressOutside:
		if a.highest {
			x = netipx.PrefixLastIP(held).Next()
		} else {
			x = held.Addr().Prev()
		}
	case addressNetwork:
		x = plan.network
	case addressBroadcast:
		x = plan.broadcast
	}
	if !x.IsValid() { // nothing of that kind here (a full Subnet, a /31, ...): the gateway
		kind, x = addressGateway, plan.gateway
	}
	rec.AddressKind, rec.Address = kind, x.String()
	ip := &capiipam.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Namespace: rec.Namespace, Name: rec.Name, Annotations: map[string]string{annotationWrittenBy: writtenByHand}},
		Spec: capiipam.IPAddressSpec{
			ClaimRef: capiipam.IPAddressClaimReference{Name: rec.Name},
			PoolRef:  capiipam.IPPoolReference{APIGroup: ipamv1.GroupVersion.Group, Kind: kindSubnet, Name: a.subnet},
			Address:  x.String(), Prefix: ptr.To(int32(held.Bits())), Gateway: plan.gateway.String(),
		},
	}
	if err := d.c.Create(ctx, ip); err != nil {
		return err
	}
	rec.Outcome, rec.RV, rec.UID = outcomeCreated, parseRV(ip.ResourceVersion), ip.UID
	return nil
}

// freeAddress is the lowest (or highest) address of plan that the
// Subnet would hand out and no IPAddress holds; invalid if none.
func freeAddress(plan addressPlan, taken map[netip.Addr]bool, highest bool) netip.Addr {
	x, step := plan.cidr.Addr(), netip.Addr.Next
	if highest {
		x, step = netipx.PrefixLastIP(plan.cidr), netip.Addr.Prev
	}
	for ; x.IsValid() && plan.cidr.Contains(x); x = step(x) {
		if !taken[x] && plan.reservedAs(x) == "" {
			return x
		}
	}
	return netip.Addr{}
}

// exportAddress reads a claim and its IPAddress as a backup tool keeps
// them.
func (d *driver) exportAddress(ctx context.Context, box *exportedAddress, rec *opRecord) error {
	var c capiipam.IPAddressClaim
	if err := d.c.Get(ctx, client.ObjectKey{Namespace: rec.Namespace, Name: rec.Name}, &c); err != nil {
		if apierrors.IsNotFound(err) {
			rec.Outcome = outcomeNotFound
			return nil
		}
		return err
	}
	box.claim = &capiipam.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name, Labels: c.Labels, Annotations: c.Annotations},
		Spec:       *c.Spec.DeepCopy(),
	}
	var a capiipam.IPAddress
	switch err := d.c.Get(ctx, client.ObjectKey{Namespace: rec.Namespace, Name: rec.Name}, &a); {
	case apierrors.IsNotFound(err):
		rec.Message = "the claim has no IPAddress"
	case err != nil:
		return err
	case a.DeletionTimestamp != nil:
		rec.Message = "its IPAddress is terminating: not exported"
	default:
		annotations := map[string]string{}
		for k, v := range a.Annotations {
			annotations[k] = v
		}
		annotations[annotationWrittenBy] = writtenByRestore
		box.addr = &capiipam.IPAddress{
			ObjectMeta: metav1.ObjectMeta{Namespace: a.Namespace, Name: a.Name, Labels: a.Labels, Annotations: annotations, Finalizers: a.Finalizers},
			Spec:       *a.Spec.DeepCopy(),
		}
		rec.Address = a.Spec.Address
	}
	rec.Outcome, rec.UID = outcomeDone, c.UID
	return nil
}

// restoreExported creates the exported claim or IPAddress again.
func (d *driver) restoreExported(ctx context.Context, a *addressOp, rec *opRecord) error {
	var o client.Object
	switch {
	case rec.Kind == kindClaim && a.box.claim != nil:
		o = a.box.claim.DeepCopy()
	case rec.Kind == kindAddress && a.box.addr != nil:
		ip := a.box.addr.DeepCopy()
		if !a.keepFinalizers {
			ip.Finalizers = nil
		}
		rec.Address = ip.Spec.Address
		o = ip
	default:
		rec.Outcome, rec.Reason = outcomeFailed, "not-exported"
		return nil
	}
	if err := d.c.Create(ctx, o); err != nil {
		return err
	}
	rec.Outcome, rec.RV, rec.UID = outcomeCreated, parseRV(o.GetResourceVersion()), o.GetUID()
	return nil
}

// awaitGone waits (boundedly) until the claim rec.Name and its IPAddress
// are gone.
func (d *driver) awaitGone(ctx context.Context, rec *opRecord) error {
	key := client.ObjectKey{Namespace: rec.Namespace, Name: rec.Name}
	for ctx.Err() == nil {
		var a capiipam.IPAddress
		var c capiipam.IPAddressClaim
		err := d.c.Get(ctx, key, &a)
		if apierrors.IsNotFound(err) {
			if err := d.c.Get(ctx, key, &c); apierrors.IsNotFound(err) {
				rec.Outcome = outcomeDone
				return nil
			}
		}
		if time.Since(rec.Start) > awaitGoneWait {
			rec.Outcome, rec.Message = outcomeFailed, "timed out: the claim or its IPAddress is still there"
			return nil
		}
		sleep(ctx, 100*time.Millisecond)
	}
	return ctx.Err()
}

// tidyAddress waits (boundedly) until claim rec.Name is gone, then
// deletes the IPAddress of its name if the test wrote it and no claim
// adopted it (its finalizers removed first: it was never the operator's,
// and no one else would remove them). Preconditioned on the version read:
// an adoption in between makes it look again.
func (d *driver) tidyAddress(ctx context.Context, rec *opRecord) error {
	key := client.ObjectKey{Namespace: rec.Namespace, Name: rec.Name}
	for ctx.Err() == nil {
		if time.Since(rec.Start) > tidyWait {
			rec.Outcome, rec.Message = outcomeFailed, "timed out: "+rec.Message
			return nil
		}
		var c capiipam.IPAddressClaim
		if err := d.c.Get(ctx, key, &c); err == nil {
			rec.Message = "the claim is still there"
			sleep(ctx, 100*time.Millisecond)
			continue
		} else if !apierrors.IsNotFound(err) {
			return err
		}
		var a capiipam.IPAddress
		err := d.c.Get(ctx, key, &a)
		switch {
		case apierrors.IsNotFound(err):
			rec.Outcome, rec.Message = outcomeDone, "nothing left"
			return nil
		case err != nil:
			return err
		case a.Annotations[annotationWrittenBy] == "":
			rec.Outcome, rec.Message = outcomeDone, "the operator's IPAddress: left to it"
			return nil
		case a.DeletionTimestamp != nil:
			rec.Outcome, rec.Message = outcomeDone, "released by the operator (cooling down)"
			return nil
		case metav1.GetControllerOf(&a) != nil:
			rec.Outcome, rec.Message = outcomeDone, "adopted: left to the operator to release"
			return nil
		}
		if len(a.Finalizers) > 0 {
			patch := client.MergeFromWithOptions(a.DeepCopy(), client.MergeFromWithOptimisticLock{})
			a.Finalizers = nil
			if err := d.c.Patch(ctx, &a, patch); err != nil {
				if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
					continue
				}
				return err
			}
		}
		uid, rv := a.UID, a.ResourceVersion
		if err := d.c.Delete(ctx, &a, client.Preconditions{UID: &uid, ResourceVersion: &rv}); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				continue
			}
			return err
		}
		rec.Outcome, rec.Message, rec.UID = outcomeDeleted, "removed what the test wrote", a.UID
		return nil
	}
	return ctx.Err()
}

// ---- the lag ----

// startLag sets the lag of an operation's replicas, lifting any earlier
// window first.
func (d *driver) startLag(ctx context.Context, lf *lagFault, kind string, group int) {
	d.liftLag(kind, group)
	rec := &opRecord{ID: d.nextID(), Group: group, Op: kind, Verb: "lag", Start: time.Now()}
	defer d.logFault(rec)
	var replicas []string
	leader, err := d.env.Leader(ctx, 30*time.Second)
	if err != nil {
		rec.Outcome, rec.Message = outcomeFailed, err.Error()
		return
	}
	for _, m := range d.env.Managers {
		switch {
		case lf.replica == lagReplicaBoth,
			lf.replica == lagReplicaLeader && m == leader,
			lf.replica == lagReplicaOther && m != leader:
			replicas = append(replicas, m.Name)
		}
	}
	for _, name := range replicas {
		if p := lagProxies[name]; p != nil {
			p.setLag(lf.delay)
		}
	}
	d.lagged, d.lagLeft = replicas, lf.span
	d.lagWindows++
	rec.Name, rec.Message, rec.Outcome = strings.Join(replicas, ","), fmt.Sprintf("%s (%s) for %d operations", lf.delay, lf.replica, lf.span), outcomeDone
}

// dropLagged drops the IPAddress watches of the lagged replicas.
func (d *driver) dropLagged(lf *lagFault, kind string, group int) {
	rec := &opRecord{ID: d.nextID(), Group: group, Op: kind, Verb: "drop-watch", Start: time.Now(), Name: strings.Join(d.lagged, ",")}
	defer d.logFault(rec)
	n := 0
	for _, name := range d.lagged {
		if p := lagProxies[name]; p != nil {
			n += p.drop(lf.expire)
		}
	}
	rec.Outcome, rec.Message = outcomeDone, fmt.Sprintf("%d watches dropped; next refused with 410: %v", n, lf.expire)
}

// liftLag ends the lag window, if one is open.
func (d *driver) liftLag(kind string, group int) {
	if len(d.lagged) == 0 {
		return
	}
	rec := &opRecord{ID: d.nextID(), Group: group, Op: opLiftLag, Verb: "lift-lag", Start: time.Now(), Name: strings.Join(d.lagged, ","), Message: "after " + kind}
	for _, name := range d.lagged {
		if p := lagProxies[name]; p != nil {
			p.setLag(0)
		}
	}
	d.lagged, d.lagLeft = nil, 0
	rec.Outcome = outcomeDone
	d.logFault(rec)
}

// tickLag counts an operation against the open lag window.
func (d *driver) tickLag(op *operation, group int) {
	if op.lag != nil || d.lagLeft == 0 {
		return
	}
	if d.lagLeft--; d.lagLeft == 0 {
		d.liftLag(op.kind, group)
	}
}

func (d *driver) logFault(rec *opRecord) {
	rec.End = time.Now()
	d.mu.Lock()
	d.log = append(d.log, rec)
	d.mu.Unlock()
}

// edgeSummary says what these operations did, for the run's summary.
func edgeSummary(records []*opRecord, rep *replayer) string {
	writes := map[string]int{}
	var restored, restoredAddrs, foreground, tidied, drops int
	for _, o := range records {
		switch {
		case o.Verb == verbWriteAddress && o.Outcome == outcomeCreated:
			writes[o.AddressKind]++
		case o.Verb == verbRestore && o.Outcome == outcomeCreated && o.Kind == kindClaim:
			restored++
		case o.Verb == verbRestore && o.Outcome == outcomeCreated && o.Kind == kindAddress:
			restoredAddrs++
		case o.Verb == "delete" && o.Foreground && o.Outcome == outcomeDeleted:
			foreground++
		case o.Verb == verbTidyAddress && o.Outcome == outcomeDeleted:
			tidied++
		case o.Verb == "drop-watch":
			drops++
		}
	}
	var watches, dropped, expired, held int64
	for _, p := range lagProxies {
		watches += p.watches.Load()
		dropped += p.dropped.Load()
		expired += p.expired.Load()
		held += p.held.Load()
	}
	a := rep.addr
	return fmt.Sprintf("IPAddresses written by hand %v; %d claims and %d IPAddresses restored; %d of the test's IPAddresses adopted, %d removed again by the test; "+
		"%d foreground deletes, %d IPAddresses deleted by the garbage collector under live claims; "+
		"lag: %d drops; proxies passed %d IPAddress watches, dropped %d, refused %d with 410, held back %d chunks of events",
		writes, restored, restoredAddrs, a.adopted, tidied, foreground, a.foreground, drops, watches, dropped, expired, held)
}
