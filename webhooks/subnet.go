package webhooks

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/big"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ipspace"
	"github.com/subnet-operator/subnet-operator/ledger"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

// The validating webhook sees DELETE of a Subnet whose addresses Cluster
// API IPAddresses may use (the address-protection finalizer marks it;
// config/webhook's matchConditions send no other delete): any other Subnet
// can always be deleted (its range returns to the pool), and with
// failurePolicy Fail an outage must not block its deletion, or its
// namespace's, for nothing. A protected Subnet is held by its finalizer
// while the manager is down anyway.
// timeoutSeconds is explicit, and above every bound the webhooks put on
// their own waits (Options), so a caller reads our answer.
// The validating webhook sees creates, and the updates that change the
// converted spec.poolRef: a Subnet's spec is immutable (the CRD's
// transition rules refuse a change before validating webhooks run), but a
// v1alpha1 request is checked in v1alpha1, where the reference is a name
// and its namespace travels in an annotation. The defaulting webhook sees
// the one update it has something to do for (an update that leaves out the
// recorded spec.cidr: see Default). config/webhook adds matchConditions, so
// the API server calls either webhook only when its answer can matter.
// +kubebuilder:webhook:path=/mutate-ipam-subnet-operator-io-v1alpha2-subnet,mutating=true,failurePolicy=fail,sideEffects=None,matchPolicy=Equivalent,groups=ipam.subnet-operator.io,resources=subnets,verbs=create;update,versions=v1alpha2,name=msubnet.ipam.subnet-operator.io,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-ipam-subnet-operator-io-v1alpha2-subnet,mutating=false,failurePolicy=fail,sideEffects=None,matchPolicy=Equivalent,groups=ipam.subnet-operator.io,resources=subnets,verbs=create;update;delete,versions=v1alpha2,name=vsubnet.ipam.subnet-operator.io,admissionReviewVersions=v1,timeoutSeconds=10

var subnetGK = ipamv1.GroupVersion.WithKind("Subnet").GroupKind()

// SubnetDefaulter canonicalises spec.cidr and fills spec.prefixLength from
// the pool's defaultPrefixLength when the Subnet names neither a range nor a
// length. It allocates nothing: that is the controller's job. (Select a
// pool's Subnets with the field selector spec.poolRef: it needs no label.)
type SubnetDefaulter struct {
	Ledger *ledger.Ledger
}

var _ admission.Defaulter[*ipamv1.Subnet] = &SubnetDefaulter{}

// Default implements admission.Defaulter. The spec is defaulted on create.
// It is immutable afterwards, so an update (a label, a finalizer) leaves it
// as stored, even text stored in a non-canonical form while the webhook was
// bypassed, with two exceptions, for an update with the manifest from Git
// (kubectl replace, a GitOps tool's replace or apply): one that leaves out
// the range the controller recorded in spec.cidr of a prefixLength claim
// keeps it, as the API server keeps a Service's allocated clusterIP (and
// keeps the stored prefixLength too if it names neither field), and one
// that leaves out spec.poolRef.namespace keeps the stored one. The
// webhook configuration sends only such updates.
func (d *SubnetDefaulter) Default(ctx context.Context, s *ipamv1.Subnet) error {
	if operation(ctx) == "UPDATE" {
		keepDefaulted(ctx, s)
		return nil
	}
	if operation(ctx) != "CREATE" {
		return nil
	}
	if s.Spec.CIDR != "" {
		// Only the text changes (case, zero compression); anything that
		// changes the meaning, such as host bits, is left for validation to
		// reject with a suggestion.
		if canonical, err := ipspace.Canonical(s.Spec.CIDR); err == nil {
			s.Spec.CIDR = canonical
		}
	}
	// A reference without a namespace is to a pool in the Subnet's own.
	if s.Spec.PoolRef.Namespace == "" {
		s.Spec.PoolRef.Namespace = s.Namespace
	}
	// The claim is immutable afterwards, even if the pool appears later (the
	// controller then uses the pool's default).
	if s.Spec.CIDR == "" && s.Spec.PrefixLength == nil && s.Spec.PoolRef.Name != "" {
		if pool, ok := d.Ledger.Pool(s.Spec.PoolRef.Namespace, s.Spec.PoolRef.Name); ok && pool.Default >= 0 {
			s.Spec.PrefixLength = ptr.To(int32(pool.Default))
		}
	}
	// Mutating webhooks run before the CRD schema: reject malformed input
	// here, with the validator's own check and message (which says what
	// to write instead), rather than leave it to the schema's terser CEL
	// messages, which remain for when the webhooks are bypassed.
	if v := validateSubnetSpec(&s.Spec, s.Namespace, specPath); len(v.errs) > 0 {
		_, err := finish(ctx, statuscalc.KindSubnet, subnetGK, objectName(s.Name, s.GenerateName), v, nil)
		return err
	}
	return nil
}

