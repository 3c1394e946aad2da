package webhooks

import (
	"strings"
	"sync"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
)

// A reference without a namespace is to a pool in the object's own: the
// defaulter says so on create, and keeps the stored namespace on an update
// that leaves it out (a replace with the manifest from Git).
func TestReferenceNamespaceDefaults(t *testing.T) {
	w := baseWorld()
	s := subnet("x", "p", "10.0.3.0/24")
	s.Spec.PoolRef.Namespace = ""
	if err := (&SubnetDefaulter{Ledger: w.ledger}).Default(withOp(admissionv1.Create), s); err != nil {
		t.Fatal(err)
	}
	if want := (ipamv1.PoolReference{Name: "p", Namespace: ns}); s.Spec.PoolRef != want {
		t.Errorf("create: poolRef %+v, want %+v", s.Spec.PoolRef, want)
	}
	if _, err := w.subnetValidator().ValidateCreate(withOp(admissionv1.Create), s); err != nil {
		t.Errorf("defaulted create refused: %v", err)
	}

	replace := s.DeepCopy()
	replace.Spec.PoolRef.Namespace = ""
	if err := (&SubnetDefaulter{Ledger: w.ledger}).Default(withUpdate(s), replace); err != nil {
		t.Fatal(err)
	}
	if replace.Spec.PoolRef != s.Spec.PoolRef {
		t.Errorf("update without the namespace: poolRef %+v, want the stored %+v", replace.Spec.PoolRef, s.Spec.PoolRef)
	}
	// An update that names another pool is not completed: the schema and
	// the validator refuse it as it was sent.
	moved := s.DeepCopy()
	moved.Spec.PoolRef = ipamv1.PoolReference{Name: "v6"}
	_ = (&SubnetDefaulter{Ledger: w.ledger}).Default(withUpdate(s), moved)
	if moved.Spec.PoolRef.Namespace != "" {
		t.Errorf("update to another pool got namespace %q", moved.Spec.PoolRef.Namespace)
	}

	p := child("c", "p", "10.0.64.0/24")
	p.Spec.ParentRef.Namespace = ""
	if err := poolDefaulter().Default(withOp(admissionv1.Create), p); err != nil {
		t.Fatal(err)
	}
	if want := (ipamv1.PoolReference{Name: "p", Namespace: ns}); *p.Spec.ParentRef != want {
		t.Errorf("create: parentRef %+v, want %+v", *p.Spec.ParentRef, want)
	}
	replacePool := p.DeepCopy()
	replacePool.Spec.ParentRef.Namespace = ""
	if err := poolDefaulter().Default(withUpdate(p), replacePool); err != nil {
		t.Fatal(err)
	}
	if *replacePool.Spec.ParentRef != *p.Spec.ParentRef {
		t.Errorf("update without the namespace: parentRef %+v, want the stored %+v", *replacePool.Spec.ParentRef, *p.Spec.ParentRef)
	}
}

// Validation refuses a reference that names no pool and one without a
// namespace (defaulting was skipped), saying what to write.
func TestReferenceRules(t *testing.T) {
	w := baseWorld()
	ref := func(name, namespace string) *ipamv1.Subnet {
		s := dynamicSubnet("x", name, 24)
		s.Spec.PoolRef.Namespace = namespace
		return s
	}
	tests := []struct {
		name string
		s    *ipamv1.Subnet
		want string
	}{
		{"no name", ref("", ns), `Subnet.ipam.subnet-operator.io "x" is invalid: spec.poolRef.name: Required value: name the SubnetPool to claim from`},
		{"no namespace", ref("p", ""), `Subnet.ipam.subnet-operator.io "x" is invalid: spec.poolRef.namespace: Required value: write the namespace of the SubnetPool to claim from: "team-a" for a SubnetPool in this namespace`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := w.subnetValidator().ValidateCreate(withOp(admissionv1.Create), tt.s)
			if err == nil || err.Error() != tt.want {
				t.Errorf("got %v\nwant %s", err, tt.want)
			}
			// The defaulter refuses the same on create, before the schema.
			if tt.s.Spec.PoolRef.Namespace != "" {
				if err := (&SubnetDefaulter{Ledger: w.ledger}).Default(withOp(admissionv1.Create), tt.s.DeepCopy()); err == nil || err.Error() != tt.want {
					t.Errorf("defaulter: got %v\nwant %s", err, tt.want)
				}
			}
		})
	}
	// Naming itself through its own namespace is still naming itself.
	self := child("c", "c", "10.0.64.0/24")
	_, err := w.poolValidator().ValidateCreate(withOp(admissionv1.Create), self)
	field.ErrorMatcher{}.ByType().ByField().Test(t, field.ErrorList{field.Invalid(field.NewPath("spec", "parentRef"), "", "")}, fieldErrors(t, err))
}

