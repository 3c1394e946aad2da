package webhooks

import (
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// delegatedPool is a root pool asking the hub's platform/plan for a /16,
// with cidr as recorded (empty: not granted yet).
func delegatedPool(cidr string) *ipamv1.SubnetPool {
	p := pool("pods", cidr)
	p.Spec.Delegation = &ipamv1.PoolDelegation{PoolRef: ipamv1.PoolReference{Namespace: "platform", Name: "plan"}, PrefixLength: ptr.To[int32](16)}
	return p
}

// A delegated pool needs no cidr until the hub grants one; the grant is
// recorded once, and neither it nor the delegation changes after: what an
// update through v1alpha1 (which has no delegation field) could try.
func TestDelegatedPoolRules(t *testing.T) {
	w := poolWorld()
	if _, err := w.poolValidator().ValidateCreate(withOp(admissionv1.Create), delegatedPool("")); err != nil {
		t.Errorf("a delegated pool without cidr: %v", err)
	}
	cidr := field.NewPath("spec", "cidr")
	delegation := field.NewPath("spec", "delegation")
	tests := []struct {
		name     string
		old      *ipamv1.SubnetPool
		mutate   func(*ipamv1.SubnetPool)
		want     field.ErrorList
		isCreate bool
	}{
		{name: "the grant recorded", old: delegatedPool(""), mutate: func(p *ipamv1.SubnetPool) { p.Spec.CIDR = "10.42.0.0/16" }},
		{name: "the recorded cidr changed", old: delegatedPool("10.42.0.0/16"), mutate: func(p *ipamv1.SubnetPool) { p.Spec.CIDR = "10.43.0.0/16" },
			want: field.ErrorList{field.Invalid(cidr, "", "")}},
		{name: "the recorded cidr removed", old: delegatedPool("10.42.0.0/16"), mutate: func(p *ipamv1.SubnetPool) { p.Spec.CIDR = "" },
			want: field.ErrorList{field.Invalid(cidr, "", "")}},
		{name: "the delegation moved to another hub pool", old: delegatedPool(""), mutate: func(p *ipamv1.SubnetPool) { p.Spec.Delegation.PoolRef.Name = "other" },
			want: field.ErrorList{field.Invalid(delegation, "", "")}},
		{name: "the delegation removed", old: delegatedPool("10.42.0.0/16"), mutate: func(p *ipamv1.SubnetPool) { p.Spec.Delegation = nil },
			want: field.ErrorList{field.Invalid(delegation, "", "")}},
		{name: "a delegation added to a local root", old: pool("local", "10.50.0.0/16"), mutate: func(p *ipamv1.SubnetPool) {
			p.Spec.Delegation = delegatedPool("").Spec.Delegation
		}, want: field.ErrorList{field.Invalid(delegation, "", "")}},
		{name: "neither a length nor a cidr", mutate: func(p *ipamv1.SubnetPool) { p.Spec.Delegation.PrefixLength = nil }, isCreate: true,
			want: field.ErrorList{field.Required(delegation.Child("prefixLength"), "")}},
		{name: "no hub namespace", mutate: func(p *ipamv1.SubnetPool) { p.Spec.Delegation.PoolRef.Namespace = "" }, isCreate: true,
			want: field.ErrorList{field.Required(delegation.Child("poolRef", "namespace"), "")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.isCreate {
				p := delegatedPool("")
				tt.mutate(p)
				_, err := w.poolValidator().ValidateCreate(withOp(admissionv1.Create), p)
				field.ErrorMatcher{}.ByType().ByField().Test(t, tt.want, fieldErrors(t, err))
				return
			}
			p := tt.old.DeepCopy()
			tt.mutate(p)
			_, err := w.poolValidator().ValidateUpdate(withOp(admissionv1.Update), tt.old, p)
			field.ErrorMatcher{}.ByType().ByField().Test(t, tt.want, fieldErrors(t, err))
		})
	}
}
