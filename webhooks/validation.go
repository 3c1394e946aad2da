package webhooks

import (
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ipspace"
	"github.com/subnet-operator/subnet-operator/ledger"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

// Denial reasons: the bounded label values of the admission metric.
const (
	reasonMissingNamespace = "missing_namespace"
	reasonMissingPoolRef   = "missing_pool_ref"
	reasonInvalidPoolRef   = "invalid_pool_ref"
	reasonNotAllowed       = "not_allowed"
	reasonInvalidCIDR      = "invalid_cidr"
	reasonInvalidSpec      = "invalid_spec"
	reasonFamily           = "family_mismatch"
	reasonOutOfRange       = "out_of_range"
	reasonReserved         = "reserved"
	reasonPrefixBounds     = "prefix_bounds"
	reasonOverlap          = "overlap"
	reasonImmutable        = "immutable"
	reasonPoolTerminating  = "pool_terminating"
	reasonParentNotFound   = "parent_not_found"
	reasonSpaceNotFound    = "address_space_not_found"
	reasonCycle            = "cycle"
	reasonShrink           = "shrink"
	reasonInUse            = "in_use"
	reasonInvalidGateway   = "invalid_gateway"
	reasonNamespaceQuota   = "namespace_quota"
)

// verdict collects the field errors of one request and, for the metric,
// the reason of each.
type verdict struct {
	errs    field.ErrorList
	reasons []string
}

func (v *verdict) add(reason string, err *field.Error) {
	v.errs = append(v.errs, err)
	v.reasons = append(v.reasons, reason)
}

func (v *verdict) merge(o verdict) {
	v.errs = append(v.errs, o.errs...)
	v.reasons = append(v.reasons, o.reasons...)
}

// reason is the label of the first denial, which is what a user fixes first.
func (v *verdict) reason() string {
	if len(v.reasons) == 0 {
		return ""
	}
	return v.reasons[0]
}

// maxNamed bounds how many colliding objects a message names.
const maxNamed = 3

// validateCIDR checks a CIDR field: it must parse, have no host bits set and
// be in canonical form. The message says what to write instead.
func validateCIDR(value string, path *field.Path) (netip.Prefix, *field.Error) {
	p, err := ipspace.ParseCanonical(value)
	if err != nil {
		var pe *ipspace.ParseError
		if errors.As(err, &pe) {
			return netip.Prefix{}, field.Invalid(path, value, pe.Error())
		}
		return netip.Prefix{}, field.Invalid(path, value, err.Error())
	}
	return p, nil
}

// validatePoolName checks a reference to a pool: it must be a name a
// SubnetPool can have (a DNS subdomain: lowercase letters, digits, '-' and
// '.', at most 253 characters).
func validatePoolName(name string, path *field.Path) *field.Error {
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return field.Invalid(path, name, "must be the name of a SubnetPool: "+strings.Join(errs, "; "))
	}
	return nil
}

// validateReference checks a reference to a pool, made from namespace
// (empty when the object names none: reported on its own). The defaulting
// webhook fills an empty namespace, so an empty one here means defaulting
// was skipped; the message says what to write.
func validateReference(ref ipamv1.PoolReference, namespace, what string, path *field.Path) verdict {
	var v verdict
	if strings.TrimSpace(ref.Name) == "" {
		v.add(reasonMissingPoolRef, field.Required(path.Child("name"), "name the SubnetPool "+what))
	} else if err := validatePoolName(ref.Name, path.Child("name")); err != nil {
		v.add(reasonInvalidPoolRef, err)
	}
	if ref.Namespace == "" {
		hint := "the SubnetPool's namespace"
		if namespace != "" {
			hint = fmt.Sprintf("%q for a SubnetPool in this namespace", namespace)
		}
		v.add(reasonMissingPoolRef, field.Required(path.Child("namespace"), "write the namespace of the SubnetPool "+what+": "+hint))
	}
	// Whether the pool allows this namespace is the validators' check
	// (checkConsent): it needs the pool.
	return v
}

