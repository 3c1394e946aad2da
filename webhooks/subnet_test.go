package webhooks

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
)

// baseWorld: a /16 pool with a default length, bounds and a reserved /24,
// an explicit Subnet, an allocated dynamic one, and a child pool.
func baseWorld() *world {
	p := pool("p", "10.0.0.0/16")
	p.Spec.DefaultPrefixLength, p.Spec.MinPrefixLength, p.Spec.MaxPrefixLength = ptr.To[int32](24), ptr.To[int32](20), ptr.To[int32](28)
	p.Spec.Reserved = []string{"10.0.255.0/24"}
	doomed := pool("doomed", "10.1.0.0/16")
	doomed.DeletionTimestamp = ptr.To(objectMeta("").CreationTimestamp)
	return newWorld(p, doomed, pool("v6", "2001:db8::/48"),
		subnet("web", "p", "10.0.1.0/24"),
		allocated(dynamicSubnet("dyn", "p", 24), "10.0.2.0/24"),
		child("team", "p", "10.0.128.0/17"),
	)
}

func TestSubnetCreateRules(t *testing.T) {
	tests := []struct {
		name string
		s    *ipamv1.Subnet
		want field.ErrorList
	}{
		{name: "a free explicit range", s: subnet("ok", "p", "10.0.3.0/24")},
		{name: "adjacent to others", s: subnet("ok", "p", "10.0.0.0/24")},
		{name: "a length", s: dynamicSubnet("ok", "p", 26)},
		{name: "the pool's default", s: subnet("ok", "p", "")},
		{name: "IPv6", s: subnet("ok", "v6", "2001:db8:0:1::/64")},
		{name: "no namespace", s: func() *ipamv1.Subnet { s := subnet("x", "p", "10.0.3.0/24"); s.Namespace = ""; return s }(),
			want: field.ErrorList{field.Required(field.NewPath("metadata", "namespace"), "")}},
		{name: "no poolRef", s: subnet("x", "", "10.0.3.0/24"),
			want: field.ErrorList{field.Required(field.NewPath("spec", "poolRef", "name"), "")}},
		{name: "blank poolRef", s: subnet("x", "  ", "10.0.3.0/24"),
			want: field.ErrorList{field.Required(field.NewPath("spec", "poolRef", "name"), "")}},
		{name: "host bits", s: subnet("x", "p", "10.0.3.1/24"),
			want: field.ErrorList{field.Invalid(field.NewPath("spec", "cidr"), "", "")}},
		{name: "malformed", s: subnet("x", "p", "10.0.3/24"),
			want: field.ErrorList{field.Invalid(field.NewPath("spec", "cidr"), "", "")}},
		{name: "cidr and a prefixLength it disagrees with", s: func() *ipamv1.Subnet {
			s := subnet("x", "p", "10.0.3.0/24")
			s.Spec.PrefixLength = ptr.To[int32](25)
			return s
		}(),
			want: field.ErrorList{field.Invalid(field.NewPath("spec", "prefixLength"), "", "")}},
		// A restored prefixLength claim with its recorded range: valid.
		{name: "cidr recorded on a prefixLength claim", s: func() *ipamv1.Subnet {
			s := subnet("x", "p", "10.0.3.0/24")
			s.Spec.PrefixLength = ptr.To[int32](24)
			return s
		}()},
		{name: "other family", s: subnet("x", "p", "2001:db8::/64"),
			want: field.ErrorList{field.Invalid(field.NewPath("spec", "cidr"), "", "")}},
		{name: "outside the pool", s: subnet("x", "p", "10.9.0.0/24"),
			want: field.ErrorList{field.Invalid(field.NewPath("spec", "cidr"), "", "")}},
		{name: "on a reserved range", s: subnet("x", "p", "10.0.255.128/25"),
			want: field.ErrorList{field.Invalid(field.NewPath("spec", "cidr"), "", "")}},
		{name: "at minPrefixLength", s: subnet("x", "p", "10.0.16.0/20")},
		{name: "explicit shorter than minPrefixLength", s: subnet("x", "p", "10.0.32.0/19"),
			want: field.ErrorList{field.Invalid(field.NewPath("spec", "cidr"), "", "")}},
		{name: "length longer than maxPrefixLength", s: dynamicSubnet("x", "p", 29),
			want: field.ErrorList{field.Invalid(field.NewPath("spec", "prefixLength"), "", "")}},
		{name: "length out of 0-128", s: dynamicSubnet("x", "p", 129),
			want: field.ErrorList{field.Invalid(field.NewPath("spec", "prefixLength"), "", "")}},
		{name: "equal to an explicit Subnet", s: subnet("x", "p", "10.0.1.0/24"),
			want: field.ErrorList{field.Invalid(field.NewPath("spec", "cidr"), "", "")}},
		{name: "inside an allocated Subnet", s: subnet("x", "p", "10.0.2.128/25"),
			want: field.ErrorList{field.Invalid(field.NewPath("spec", "cidr"), "", "")}},
		{name: "containing Subnets", s: subnet("x", "p", "10.0.0.0/20"),
			want: field.ErrorList{field.Invalid(field.NewPath("spec", "cidr"), "", "")}},
		{name: "inside a child pool", s: subnet("x", "p", "10.0.200.0/24"),
			want: field.ErrorList{field.Invalid(field.NewPath("spec", "cidr"), "", "")}},
		{name: "pool being deleted", s: subnet("x", "doomed", "10.1.0.0/24"),
			want: field.ErrorList{field.Invalid(field.NewPath("spec", "poolRef"), "", "")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := baseWorld()
			_, err := w.subnetValidator().ValidateCreate(withOp(admissionv1.Create), tt.s)
			field.ErrorMatcher{}.ByType().ByField().Test(t, tt.want, fieldErrors(t, err))
		})
	}
}

