package webhooks

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ipspace"
	"github.com/subnet-operator/subnet-operator/ledger"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

// +kubebuilder:webhook:path=/mutate-ipam-subnet-operator-io-v1alpha2-subnetpool,mutating=true,failurePolicy=fail,sideEffects=None,matchPolicy=Equivalent,groups=ipam.subnet-operator.io,resources=subnetpools,verbs=create;update,versions=v1alpha2,name=msubnetpool.ipam.subnet-operator.io,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-ipam-subnet-operator-io-v1alpha2-subnetpool,mutating=false,failurePolicy=fail,sideEffects=None,matchPolicy=Equivalent,groups=ipam.subnet-operator.io,resources=subnetpools,verbs=create;update;delete,versions=v1alpha2,name=vsubnetpool.ipam.subnet-operator.io,admissionReviewVersions=v1,timeoutSeconds=10

var (
	poolGK       = ipamv1.GroupVersion.WithKind("SubnetPool").GroupKind()
	poolResource = ipamv1.GroupVersion.WithResource("subnetpools").GroupResource()
)

// SubnetPoolDefaulter rewrites spec.cidr and spec.reserved to canonical
// text (case, zero compression; never the meaning), and puts a new root
// pool in its namespace's address space (ipamv1.LabelAddressSpace).
type SubnetPoolDefaulter struct {
	Ledger *ledger.Ledger
	// namespaces reads a namespace the ledger has not seen yet, within
	// the replica's budget (namespaceReads); Setup shares the validators'.
	namespaces *namespaceReads
}

var _ admission.Defaulter[*ipamv1.SubnetPool] = &SubnetPoolDefaulter{}

// Default implements admission.Defaulter. On update it rewrites only the
// values the request changes: text stored in a non-canonical form while the
// webhook was bypassed stays as it is, so an update of something else (a
// label, the finalizer) does not turn into a change of the pool's range.
// Like the Subnet defaulter, it rejects a malformed spec on create before the
// CRD schema does, with the validator's messages.
func (d *SubnetPoolDefaulter) Default(ctx context.Context, p *ipamv1.SubnetPool) error {
	old := oldPool(ctx)
	if canonical, err := ipspace.Canonical(p.Spec.CIDR); err == nil && (old == nil || p.Spec.CIDR != old.Spec.CIDR) {
		p.Spec.CIDR = canonical
	}
	for i, r := range p.Spec.Reserved {
		if canonical, err := ipspace.Canonical(r); err == nil && (old == nil || !slices.Contains(old.Spec.Reserved, r)) {
			p.Spec.Reserved[i] = canonical
		}
	}
	// A parent without a namespace is in the pool's own; an update with
	// the manifest from Git that leaves it out keeps the stored one.
	if ref := p.Spec.ParentRef; ref != nil && ref.Namespace == "" {
		switch {
		case old == nil:
			ref.Namespace = p.Namespace
		case old.Spec.ParentRef != nil && old.Spec.ParentRef.Name == ref.Name:
			ref.Namespace = old.Spec.ParentRef.Namespace
		}
	}
	if operation(ctx) == "CREATE" && p.Spec.ParentRef == nil && p.Spec.AddressSpace == "" && p.Namespace != "" {
		space, err := d.namespaceSpace(ctx, p.Namespace)
		if err != nil {
			return apierrors.NewInternalError(fmt.Errorf("reading namespace %s for its address space: %w", p.Namespace, err))
		}
		p.Spec.AddressSpace = space
	}
	if operation(ctx) == "CREATE" {
		if v := validatePoolSpec(p.Namespace, p.Name, &p.Spec, nil, specPath); len(v.errs) > 0 {
			_, err := finish(ctx, statuscalc.KindSubnetPool, poolGK, objectName(p.Name, p.GenerateName), v, nil)
			return err
		}
	}
	return nil
}