// checkConsent refuses a reference from namespace into another namespace's
// pool that does not allow it (spec.allowedNamespaces), naming the pool and
// its policy. A pool the ledger does not know is not refused here: the
// claim waits for it, and the arbiter checks consent when it appears.
func checkConsent(l *ledger.Ledger, ref ipamv1.PoolReference, namespace string, path *field.Path) verdict {
	var v verdict
	if ref.Namespace == namespace {
		return v
	}
	if allowed, policy, found := l.Consent(ref, namespace); found && !allowed {
		v.add(reasonNotAllowed, field.Forbidden(path, fmt.Sprintf(
			"SubnetPool %s %s, not from %s; ask its owners to allow this namespace in spec.allowedNamespaces", ref, policy, namespace)))
	}
	return v
}

// checkQuota refuses the claim key from namespace, asking for size
// addresses (nil when not known), when its namespace already has what the
// pool allows each namespace (spec.allowedNamespaces.perNamespace), with
// the figure. It tells the namespace only its own usage. Claims that race
// past it are held back by the arbiter (reason NamespaceQuotaExceeded).
func checkQuota(l *ledger.Ledger, ref ipamv1.PoolReference, namespace string, key ledger.ClaimKey, size *big.Int, path *field.Path) verdict {
	var v verdict
	if refusal := l.NamespaceQuota(ref, namespace, key, size); refusal != "" {
		v.add(reasonNamespaceQuota, field.Forbidden(path, refusal+"; delete one of the namespace's claims on the pool, or ask its owners to raise spec.allowedNamespaces.perNamespace"))
	}
	return v
}

// validateAllowedNamespaces checks a pool's consent: a selector exactly
// when from is Selector, and one that parses; per-namespace caps that are
// numbers (the schema says so too, but a v1alpha1 client carries the
// field in an annotation the schema does not look into).
func validateAllowedNamespaces(a *ipamv1.AllowedNamespaces, path *field.Path) verdict {
	var v verdict
	if a == nil {
		return v
	}
	switch a.From {
	case "", ipamv1.FromSame, ipamv1.FromAll:
		if a.Selector != nil {
			v.add(reasonInvalidSpec, field.Invalid(path.Child("selector"), a.Selector.String(), "allowed only when from is Selector"))
		}
	case ipamv1.FromSelector:
		if a.Selector == nil {
			v.add(reasonInvalidSpec, field.Required(path.Child("selector"), "from: Selector needs a namespace label selector, such as {matchLabels: {ipam.subnet-operator.io/tenant: \"true\"}}"))
		}
		for _, err := range metav1validation.ValidateLabelSelector(a.Selector, metav1validation.LabelSelectorValidationOptions{}, path.Child("selector")) {
			v.add(reasonInvalidSpec, err)
		}
	default:
		v.add(reasonInvalidSpec, field.NotSupported(path.Child("from"), a.From, []ipamv1.FromNamespaces{ipamv1.FromSame, ipamv1.FromAll, ipamv1.FromSelector}))
	}
	if n := a.PerNamespace; n != nil {
		limits := path.Child("perNamespace")
		if n.MaxClaims != nil && *n.MaxClaims < 0 {
			v.add(reasonInvalidSpec, field.Invalid(limits.Child("maxClaims"), *n.MaxClaims, "must be 0 or more"))
		}
		if n.MaxAddresses != "" {
			if !decimalCount.MatchString(n.MaxAddresses) {
				v.add(reasonInvalidSpec, field.Invalid(limits.Child("maxAddresses"), n.MaxAddresses,
					`must be a whole number of addresses written in decimal, such as "4096" (a /20 of IPv4) or "18446744073709551616" (an IPv6 /64)`))
			}
		}
	}
	return v
}

// decimalCount is an address count as perNamespace.maxAddresses writes
// it: decimal, no sign, no leading zero, at most 39 digits (2^128 has 39).
var decimalCount = regexp.MustCompile(`^(0|[1-9][0-9]{0,38})$`)

