//go:build integration

package lifecycle

// Delegated root pools (spec.delegation, docs/fleet.md): the checker's
// managers are fleet members of a hub, and the hub is the same API server.
// The members' hub kubeconfig (a Secret written before they start) is a
// client certificate of this control plane's CA, bound to
// config/fleet-hub's Role in the hub namespace lifecycle-hub only; each
// run's plan is a pool in an isolated address space of its own
// (lifecycleN-plan/plan, 10.248.0.0/14), which allows lifecycle-hub and
// lifecycle-hub-other, the namespace of a second member identity whose
// claims the test makes itself. The plan covers the /21s every namespace's
// local root pools compete for (10.250.0.0/20), so a grant can collide with
// a local root pool of the member.
//
//	operation               weight  exercises
//	create-delegated-pool      4    a delegated root pool asking the hub for a /22-/26 (3 in 5), or for an explicit
//	                                cidr: in the plan's low end (against dynamic grants and the other member), over
//	                                the member's local root pools, or outside the plan (the hub refuses); 1 in 25
//	                                with neither (the schema refuses). An explicit one joins the generator's pools:
//	                                every pool operation (edits, which it must refuse but for lengths and reserved
//	                                ranges, child pools, Subnets, claim bursts, drains, v1alpha1) hits it
//	delete-delegated-pool      2    its Subnets first (mostly), then the pool: its claim in the hub is released
//	delete-hub-claim           2    the member pool's claim deleted in the hub (DelegationLost); 1 in 3 with a
//	                                Subnet of the pool created at once
//	create-delegated-subnet    3    a Subnet of a delegated pool (its default length or longer); then the
//	                                generator's Subnet operations (deletes, re-creates, restores) hit it
//	other-member-claim         2    the other member's claim in the hub: an explicit range of the plan's low end or
//	                                a /24, or one deleted again
//	restore-delegated-pool     2    a delegated pool exported (once its grant is recorded, within a bound), deleted,
//	                                and created again from the export: it asks the hub for that range back; half
//	                                the time its finalizers are removed first (a cluster lost and restored: the old
//	                                claim stays in the hub and the restored pool must adopt it); half the time its
//	                                status is restored too (a status is not a grant), and a third of those lost
//	                                and restored with status find their old claim gone from the hub and the range
//	                                taken by the other member identity (it must not be served: D2)
//
// Hand-overs, SIGKILLs, lag windows, v1alpha1 round trips and status
// restores hit delegated pools as any other. delegation_checks.go has the
// checks (D1-D5).

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/test/controlplane"
)

const (
	opCreateDelegated   = "create-delegated-pool"
	opDeleteDelegated   = "delete-delegated-pool"
	opDeleteHubClaim    = "delete-hub-claim"
	opDelegatedSubnet   = "create-delegated-subnet"
	opOtherMemberClaim  = "other-member-claim"
	opRestoreDelegated  = "restore-delegated-pool"
	verbRestoreDelegate = "restore-delegated" // not "restore": sendAddress answers that verb

	// kindHubClaim is a Subnet in a hub namespace: a member's claim. The
	// history's checks do not record the hub namespaces (their pool is in
	// another address space); delegation_checks.go judges them.
	kindHubClaim = "HubSubnet"

	fleetSecretNamespace = "lifecycle-fleet-system"
	fleetSecretName      = "hub-kubeconfig"
	fleetUser            = "lifecycle-member"
	delegatedPoolNames   = 4
)

// The hub side, fixed for the test binary (the members read their hub
// kubeconfig once, at start); the plan is per run (fleetPlanNamespace).
var (
	fleetHubNamespaces = []string{fleetHubNamespace, fleetOtherNamespace}
)

var (
	planRange      = netip.MustParsePrefix("10.248.0.0/14")
	planLowEnd     = netip.MustParsePrefix("10.248.0.0/20") // where the hub's best fit grants first
	localContested = netip.MustParsePrefix("10.250.0.0/20") // where local root pools of every namespace compete
	outsidePlan    = netip.MustParsePrefix("10.252.0.0/20")
)