// namespaceSpace returns the address space a namespace's label names for
// its new root pools, "" for the default. A namespace the ledger has not
// seen yet (just created) is read from the API server, so that a root pool
// created right after its namespace lands in the space the label names.
func (d *SubnetPoolDefaulter) namespaceSpace(ctx context.Context, namespace string) (string, error) {
	if nsLabels, known := d.Ledger.NamespaceLabels(namespace); known {
		return nsLabels[ipamv1.LabelAddressSpace], nil
	}
	// Not a guess: a root pool defaulted into the wrong space stays there
	// (the field is immutable), so a read that cannot be made refuses.
	nsLabels, _, err := d.namespaces.labels(ctx, namespace)
	if err != nil {
		return "", err
	}
	return nsLabels[ipamv1.LabelAddressSpace], nil
}

// oldPool returns the stored pool an UPDATE request changes, or nil.
func oldPool(ctx context.Context) *ipamv1.SubnetPool {
	req, err := admission.RequestFromContext(ctx)
	if err != nil || req.Operation != admissionv1.Update || len(req.OldObject.Raw) == 0 {
		return nil
	}
	old := &ipamv1.SubnetPool{}
	if json.Unmarshal(req.OldObject.Raw, old) != nil {
		return nil
	}
	return old
}

// SubnetPoolValidator checks a pool on its own, against its parent and
// siblings, against what it holds when it changes, and refuses to delete a
// pool in use.
type SubnetPoolValidator struct {
	Ledger *ledger.Ledger
	fresh  *freshness
}

var _ admission.Validator[*ipamv1.SubnetPool] = &SubnetPoolValidator{}

// ValidateCreate implements admission.Validator.
func (v *SubnetPoolValidator) ValidateCreate(ctx context.Context, p *ipamv1.SubnetPool) (admission.Warnings, error) {
	return v.validate(ctx, nil, p)
}

// ValidateUpdate implements admission.Validator.
func (v *SubnetPoolValidator) ValidateUpdate(ctx context.Context, old, p *ipamv1.SubnetPool) (admission.Warnings, error) {
	return v.validate(ctx, old, p)
}

// ValidateDelete implements admission.Validator: a pool that Subnets or
// child pools use cannot be deleted (the finalizer also keeps it when this
// webhook is bypassed), except with its namespace.
func (v *SubnetPoolValidator) ValidateDelete(ctx context.Context, p *ipamv1.SubnetPool) (admission.Warnings, error) {
	self := []ipamv1.PoolReference{{Namespace: p.Namespace, Name: p.Name}}
	if err := v.fresh.awaitDomain(ctx, p.Namespace, self, statuscalc.KindSubnet, statuscalc.KindSubnetPool); err != nil {
		return internalError(ctx, statuscalc.KindSubnetPool, err)
	}
	_, subnets, children := v.Ledger.Users(p.Namespace, p.Name, 0)
	if subnets+children == 0 || v.Ledger.NamespaceTerminating(p.Namespace) {
		// In a namespace being deleted, the pool goes Terminating and its
		// finalizer keeps it until its users are gone: a refusal would
		// only stop the namespace controller, which retries in its own
		// order (a parent before its child, forever).
		return finish(ctx, statuscalc.KindSubnetPool, poolGK, p.Name, verdict{}, nil)
	}
	// The refusal is read by whoever sent the request, which says only
	// that it comes from the pool's namespace (and a forged review need
	// not even come from the API server): it names the users in that
	// namespace and only counts the others, which are their namespaces'
	// business. The pool's status lists no claim of another namespace
	// either, beyond those it no longer allows.
	named, own := v.Ledger.UsersIn(p.Namespace, p.Name, p.Namespace, maxNamed)
	names := make([]string, 0, len(named))
	for _, ref := range named {
		names = append(names, ref.String())
	}
	list := strings.Join(names, ", ")
	if extra := own - len(named); extra > 0 {
		list += fmt.Sprintf(" and %d more", extra)
	}
	if others := subnets + children - own; others > 0 {
		if list != "" {
			list += ", and "
		}
		list += fmt.Sprintf("%d %s in other namespaces", others, plural(others, "claim", "claims"))
	}
	admissionDecisions.WithLabelValues(statuscalc.KindSubnetPool, operation(ctx), "denied", reasonInUse).Inc()
	return nil, apierrors.NewForbidden(poolResource, p.Name, fmt.Errorf(
		"SubnetPool %s/%s is in use by %d Subnets and %d child pools (%s); delete them first", p.Namespace, p.Name, subnets, children, list))
}