// keepDefaulted copies from the stored object into an update what the
// update leaves out and the stored object got after it was written: the
// range recorded in spec.cidr of a prefixLength claim, the prefixLength
// itself when the update names neither field (the pool's default, filled
// in at admission or recorded with the range), and the namespace of
// spec.poolRef. An update that changes the claim itself is left for the
// schema to refuse.
func keepDefaulted(ctx context.Context, s *ipamv1.Subnet) {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return
	}
	var old ipamv1.Subnet
	if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
		return
	}
	if s.Spec.CIDR == "" && s.Spec.PrefixLength == nil && old.Spec.PrefixLength != nil {
		// A manifest that names neither field: the length came from the
		// pool's default, at admission or with the record of a Subnet
		// created before its pool.
		s.Spec.PrefixLength = ptr.To(*old.Spec.PrefixLength)
	}
	if s.Spec.CIDR == "" && s.Spec.PrefixLength != nil && old.Spec.CIDR != "" && ptr.Equal(old.Spec.PrefixLength, s.Spec.PrefixLength) {
		s.Spec.CIDR = old.Spec.CIDR
	}
	if s.Spec.PoolRef.Namespace == "" && s.Spec.PoolRef.Name == old.Spec.PoolRef.Name {
		s.Spec.PoolRef.Namespace = old.Spec.PoolRef.Namespace
	}
}

// SubnetValidator rejects malformed Subnets, Subnets that do not fit their
// pool, and explicit claims that overlap any other claim of the pool.
type SubnetValidator struct {
	Ledger *ledger.Ledger
	fresh  *freshness
}

var _ admission.Validator[*ipamv1.Subnet] = &SubnetValidator{}

// ValidateCreate implements admission.Validator.
func (v *SubnetValidator) ValidateCreate(ctx context.Context, s *ipamv1.Subnet) (admission.Warnings, error) {
	claim := "dynamic"
	if s.Spec.CIDR != "" {
		claim = "explicit" // these wait for the freshness barrier's reads
	}
	defer prometheus.NewTimer(subnetAdmission.WithLabelValues(claim)).ObserveDuration()
	return v.validate(ctx, nil, s)
}

// ValidateUpdate implements admission.Validator. The webhook configuration
// sends only updates whose spec.poolRef differs from the stored one (see
// the markers above); it refuses the same changes the schema does.
func (v *SubnetValidator) ValidateUpdate(ctx context.Context, old, s *ipamv1.Subnet) (admission.Warnings, error) {
	return v.validate(ctx, old, s)
}

// ValidateDelete implements admission.Validator: a Subnet whose addresses
// Cluster API machines use is refused, naming them (addressesInUse; the
// finalizer holds it when this webhook is bypassed or raced). Any other
// Subnet can be deleted.
func (v *SubnetValidator) ValidateDelete(ctx context.Context, s *ipamv1.Subnet) (admission.Warnings, error) {
	if err := v.addressesInUse(ctx, s); err != nil {
		return nil, err
	}
	return finish(ctx, statuscalc.KindSubnet, subnetGK, s.Name, verdict{}, nil)
}