// tenancyWorld is a platform namespace with three pools, one per consent
// policy, and tenant namespaces: team-a labelled as a tenant, team-b not.
// team-b holds a range in the shared plan (it was allowed when it claimed).
func tenancyWorld() *world {
	w := newWorld()
	for name, labels := range map[string]map[string]string{
		"netops": {"kubernetes.io/metadata.name": "netops"},
		"team-a": {"kubernetes.io/metadata.name": "team-a", "tenant": "true"},
		"team-b": {"kubernetes.io/metadata.name": "team-b"},
	} {
		w.ledger.ApplyNamespace(name, labels, ledger.Created)
	}
	platform := func(name, cidr string, allowed *ipamv1.AllowedNamespaces) *ipamv1.SubnetPool {
		p := pool(name, cidr)
		p.Namespace = "netops"
		p.Spec.DefaultPrefixLength = ptr.To(int32(24))
		p.Spec.AllowedNamespaces = allowed
		return p
	}
	w.add(platform("same", "10.1.0.0/16", nil))
	w.add(platform("selected", "10.2.0.0/16", &ipamv1.AllowedNamespaces{From: ipamv1.FromSelector,
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "true"}}}))
	w.add(platform("everyone", "10.3.0.0/16", &ipamv1.AllowedNamespaces{From: ipamv1.FromAll}))
	held := allocated(subnet("db", "everyone", "10.3.2.0/24"), "10.3.2.0/24")
	held.Namespace, held.Spec.PoolRef.Namespace = "team-b", "netops"
	w.add(held)
	own := allocated(subnet("infra", "everyone", "10.3.9.0/24"), "10.3.9.0/24")
	own.Namespace, own.Spec.PoolRef.Namespace = "netops", "netops"
	w.add(own)
	return w
}