// validate checks a create (old nil) or an update.
func (v *SubnetPoolValidator) validate(ctx context.Context, old, p *ipamv1.SubnetPool) (admission.Warnings, error) {
	name := objectName(p.Name, p.GenerateName)
	var res verdict
	if p.Namespace == "" {
		res.add(reasonMissingNamespace, field.Required(metadataPath.Child("namespace"), "SubnetPools are namespaced"))
	}
	var oldSpec *ipamv1.SubnetPoolSpec
	if old != nil {
		oldSpec = &old.Spec
	}
	res.merge(validatePoolSpec(p.Namespace, p.Name, &p.Spec, oldSpec, specPath))
	res.merge(validateDelegation(oldSpec, &p.Spec, specPath))
	if old != nil && familyChanged(old.Spec.CIDR, p.Spec.CIDR) {
		res.add(reasonFamily, field.Invalid(specPath.Child("cidr"), p.Spec.CIDR, "the address family of a pool cannot change: create a pool of the other family"))
	}
	if old != nil && !sameReference(old.Spec.ParentRef, p.Spec.ParentRef, p.Namespace) {
		res.add(reasonImmutable, field.Invalid(specPath.Child("parentRef"), refString(p.Spec.ParentRef), "is immutable: create a new pool under the other parent"))
	}
	if len(res.errs) > 0 {
		return finish(ctx, statuscalc.KindSubnetPool, poolGK, name, res, nil)
	}
	warnings := append(v.capsLowered(old, p), v.lengthsTightened(old, p)...)
	// Unchanged range, reserved ranges and parent: nothing else to check
	// (status updates, labels, the finalizer).
	if old != nil && old.Spec.CIDR == p.Spec.CIDR && slices.Equal(old.Spec.Reserved, p.Spec.Reserved) {
		return finish(ctx, statuscalc.KindSubnetPool, poolGK, name, res, warnings)
	}
	// Consent first, on this replica's view, as for a Subnet: a namespace
	// the parent does not allow learns nothing of its claims and costs no
	// read of the API server. validateInParent checks again after the
	// barrier.
	if ref := p.Spec.ParentRef; ref != nil {
		parent := ipamv1.PoolReference{Namespace: ref.In(p.Namespace), Name: ref.Name}
		if res.merge(checkConsent(v.Ledger, parent, p.Namespace, specPath.Child("parentRef"))); len(res.errs) > 0 {
			return finish(ctx, statuscalc.KindSubnetPool, poolGK, name, res, nil)
		}
	}
	// Caught up across namespaces when the pool, or the parent it is
	// carved from, can hold claims from several.
	domain := []ipamv1.PoolReference{{Namespace: p.Namespace, Name: p.Name}}
	if ref := p.Spec.ParentRef; ref != nil {
		domain = append(domain, ipamv1.PoolReference{Namespace: ref.In(p.Namespace), Name: ref.Name})
	}
	var err error
	if p.Spec.ParentRef == nil {
		// The root pools of a space live in every namespace: caught up
		// with all of them.
		err = v.fresh.await(ctx, "", statuscalc.KindSubnet, statuscalc.KindSubnetPool)
	} else {
		err = v.fresh.awaitDomain(ctx, p.Namespace, domain, statuscalc.KindSubnet, statuscalc.KindSubnetPool)
	}
	if err != nil {
		return internalError(ctx, statuscalc.KindSubnetPool, err)
	}
	cidr, err := ipspace.ParsePrefix(p.Spec.CIDR) // validated above, or unchanged
	if err != nil {
		return finish(ctx, statuscalc.KindSubnetPool, poolGK, name, res, nil)
	}
	if p.Spec.ParentRef == nil {
		// After the barrier: the ledger holds the namespaces' labels and
		// the other root pools.
		if res.merge(v.validateInSpace(ctx, p, cidr, old == nil)); len(res.errs) > 0 {
			return finish(ctx, statuscalc.KindSubnetPool, poolGK, name, res, nil)
		}
	} else {
		res.merge(v.validateInParent(p, cidr))
	}
	if old != nil {
		res.merge(v.validateHoldings(old, p, cidr))
	}
	if len(res.errs) > 0 {
		warnings = nil
	}
	return finish(ctx, statuscalc.KindSubnetPool, poolGK, name, res, warnings)
}

