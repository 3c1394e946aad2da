package webhooks

import (
	"net/netip"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/utils/ptr"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// fuzzWorld: an IPv4 pool with bounds and a reserved range and two claims,
// and an IPv6 pool with one claim. The fuzz targets check admissions
// against these facts with netip directly, not with the code under test.
func fuzzWorld() *world {
	v4 := pool("v4", "10.0.0.0/16")
	v4.Spec.DefaultPrefixLength, v4.Spec.MinPrefixLength, v4.Spec.MaxPrefixLength = ptr.To[int32](24), ptr.To[int32](18), ptr.To[int32](28)
	v4.Spec.Reserved = []string{"10.0.64.0/24"}
	return newWorld(v4, pool("v6", "2001:db8::/48"),
		subnet("held", "v4", "10.0.1.0/24"),
		allocated(dynamicSubnet("dyn", "v4", 24), "10.0.2.0/24"),
		subnet("held6", "v6", "2001:db8:0:1::/64"))
}

var fuzzClaims = map[string][]netip.Prefix{
	"v4": {netip.MustParsePrefix("10.0.1.0/24"), netip.MustParsePrefix("10.0.2.0/24")},
	"v6": {netip.MustParsePrefix("2001:db8:0:1::/64")},
}

// FuzzSubnetAdmission sends arbitrary Subnets through the defaulting and
// validating webhooks. It must never panic, and whatever it admits must be
// valid: a canonical, masked CIDR of the pool's family, inside the pool, off
// its reserved range, within its length bounds, overlapping no claim; or a
// length the pool accepts.
func FuzzSubnetAdmission(f *testing.F) {
	for _, seed := range []struct {
		cidr, pool string
		length     int32
		hasLength  bool
	}{
		{"10.0.3.0/24", "v4", 0, false}, {"10.0.1.0/25", "v4", 0, false}, {"10.0.3.1/24", "v4", 0, false},
		{"", "v4", 26, true}, {"", "v4", 30, true}, {"", "v4", 0, false}, {"2001:DB8:0:2::/64", "v6", 0, false},
		{"::ffff:10.0.0.0/104", "v4", 0, false}, {"10.0.64.0/26", "v4", 0, false}, {"", "nowhere", 24, true},
		{"10.0.0.0/8", "v4", 0, false}, {" 10.0.3.0/24", "v4", 0, false}, {"", "", 24, true},
	} {
		f.Add(seed.cidr, seed.pool, seed.length, seed.hasLength)
	}
	w := fuzzWorld()
	d := &SubnetDefaulter{Ledger: w.ledger}
	v := w.subnetValidator()
	f.Fuzz(func(t *testing.T, cidr, poolRef string, length int32, hasLength bool) {
		s := subnet("fuzz", poolRef, cidr)
		if hasLength {
			s.Spec.PrefixLength = ptr.To(length)
		}
		ctx := withOp(admissionv1.Create)
		if err := d.Default(ctx, s); err != nil {
			return // refused by the mutating webhook
		}
		if _, err := v.ValidateCreate(ctx, s); err != nil {
			return
		}
		checkAdmitted(t, w, s)
	})
}

func checkAdmitted(t *testing.T, w *world, s *ipamv1.Subnet) {
	t.Helper()
	if strings.TrimSpace(s.Spec.PoolRef.Name) == "" {
		t.Fatalf("admitted without a poolRef: %+v", s.Spec)
	}
	if s.Spec.CIDR != "" && s.Spec.PrefixLength != nil {
		t.Fatalf("admitted with cidr and prefixLength: %+v", s.Spec)
	}
	pool, poolExists := w.ledger.Pool(ns, s.Spec.PoolRef.Name)
	if s.Spec.CIDR != "" {
		p, err := netip.ParsePrefix(s.Spec.CIDR)
		if err != nil || p != p.Masked() || p.String() != s.Spec.CIDR || p.Addr().Is4In6() {
			t.Fatalf("admitted a CIDR that is not canonical and masked: %q (%v)", s.Spec.CIDR, err)
		}
		if !poolExists {
			return // waits for its pool
		}
		if p.Addr().BitLen() != pool.Spec.Addr().BitLen() || p.Bits() < pool.Spec.Bits() || !pool.Spec.Contains(p.Addr()) {
			t.Fatalf("admitted %s outside pool %s", p, pool.Spec)
		}
		for _, r := range pool.Reserved {
			if r.Overlaps(p) {
				t.Fatalf("admitted %s on reserved range %s", p, r)
			}
		}
		for _, c := range fuzzClaims[s.Spec.PoolRef.Name] {
			if c.Overlaps(p) {
				t.Fatalf("admitted %s over claim %s", p, c)
			}
		}
		checkLength(t, pool.Spec, pool.Min, pool.Max, p.Bits())
		return
	}
	if !poolExists {
		return
	}
	length := pool.Default
	if s.Spec.PrefixLength != nil {
		length = int(*s.Spec.PrefixLength)
	}
	if length < 0 {
		t.Fatalf("admitted without a length, from a pool without a default")
	}
	checkLength(t, pool.Spec, pool.Min, pool.Max, length)
}

func checkLength(t *testing.T, pool netip.Prefix, minLen, maxLen, length int) {
	t.Helper()
	if length < pool.Bits() || length > pool.Addr().BitLen() || (minLen >= 0 && length < minLen) || (maxLen >= 0 && length > maxLen) {
		t.Fatalf("admitted prefix length %d for pool %s (min %d, max %d)", length, pool, minLen, maxLen)
	}
}

// FuzzSubnetPoolAdmission sends arbitrary child pools through both
// webhooks: never a panic, and an admitted child pool lies inside its
// parent, clear of the parent's claims and reserved range, with consistent
// lengths.
func FuzzSubnetPoolAdmission(f *testing.F) {
	f.Add("10.0.128.0/17", "v4", "", int32(-1), int32(-1))
	f.Add("10.0.0.0/17", "v4", "10.0.0.0/30", int32(20), int32(24))
	f.Add("10.1.0.0/16", "v4", "", int32(-1), int32(-1))
	f.Add("2001:db8:0:8000::/49", "v6", "2001:db8:0:8000::/64", int32(64), int32(56))
	f.Add("10.0.64.0/20", "v4", "", int32(30), int32(40))
	w := fuzzWorld()
	d := poolDefaulter()
	v := w.poolValidator()
	f.Fuzz(func(t *testing.T, cidr, parent, reserved string, minLen, maxLen int32) {
		p := child("fuzz", parent, cidr)
		if reserved != "" {
			p.Spec.Reserved = []string{reserved}
		}
		if minLen >= 0 {
			p.Spec.MinPrefixLength = ptr.To(minLen)
		}
		if maxLen >= 0 {
			p.Spec.MaxPrefixLength = ptr.To(maxLen)
		}
		ctx := withOp(admissionv1.Create)
		if err := d.Default(ctx, p); err != nil {
			return
		}
		if _, err := v.ValidateCreate(ctx, p); err != nil {
			return
		}
		c, err := netip.ParsePrefix(p.Spec.CIDR)
		if err != nil || c != c.Masked() || c.String() != p.Spec.CIDR {
			t.Fatalf("admitted a pool CIDR that is not canonical and masked: %q", p.Spec.CIDR)
		}
		for _, r := range p.Spec.Reserved {
			rp, err := netip.ParsePrefix(r)
			if err != nil || rp != rp.Masked() || rp.Bits() < c.Bits() || !c.Contains(rp.Addr()) {
				t.Fatalf("admitted reserved range %q outside %s", r, c)
			}
		}
		for _, l := range []*int32{p.Spec.MinPrefixLength, p.Spec.MaxPrefixLength} {
			if l != nil && (int(*l) < c.Bits() || int(*l) > c.Addr().BitLen()) {
				t.Fatalf("admitted length %d for %s", *l, c)
			}
		}
		if p.Spec.MinPrefixLength != nil && p.Spec.MaxPrefixLength != nil && *p.Spec.MinPrefixLength > *p.Spec.MaxPrefixLength {
			t.Fatalf("admitted min %d > max %d", *p.Spec.MinPrefixLength, *p.Spec.MaxPrefixLength)
		}
		if parent == "" {
			return
		}
		pp, ok := w.ledger.Pool(ns, parent)
		if !ok || parent == "fuzz" {
			t.Fatalf("admitted a child of %q, which does not exist", parent)
		}
		if c.Addr().BitLen() != pp.Spec.Addr().BitLen() || c.Bits() < pp.Spec.Bits() || !pp.Spec.Contains(c.Addr()) {
			t.Fatalf("admitted child %s outside parent %s", c, pp.Spec)
		}
		for _, r := range pp.Reserved {
			if r.Overlaps(c) {
				t.Fatalf("admitted child %s on the parent's reserved range %s", c, r)
			}
		}
		for _, claim := range fuzzClaims[parent] {
			if claim.Overlaps(c) {
				t.Fatalf("admitted child %s over the parent's claim %s", c, claim)
			}
		}
	})
}