// validate checks a create (old nil) or an update.
func (v *SubnetValidator) validate(ctx context.Context, old, s *ipamv1.Subnet) (admission.Warnings, error) {
	name := objectName(s.Name, s.GenerateName)
	var res verdict
	if s.Namespace == "" {
		res.add(reasonMissingNamespace, field.Required(metadataPath.Child("namespace"), "Subnets are namespaced: create it in the namespace of its SubnetPool"))
	}
	if old != nil {
		// The claim is immutable once made; status-only and metadata
		// changes pass. (The CRD's transition rules say so too, and
		// first.) The spec was validated when it was made.
		res.merge(validateSubnetUpdate(old, s))
		return finish(ctx, statuscalc.KindSubnet, subnetGK, name, res, nil)
	}
	res.merge(validateSubnetSpec(&s.Spec, s.Namespace, specPath))
	if len(res.errs) > 0 {
		return finish(ctx, statuscalc.KindSubnet, subnetGK, name, res, nil)
	}

	// An explicit range must not overlap anything the pool knows of,
	// including a claim created a moment ago: catch up first. A pool that
	// claims from several namespaces can reach is caught up with across
	// all of them (awaitDomain).
	ref := s.Spec.PoolRef // validateSubnetSpec: name and namespace are set
	// Consent first, on this replica's view: a namespace the pool does not
	// allow is refused before any read of the API server and before any
	// check against the pool's claims, so that a request (a forged one
	// too) learns nothing of them and costs no read. The check is made
	// again after the barrier, for a pool that just stopped allowing it.
	if res.merge(checkConsent(v.Ledger, ref, s.Namespace, specPath.Child("poolRef"))); len(res.errs) > 0 {
		return finish(ctx, statuscalc.KindSubnet, subnetGK, name, res, nil)
	}
	domain := []ipamv1.PoolReference{ref}
	explicit := s.Spec.CIDR != ""
	if explicit {
		if err := v.fresh.awaitDomain(ctx, s.Namespace, domain, statuscalc.KindSubnet, statuscalc.KindSubnetPool); err != nil {
			return internalError(ctx, statuscalc.KindSubnet, err)
		}
	}
	pool, ok := v.Ledger.Pool(ref.Namespace, ref.Name)
	if !ok && !explicit {
		// Maybe it was created a moment ago; look again before warning.
		if err := v.fresh.awaitDomain(ctx, s.Namespace, domain, statuscalc.KindSubnetPool); err != nil {
			return internalError(ctx, statuscalc.KindSubnet, err)
		}
		pool, ok = v.Ledger.Pool(ref.Namespace, ref.Name)
	}
	var warnings admission.Warnings
	if ok {
		res.merge(checkConsent(v.Ledger, ref, s.Namespace, specPath.Child("poolRef")))
		if len(res.errs) > 0 {
			return finish(ctx, statuscalc.KindSubnet, subnetGK, name, res, nil)
		}
		res.merge(validateSubnetInPool(&s.Spec, pool, ref.Namespace, specPath))
		if len(res.errs) == 0 {
			res.merge(checkQuota(v.Ledger, ref, s.Namespace, ledger.SubnetKey(s.Name), v.askedSize(s), specPath.Child("poolRef")))
		}
		if !explicit {
			warnings = v.waitsForSpace(&s.Spec, pool, ref)
		}
	} else {
		// GitOps applies in any order: the Subnet waits for its pool. A
		// reference that is likely a mistake names the pool it may have
		// meant, as the Subnet's condition will: a pool of any namespace,
		// so the view is brought up to date across namespaces first (a
		// pool created a moment ago elsewhere is the likely one). A view
		// that does not catch up only loses the hint: a warning is not
		// worth refusing the request for.
		v.fresh.catchUpForHints(ctx, statuscalc.KindSubnetPool)
		warnings = admission.Warnings{PoolNotFoundMessage(PoolHintsFor(v.Ledger), ref, s.Namespace)}
	}
	// An explicit range must not overlap the pool's other claims, including
	// the ones that wait for a pool that does not exist yet: they claim
	// their ranges the moment it does.
	if explicit && len(res.errs) == 0 {
		p, _ := ipspace.ParseCanonical(s.Spec.CIDR) // validated above
		if found, total := v.Ledger.Overlapping(ref, p, s.Namespace, ledger.SubnetKey(s.Name), maxNamed); total > 0 {
			res.add(reasonOverlap, field.Invalid(specPath.Child("cidr"), s.Spec.CIDR,
				"overlaps "+describe(found, total, []string{s.Namespace, ref.Namespace})+"; pick a free range, or set spec.prefixLength to have one allocated"))
		}
	}
	if len(res.errs) > 0 {
		warnings = nil
	}
	return finish(ctx, statuscalc.KindSubnet, subnetGK, name, res, warnings)
}

// waitsForSpace warns when a prefixLength claim that fits its pool's range
// finds no free block of its length now: it will wait (PoolExhausted)
// until space frees, and the warning names the largest free block, so that
// a shorter request can be made at once. The requester passed the pool's
// consent, so it may see the pool's figures (the pool's status shows the
// same block to anyone who may read the pool).
//
// Admission is where this figure is told: the Ready=False PoolExhausted
// message leaves it out on purpose (ledger.DecideSubnet), since a figure
// that changes with every allocation and release would rewrite the status
// of every claim waiting on the pool each time.
func (v *SubnetValidator) waitsForSpace(spec *ipamv1.SubnetSpec, pool ledger.PoolView, ref ipamv1.PoolReference) admission.Warnings {
	length := pool.Default
	if spec.PrefixLength != nil {
		length = int(*spec.PrefixLength)
	}
	largest, _, ok := v.Ledger.FreeBlocks(ref.Namespace, ref.Name, 1) // O(W): the maintained free-space map
	if !ok || length < 0 || (len(largest) > 0 && largest[0].Bits() <= length) {
		return nil // a pool that serves no range yet says so in its own status
	}
	now := "nothing is free in " + ref.String() + " now"
	if len(largest) > 0 {
		now = fmt.Sprintf("no /%d is free in %s now: the largest free block is %s", length, ref, largest[0])
	}
	return admission.Warnings{now + "; this Subnet waits (PoolExhausted) until space frees"}
}

