package ipspace

import "testing"

func TestRules(t *testing.T) {
	r := Rules{Name: "SubnetPool ns/p", Pool: mp("10.0.0.0/16"), Reserved: mps("10.0.255.0/24"), MinLength: 20, MaxLength: 28}
	tests := []struct {
		p           string
		checkLength bool
		rule        string
		detail      string
	}{
		{"10.0.1.0/24", true, "", ""},
		{"10.0.0.0/17", false, "", ""}, // length bounds are for Subnets, not child pools
		{"10.0.0.0/17", true, RuleLength, "prefix length 17 is shorter than minPrefixLength 20 of SubnetPool ns/p: use 20 to 28"},
		{"10.0.0.0/16", false, RuleReserved, "overlaps reserved range 10.0.255.0/24 of SubnetPool ns/p"},
		{"10.0.1.0/29", true, RuleLength, "prefix length 29 is longer than maxPrefixLength 28 of SubnetPool ns/p: use 20 to 28"},
		{"10.1.0.0/24", true, RuleOutside, "lies outside SubnetPool ns/p (10.0.0.0/16)"},
		{"10.0.0.0/8", false, RuleOutside, "lies outside SubnetPool ns/p (10.0.0.0/16)"},
		{"2001:db8::/64", true, RuleFamily, "is IPv6 but SubnetPool ns/p (10.0.0.0/16) is IPv4"},
		{"10.0.255.128/25", true, RuleReserved, "overlaps reserved range 10.0.255.0/24 of SubnetPool ns/p"},
		{"10.0.254.0/23", false, RuleReserved, "overlaps reserved range 10.0.255.0/24 of SubnetPool ns/p"},
	}
	for _, tt := range tests {
		v := r.CheckRange(mp(tt.p), tt.checkLength)
		switch {
		case tt.rule == "" && v != nil:
			t.Errorf("CheckRange(%s) = %+v, want nil", tt.p, v)
		case tt.rule != "" && (v == nil || v.Rule != tt.rule || v.Detail != tt.detail):
			t.Errorf("CheckRange(%s) = %+v, want %s %q", tt.p, v, tt.rule, tt.detail)
		}
	}
	// The lengths offered are what every rule allows together, not the
	// pool's range alone.
	for _, tt := range []struct {
		rules  Rules
		length int
		want   string
	}{
		{r, 12, "prefix length 12 does not fit SubnetPool ns/p (10.0.0.0/16): use 20 to 28"},
		{r, 33, "prefix length 33 does not fit SubnetPool ns/p (10.0.0.0/16): use 20 to 28"},
		{Rules{Name: "SubnetPool ns/p", Pool: mp("10.0.0.0/16"), MinLength: -1, MaxLength: -1}, 12,
			"prefix length 12 does not fit SubnetPool ns/p (10.0.0.0/16): use 16 to 32"},
		{Rules{Name: "SubnetPool ns/p", Pool: mp("10.0.0.0/16"), MinLength: 8, MaxLength: 24}, 12,
			"prefix length 12 does not fit SubnetPool ns/p (10.0.0.0/16): use 16 to 24"},
		{Rules{Name: "SubnetPool ns/p", Pool: mp("10.0.0.0/16"), MinLength: 24, MaxLength: 24}, 25,
			"prefix length 25 is longer than maxPrefixLength 24 of SubnetPool ns/p: use 24"},
		{Rules{Name: "SubnetPool ns/p", Pool: mp("10.0.0.0/16"), MinLength: -1, MaxLength: 12}, 20,
			"prefix length 20 is longer than maxPrefixLength 12 of SubnetPool ns/p: it allows no prefix length"},
	} {
		if v := tt.rules.CheckLength(tt.length); v == nil || v.Rule != RuleLength || v.Detail != tt.want {
			t.Errorf("%+v: CheckLength(%d) = %+v, want %q", tt.rules, tt.length, v, tt.want)
		}
	}
	unbounded := Rules{Name: "SubnetPool ns/q", Pool: mp("2001:db8::/48"), MinLength: -1, MaxLength: -1}
	if v := unbounded.CheckLength(128); v != nil {
		t.Errorf("CheckLength(128) without bounds = %+v", v)
	}
}