// validateSubnetSpec checks what the spec of a Subnet in namespace says on
// its own.
func validateSubnetSpec(spec *ipamv1.SubnetSpec, namespace string, path *field.Path) verdict {
	v := validateReference(spec.PoolRef, namespace, "to claim from", path.Child("poolRef"))
	if spec.PrefixLength != nil && (*spec.PrefixLength < 0 || *spec.PrefixLength > 128) {
		v.add(reasonPrefixBounds, field.Invalid(path.Child("prefixLength"), *spec.PrefixLength, "must be between 0 and 128"))
	}
	if spec.CIDR == "" {
		if spec.Gateway != "" {
			v.add(reasonInvalidGateway, field.Invalid(path.Child("gateway"), spec.Gateway,
				"needs an explicit spec.cidr: the gateway of a range not allocated yet cannot be known; leave gateway out to use the range's first usable address"))
		}
		return v
	}
	p, err := validateCIDR(spec.CIDR, path.Child("cidr"))
	switch {
	case err != nil:
		v.add(reasonInvalidCIDR, err)
	case spec.PrefixLength != nil && p.Bits() != int(*spec.PrefixLength):
		// Both set is a prefixLength claim with the range allocated to it
		// recorded (a restore from a backup): they must agree.
		v.add(reasonInvalidSpec, field.Invalid(path.Child("prefixLength"), *spec.PrefixLength,
			fmt.Sprintf("disagrees with cidr %s: set either cidr (an explicit range) or prefixLength (a range the controller allocates); both only as the controller records an allocation (cidr a /prefixLength range)", spec.CIDR)))
	}
	if spec.Gateway != "" && err == nil {
		v.merge(validateGateway(spec.Gateway, p, path.Child("gateway")))
	}
	return v
}

// validateGateway checks a Subnet's gateway against its range: an address
// of the range's family, inside it, and not its network or IPv4 broadcast
// address (which no machine answers on).
func validateGateway(gateway string, cidr netip.Prefix, path *field.Path) verdict {
	var v verdict
	gw, err := netip.ParseAddr(gateway)
	switch {
	case err != nil || gw.Zone() != "" || gw.Is4In6():
		v.add(reasonInvalidGateway, field.Invalid(path, gateway, "must be an IP address such as 10.0.1.1 or 2001:db8::1 (no zone, no IPv4-mapped IPv6)"))
	case gw.Is4() != cidr.Addr().Is4():
		v.add(reasonInvalidGateway, field.Invalid(path, gateway, fmt.Sprintf("is %s, spec.cidr %s is %s: use an address of the same family", ipspace.Family(gw), cidr, ipspace.Family(cidr.Addr()))))
	case !cidr.Contains(gw):
		v.add(reasonInvalidGateway, field.Invalid(path, gateway, fmt.Sprintf("is outside spec.cidr %s: the gateway is an address of the Subnet's own network", cidr)))
	default:
		plan := ledger.PlanAddresses(cidr, gw)
		switch gw {
		case plan.Network:
			v.add(reasonInvalidGateway, field.Invalid(path, gateway, fmt.Sprintf("is the network address of %s; use a host address such as %s", cidr, plan.Network.Next())))
		case plan.Broadcast:
			v.add(reasonInvalidGateway, field.Invalid(path, gateway, fmt.Sprintf("is the broadcast address of %s; use a host address such as %s", cidr, plan.Network.Next())))
		}
	}
	return v
}

// validateSubnetInPool checks a Subnet against its pool: family, range,
// reserved ranges, and the bounds of the prefix length the Subnet will have
// (its CIDR's, or prefixLength, or the pool's default).
func validateSubnetInPool(spec *ipamv1.SubnetSpec, pool ledger.PoolView, poolNamespace string, path *field.Path) verdict {
	var v verdict
	poolName := poolNamespace + "/" + pool.Name
	if pool.Deleting {
		v.add(reasonPoolTerminating, field.Invalid(path.Child("poolRef"), spec.PoolRef.Name,
			fmt.Sprintf("SubnetPool %s is being deleted; claim from another pool", poolName)))
		return v
	}
	if !pool.Spec.IsValid() {
		return v // the pool reports its own invalid spec
	}
	rules := poolRules("SubnetPool "+poolName, pool)
	if spec.CIDR != "" {
		p, err := ipspace.ParseCanonical(spec.CIDR)
		if err != nil {
			return v // reported by validateSubnetSpec
		}
		if violation := rules.CheckRange(p, true); violation != nil {
			v.add(violationReason(violation), field.Invalid(path.Child("cidr"), spec.CIDR, violation.Detail))
		}
		return v
	}
	length := pool.Default
	if spec.PrefixLength != nil {
		length = int(*spec.PrefixLength)
	}
	if length < 0 {
		v.add(reasonInvalidSpec, field.Required(path.Child("prefixLength"),
			fmt.Sprintf("SubnetPool %s has no defaultPrefixLength; set spec.prefixLength or spec.cidr", poolName)))
		return v
	}
	if violation := checkLengthClearOfReserved(rules, length); violation != nil {
		v.add(violationReason(violation), field.Invalid(path.Child("prefixLength"), length, violation.Detail))
	}
	return v
}

