package webhooks

import (
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
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
	if err := (&SubnetPoolDefaulter{}).Default(withOp(admissionv1.Create), p); err != nil {
		t.Fatal(err)
	}
	if want := (ipamv1.PoolReference{Name: "p", Namespace: ns}); *p.Spec.ParentRef != want {
		t.Errorf("create: parentRef %+v, want %+v", *p.Spec.ParentRef, want)
	}
	replacePool := p.DeepCopy()
	replacePool.Spec.ParentRef.Namespace = ""
	if err := (&SubnetPoolDefaulter{}).Default(withUpdate(p), replacePool); err != nil {
		t.Fatal(err)
	}
	if *replacePool.Spec.ParentRef != *p.Spec.ParentRef {
		t.Errorf("update without the namespace: parentRef %+v, want the stored %+v", *replacePool.Spec.ParentRef, *p.Spec.ParentRef)
	}
}

// Validation refuses a reference that names no pool, one without a
// namespace (defaulting was skipped), and one into another namespace,
// saying what to write or why not.
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
		{"another namespace", ref("corp", "netops"), `Subnet.ipam.subnet-operator.io "x" is invalid: spec.poolRef.namespace: Forbidden: SubnetPool netops/corp allows claims only from its own namespace netops, not from team-a: references across namespaces are not served yet`},
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

	p := child("c", "corp", "10.0.64.0/24")
	p.Spec.ParentRef.Namespace = "netops"
	_, err := w.poolValidator().ValidateCreate(withOp(admissionv1.Create), p)
	field.ErrorMatcher{}.ByType().ByField().Test(t, field.ErrorList{field.Forbidden(field.NewPath("spec", "parentRef", "namespace"), "")}, fieldErrors(t, err))
	// Naming itself through its own namespace is still naming itself.
	self := child("c", "c", "10.0.64.0/24")
	_, err = w.poolValidator().ValidateCreate(withOp(admissionv1.Create), self)
	field.ErrorMatcher{}.ByType().ByField().Test(t, field.ErrorList{field.Invalid(field.NewPath("spec", "parentRef"), "", "")}, fieldErrors(t, err))
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
