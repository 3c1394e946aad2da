package webhooks

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/time/rate"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	ipamv1alpha1 "github.com/subnet-operator/subnet-operator/api/v1alpha1"
	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
)

// limitsWorld has netops/corp (10.0.0.0/16, default /24) open to every
// namespace with the given per-namespace caps.
func limitsWorld(perNamespace *ipamv1.NamespaceLimits) *world {
	w := newWorld()
	corp := pool("corp", "10.0.0.0/16")
	corp.Namespace = "netops"
	corp.Spec.DefaultPrefixLength = ptr.To(int32(24))
	corp.Spec.AllowedNamespaces = &ipamv1.AllowedNamespaces{From: ipamv1.FromAll, PerNamespace: perNamespace}
	w.add(corp)
	return w
}

// claimOn is a Subnet of namespace on netops/corp: explicit when cidr is
// set, else of length 24.
func claimOn(namespace, name, cidr string) *ipamv1.Subnet {
	s := dynamicSubnet(name, "corp", 24)
	if cidr != "" {
		s = subnet(name, "corp", cidr)
	}
	s.Namespace, s.Spec.PoolRef.Namespace = namespace, "netops"
	s.UID = types.UID("uid-" + namespace + "-" + name)
	return s
}

// Over a per-namespace cap a create is refused at admission, with the
// figure; other namespaces, and the pool's own, are not counted.
func TestNamespaceCapsAtAdmission(t *testing.T) {
	w := limitsWorld(&ipamv1.NamespaceLimits{MaxClaims: ptr.To[int32](2), MaxAddresses: "512"})
	w.add(allocated(claimOn("team-a", "a1", "10.0.1.0/24"), "10.0.1.0/24"))
	w.add(claimOn("team-a", "a2", "")) // waiting: it counts too
	w.add(allocated(claimOn("team-b", "b1", "10.0.2.0/24"), "10.0.2.0/24"))
	for i := range 3 {
		w.add(allocated(claimOn("netops", fmt.Sprintf("own%d", i), fmt.Sprintf("10.0.%d.0/24", 10+i)), fmt.Sprintf("10.0.%d.0/24", 10+i)))
	}
	tests := []struct {
		name string
		s    *ipamv1.Subnet
		want string // "" for allowed
	}{
		{"a third claim of team-a", claimOn("team-a", "a3", ""),
			`Subnet.ipam.subnet-operator.io "a3" is invalid: spec.poolRef: Forbidden: namespace team-a has 2 of the 2 claims SubnetPool netops/corp allows each namespace; delete one of the namespace's claims on the pool, or ask its owners to raise spec.allowedNamespaces.perNamespace`},
		{"team-b within both caps", claimOn("team-b", "b2", "10.0.3.0/24"), ""},
		{"team-b past the address cap", claimOn("team-b", "b2", "10.0.4.0/23"),
			`Subnet.ipam.subnet-operator.io "b2" is invalid: spec.poolRef: Forbidden: namespace team-b has 256 of the 512 addresses (this claim asks for 512 more) that SubnetPool netops/corp allows each namespace; delete one of the namespace's claims on the pool, or ask its owners to raise spec.allowedNamespaces.perNamespace`},
		{"the pool's own namespace is not capped", claimOn("netops", "own9", ""), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := w.subnetValidator().ValidateCreate(withOp(admissionv1.Create), tt.s)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want != "" && (err == nil || err.Error() != tt.want):
				t.Errorf("got %v\nwant %s", err, tt.want)
			}
		})
	}

	// A child pool is a claim like a Subnet.
	kid := child("kid", "corp", "10.0.64.0/24")
	kid.Namespace, kid.Spec.ParentRef.Namespace = "team-a", "netops"
	_, err := w.poolValidator().ValidateCreate(withOp(admissionv1.Create), kid)
	field.ErrorMatcher{}.ByType().ByField().Test(t, field.ErrorList{field.Forbidden(field.NewPath("spec", "parentRef"), "")}, fieldErrors(t, err))
}

// The caps are validated: a v1alpha1 client carries them in an annotation
// that the schema does not look into.
func TestNamespaceCapsRules(t *testing.T) {
	w := newWorld()
	for _, tt := range []struct {
		limits ipamv1.NamespaceLimits
		field  string
	}{
		{ipamv1.NamespaceLimits{MaxAddresses: "4k"}, "spec.allowedNamespaces.perNamespace.maxAddresses"},
		{ipamv1.NamespaceLimits{MaxAddresses: "-1"}, "spec.allowedNamespaces.perNamespace.maxAddresses"},
		{ipamv1.NamespaceLimits{MaxAddresses: strings.Repeat("9", 40)}, "spec.allowedNamespaces.perNamespace.maxAddresses"},
		{ipamv1.NamespaceLimits{MaxClaims: ptr.To[int32](-1)}, "spec.allowedNamespaces.perNamespace.maxClaims"},
	} {
		p := pool("p", "10.9.0.0/16")
		p.Spec.AllowedNamespaces = &ipamv1.AllowedNamespaces{From: ipamv1.FromAll, PerNamespace: &tt.limits}
		_, err := w.poolValidator().ValidateCreate(withOp(admissionv1.Create), p)
		field.ErrorMatcher{}.ByType().ByField().Test(t, field.ErrorList{field.Invalid(field.NewPath(tt.field), nil, "")}, fieldErrors(t, err))
	}
	p := pool("p", "2001:db8::/48")
	p.Spec.AllowedNamespaces = &ipamv1.AllowedNamespaces{From: ipamv1.FromAll, PerNamespace: &ipamv1.NamespaceLimits{MaxAddresses: "18446744073709551616"}}
	if _, err := w.poolValidator().ValidateCreate(withOp(admissionv1.Create), p); err != nil {
		t.Errorf("one IPv6 /64 per namespace refused: %v", err)
	}
}