// capsLowered warns the pool's owners when an update sets per-namespace
// caps that namespaces already hold more than: nothing is taken from
// them, and their new claims wait until they are back under the caps.
// The owners may read which namespaces claim from their pool.
func (v *SubnetPoolValidator) capsLowered(old, p *ipamv1.SubnetPool) admission.Warnings {
	if old == nil || p.Spec.AllowedNamespaces == nil || p.Spec.AllowedNamespaces.PerNamespace == nil {
		return nil
	}
	if o := old.Spec.AllowedNamespaces; o != nil && equality.Semantic.DeepEqual(o.PerNamespace, p.Spec.AllowedNamespaces.PerNamespace) {
		return nil
	}
	over, total := v.Ledger.NamespacesOverLimits(ipamv1.PoolReference{Namespace: p.Namespace, Name: p.Name}, p.Spec.AllowedNamespaces.PerNamespace, maxNamed)
	if total == 0 {
		return nil
	}
	list := strings.Join(over, ", ")
	if extra := total - len(over); extra > 0 {
		list += fmt.Sprintf(" and %d more", extra)
	}
	return admission.Warnings{fmt.Sprintf(
		"namespaces %s already hold more than spec.allowedNamespaces.perNamespace allows each namespace: their claims keep their ranges; their new claims are refused, or wait (reason %s), until they are back under it",
		list, ipamv1.ReasonNamespaceQuotaExceeded)}
}

// lengthsTightened warns the pool's owners when an update narrows the
// prefix lengths it grants below claims it holds: they keep their ranges
// (nothing is revoked), which the new rules would not grant. It names the
// claims of the pool's own namespace and counts the others, whose names
// are their namespaces' business.
func (v *SubnetPoolValidator) lengthsTightened(old, p *ipamv1.SubnetPool) admission.Warnings {
	if old == nil {
		return nil
	}
	bound := func(b *int32, def int) int {
		if b == nil {
			return def
		}
		return int(*b)
	}
	oldMin, oldMax := bound(old.Spec.MinPrefixLength, 0), bound(old.Spec.MaxPrefixLength, 128)
	newMin, newMax := bound(p.Spec.MinPrefixLength, 0), bound(p.Spec.MaxPrefixLength, 128)
	if newMin <= oldMin && newMax >= oldMax {
		return nil
	}
	named, total := v.Ledger.HeldOutsideLengths(p.Namespace, p.Name, p.Namespace, newMin, newMax, maxNamed)
	if total == 0 {
		return nil
	}
	parts := make([]string, 0, len(named)+1)
	for _, c := range named {
		parts = append(parts, fmt.Sprintf("%s (%s)", c.Ref, c.Range))
	}
	if others := total - len(named); others > 0 {
		parts = append(parts, fmt.Sprintf("%d more %s", others, plural(others, "claim", "claims")))
	}
	return admission.Warnings{fmt.Sprintf(
		"%d %s of this pool %s a range of a length outside /%d-/%d: %s; they keep their ranges (nothing is revoked), new claims get lengths inside the bounds",
		total, plural(total, "claim", "claims"), plural(total, "holds", "hold"), newMin, newMax, strings.Join(parts, ", "))}
}

// plural picks the word for count.
func plural(count int, one, many string) string {
	if count == 1 {
		return one
	}
	return many
}