// The message is the product: the common mistakes, in full, as kubectl
// prints them after "admission webhook ... denied the request: ".
func TestSubnetMessages(t *testing.T) {
	golden := []struct {
		s    *ipamv1.Subnet
		want string
	}{
		{subnet("web2", "p", "10.0.1.1/24"),
			`Subnet.ipam.subnet-operator.io "web2" is invalid: spec.cidr: Invalid value: "10.0.1.1/24": host bits set; did you mean "10.0.1.0/24"?`},
		{subnet("web2", "p", "10.0.1.0/24"),
			`Subnet.ipam.subnet-operator.io "web2" is invalid: spec.cidr: Invalid value: "10.0.1.0/24": overlaps Subnet team-a/web (10.0.1.0/24); pick a free range, or set spec.prefixLength to have one allocated`},
		{subnet("wide", "p", "10.0.0.0/20"),
			`Subnet.ipam.subnet-operator.io "wide" is invalid: spec.cidr: Invalid value: "10.0.0.0/20": overlaps Subnet team-a/web (10.0.1.0/24), Subnet team-a/dyn (10.0.2.0/24); pick a free range, or set spec.prefixLength to have one allocated`},
		{subnet("far", "p", "192.168.0.0/24"),
			`Subnet.ipam.subnet-operator.io "far" is invalid: spec.cidr: Invalid value: "192.168.0.0/24": lies outside SubnetPool team-a/p (10.0.0.0/16)`},
		{subnet("gw", "p", "10.0.255.0/26"),
			`Subnet.ipam.subnet-operator.io "gw" is invalid: spec.cidr: Invalid value: "10.0.255.0/26": overlaps reserved range 10.0.255.0/24 of SubnetPool team-a/p`},
		{subnet("mixed", "p", "2001:db8::/64"),
			`Subnet.ipam.subnet-operator.io "mixed" is invalid: spec.cidr: Invalid value: "2001:db8::/64": is IPv6 but SubnetPool team-a/p (10.0.0.0/16) is IPv4`},
		{subnet("mapped", "p", "::ffff:10.0.0.0/104"),
			`Subnet.ipam.subnet-operator.io "mapped" is invalid: spec.cidr: Invalid value: "::ffff:10.0.0.0/104": IPv4-mapped IPv6 is not allowed; write the IPv4 form; did you mean "10.0.0.0/8"?`},
		{dynamicSubnet("tiny", "p", 30),
			`Subnet.ipam.subnet-operator.io "tiny" is invalid: spec.prefixLength: Invalid value: 30: prefix length 30 is longer than maxPrefixLength 28 of SubnetPool team-a/p: use 20 to 28`},
		{subnet("orphan", "", "10.0.9.0/24"),
			`Subnet.ipam.subnet-operator.io "orphan" is invalid: spec.poolRef.name: Required value: name the SubnetPool to claim from`},
	}
	for _, g := range golden {
		_, err := baseWorld().subnetValidator().ValidateCreate(withOp(admissionv1.Create), g.s)
		if err == nil || err.Error() != g.want {
			t.Errorf("%s:\n got: %v\nwant: %s", g.s.Name, err, g.want)
		}
	}
}