// fleetManagerArgs make the replicas fleet members.
func fleetManagerArgs() []string {
	return []string{"--hub-kubeconfig-secret=" + fleetSecretNamespace + "/" + fleetSecretName, "--cluster-name=" + fleetCluster}
}

// fleetBeforeInstall prepares the hub side on the bare control plane and
// writes the members' hub kubeconfig Secret: a user of its CA with
// config/fleet-hub's Role in lifecycle-hub only, the context naming that
// namespace.
func fleetBeforeInstall(ctx context.Context, cp *controlplane.ControlPlane) error {
	// client-go, not controller-runtime: its logger is not set up yet.
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return err
	}
	for _, ns := range append([]string{fleetSecretNamespace}, fleetHubNamespaces...) {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	// config/fleet-hub/role.yaml's Role and RoleBinding, bound to the user.
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: fleetHubNamespace, Name: "subnet-operator-fleet-member"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{ipamv1.GroupVersion.Group}, Resources: []string{"subnets"},
			Verbs: []string{"get", "list", "watch", "create", "patch", "delete"}}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: fleetHubNamespace, Name: "subnet-operator-fleet-member"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: fleetUser}}}
	if _, err := cs.RbacV1().Roles(fleetHubNamespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := cs.RbacV1().RoleBindings(fleetHubNamespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return err
	}
	path, err := cp.AddUser(fleetUser)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	kubeconfig, err := clientcmd.Load(data)
	if err != nil {
		return err
	}
	for _, kctx := range kubeconfig.Contexts {
		kctx.Namespace = fleetHubNamespace // not the cluster name: the context's namespace wins
	}
	if data, err = clientcmd.Write(*kubeconfig); err != nil {
		return err
	}
	_, err = cs.CoreV1().Secrets(fleetSecretNamespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: fleetSecretNamespace, Name: fleetSecretName},
		Data: map[string][]byte{"value": data}}, metav1.CreateOptions{})
	return err
}

// setupFleetRun creates the run's plan: an isolated namespace (an address
// space of its own, as a hub's is) with the pool the members' delegated
// pools name.
func setupFleetRun(ctx context.Context, c client.Client, run int) error {
	fleetPlanNamespace = fmt.Sprintf("lifecycle%d-plan", run)
	space := &ipamv1.AddressSpace{ObjectMeta: metav1.ObjectMeta{Name: fleetPlanNamespace}, Spec: ipamv1.AddressSpaceSpec{
		Description:        "the lifecycle test's hub plan",
		RootPoolNamespaces: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: fleetPlanNamespace}},
	}}
	if err := c.Create(ctx, space); err != nil {
		return err
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fleetPlanNamespace,
		Labels: map[string]string{ipamv1.LabelAddressSpace: fleetPlanNamespace}}}); err != nil {
		return err
	}
	return c.Create(ctx, &ipamv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Namespace: fleetPlanNamespace, Name: fleetPlanName},
		Spec: ipamv1.SubnetPoolSpec{CIDR: planRange.String(), DefaultPrefixLength: ptr.To[int32](24),
			AllowedNamespaces: &ipamv1.AllowedNamespaces{From: ipamv1.FromSelector, Selector: &metav1.LabelSelector{
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: fleetHubNamespaces}},
			}}}})
}

// listHub lists the claims in the hub namespaces.
func listHub(ctx context.Context, c client.Client) ([]hubClaim, error) {
	var out []hubClaim
	for _, ns := range fleetHubNamespaces {
		var list ipamv1.SubnetList
		if err := retryTransient(ctx, func(ctx context.Context) error { return c.List(ctx, &list, client.InNamespace(ns)) }); err != nil {
			return nil, err
		}
		for i := range list.Items {
			out = append(out, fromHubSubnet(&list.Items[i]))
		}
	}
	return out, nil
}