// validateInSpace checks a root pool against its address space: the space
// exists, takes root pools from the pool's namespace (on create: a pool
// keeps its place when its namespace loses the label), and no other root
// pool of the space overlaps the range. Another root pool is named only
// if it is in the requester's namespace.
func (v *SubnetPoolValidator) validateInSpace(ctx context.Context, p *ipamv1.SubnetPool, cidr netip.Prefix, create bool) verdict {
	var res verdict
	path := specPath.Child("addressSpace")
	space := p.Spec.AddressSpace
	if space == "" {
		space = ipamv1.DefaultAddressSpace
	}
	view := v.Ledger.Space(space, p.Namespace)
	if view.Exists && create && !view.Allowed {
		// Before refusing, the namespace as the API server has it: its
		// label may not have reached this replica yet. Only the request's
		// own namespace is read, within the replica's budget
		// (namespaceReads); without a read the refusal stands.
		if nsLabels, exists, err := v.fresh.namespaces.labels(ctx, p.Namespace); err == nil && exists {
			view = v.Ledger.SpaceWithLabels(space, p.Namespace, nsLabels)
		}
	}
	switch {
	case !view.Exists:
		res.add(reasonSpaceNotFound, field.Invalid(path, p.Spec.AddressSpace, fmt.Sprintf(
			"AddressSpace %s does not exist; ask the platform team to create it, or leave spec.addressSpace empty for the default space", space)))
		return res
	case create && !view.Known:
		res.add(reasonNotAllowed, field.Forbidden(path, fmt.Sprintf(
			"address space %s takes root pools only from namespaces the platform allows, and the labels of namespace %s are not known to the operator yet; if it was just created, retry",
			space, p.Namespace)))
		return res
	case create && !view.Allowed:
		res.add(reasonNotAllowed, field.Forbidden(path, fmt.Sprintf(
			"address space %s takes root pools (without parentRef) only from namespaces the platform allows, and namespace %s lacks %s; "+
				"ask the platform team to label it, or carve this pool from an existing one with spec.parentRef",
			space, p.Namespace, strings.Join(view.Missing, ", "))))
		return res
	}
	if found, total := v.Ledger.SpaceOverlapping(space, cidr, p.Namespace, p.Name, maxNamed); total > 0 {
		res.add(reasonOverlap, field.Invalid(specPath.Child("cidr"), p.Spec.CIDR, fmt.Sprintf(
			"overlaps %s, a root pool of address space %s; pick a free range, carve this pool from that one with spec.parentRef, or put it in another address space for a deliberate overlap",
			describe(found, total, []string{p.Namespace}), space)))
	}
	return res
}