func TestSubnetBeforeItsPoolIsAdmittedWithAWarning(t *testing.T) {
	w := newWorld()
	warnings, err := w.subnetValidator().ValidateCreate(withOp(admissionv1.Create), dynamicSubnet("early", "later", 24))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"SubnetPool team-a/later does not exist yet; the Subnet waits (Ready=False, reason PoolNotFound) until it is created"}
	if diff := cmp.Diff(want, []string(warnings)); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
}

func TestSubnetUpdateRules(t *testing.T) {
	old := allocated(subnet("web", "p", "10.0.1.0/24"), "10.0.1.0/24")
	tests := []struct {
		name   string
		mutate func(*ipamv1.Subnet)
		want   field.ErrorList
	}{
		{name: "status only", mutate: func(s *ipamv1.Subnet) { s.Status.Addresses = "256" }},
		{name: "labels", mutate: func(s *ipamv1.Subnet) { s.Labels = map[string]string{"team": "a"} }},
		{name: "poolRef", mutate: func(s *ipamv1.Subnet) { s.Spec.PoolRef = ipamv1.PoolReference{Name: "other"} },
			want: field.ErrorList{field.Invalid(field.NewPath("spec", "poolRef"), "", "")}},
		{name: "cidr", mutate: func(s *ipamv1.Subnet) { s.Spec.CIDR = "10.0.3.0/24" },
			want: field.ErrorList{field.Invalid(field.NewPath("spec", "cidr"), "", "")}},
		{name: "cidr to prefixLength", mutate: func(s *ipamv1.Subnet) { s.Spec.CIDR, s.Spec.PrefixLength = "", ptr.To[int32](24) },
			want: field.ErrorList{field.Invalid(field.NewPath("spec", "cidr"), "", ""), field.Invalid(field.NewPath("spec", "prefixLength"), "", "")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := old.DeepCopy()
			tt.mutate(s)
			_, err := baseWorld().subnetValidator().ValidateUpdate(withOp(admissionv1.Update), old, s)
			field.ErrorMatcher{}.ByType().ByField().Test(t, tt.want, fieldErrors(t, err))
		})
	}
}

// Whatever the defaulter produces from a valid request passes validation,
// and it is deterministic.
func TestDefaultedSubnetsPassValidation(t *testing.T) {
	w := baseWorld()
	d := &SubnetDefaulter{Ledger: w.ledger}
	for _, s := range []*ipamv1.Subnet{
		subnet("plain", "p", ""),
		subnet("upper", "v6", "2001:DB8:0:5::/64"),
		subnet("zeros", "v6", "2001:0db8:0000:0006::/64"),
		dynamicSubnet("len", "p", 25),
		subnet("missing-pool", "nowhere", ""),
	} {
		first, second := s.DeepCopy(), s.DeepCopy()
		for _, obj := range []*ipamv1.Subnet{first, second} {
			if err := d.Default(withOp(admissionv1.Create), obj); err != nil {
				t.Fatal(err)
			}
		}
		if diff := cmp.Diff(first, second); diff != "" {
			t.Errorf("%s: defaulting is not deterministic:\n%s", s.Name, diff)
		}
		if _, err := w.subnetValidator().ValidateCreate(withOp(admissionv1.Create), first); err != nil {
			t.Errorf("%s: defaulted object fails validation: %v", s.Name, err)
		}
	}
	s := subnet("plain", "p", "")
	_ = d.Default(withOp(admissionv1.Create), s)
	if s.Spec.PrefixLength == nil || *s.Spec.PrefixLength != 24 {
		t.Errorf("prefixLength not defaulted from the pool: %v", s.Spec.PrefixLength)
	}
	// On update the claim is not touched, even if the pool now has a default.
	s = subnet("plain", "p", "")
	_ = d.Default(withOp(admissionv1.Update), s)
	if s.Spec.PrefixLength != nil {
		t.Error("prefixLength defaulted on update")
	}
}

// Invariant 2: a create that the API server has stored is seen by the next
// admission even if the informer has not delivered it yet. The barrier reads
// the namespace's count from the API server, waits for the ledger to reach
// it, and only then decides.
func TestBackToBackCreatesWaitForTheLedger(t *testing.T) {
	w := baseWorld()
	first := subnet("first", "p", "10.0.7.0/24")
	w.api.add(first) // stored and returned to its client; not delivered yet
	go func() {
		time.Sleep(50 * time.Millisecond)
		w.ledger.ApplySubnet(first, ledger.Created, nil) // the informer, late
	}()
	start := time.Now()
	_, err := w.subnetValidator().ValidateCreate(withOp(admissionv1.Create), subnet("second", "p", "10.0.7.128/25"))
	if err == nil || !strings.Contains(err.Error(), "overlaps Subnet team-a/first") {
		t.Fatalf("the second create was not rejected: %v", err)
	}
	if waited := time.Since(start); waited < 40*time.Millisecond {
		t.Errorf("decided after %s, before the ledger could have caught up", waited)
	}
}