// The new field survives a v1alpha1 client's read-modify-write: v1alpha1
// carries spec.allowedNamespaces as JSON in an annotation.
func TestNamespaceCapsSurviveV1alpha1(t *testing.T) {
	p := pool("p", "10.9.0.0/16")
	p.Spec.AllowedNamespaces = &ipamv1.AllowedNamespaces{From: ipamv1.FromAll,
		PerNamespace: &ipamv1.NamespaceLimits{MaxClaims: ptr.To[int32](4), MaxAddresses: "1024"}}
	var old ipamv1alpha1.SubnetPool
	if err := ipamv1alpha1.ConvertSubnetPoolFromHub(context.Background(), p, &old); err != nil {
		t.Fatal(err)
	}
	var back ipamv1.SubnetPool
	if err := ipamv1alpha1.ConvertSubnetPoolToHub(context.Background(), &old, &back); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(back.Spec.AllowedNamespaces, p.Spec.AllowedNamespaces) {
		t.Errorf("round trip: %+v, want %+v", back.Spec.AllowedNamespaces, p.Spec.AllowedNamespaces)
	}
}

// Lowering a cap below what a namespace holds is allowed, with a warning
// to the pool's owners: nothing is taken away.
func TestLoweredCapWarns(t *testing.T) {
	w := limitsWorld(nil)
	for i := range 3 {
		cidr := fmt.Sprintf("10.0.%d.0/24", i)
		w.add(allocated(claimOn("team-a", fmt.Sprintf("a%d", i), cidr), cidr))
	}
	before := pool("corp", "10.0.0.0/16")
	before.Namespace = "netops"
	before.Spec.DefaultPrefixLength = ptr.To(int32(24))
	before.Spec.AllowedNamespaces = &ipamv1.AllowedNamespaces{From: ipamv1.FromAll}
	after := before.DeepCopy()
	after.Spec.AllowedNamespaces.PerNamespace = &ipamv1.NamespaceLimits{MaxClaims: ptr.To[int32](2)}
	warnings, err := w.poolValidator().ValidateUpdate(withUpdate(before), before, after)
	want := "namespaces team-a already hold more than spec.allowedNamespaces.perNamespace allows each namespace: their claims keep their ranges; their new claims are refused, or wait (reason NamespaceQuotaExceeded), until they are back under it"
	if err != nil || len(warnings) != 1 || warnings[0] != want {
		t.Errorf("warnings %q, err %v; want %q", warnings, err, want)
	}
}