func fromHubSubnet(s *ipamv1.Subnet) hubClaim {
	return hubClaim{obj: fromSubnet(s), Member: s.Labels[ipamv1.LabelMemberCluster],
		MemberPool: s.Annotations[ipamv1.AnnotationMemberPool], MemberPoolUID: types.UID(s.Annotations[ipamv1.AnnotationMemberPoolUID])}
}

// ---- the generator ----

// delegationPlan is a delegated pool as the generator believes it.
type delegationPlan struct {
	cidr   netip.Prefix // explicit (at create); invalid: asked for prefixLength
	length *int32
	def    int32
}

// fleetBelief is what the generator believes of the hub: the other
// member's claims, by name.
type fleetBelief struct {
	otherClaims map[string]bool
}

func delegatedPoolName(i int) string { return fmt.Sprintf("d%d", i) }

// pruneDelegated forgets explicit delegated pools the generator's pool
// operations deleted (they are in ns.pools while they exist).
func pruneDelegated(ns *nsPlan) {
	for name, d := range ns.delegated {
		if d.cidr.IsValid() && ns.pools[name] == nil {
			delete(ns.delegated, name)
		}
	}
}

// makeDelegationOp draws kind if it is a delegation operation (nil if not).
func (g *generator) makeDelegationOp(kind string, ns *nsPlan) *operation {
	switch kind {
	case opCreateDelegated, opDeleteDelegated, opDeleteHubClaim, opDelegatedSubnet, opOtherMemberClaim, opRestoreDelegated:
	default:
		return nil
	}
	pruneDelegated(ns)
	names := sortedKeys(ns.delegated)
	if kind == opOtherMemberClaim {
		return g.otherMemberClaim()
	}
	if kind == opCreateDelegated || len(names) == 0 {
		return &operation{kind: opCreateDelegated, requests: []*request{g.createDelegated(ns)}}
	}
	name := g.pick(names)
	switch kind {
	case opDeleteDelegated:
		op := &operation{kind: kind}
		if g.chance(0.7) {
			for _, sn := range sortedKeys(ns.subnets) {
				if ns.subnets[sn].pool == name {
					r := g.deleteSubnet(ns, sn)
					r.rec.Op = kind
					op.requests = append(op.requests, r)
				}
			}
		}
		del := g.deletePoolNamed(ns, name)
		del.rec.Op = kind
		inner := del.apply
		del.apply = func(rec *opRecord) {
			inner(rec)
			if rec.Outcome == outcomeDeleted || rec.Outcome == outcomeNotFound {
				delete(ns.delegated, name)
			}
		}
		op.requests = append(op.requests, del)
		return op
	case opDeleteHubClaim:
		op := &operation{kind: kind, requests: []*request{{
			rec: opRecord{Op: kind, Verb: "delete", Kind: kindHubClaim, Namespace: fleetHubNamespace, Name: hubClaimName(ns.name, name)},
		}}}
		if sn, ok := g.freeSubnetName(ns, nil); ok && g.chance(0.33) {
			r := g.delegatedSubnet(ns, sn, name)
			op.requests = append(op.requests, r)
			op.concurrent = 2
		}
		return op
	case opDelegatedSubnet:
		sn, ok := g.freeSubnetName(ns, nil)
		if !ok {
			return g.make(opDeleteSubnet)
		}
		return &operation{kind: kind, requests: []*request{g.delegatedSubnet(ns, sn, name)}}
	case opRestoreDelegated:
		inUse := false
		for _, s := range ns.subnets {
			inUse = inUse || s.pool == name
		}
		for _, p := range ns.pools {
			inUse = inUse || p.parent == name
		}
		if inUse {
			// Its delete would wait for its users: restored only when
			// nothing uses it (as believed).
			return g.make(opDeleteHubClaim)
		}
		op := &delegationOp{force: g.chance(0.5), withStatus: g.chance(0.5)}
		if op.force && op.withStatus && g.chance(1.0/3) {
			op.takenBy = fmt.Sprintf("other.network.t%d", g.rng.IntN(4))
		}
		return &operation{kind: kind, requests: []*request{{
			rec:        opRecord{Op: kind, Verb: verbRestoreDelegate, Kind: kindPool, Namespace: ns.name, Name: name},
			delegation: op,
			apply: func(*opRecord) {
				if op.takenBy != "" {
					// Deleted by a later other-member-claim, if made.
					g.fleet.otherClaims[op.takenBy] = true
				}
			},
		}}}
	}
	return nil
}