// If the ledger cannot catch up in time, the request is refused with a
// Retry-After (clients retry it by themselves), within the bound, and
// counted; it is never decided on the stale view.
func TestBarrierTimeoutRefusesWithRetry(t *testing.T) {
	w := baseWorld()
	w.api.add(subnet("lost", "p", "10.0.8.0/24")) // never delivered
	v := &SubnetValidator{Ledger: w.ledger, fresh: w.fresh(100 * time.Millisecond)}
	before := testutil.ToFloat64(staleDecisions.WithLabelValues("Subnet"))
	errorsBefore := testutil.ToFloat64(admissionDecisions.WithLabelValues("Subnet", "CREATE", "error", reasonNotCaughtUp))
	start := time.Now()
	_, err := v.ValidateCreate(withOp(admissionv1.Create), subnet("next", "p", "10.0.9.0/24"))
	var status apierrors.APIStatus
	if !apierrors.IsTimeout(err) || !errors.As(err, &status) || status.Status().Details.RetryAfterSeconds != 1 {
		t.Fatalf("want a Timeout with Retry-After, got %v", err)
	}
	if !strings.Contains(err.Error(), "did not catch up with the API server within 100ms") {
		t.Errorf("message: %v", err)
	}
	if waited := time.Since(start); waited > 2*time.Second {
		t.Errorf("waited %s", waited)
	}
	if after := testutil.ToFloat64(staleDecisions.WithLabelValues("Subnet")); after != before+1 {
		t.Errorf("stale views %v -> %v", before, after)
	}
	if after := testutil.ToFloat64(admissionDecisions.WithLabelValues("Subnet", "CREATE", "error", reasonNotCaughtUp)); after != errorsBefore+1 {
		t.Errorf("not_caught_up errors %v -> %v", errorsBefore, after)
	}
}

func TestUnsyncedLedgerAsksToRetry(t *testing.T) {
	l := ledger.New() // never synced
	v := &SubnetValidator{Ledger: l, fresh: newFreshness(&fakeAPI{}, l, time.Second, 50*time.Millisecond)}
	_, err := v.ValidateCreate(withOp(admissionv1.Create), subnet("x", "p", "10.0.0.0/24"))
	if !apierrors.IsTimeout(err) || !strings.Contains(err.Error(), "still loading") {
		t.Fatalf("want a Timeout asking to retry, got %v", err)
	}
}

// Two overlapping explicit Subnets created one after the other before their
// pool exists: the second is refused, since the first claims its range the
// moment the pool appears.
func TestOverlapsWithClaimsWaitingForTheirPool(t *testing.T) {
	w := newWorld(subnet("first", "later", "10.50.0.0/24"))
	_, err := w.subnetValidator().ValidateCreate(withOp(admissionv1.Create), subnet("second", "later", "10.50.0.128/25"))
	want := `Subnet.ipam.subnet-operator.io "second" is invalid: spec.cidr: Invalid value: "10.50.0.128/25": overlaps Subnet team-a/first (10.50.0.0/24); pick a free range, or set spec.prefixLength to have one allocated`
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
	warnings, err := w.subnetValidator().ValidateCreate(withOp(admissionv1.Create), subnet("third", "later", "10.50.1.0/24"))
	if err != nil || len(warnings) != 1 {
		t.Errorf("a free range before the pool: %v, warnings %v", err, warnings)
	}
}

// A pool's name may be longer than a label value; its Subnets are created
// like any other, with no label the user did not write.
func TestLongPoolNames(t *testing.T) {
	long := strings.Repeat("a", 70)
	w := newWorld(pool(long, "10.60.0.0/16"))
	s := dynamicSubnet("s", long, 24)
	if err := (&SubnetDefaulter{Ledger: w.ledger}).Default(withOp(admissionv1.Create), s); err != nil {
		t.Fatal(err)
	}
	if len(s.Labels) != 0 {
		t.Errorf("labels %v", s.Labels)
	}
	if _, err := w.subnetValidator().ValidateCreate(withOp(admissionv1.Create), s); err != nil {
		t.Errorf("create: %v", err)
	}
}