// checkLengthClearOfReserved is the engine's CheckLength, and the reserved
// ranges too: a length that fits the pool's range and bounds, but whose
// every block overlaps a reserved range, can never be allocated, so it is
// refused here rather than left to wait (PoolExhausted) forever. When the
// reserved ranges rule out lengths the bounds allow, the lengths the
// message offers ("use 19 to 28") leave those out too.
func checkLengthClearOfReserved(rules ipspace.Rules, length int) *ipspace.Violation {
	violation := rules.CheckLength(length)
	if len(rules.Reserved) == 0 {
		return violation
	}
	lo, hi := rules.AllowedLengths()
	// The largest block clear of every reserved range: O(r log r) for r
	// reserved ranges (at most 256), and only for a pool that has some.
	clear := ipspace.NewSpace(rules.Pool, rules.Reserved).Usage().LargestFree
	clearLo := hi + 1 // nothing is clear: no length fits
	if clear.IsValid() {
		clearLo = max(lo, clear.Bits())
	}
	if clearLo == lo {
		return violation // the reserved ranges rule out nothing the bounds allow
	}
	if violation != nil {
		detail, _ := strings.CutSuffix(violation.Detail, allowedLengths(lo, hi))
		return &ipspace.Violation{Rule: violation.Rule, Detail: detail + allowedLengths(clearLo, hi)}
	}
	if length >= clearLo {
		return nil
	}
	return &ipspace.Violation{Rule: ipspace.RuleReserved, Detail: fmt.Sprintf("no /%d of %s (%s) is clear of its reserved ranges (%s)",
		length, rules.Name, rules.Pool, listPrefixes(rules.Reserved, maxNamed)) + allowedLengths(clearLo, hi)}
}

// allowedLengths ends a refused length's message with the lengths that
// would do, as the engine's CheckLength words it.
func allowedLengths(lo, hi int) string {
	switch {
	case lo > hi:
		return ": it allows no prefix length"
	case lo == hi:
		return fmt.Sprintf(": use %d", lo)
	default:
		return fmt.Sprintf(": use %d to %d", lo, hi)
	}
}

// listPrefixes names up to limit prefixes, plus a count of the rest.
func listPrefixes(ps []netip.Prefix, limit int) string {
	parts := make([]string, 0, min(len(ps), limit))
	for _, p := range ps[:min(len(ps), limit)] {
		parts = append(parts, p.String())
	}
	s := strings.Join(parts, ", ")
	if extra := len(ps) - limit; extra > 0 {
		s += fmt.Sprintf(" and %d more", extra)
	}
	return s
}

// poolRules are the engine's rules of a pool as the ledger shows it.
func poolRules(name string, pool ledger.PoolView) ipspace.Rules {
	return ipspace.Rules{Name: name, Pool: pool.Spec, Reserved: pool.Reserved, MinLength: pool.Min, MaxLength: pool.Max}
}

// violationReason maps a broken rule to its admission metric label.
func violationReason(v *ipspace.Violation) string {
	switch v.Rule {
	case ipspace.RuleFamily:
		return reasonFamily
	case ipspace.RuleOutside:
		return reasonOutOfRange
	case ipspace.RuleReserved:
		return reasonReserved
	default:
		return reasonPrefixBounds
	}
}