// A pool DELETE refusal names the users in the request's namespace (the
// pool's) and only counts the others: a forged review learns no other
// namespace's claim names.
func TestPoolDeleteNamesOnlyTheRequestNamespace(t *testing.T) {
	w := limitsWorld(nil)
	for i, n := range []string{"netops", "netops", "team-a", "team-a", "team-a", "team-b"} {
		cidr := fmt.Sprintf("10.0.%d.0/24", i)
		w.add(allocated(claimOn(n, fmt.Sprintf("s%d", i), cidr), cidr))
	}
	corp := pool("corp", "10.0.0.0/16")
	corp.Namespace = "netops"
	_, err := w.poolValidator().ValidateDelete(withOp(admissionv1.Delete), corp)
	want := `subnetpools.ipam.subnet-operator.io "corp" is forbidden: SubnetPool netops/corp is in use by 6 Subnets and 0 child pools (Subnet netops/s0, Subnet netops/s1, and 4 claims in other namespaces); delete them first`
	if !apierrors.IsForbidden(err) || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

// A create against a pool that does not allow the request's namespace is
// refused as not allowed before anything else: no read of the API server
// (a forged request costs none) and no overlap answer (no oracle for the
// pool's allocations), for a Subnet and for a child pool.
func TestNotAllowedIsDecidedFirst(t *testing.T) {
	w := newWorld()
	corp := pool("corp", "10.0.0.0/16")
	corp.Namespace = "netops"
	w.add(corp)
	held := allocated(subnet("db", "corp", "10.0.1.0/24"), "10.0.1.0/24")
	held.Namespace, held.Spec.PoolRef.Namespace = "netops", "netops"
	w.add(held)

	probe := subnet("probe", "corp", "10.0.1.0/24") // overlaps netops/db
	probe.Namespace, probe.Spec.PoolRef.Namespace = "team-x", "netops"
	_, err := w.subnetValidator().ValidateCreate(withOp(admissionv1.Create), probe)
	field.ErrorMatcher{}.ByType().ByField().Test(t, field.ErrorList{field.Forbidden(field.NewPath("spec", "poolRef"), "")}, fieldErrors(t, err))

	kid := child("kid", "corp", "10.0.1.0/25")
	kid.Namespace, kid.Spec.ParentRef.Namespace = "team-x", "netops"
	_, err = w.poolValidator().ValidateCreate(withOp(admissionv1.Create), kid)
	field.ErrorMatcher{}.ByType().ByField().Test(t, field.ErrorList{field.Forbidden(field.NewPath("spec", "parentRef"), "")}, fieldErrors(t, err))

	if lists, gets := w.api.reads(); lists+gets != 0 {
		t.Errorf("refusals for consent read the API server: %d LISTs, %d GETs", lists, gets)
	}
}

// A refusal for consent tells the tenant which of its own labels the
// selector looks at, and its own values, never the selector's values,
// which may name other tenants.
func TestNotAllowedHidesOtherTenants(t *testing.T) {
	w := newWorld()
	w.ledger.ApplyNamespace("team-c", map[string]string{"kubernetes.io/metadata.name": "team-c"}, ledger.Created)
	corp := pool("corp", "10.0.0.0/16")
	corp.Namespace = "netops"
	corp.Spec.AllowedNamespaces = &ipamv1.AllowedNamespaces{From: ipamv1.FromSelector, Selector: &metav1.LabelSelector{
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{"team-a", "team-b"}}}}}
	w.add(corp)
	s := claimOn("team-c", "x", "")
	_, err := w.subnetValidator().ValidateCreate(withOp(admissionv1.Create), s)
	want := `Subnet.ipam.subnet-operator.io "x" is invalid: spec.poolRef: Forbidden: SubnetPool netops/corp allows claims only from its own namespace netops and namespaces whose labels match its selector on the label kubernetes.io/metadata.name (namespace team-c has kubernetes.io/metadata.name=team-c), not from team-c; ask its owners to allow this namespace in spec.allowedNamespaces`
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

// Reads of namespaces the ledger has not seen, which a forged request can
// name at will, stay within the replica's budget: a flood of creates of
// root pools in made-up namespaces makes at most the burst of reads, and
// the requests beyond it are refused, not defaulted on a guess.
func TestNamespaceReadsAreBounded(t *testing.T) {
	w := newWorld()
	d := &SubnetPoolDefaulter{Ledger: w.ledger, namespaces: &namespaceReads{reader: w.api, limiter: rate.NewLimiter(0, 5)}}
	refused := 0
	for i := range 50 {
		p := pool("p", "10.9.0.0/16")
		p.Namespace = fmt.Sprintf("made-up-%d", i)
		if err := d.Default(withOp(admissionv1.Create), p); err != nil {
			refused++
		}
	}
	if _, gets := w.api.reads(); gets != 5 || refused != 45 {
		t.Errorf("%d namespace reads and %d refusals for 50 made-up namespaces; want 5 and 45", gets, refused)
	}
}

// Narrowing the prefix lengths a pool grants below claims it holds warns
// its owners: the claims keep their ranges. The pool's own namespace's
// claims are named, the others counted.
func TestTightenedLengthsWarn(t *testing.T) {
	w := limitsWorld(nil)
	w.add(allocated(claimOn("netops", "wide", "10.0.0.0/24"), "10.0.0.0/24"))
	w.add(allocated(claimOn("netops", "narrow", "10.0.1.0/28"), "10.0.1.0/28"))
	w.add(allocated(claimOn("team-a", "tiny", "10.0.2.0/29"), "10.0.2.0/29"))
	before := pool("corp", "10.0.0.0/16")
	before.Namespace = "netops"
	before.Spec.AllowedNamespaces = &ipamv1.AllowedNamespaces{From: ipamv1.FromAll}
	w.add(before)
	after := before.DeepCopy()
	after.Spec.MaxPrefixLength = ptr.To(int32(26))
	warnings, err := w.poolValidator().ValidateUpdate(withUpdate(before), before, after)
	want := "2 claims of this pool hold a range of a length outside /0-/26: Subnet netops/narrow (10.0.1.0/28), 1 more claim; they keep their ranges (nothing is revoked), new claims get lengths inside the bounds"
	if err != nil || len(warnings) != 1 || warnings[0] != want {
		t.Errorf("warnings %q, err %v; want %q", warnings, err, want)
	}
	// Loosening warns of nothing.
	if warnings, err := w.poolValidator().ValidateUpdate(withUpdate(after), after, before); err != nil || len(warnings) != 0 {
		t.Errorf("loosening: warnings %q, err %v", warnings, err)
	}
}