// A pool reference must be a name a pool can have.
func TestPoolRefsAreNames(t *testing.T) {
	w := baseWorld()
	_, err := w.subnetValidator().ValidateCreate(withOp(admissionv1.Create), dynamicSubnet("x", "Team_Pool", 24))
	want := `Subnet.ipam.subnet-operator.io "x" is invalid: spec.poolRef.name: Invalid value: "Team_Pool": must be the name of a SubnetPool: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
	_, err = w.poolValidator().ValidateCreate(withOp(admissionv1.Create), child("c", "Parent", "10.0.0.0/24"))
	field.ErrorMatcher{}.ByType().ByField().Test(t, field.ErrorList{field.Invalid(field.NewPath("spec", "parentRef", "name"), "", "")}, fieldErrors(t, err))
}

// A Subnet stored with a non-canonical cidr (the webhook was bypassed) can
// still have its metadata changed: the defaulter leaves a stored spec alone.
func TestSubnetUpdateKeepsStoredText(t *testing.T) {
	stored := subnet("v6", "v6", "2001:DB8::/64")
	update := stored.DeepCopy()
	update.Labels = map[string]string{"team": "a"}
	if err := (&SubnetDefaulter{Ledger: baseWorld().ledger}).Default(withOp(admissionv1.Update), update); err != nil {
		t.Fatal(err)
	}
	if update.Spec.CIDR != "2001:DB8::/64" {
		t.Errorf("spec.cidr rewritten to %q on update", update.Spec.CIDR)
	}
	if _, err := baseWorld().subnetValidator().ValidateUpdate(withOp(admissionv1.Update), stored, update); err != nil {
		t.Errorf("update: %v", err)
	}
}

func TestAdmissionMetric(t *testing.T) {
	w := baseWorld()
	counter := admissionDecisions.WithLabelValues("Subnet", "CREATE", "denied", reasonOverlap)
	before := testutil.ToFloat64(counter)
	_, _ = w.subnetValidator().ValidateCreate(withOp(admissionv1.Create), subnet("x", "p", "10.0.1.0/24"))
	if after := testutil.ToFloat64(counter); after != before+1 {
		t.Errorf("denials by overlap %v -> %v", before, after)
	}
}

// The mutating webhook runs before the CRD schema, so it rejects a
// malformed create itself, with the message that says what to write.
func TestDefaulterRejectsMalformedCreates(t *testing.T) {
	d := &SubnetDefaulter{Ledger: baseWorld().ledger}
	err := d.Default(withOp(admissionv1.Create), subnet("x", "p", "10.0.0.1/24"))
	want := `Subnet.ipam.subnet-operator.io "x" is invalid: spec.cidr: Invalid value: "10.0.0.1/24": host bits set; did you mean "10.0.0.0/24"?`
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
	p := pool("x", "010.0.0.0/8")
	err = poolDefaulter().Default(withOp(admissionv1.Create), p)
	want = `SubnetPool.ipam.subnet-operator.io "x" is invalid: spec.cidr: Invalid value: "010.0.0.0/8": leading zeros are not allowed in IPv4 addresses (they are read as octal by some tools); did you mean "10.0.0.0/8"?`
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

// A Subnet created before its pool named neither field; the controller
// recorded its range and the range's length together. A replace with its
// manifest (neither field) keeps both, and passes validation; the record
// itself passes too, but not a length other than the held range's.
func TestNeitherFieldRecordAndReplace(t *testing.T) {
	bare := allocated(subnet("early", "p", ""), "10.0.2.0/24")
	record := bare.DeepCopy()
	record.Spec.CIDR, record.Spec.PrefixLength = "10.0.2.0/24", ptr.To[int32](24)
	v := baseWorld().subnetValidator()
	if _, err := v.ValidateUpdate(withOp(admissionv1.Update), bare, record); err != nil {
		t.Errorf("recording the range and its length: %v", err)
	}
	other := record.DeepCopy()
	other.Spec.PrefixLength = ptr.To[int32](25)
	_, err := v.ValidateUpdate(withOp(admissionv1.Update), bare, other)
	field.ErrorMatcher{}.ByType().ByField().Test(t, field.ErrorList{field.Invalid(field.NewPath("spec", "prefixLength"), "", "")}, fieldErrors(t, err))

	replace := bare.DeepCopy()
	replace.Labels = map[string]string{"tier": "front"}
	if err := (&SubnetDefaulter{Ledger: baseWorld().ledger}).Default(withUpdate(record), replace); err != nil {
		t.Fatal(err)
	}
	if replace.Spec.CIDR != "10.0.2.0/24" || replace.Spec.PrefixLength == nil || *replace.Spec.PrefixLength != 24 {
		t.Errorf("a replace naming neither field left spec %+v; want the recorded range and length kept", replace.Spec)
	}
	if _, err := v.ValidateUpdate(withOp(admissionv1.Update), record, replace); err != nil {
		t.Errorf("the replace: %v", err)
	}
}