// validatePoolSpec checks what the spec of the pool namespace/name says on
// its own. On update (old not nil), text that did not change is not judged
// again, so an object stored while the webhook was bypassed can still be
// updated.
func validatePoolSpec(namespace, name string, spec, old *ipamv1.SubnetPoolSpec, path *field.Path) verdict {
	var v verdict
	var cidr netip.Prefix
	if old != nil && spec.CIDR == old.CIDR {
		cidr, _ = ipspace.ParsePrefix(spec.CIDR)
	} else if awaitsGrant(spec) {
		// A delegated pool's range comes from the hub (delegation.go).
	} else if p, err := validateCIDR(spec.CIDR, path.Child("cidr")); err != nil {
		v.add(reasonInvalidCIDR, err)
	} else {
		cidr = p
	}
	if ref := spec.ParentRef; ref != nil && ref.Name == name && ref.In(namespace) == namespace {
		v.add(reasonCycle, field.Invalid(path.Child("parentRef"), ref.Name, "must not name the pool itself"))
	} else if ref != nil && (old == nil || old.ParentRef == nil || *ref != *old.ParentRef) {
		v.merge(validateReference(*ref, namespace, "to carve this pool from", path.Child("parentRef")))
	}
	v.merge(validateAllowedNamespaces(spec.AllowedNamespaces, path.Child("allowedNamespaces")))
	for i, r := range spec.Reserved {
		var rp netip.Prefix
		var err *field.Error
		if old != nil && slices.Contains(old.Reserved, r) {
			rp, _ = ipspace.ParsePrefix(r)
		} else if rp, err = validateCIDR(r, path.Child("reserved").Index(i)); err != nil {
			v.add(reasonInvalidCIDR, err)
			continue
		}
		if cidr.IsValid() && !statuscalc.Contains(cidr, rp) {
			v.add(reasonOutOfRange, field.Invalid(path.Child("reserved").Index(i), r, fmt.Sprintf("must lie inside spec.cidr %s", cidr)))
		}
	}
	lengths := []struct {
		name  string
		value *int32
	}{{"minPrefixLength", spec.MinPrefixLength}, {"defaultPrefixLength", spec.DefaultPrefixLength}, {"maxPrefixLength", spec.MaxPrefixLength}}
	for _, l := range lengths {
		if l.value == nil {
			continue
		}
		lp := path.Child(l.name)
		switch {
		case *l.value < 0 || *l.value > 128:
			v.add(reasonPrefixBounds, field.Invalid(lp, *l.value, "must be between 0 and 128"))
		case cidr.IsValid() && (int(*l.value) < cidr.Bits() || int(*l.value) > cidr.Addr().BitLen()):
			v.add(reasonPrefixBounds, field.Invalid(lp, *l.value, fmt.Sprintf("must be between %d (the pool's own length) and %d", cidr.Bits(), cidr.Addr().BitLen())))
		}
	}
	minLen, defLen, maxLen := statuscalc.Length(spec.MinPrefixLength), statuscalc.Length(spec.DefaultPrefixLength), statuscalc.Length(spec.MaxPrefixLength)
	if minLen >= 0 && maxLen >= 0 && minLen > maxLen {
		v.add(reasonPrefixBounds, field.Invalid(path.Child("minPrefixLength"), minLen, fmt.Sprintf("must not be greater than maxPrefixLength (%d)", maxLen)))
	}
	if defLen >= 0 && minLen >= 0 && defLen < minLen {
		v.add(reasonPrefixBounds, field.Invalid(path.Child("defaultPrefixLength"), defLen, fmt.Sprintf("must not be less than minPrefixLength (%d)", minLen)))
	}
	if defLen >= 0 && maxLen >= 0 && defLen > maxLen {
		v.add(reasonPrefixBounds, field.Invalid(path.Child("defaultPrefixLength"), defLen, fmt.Sprintf("must not be greater than maxPrefixLength (%d)", maxLen)))
	}
	return v
}

// describe names up to maxNamed claims with their ranges, plus a count of
// the rest: "Subnet team-a/web (10.0.1.0/24), SubnetPool team-a/x (...) and
// 4 more".
//
// A claimant's refusal names an object only if it is in one of the
// namespaces in visible (the requester's and the pool's): across
// namespaces a tenant learns the range it collides with, which is what it
// needs to pick another, and not the names of other tenants' objects. A
// pool's owners, who consented to those claims, see every name (visible
// nil).
func describe(found []ledger.Claimant, total int, visible []string) string {
	parts := make([]string, 0, len(found))
	for _, c := range found {
		if visible == nil || slices.Contains(visible, c.Ref.Namespace) {
			parts = append(parts, fmt.Sprintf("%s (%s)", c.Ref, c.Range))
		} else {
			parts = append(parts, fmt.Sprintf("a range held in another namespace (%s)", c.Range))
		}
	}
	s := strings.Join(parts, ", ")
	if extra := total - len(found); extra > 0 {
		s += fmt.Sprintf(" and %d more", extra)
	}
	return s
}