// createDelegated draws a delegated pool.
func (g *generator) createDelegated(ns *nsPlan) *request {
	var free []string
	for i := range delegatedPoolNames {
		if n := delegatedPoolName(i); ns.delegated[n] == nil && ns.pools[n] == nil {
			free = append(free, n)
		}
	}
	name := delegatedPoolName(g.rng.IntN(delegatedPoolNames))
	if len(free) > 0 && g.chance(0.95) {
		name = g.pick(free)
	}
	d := &delegationPlan{}
	if g.chance(0.6) {
		bits := 22 + g.rng.IntN(5)
		d.length, d.def = ptr.To(int32(bits)), int32(min(bits+2+g.rng.IntN(2), 30))
	} else {
		switch x := g.rng.Float64(); {
		case x < 0.45:
			d.cidr = g.within(planLowEnd, 22+g.rng.IntN(5))
		case x < 0.85:
			d.cidr = g.within(localContested, 23+g.rng.IntN(4))
		default:
			d.cidr = g.within(outsidePlan, 24)
		}
		d.def = int32(min(d.cidr.Bits()+2+g.rng.IntN(2), 30))
	}
	p := &ipamv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns.name, Name: name}, Spec: ipamv1.SubnetPoolSpec{
		DefaultPrefixLength: ptr.To(d.def),
		Delegation:          &ipamv1.PoolDelegation{PoolRef: ipamv1.PoolReference{Namespace: fleetPlanNamespace, Name: fleetPlanName}, PrefixLength: d.length},
	}}
	if d.cidr.IsValid() {
		p.Spec.CIDR = d.cidr.String()
	}
	if g.chance(0.04) {
		p.Spec.CIDR, p.Spec.Delegation.PrefixLength = "", nil // asks for nothing: refused
	}
	if ns.platform {
		p.Spec.AllowedNamespaces = platformConsent()
	}
	return &request{
		rec:    opRecord{Op: opCreateDelegated, Verb: "create", Kind: kindPool, Namespace: ns.name, Name: name, CIDR: p.Spec.CIDR, PrefixLength: d.length},
		create: p,
		apply: func(rec *opRecord) {
			if rec.Outcome != outcomeCreated {
				return
			}
			ns.delegated[name] = d
			if d.cidr.IsValid() {
				// A root pool of a known range: the pool operations hit it.
				ns.pools[name] = &poolPlan{cidr: d.cidr, def: ptr.To(d.def)}
			}
		},
	}
}

// delegatedSubnet is a dynamic Subnet of delegated pool pool: its default
// length, or a longer one.
func (g *generator) delegatedSubnet(ns *nsPlan, name, pool string) *request {
	d := ns.delegated[pool]
	var length *int32
	if g.chance(0.5) {
		length = ptr.To(min(d.def+int32(g.rng.IntN(3)), 32))
	}
	r := g.subnetRequest(ns, name, pool, netip.Prefix{}, length)
	r.rec.Op = opDelegatedSubnet
	return r
}