// validateInParent checks a child pool against its parent: the parent
// exists and allows the pool's namespace, the chain makes no cycle, the
// range lies inside the parent, off its reserved ranges, and overlaps none
// of the parent's other claims.
func (v *SubnetPoolValidator) validateInParent(p *ipamv1.SubnetPool, cidr netip.Prefix) verdict {
	var res verdict
	path := specPath.Child("parentRef")
	ref := ipamv1.PoolReference{Name: p.Spec.ParentRef.Name, Namespace: p.Spec.ParentRef.In(p.Namespace)}
	// The value as the user wrote it: a name, or namespace/name.
	parentRef := poolName(p.Namespace, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name})
	parent, ok := v.Ledger.Pool(ref.Namespace, ref.Name)
	if !ok {
		res.add(reasonParentNotFound, field.Invalid(path, parentRef,
			fmt.Sprintf("SubnetPool %s does not exist; create the parent pool first", ref)))
		return res
	}
	if parent.Deleting {
		res.add(reasonPoolTerminating, field.Invalid(path, parentRef, fmt.Sprintf("SubnetPool %s is being deleted", ref)))
		return res
	}
	if res.merge(checkConsent(v.Ledger, ref, p.Namespace, path)); len(res.errs) > 0 {
		return res
	}
	if res.merge(checkQuota(v.Ledger, ref, p.Namespace, ledger.PoolKey(p.Name), ipspace.AddressCount(cidr), path)); len(res.errs) > 0 {
		return res
	}
	self := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
	if chain := v.Ledger.Ancestors(ref.Namespace, ref.Name); slices.Contains(chain, self) {
		cycle := []string{p.Name, parentRef}
		for _, pool := range chain[:slices.Index(chain, self)+1] {
			cycle = append(cycle, poolName(p.Namespace, pool))
		}
		res.add(reasonCycle, field.Invalid(path, parentRef, "makes a cycle: "+strings.Join(cycle, " -> ")))
		return res
	}
	cidrPath := specPath.Child("cidr")
	parentName := ref.String()
	if !parent.Spec.IsValid() {
		return res
	}
	if violation := poolRules("parent SubnetPool "+parentName, parent).CheckRange(cidr, false); violation != nil {
		res.add(violationReason(violation), field.Invalid(cidrPath, p.Spec.CIDR, violation.Detail))
		return res
	}
	if found, total := v.Ledger.Overlapping(ref, cidr, p.Namespace, ledger.PoolKey(p.Name), maxNamed); total > 0 {
		res.add(reasonOverlap, field.Invalid(cidrPath, p.Spec.CIDR, fmt.Sprintf("overlaps %s in parent SubnetPool %s; pick a free range",
			describe(found, total, []string{p.Namespace, ref.Namespace}), parentName)))
	}
	return res
}

// validateHoldings checks a changed pool against the ranges its claims hold:
// it may grow, but not shrink so as to leave a held range outside, and a
// reserved range it adds may not cover one. Claims that hold nothing
// (waiting, or out of range) lose nothing to an edit and do not block it,
// nor does a claim already outside the pool or on a reserved range (a grant
// that raced an earlier edit). The arbiter applies the new rules from the
// moment it sees them; a grant that races this check keeps its range and
// the pool reports it (reason ClaimsOutside).
func (v *SubnetPoolValidator) validateHoldings(old, p *ipamv1.SubnetPool, cidr netip.Prefix) verdict {
	var res verdict
	if oldCIDR, err := ipspace.ParsePrefix(old.Spec.CIDR); err == nil && oldCIDR != cidr {
		if found, total := v.Ledger.HeldLeftOutside(p.Namespace, p.Name, oldCIDR, cidr, maxNamed); total > 0 {
			res.add(reasonShrink, field.Invalid(specPath.Child("cidr"), p.Spec.CIDR,
				fmt.Sprintf("would leave claims outside the pool: %s; a pool may grow, or shrink only around what it holds", describe(found, total, nil))))
		}
	}
	for i, r := range p.Spec.Reserved {
		rp, err := ipspace.ParsePrefix(r)
		if err != nil || slices.Contains(old.Spec.Reserved, r) {
			continue // reported by validatePoolSpec, or not new
		}
		if found, total := v.Ledger.HeldOverlapping(p.Namespace, p.Name, rp, maxNamed); total > 0 {
			res.add(reasonReserved, field.Invalid(specPath.Child("reserved").Index(i), r,
				"covers ranges already claimed: "+describe(found, total, nil)))
		}
	}
	return res
}

// poolName names a pool by its name within namespace, else as
// namespace/name.
func poolName(namespace string, pool types.NamespacedName) string {
	if pool.Namespace == namespace {
		return pool.Name
	}
	return pool.String()
}

// refString spells an optional reference for a message: "none" when unset.
func refString(ref *ipamv1.PoolReference) string {
	if ref == nil {
		return "none"
	}
	return ref.String()
}

// familyChanged reports whether an edit moves a pool's range to the other
// address family (both values parse). A root pool's grant lives in its
// address space's slot of one family.
func familyChanged(before, after string) bool {
	b, errB := ipspace.ParsePrefix(before)
	a, errA := ipspace.ParsePrefix(after)
	return errB == nil && errA == nil && b.Addr().Is4() != a.Addr().Is4()
}