// A pool in another namespace serves a claim only if its
// spec.allowedNamespaces allows the claim's namespace; the refusal names
// the pool and its policy. Child pools are held to the same rule.
func TestConsentAcrossNamespaces(t *testing.T) {
	w := tenancyWorld()
	claim := func(namespace, pool, cidr string) *ipamv1.Subnet {
		s := dynamicSubnet("x", pool, 24)
		if cidr != "" {
			s = subnet("x", pool, cidr)
		}
		s.Namespace, s.Spec.PoolRef.Namespace = namespace, "netops"
		return s
	}
	tests := []struct {
		name string
		s    *ipamv1.Subnet
		want string // "" for allowed
	}{
		{"Same refuses another namespace", claim("team-a", "same", ""),
			`Subnet.ipam.subnet-operator.io "x" is invalid: spec.poolRef: Forbidden: SubnetPool netops/same allows claims only from its own namespace netops (spec.allowedNamespaces.from: Same), not from team-a; ask its owners to allow this namespace in spec.allowedNamespaces`},
		{"Same serves its own namespace", claim("netops", "same", ""), ""},
		{"Selector serves a matching namespace", claim("team-a", "selected", ""), ""},
		{"Selector refuses another", claim("team-b", "selected", ""),
			`Subnet.ipam.subnet-operator.io "x" is invalid: spec.poolRef: Forbidden: SubnetPool netops/selected allows claims only from its own namespace netops and namespaces whose labels match its selector on the label tenant (namespace team-b has no label tenant), not from team-b; ask its owners to allow this namespace in spec.allowedNamespaces`},
		{"Selector refuses a namespace it does not know", claim("team-z", "selected", ""),
			`Subnet.ipam.subnet-operator.io "x" is invalid: spec.poolRef: Forbidden: SubnetPool netops/selected allows claims only from its own namespace netops and namespaces whose labels match its selector on the label tenant (the labels of namespace team-z are not known to the operator yet: if it was just created, retry), not from team-z; ask its owners to allow this namespace in spec.allowedNamespaces`},
		{"All serves anyone", claim("team-z", "everyone", ""), ""},
		// The overlap domain is the pool, whichever namespaces its claims
		// live in; a tenant learns the range, not another tenant's names.
		{"overlap with another tenant's claim", claim("team-a", "everyone", "10.3.2.0/25"),
			`Subnet.ipam.subnet-operator.io "x" is invalid: spec.cidr: Invalid value: "10.3.2.0/25": overlaps a range held in another namespace (10.3.2.0/24); pick a free range, or set spec.prefixLength to have one allocated`},
		{"overlap with the platform's own claim is named", claim("team-a", "everyone", "10.3.9.0/25"),
			`Subnet.ipam.subnet-operator.io "x" is invalid: spec.cidr: Invalid value: "10.3.9.0/25": overlaps Subnet netops/infra (10.3.9.0/24); pick a free range, or set spec.prefixLength to have one allocated`},
		{"a missing pool in another namespace is waited for", claim("team-a", "later", ""), ""},
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

	// The defaulter fills prefixLength from a pool in another namespace.
	s := claim("team-a", "selected", "")
	s.Spec.PrefixLength = nil
	if err := (&SubnetDefaulter{Ledger: w.ledger}).Default(withOp(admissionv1.Create), s); err != nil || s.Spec.PrefixLength == nil || *s.Spec.PrefixLength != 24 {
		t.Errorf("defaulted prefixLength %v, err %v; want 24", s.Spec.PrefixLength, err)
	}

	kid := func(namespace, parent, cidr string) *ipamv1.SubnetPool {
		p := child("kid", parent, cidr)
		p.Namespace, p.Spec.ParentRef.Namespace = namespace, "netops"
		return p
	}
	if _, err := w.poolValidator().ValidateCreate(withOp(admissionv1.Create), kid("team-a", "selected", "10.2.64.0/20")); err != nil {
		t.Errorf("child pool from an allowed namespace refused: %v", err)
	}
	_, err := w.poolValidator().ValidateCreate(withOp(admissionv1.Create), kid("team-b", "selected", "10.2.64.0/20"))
	field.ErrorMatcher{}.ByType().ByField().Test(t, field.ErrorList{field.Forbidden(field.NewPath("spec", "parentRef"), "")}, fieldErrors(t, err))
	_, err = w.poolValidator().ValidateCreate(withOp(admissionv1.Create), kid("team-a", "everyone", "10.3.2.0/23"))
	if err == nil || !strings.Contains(err.Error(), "overlaps a range held in another namespace (10.3.2.0/24) in parent SubnetPool netops/everyone") {
		t.Errorf("child pool over another tenant's range: %v", err)
	}

	// A DELETE refusal is read by whoever sent the request (which need not
	// be the pool's owners: a forged review says any namespace): it names
	// the users in the pool's namespace and counts the others.
	everyone := pool("everyone", "10.3.0.0/16")
	everyone.Namespace = "netops"
	_, err = w.poolValidator().ValidateDelete(withOp(admissionv1.Delete), everyone)
	if err == nil || strings.Contains(err.Error(), "team-b") || !strings.Contains(err.Error(), "(Subnet netops/infra, and 1 claim in other namespaces)") {
		t.Errorf("deleting a pool a tenant uses: %v", err)
	}
}

// The pool's consent is validated: a selector exactly with Selector, and
// one that parses.
func TestAllowedNamespacesRules(t *testing.T) {
	w := newWorld()
	tests := []struct {
		name    string
		allowed *ipamv1.AllowedNamespaces
		want    field.ErrorList
	}{
		{"Selector without selector", &ipamv1.AllowedNamespaces{From: ipamv1.FromSelector},
			field.ErrorList{field.Required(field.NewPath("spec", "allowedNamespaces", "selector"), "")}},
		{"All with a selector", &ipamv1.AllowedNamespaces{From: ipamv1.FromAll, Selector: &metav1.LabelSelector{}},
			field.ErrorList{field.Invalid(field.NewPath("spec", "allowedNamespaces", "selector"), nil, "")}},
		{"a bad selector", &ipamv1.AllowedNamespaces{From: ipamv1.FromSelector, Selector: &metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tenant", Operator: "Near"}}}},
			field.ErrorList{field.Invalid(field.NewPath("spec", "allowedNamespaces", "selector", "matchExpressions").Index(0).Child("operator"), nil, "")}},
		{"a good one", &ipamv1.AllowedNamespaces{From: ipamv1.FromSelector, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "true"}}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := pool("corp", "10.0.0.0/8")
			p.Spec.AllowedNamespaces = tt.allowed
			_, err := w.poolValidator().ValidateCreate(withOp(admissionv1.Create), p)
			field.ErrorMatcher{}.ByType().ByField().Test(t, tt.want, fieldErrors(t, err))
		})
	}
}