// askedSize is how many addresses a Subnet asks for: its explicit range,
// or a block of its prefix length (the pool's default if it names none);
// nil when not known.
func (v *SubnetValidator) askedSize(s *ipamv1.Subnet) *big.Int {
	if p, err := ipspace.ParsePrefix(s.Spec.CIDR); err == nil {
		return ipspace.AddressCount(p)
	}
	length := -1
	if s.Spec.PrefixLength != nil {
		length = int(*s.Spec.PrefixLength)
	}
	return v.Ledger.BlockSize(s.Spec.PoolRef, length)
}

// validateSubnetUpdate rejects changes to the claim: poolRef, cidr and
// prefixLength are immutable. One message per changed field, saying what
// to do instead, in the words of the CRD's rules (which refuse these
// changes first when the request comes through the schema).
func validateSubnetUpdate(old, s *ipamv1.Subnet) verdict {
	var v verdict
	// Compared as resolved: a reference stored without its namespace (the
	// webhooks bypassed) and one that writes the object's own are the same.
	// kubectl ipam next's arguments for the pool the claim is on.
	nextArgs := old.Spec.PoolRef.In(old.Namespace) + " " + old.Spec.PoolRef.Name
	if !sameReference(&old.Spec.PoolRef, &s.Spec.PoolRef, s.Namespace) {
		v.add(reasonImmutable, field.Invalid(specPath.Child("poolRef"), s.Spec.PoolRef.String(), fmt.Sprintf(
			"is immutable: a Subnet claims from one pool (%s) for its lifetime; to claim from another, delete this Subnet and create a new one (kubectl ipam next -n %s %s shows what that pool would allocate)",
			old.Spec.PoolRef.In(old.Namespace)+"/"+old.Spec.PoolRef.Name, s.Spec.PoolRef.In(s.Namespace), s.Spec.PoolRef.Name)))
	}
	// The one change allowed: the controller records the range a dynamic
	// claim holds (AllocationRecorder in reconcilers), and with it the
	// length of one that named neither field.
	recorded := old.Spec.CIDR == "" && old.Status.CIDR != "" && s.Spec.CIDR == old.Status.CIDR
	if s.Spec.CIDR != old.Spec.CIDR && !recorded {
		claims := cmp.Or(old.Spec.CIDR, old.Status.CIDR, "none yet")
		v.add(reasonImmutable, field.Invalid(specPath.Child("cidr"), s.Spec.CIDR, fmt.Sprintf(
			"cidr is immutable: a Subnet keeps the range it claims (%s) for its lifetime; to claim another, delete this Subnet and create a new one (kubectl ipam next -n %s shows what the pool would allocate)",
			claims, nextArgs)))
	}
	if !ptr.Equal(s.Spec.PrefixLength, old.Spec.PrefixLength) && !(recorded && recordsLength(old, s)) {
		var value any = "unset"
		asked, next := "none", ""
		if old.Spec.PrefixLength != nil {
			asked = fmt.Sprintf("/%d", *old.Spec.PrefixLength)
		}
		if s.Spec.PrefixLength != nil {
			value = *s.Spec.PrefixLength
			next = fmt.Sprintf(" --length %d", *s.Spec.PrefixLength)
		}
		v.add(reasonImmutable, field.Invalid(specPath.Child("prefixLength"), value, fmt.Sprintf(
			"prefixLength is immutable: a Subnet keeps the length it asked for (%s) for its lifetime; to claim another, delete this Subnet and create a new one (kubectl ipam next -n %s%s shows what the pool would allocate)",
			asked, nextArgs, next)))
	}
	return v
}

// recordsLength reports whether s adds to a claim that named neither a
// range nor a length the length of the range it holds.
func recordsLength(old, s *ipamv1.Subnet) bool {
	if old.Spec.PrefixLength != nil || s.Spec.PrefixLength == nil {
		return false
	}
	held, err := ipspace.ParsePrefix(old.Status.CIDR)
	return err == nil && int(*s.Spec.PrefixLength) == held.Bits()
}

// sameReference reports whether two optional references made from
// namespace name the same pool: an empty namespace is namespace.
func sameReference(a, b *ipamv1.PoolReference, namespace string) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Name == b.Name && a.In(namespace) == b.In(namespace)
}