// otherMemberClaim creates or deletes a claim of the other member identity.
func (g *generator) otherMemberClaim() *operation {
	names := sortedKeys(g.fleet.otherClaims)
	if len(names) > 0 && g.chance(0.4) {
		name := g.pick(names)
		return &operation{kind: opOtherMemberClaim, requests: []*request{{
			rec: opRecord{Op: opOtherMemberClaim, Verb: "delete", Kind: kindHubClaim, Namespace: fleetOtherNamespace, Name: name},
			apply: func(rec *opRecord) {
				if rec.Outcome == outcomeDeleted || rec.Outcome == outcomeNotFound {
					delete(g.fleet.otherClaims, name)
				}
			},
		}}}
	}
	name := fmt.Sprintf("other.network.o%d", g.rng.IntN(8))
	s := &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: fleetOtherNamespace, Name: name,
		Labels:      map[string]string{ipamv1.LabelMemberCluster: "other"},
		Annotations: map[string]string{ipamv1.AnnotationMemberPool: "network/" + name}},
		Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Namespace: fleetPlanNamespace, Name: fleetPlanName}}}
	if g.chance(0.6) {
		s.Spec.CIDR = g.within(planLowEnd, 22+g.rng.IntN(5)).String()
	} else {
		s.Spec.PrefixLength = ptr.To[int32](24)
	}
	return &operation{kind: opOtherMemberClaim, requests: []*request{{
		rec:    opRecord{Op: opOtherMemberClaim, Verb: "create", Kind: kindHubClaim, Namespace: fleetOtherNamespace, Name: name, CIDR: s.Spec.CIDR},
		create: s,
		apply: func(rec *opRecord) {
			if rec.Outcome == outcomeCreated {
				g.fleet.otherClaims[name] = true
			}
		},
	}}}
}

// ---- the driver ----

// delegationOp is a restore-delegated-pool request.
type delegationOp struct {
	force      bool // remove the pool's finalizers before its delete
	withStatus bool // write the exported status after the re-create, as Velero's restoreStatus does
	// takenBy: while the pool is gone, its claim is removed from the hub
	// (finalizers too: the hub restored from an older backup) and the other
	// member identity claims the range, with a claim of this name.
	takenBy string
}

// sendDelegation sends a request on a hub claim or a delegated pool's
// restore; handled is false for any other request.
func (d *driver) sendDelegation(ctx context.Context, r *request, rec *opRecord) (handled bool, err error) {
	switch {
	case rec.Kind == kindHubClaim:
		s := &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: rec.Namespace, Name: rec.Name}}
		if rec.Verb == "create" {
			s = r.create.DeepCopyObject().(*ipamv1.Subnet)
			err = d.c.Create(ctx, s)
			if err == nil {
				rec.Outcome = outcomeCreated
			}
		} else if err = d.c.Delete(ctx, s); err == nil {
			rec.Outcome = outcomeDeleted
		}
		if err == nil {
			rec.RV, rec.UID = parseRV(s.ResourceVersion), s.UID
		}
		return true, err
	case r.delegation != nil:
		return true, d.restoreDelegated(ctx, r.delegation, rec)
	}
	return false, nil
}