// A platform can keep root pools in its own namespaces: the default
// address space takes them only from namespaces with its label, and the
// refusal says which label is missing, not the rest of the rules.
func TestRootPoolNamespaces(t *testing.T) {
	w := tenancyWorld()
	v := w.poolValidator()
	w.ledger.SetDefaultSpaceRules(labels.SelectorFromSet(labels.Set{ipamv1.LabelRootPools: "true"}))
	w.ledger.ApplyNamespace("netops", map[string]string{"kubernetes.io/metadata.name": "netops", ipamv1.LabelRootPools: "true"}, ledger.Updated)
	root := pool("mine", "192.168.0.0/16")
	_, err := v.ValidateCreate(withOp(admissionv1.Create), root)
	want := `SubnetPool.ipam.subnet-operator.io "mine" is invalid: spec.addressSpace: Forbidden: address space default takes root pools (without parentRef) only from namespaces the platform allows, and namespace team-a lacks ipam.subnet-operator.io/root-pools=true; ask the platform team to label it, or carve this pool from an existing one with spec.parentRef`
	if err == nil || err.Error() != want {
		t.Errorf("root pool in a tenant namespace: got %v\nwant %s", err, want)
	}
	root.Namespace = "netops"
	if _, err := v.ValidateCreate(withOp(admissionv1.Create), root); err != nil {
		t.Errorf("root pool in the platform namespace: %v", err)
	}
	kid := child("kid", "selected", "10.2.128.0/20")
	kid.Spec.ParentRef.Namespace = "netops"
	if _, err := v.ValidateCreate(withOp(admissionv1.Create), kid); err != nil {
		t.Errorf("child pool in a tenant namespace: %v", err)
	}
}

