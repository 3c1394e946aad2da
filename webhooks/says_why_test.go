package webhooks

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// A prefixLength that no block of the pool can ever have is refused with the
// lengths that would do; one that fits the pool's range but no free block
// now is admitted with a warning that names the largest free block.

// reservedWorld: /18 pools with a /24 reserved, so no /18 of them is ever
// free (one of them has /18 as its default length), a pool reserved whole,
// and a /18 pool holding a /24.
func reservedWorld() *world {
	rsv := pool("rsv", "10.41.0.0/18")
	rsv.Spec.Reserved = []string{"10.41.63.0/24"}
	rsv.Spec.MaxPrefixLength = ptr.To[int32](28)
	all := pool("all", "10.42.0.0/24")
	all.Spec.Reserved = []string{"10.42.0.0/25", "10.42.0.128/25"}
	rsvDefault := pool("rsvdefault", "10.43.0.0/18")
	rsvDefault.Spec.Reserved, rsvDefault.Spec.DefaultPrefixLength = []string{"10.43.0.0/24"}, ptr.To[int32](18)
	return newWorld(rsv, all, rsvDefault, serving(pool("dc", "10.40.0.0/18")), allocated(subnet("web", "dc", "10.40.0.0/24"), "10.40.0.0/24"))
}

// serving gives a root pool the status of one that serves its range: the
// free-space map the warning reads is built for such a pool.
func serving(p *ipamv1.SubnetPool) *ipamv1.SubnetPool {
	p.Status.CIDR = p.Spec.CIDR
	p.Status.Conditions = []metav1.Condition{{Type: ipamv1.ConditionReady, Status: metav1.ConditionTrue, Reason: ipamv1.ReasonAvailable}}
	return p
}

func TestPrefixLengthThatCanNeverFitIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    *ipamv1.Subnet
		want string
	}{
		{"every /18 overlaps a reserved range", dynamicSubnet("big", "rsv", 18),
			`Subnet.ipam.subnet-operator.io "big" is invalid: spec.prefixLength: Invalid value: 18: no /18 of SubnetPool team-a/rsv (10.41.0.0/18) is clear of its reserved ranges (10.41.63.0/24): use 19 to 28`},
		{"shorter than the pool: the lengths offered leave out the reserved ones", dynamicSubnet("big", "rsv", 17),
			`Subnet.ipam.subnet-operator.io "big" is invalid: spec.prefixLength: Invalid value: 17: prefix length 17 does not fit SubnetPool team-a/rsv (10.41.0.0/18): use 19 to 28`},
		{"longer than maxPrefixLength", dynamicSubnet("tiny", "rsv", 30),
			`Subnet.ipam.subnet-operator.io "tiny" is invalid: spec.prefixLength: Invalid value: 30: prefix length 30 is longer than maxPrefixLength 28 of SubnetPool team-a/rsv: use 19 to 28`},
		{"another family's length", dynamicSubnet("v6", "rsv", 64),
			`Subnet.ipam.subnet-operator.io "v6" is invalid: spec.prefixLength: Invalid value: 64: prefix length 64 does not fit SubnetPool team-a/rsv (10.41.0.0/18): use 19 to 28`},
		{"all of it reserved", dynamicSubnet("any", "all", 28),
			`Subnet.ipam.subnet-operator.io "any" is invalid: spec.prefixLength: Invalid value: 28: no /28 of SubnetPool team-a/all (10.42.0.0/24) is clear of its reserved ranges (10.42.0.0/25, 10.42.0.128/25): it allows no prefix length`},
		{"the pool's default length, ruled out", subnet("deflt", "rsvdefault", ""),
			`Subnet.ipam.subnet-operator.io "deflt" is invalid: spec.prefixLength: Invalid value: 18: no /18 of SubnetPool team-a/rsvdefault (10.43.0.0/18) is clear of its reserved ranges (10.43.0.0/24): use 19 to 32`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := reservedWorld().subnetValidator().ValidateCreate(withOp(admissionv1.Create), tc.s)
			if err == nil || err.Error() != tc.want {
				t.Errorf("\n got: %v\nwant: %s", err, tc.want)
			}
		})
	}
	// A length clear of the reserved ranges is admitted.
	if _, err := reservedWorld().subnetValidator().ValidateCreate(withOp(admissionv1.Create), dynamicSubnet("half", "rsv", 19)); err != nil {
		t.Errorf("a /19 of a /18 whose top /24 is reserved: %v", err)
	}
}