// restoreDelegated exports a delegated pool as a backup tool keeps it
// (metadata a user wrote and the spec, once the grant is recorded if that
// happens within a bound), deletes it (its finalizers removed first when
// force), waits until it is gone, and creates it again from the export.
// Its outcome is the re-create's.
func (d *driver) restoreDelegated(ctx context.Context, op *delegationOp, rec *opRecord) error {
	key := client.ObjectKey{Namespace: rec.Namespace, Name: rec.Name}
	var p ipamv1.SubnetPool
	for {
		err := d.c.Get(ctx, key, &p)
		if apierrors.IsNotFound(err) {
			rec.Outcome = outcomeNotFound
			return nil
		}
		if err != nil {
			return err
		}
		if p.Spec.CIDR != "" || time.Since(rec.Start) > 10*time.Second || ctx.Err() != nil {
			break
		}
		sleep(ctx, 50*time.Millisecond)
	}
	if p.DeletionTimestamp != nil {
		rec.Outcome, rec.Reason, rec.Message = outcomeFailed, "terminating", "the pool is being deleted"
		return nil
	}
	exported := &ipamv1.SubnetPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, Labels: p.Labels, Annotations: p.Annotations},
		Spec:       *p.Spec.DeepCopy(),
	}
	rec.CIDR, rec.Message = p.Spec.CIDR, fmt.Sprintf("force=%t, exported uid %s", op.force, shortUID(p.UID))
	if op.force && len(p.Finalizers) > 0 {
		body := []byte(`{"metadata":{"finalizers":null}}`)
		if err := d.c.Patch(ctx, &p, client.RawPatch(types.MergePatchType, body)); err != nil {
			return err
		}
	}
	if err := d.c.Delete(ctx, &p, client.Preconditions{UID: &p.UID}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	for {
		var now ipamv1.SubnetPool
		err := d.c.Get(ctx, key, &now)
		if apierrors.IsNotFound(err) || (err == nil && now.UID != p.UID) {
			break
		}
		if time.Since(rec.Start) > 30*time.Second || ctx.Err() != nil {
			rec.Outcome, rec.Reason, rec.Message = outcomeFailed, "still-terminating", "the pool was not gone within 30 s: "+rec.Message
			return nil
		}
		sleep(ctx, 50*time.Millisecond)
	}
	if op.takenBy != "" && p.Spec.CIDR != "" {
		taken, err := d.takeDelegatedRange(ctx, &p, op.takenBy)
		if err != nil {
			return err
		}
		rec.Message += fmt.Sprintf("; %s taken in the hub by %s/%s: %t", p.Spec.CIDR, fleetOtherNamespace, op.takenBy, taken)
	}
	if err := d.c.Create(ctx, exported); err != nil {
		return err
	}
	rec.Outcome, rec.RV, rec.UID = outcomeCreated, parseRV(exported.ResourceVersion), exported.UID
	if op.withStatus {
		// The status as exported, onto the new object: retried from a
		// fresh read while the manager writes it too.
		for attempt := 0; ; attempt++ {
			restored := exported.DeepCopy()
			restored.Status = *p.Status.DeepCopy()
			err := d.c.Status().Update(ctx, restored)
			if err == nil {
				rec.Message += "; status restored"
				restoredStatuses.note(fromPool(restored)) // not the operator's: ops_restore_test.go
				break
			}
			if !apierrors.IsConflict(err) || attempt == 4 {
				rec.Message += fmt.Sprintf("; status not restored: %v", err)
				break
			}
			if err := d.c.Get(ctx, key, exported); err != nil || exported.UID != rec.UID {
				rec.Message += "; status not restored: the pool is gone"
				break
			}
		}
	}
	return nil
}

// takeDelegatedRange removes the claim in the hub of the pool p (gone
// from the member) and has the other member identity claim its range,
// within a bound. It reports whether that claim was created.
func (d *driver) takeDelegatedRange(ctx context.Context, p *ipamv1.SubnetPool, name string) (bool, error) {
	var claims ipamv1.SubnetList
	if err := d.c.List(ctx, &claims, client.InNamespace(fleetHubNamespace)); err != nil {
		return false, err
	}
	strip := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))
	for i := range claims.Items {
		c := &claims.Items[i]
		if c.Annotations[ipamv1.AnnotationMemberPool] != p.Namespace+"/"+p.Name {
			continue
		}
		if err := d.c.Patch(ctx, c, strip); client.IgnoreNotFound(err) != nil {
			return false, err
		}
		if err := d.c.Delete(ctx, c); client.IgnoreNotFound(err) != nil {
			return false, err
		}
	}
	taker := &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: fleetOtherNamespace, Name: name,
		Labels:      map[string]string{ipamv1.LabelMemberCluster: "other"},
		Annotations: map[string]string{ipamv1.AnnotationMemberPool: "network/" + name}},
		Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Namespace: fleetPlanNamespace, Name: fleetPlanName}, CIDR: p.Spec.CIDR}}
	deadline := time.Now().Add(10 * time.Second)
	for {
		// Refused while the hub's arbiter still sees the old claim.
		err := d.c.Create(ctx, taker.DeepCopy())
		if err == nil {
			return true, nil
		}
		if apierrors.IsAlreadyExists(err) || !apierrors.IsInvalid(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return false, nil
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// lastDelegation is what the delegation checks saw at the last phase end,
// for the summary.
var lastDelegation delegationSummary