// Root pools of one address space never overlap, whichever namespaces
// they are in: a tenant cannot create a root pool over the platform's
// range (and is not told the platform pool's name); a named space is the
// way to overlap on purpose, and it must exist and take the namespace.
func TestRootPoolsOfASpaceDoNotOverlap(t *testing.T) {
	w := tenancyWorld() // netops/corp holds 10.2.0.0/16 (and more) in the default space
	v := w.poolValidator()
	mine := pool("mine", "10.2.0.0/24") // team-a
	_, err := v.ValidateCreate(withOp(admissionv1.Create), mine)
	want := `SubnetPool.ipam.subnet-operator.io "mine" is invalid: spec.cidr: Invalid value: "10.2.0.0/24": overlaps a range held in another namespace (10.2.0.0/16), a root pool of address space default; pick a free range, carve this pool from that one with spec.parentRef, or put it in another address space for a deliberate overlap`
	if err == nil || err.Error() != want {
		t.Errorf("tenant root over the platform's range: got %v\nwant %s", err, want)
	}
	same := pool("again", "10.2.0.0/20")
	same.Namespace = "netops"
	_, err = v.ValidateCreate(withOp(admissionv1.Create), same)
	if err == nil || !strings.Contains(err.Error(), "overlaps SubnetPool netops/") {
		t.Errorf("root over a root of the same namespace names it: %v", err)
	}
	// Growing into another root's range is refused too.
	free := pool("free", "10.9.0.0/24")
	w.add(free)
	grown := free.DeepCopy()
	grown.Spec.CIDR = "10.8.0.0/14"
	if _, err := v.ValidateUpdate(withUpdate(free), free, grown); err != nil {
		t.Errorf("growth into free space: %v", err)
	}
	grown.Spec.CIDR = "10.0.0.0/12"
	_, err = v.ValidateUpdate(withUpdate(free), free, grown)
	field.ErrorMatcher{}.ByType().ByField().Test(t, field.ErrorList{field.Invalid(field.NewPath("spec", "cidr"), "", "")}, fieldErrors(t, err))

	// A named space: refused until it exists, then taken.
	lab := pool("lab", "10.2.0.0/24")
	lab.Spec.AddressSpace = "lab"
	_, err = v.ValidateCreate(withOp(admissionv1.Create), lab)
	field.ErrorMatcher{}.ByType().ByField().Test(t, field.ErrorList{field.Invalid(field.NewPath("spec", "addressSpace"), "", "")}, fieldErrors(t, err))
	w.ledger.ApplyAddressSpace(&ipamv1.AddressSpace{ObjectMeta: metav1.ObjectMeta{Name: "lab"},
		Spec: ipamv1.AddressSpaceSpec{RootPoolNamespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "true"}}}}, ledger.Created)
	if _, err := v.ValidateCreate(withOp(admissionv1.Create), lab); err != nil {
		t.Errorf("root pool in the lab space: %v", err)
	}
	elsewhere := lab.DeepCopy()
	elsewhere.Namespace = "team-b" // no tenant label
	_, err = v.ValidateCreate(withOp(admissionv1.Create), elsewhere)
	if err == nil || !strings.Contains(err.Error(), "namespace team-b lacks tenant=true") {
		t.Errorf("root pool in the lab space from a namespace it does not take: %v", err)
	}
}

// An update of an object stored without its reference's namespace (the
// webhooks were bypassed) that writes the object's own namespace changes
// nothing, and is not refused as a change; one into another namespace is.
func TestReferenceUpdatesCompareResolved(t *testing.T) {
	w := baseWorld()
	stored := subnet("x", "p", "10.0.3.0/24")
	stored.Spec.PoolRef.Namespace = ""
	same := stored.DeepCopy()
	same.Spec.PoolRef.Namespace = ns
	same.Labels = map[string]string{"team": "a"}
	if _, err := w.subnetValidator().ValidateUpdate(withOp(admissionv1.Update), stored, same); err != nil {
		t.Errorf("same pool, namespace written: %v", err)
	}
	moved := stored.DeepCopy()
	moved.Spec.PoolRef.Namespace = "elsewhere"
	_, err := w.subnetValidator().ValidateUpdate(withOp(admissionv1.Update), stored, moved)
	field.ErrorMatcher{}.ByType().ByField().Test(t, field.ErrorList{field.Invalid(field.NewPath("spec", "poolRef"), "", "")}, fieldErrors(t, err))

	pool := child("c", "p", "10.0.64.0/24")
	pool.Spec.ParentRef.Namespace = ""
	samePool := pool.DeepCopy()
	samePool.Spec.ParentRef.Namespace = ns
	if _, err := w.poolValidator().ValidateUpdate(withUpdate(pool), pool, samePool); err != nil {
		t.Errorf("same parent, namespace written: %v", err)
	}
}