func TestWaitingForSpaceWarnsWithTheLargestFreeBlock(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    *ipamv1.Subnet
		want []string
	}{
		{"no /18 free now", dynamicSubnet("big", "dc", 18),
			[]string{"no /18 is free in team-a/dc now: the largest free block is 10.40.32.0/19; this Subnet waits (PoolExhausted) until space frees"}},
		{"a /19 is free", dynamicSubnet("half", "dc", 19), nil},
		{"an explicit range: the overlap check judges it", subnet("x", "dc", "10.40.32.0/19"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			warnings, err := reservedWorld().subnetValidator().ValidateCreate(withOp(admissionv1.Create), tc.s)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, []string(warnings)); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}

	// A full pool: nothing is free.
	w := newWorld(serving(pool("full", "10.50.0.0/24")), allocated(subnet("all", "full", "10.50.0.0/24"), "10.50.0.0/24"))
	warnings, err := w.subnetValidator().ValidateCreate(withOp(admissionv1.Create), dynamicSubnet("more", "full", 28))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"nothing is free in team-a/full now; this Subnet waits (PoolExhausted) until space frees"}
	if diff := cmp.Diff(want, []string(warnings)); diff != "" {
		t.Errorf("a full pool: warnings (-want +got):\n%s", diff)
	}
}

// An edit of an immutable field gets one message per field, saying what to
// do instead (the webhook sees such an update when it comes through
// v1alpha1 with a reference that moved; its words are the CRD rules').
func TestSubnetUpdateSaysWhatToDoInstead(t *testing.T) {
	explicit := allocated(subnet("web", "p", "10.0.1.0/24"), "10.0.1.0/24")
	dynamic := allocated(dynamicSubnet("dyn", "p", 24), "10.0.2.0/24")
	dynamic.Spec.CIDR = "10.0.2.0/24"
	for _, tc := range []struct {
		name   string
		old    *ipamv1.Subnet
		mutate func(*ipamv1.Subnet)
		want   string
	}{
		{"cidr", explicit, func(s *ipamv1.Subnet) { s.Spec.CIDR = "10.0.3.0/24" },
			`Subnet.ipam.subnet-operator.io "web" is invalid: spec.cidr: Invalid value: "10.0.3.0/24": cidr is immutable: a Subnet keeps the range it claims (10.0.1.0/24) for its lifetime; to claim another, delete this Subnet and create a new one (kubectl ipam next -n team-a p shows what the pool would allocate)`},
		{"prefixLength", dynamic, func(s *ipamv1.Subnet) { s.Spec.PrefixLength = ptr.To[int32](23) },
			`Subnet.ipam.subnet-operator.io "dyn" is invalid: spec.prefixLength: Invalid value: 23: prefixLength is immutable: a Subnet keeps the length it asked for (/24) for its lifetime; to claim another, delete this Subnet and create a new one (kubectl ipam next -n team-a p --length 23 shows what the pool would allocate)`},
		{"poolRef", explicit, func(s *ipamv1.Subnet) { s.Spec.PoolRef.Name = "other" },
			`Subnet.ipam.subnet-operator.io "web" is invalid: spec.poolRef: Invalid value: "team-a/other": is immutable: a Subnet claims from one pool (team-a/p) for its lifetime; to claim from another, delete this Subnet and create a new one (kubectl ipam next -n team-a other shows what that pool would allocate)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.old.DeepCopy()
			tc.mutate(s)
			_, err := baseWorld().subnetValidator().ValidateUpdate(withOp(admissionv1.Update), tc.old, s)
			if err == nil || err.Error() != tc.want {
				t.Errorf("\n got: %v\nwant: %s", err, tc.want)
			}
		})
	}
}