// Whether a pool is shared is read after the requester's namespace has
// caught up: a platform pool applied a moment ago together with a tenant's
// claim on it (kubectl apply of a directory) must not be caught up with in
// the platform namespace only, or the tenant's claim is missed.
func TestSharedPoolCaughtUpAcrossNamespaces(t *testing.T) {
	w := newWorld()
	w.ledger.ApplyNamespace("team-b", nil, ledger.Created)
	corp := pool("corp", "10.9.0.0/16")
	corp.Namespace = "netops"
	corp.Spec.AllowedNamespaces = &ipamv1.AllowedNamespaces{From: ipamv1.FromAll}
	tenant := subnet("b", "corp", "10.9.1.0/24")
	tenant.Namespace, tenant.Spec.PoolRef.Namespace = "team-b", "netops"
	// Both are acknowledged by the API server; this replica's informers
	// deliver each only once a read covers it: the pool with a read of
	// its namespace, the tenant's Subnet with a read of every namespace.
	// A barrier that never reads across namespaces never sees the Subnet.
	w.api.add(corp)
	w.api.add(tenant)
	var deliverPool, deliverSubnet sync.Once
	w.api.onRead = func(namespace string) {
		if namespace == "netops" || namespace == "" {
			deliverPool.Do(func() { w.ledger.ApplyPool(corp, ledger.Created, nil) })
		}
		if namespace == "" {
			deliverSubnet.Do(func() { w.ledger.ApplySubnet(tenant, ledger.Created, nil) })
		}
	}
	own := subnet("a", "corp", "10.9.1.0/25")
	own.Namespace, own.Spec.PoolRef.Namespace = "netops", "netops"
	_, err := w.subnetValidator().ValidateCreate(withOp(admissionv1.Create), own)
	if err == nil || !strings.Contains(err.Error(), "overlaps a range held in another namespace (10.9.1.0/24)") {
		t.Fatalf("an overlap with a claim acknowledged in another namespace: %v", err)
	}
}

// A namespace's address-space label puts its new root pools in that space
// (a lab's private plan); child pools and explicit spaces are left alone.
func TestNamespaceLabelNamesTheAddressSpaceOfNewRoots(t *testing.T) {
	d := poolDefaulter()
	d.Ledger.ApplyNamespace(ns, map[string]string{ipamv1.LabelAddressSpace: "lab"}, ledger.Updated)
	root := pool("r", "10.0.0.0/16")
	if err := d.Default(withOp(admissionv1.Create), root); err != nil || root.Spec.AddressSpace != "lab" {
		t.Errorf("root: %q, %v", root.Spec.AddressSpace, err)
	}
	named := pool("n", "10.0.0.0/16")
	named.Spec.AddressSpace = "other"
	if err := d.Default(withOp(admissionv1.Create), named); err != nil || named.Spec.AddressSpace != "other" {
		t.Errorf("explicit space: %q, %v", named.Spec.AddressSpace, err)
	}
	kid := child("k", "r", "10.0.1.0/24")
	if err := d.Default(withOp(admissionv1.Create), kid); err != nil || kid.Spec.AddressSpace != "" {
		t.Errorf("child: %q, %v", kid.Spec.AddressSpace, err)
	}
}

// A namespace labelled a moment ago, whose label this replica has not
// seen, is not refused: the refusal is checked against the API server.
func TestRootPoolInANamespaceJustLabelled(t *testing.T) {
	w := tenancyWorld()
	v := w.poolValidator()
	w.ledger.SetDefaultSpaceRules(labels.SelectorFromSet(labels.Set{ipamv1.LabelRootPools: "true"}))
	w.api.namespaces = map[string]map[string]string{ns: {ipamv1.LabelRootPools: "true"}}
	if _, err := v.ValidateCreate(withOp(admissionv1.Create), pool("mine", "192.168.0.0/16")); err != nil {
		t.Errorf("root pool in a namespace labelled a moment ago: %v", err)
	}
}
