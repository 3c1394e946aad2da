package ipspace

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestParsePrefix(t *testing.T) {
	tests := []struct {
		in             string
		want           string // canonical prefix on success
		wantReason     string // substring of the reason on failure
		wantSuggestion string
	}{
		{in: "10.0.0.0/24", want: "10.0.0.0/24"},
		{in: "0.0.0.0/0", want: "0.0.0.0/0"},
		{in: "10.1.2.3/32", want: "10.1.2.3/32"},
		{in: "::/0", want: "::/0"},
		{in: "2001:db8::/48", want: "2001:db8::/48"},
		{in: "2001:DB8::/48", want: "2001:db8::/48"},
		{in: "2001:0db8:0000::/48", want: "2001:db8::/48"},
		{in: "::1/128", want: "::1/128"},

		{in: "", wantReason: "must not be empty"},
		{in: " 10.0.0.0/24", wantReason: "must not contain spaces", wantSuggestion: "10.0.0.0/24"},
		{in: "10.0.0.0/24 ", wantReason: "must not contain spaces", wantSuggestion: "10.0.0.0/24"},
		{in: "10.0.0.0 /24", wantReason: "contains ' '"},
		{in: "10.0.0.1/24", wantReason: "host bits set", wantSuggestion: "10.0.0.0/24"},
		{in: "2001:db8::1/64", wantReason: "host bits set", wantSuggestion: "2001:db8::/64"},
		{in: "10.0.0.0/33", wantReason: "prefix length 33 is out of range for IPv4 (0-32)"},
		{in: "2001:db8::/129", wantReason: "prefix length 129 is out of range for IPv6 (0-128)"},
		{in: "10.0.0.0/-1", wantReason: `prefix length "-1" is not a number`},
		{in: "10.0.0.0/08", wantReason: `prefix length "08" is not a number`},
		{in: "10.0.0.0/", wantReason: `prefix length "" is not a number`},
		{in: "10.0.0.0/1000", wantReason: `prefix length "1000" is not a number`},
		{in: "10.0.0/24", wantReason: `"10.0.0" is not an IPv4 or IPv6 address`},
		{in: "010.0.0.0/8", wantReason: "leading zeros are not allowed", wantSuggestion: "10.0.0.0/8"},
		{in: "10.00.0.0/16", wantReason: "leading zeros are not allowed", wantSuggestion: "10.0.0.0/16"},
		{in: "fe80::1%eth0/64", wantReason: "zones (such as %eth0) are not allowed", wantSuggestion: ""},
		{in: "fe80::%eth0/64", wantReason: "zones (such as %eth0) are not allowed", wantSuggestion: "fe80::/64"},
		{in: "::ffff:10.0.0.0/104", wantReason: "IPv4-mapped IPv6 is not allowed", wantSuggestion: "10.0.0.0/8"},
		{in: "::ffff:10.0.0.0/8", wantReason: "IPv4-mapped IPv6 is not allowed"},
		{in: "10.0.0.0", wantReason: "missing prefix length", wantSuggestion: "10.0.0.0/32"},
		{in: "2001:db8::", wantReason: "missing prefix length", wantSuggestion: "2001:db8::/128"},
		{in: "banana", wantReason: "missing prefix length; write a CIDR"},
		{in: "１０.0.0.0/8", wantReason: "contains '１'"},
		{in: "10.0.0.0/٨", wantReason: "contains '٨'"},
		{in: "10.0.0.0/24/24", wantReason: `prefix length "24/24" is not a number`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParsePrefix(tt.in)
			if tt.wantReason == "" {
				if err != nil {
					t.Fatalf("ParsePrefix(%q) error %v", tt.in, err)
				}
				if got.String() != tt.want {
					t.Fatalf("ParsePrefix(%q) = %s, want %s", tt.in, got, tt.want)
				}
				return
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("ParsePrefix(%q) = %v, %v; want a ParseError", tt.in, got, err)
			}
			if !strings.Contains(pe.Reason, tt.wantReason) {
				t.Errorf("reason %q, want it to contain %q", pe.Reason, tt.wantReason)
			}
			if pe.Suggestion != tt.wantSuggestion {
				t.Errorf("suggestion %q, want %q", pe.Suggestion, tt.wantSuggestion)
			}
		})
	}
}

// The message is part of the product: keep a few in full.
func TestParseErrorMessages(t *testing.T) {
	golden := map[string]string{
		"10.0.0.1/24":         `host bits set; did you mean "10.0.0.0/24"?`,
		"10.0.0.0/33":         `prefix length 33 is out of range for IPv4 (0-32)`,
		"::ffff:10.0.0.0/104": `IPv4-mapped IPv6 is not allowed; write the IPv4 form; did you mean "10.0.0.0/8"?`,
		"010.0.0.0/8":         `leading zeros are not allowed in IPv4 addresses (they are read as octal by some tools); did you mean "10.0.0.0/8"?`,
	}
	for in, want := range golden {
		_, err := ParsePrefix(in)
		if err == nil || err.Error() != want {
			t.Errorf("ParsePrefix(%q) error\n got: %v\nwant: %s", in, err, want)
		}
	}
}

func TestParseCanonical(t *testing.T) {
	if _, err := ParseCanonical("2001:db8::/48"); err != nil {
		t.Fatal(err)
	}
	_, err := ParseCanonical("2001:DB8:0::/48")
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Reason != "not in canonical form" || pe.Suggestion != "2001:db8::/48" {
		t.Fatalf("ParseCanonical = %v", err)
	}
	if c, err := Canonical("2001:0DB8::/32"); err != nil || c != "2001:db8::/32" {
		t.Fatalf("Canonical = %q, %v", c, err)
	}
}

func TestAddressCount(t *testing.T) {
	tests := map[string]string{
		"10.0.0.0/24":   "256",
		"10.0.0.1/32":   "1",
		"0.0.0.0/0":     "4294967296",
		"2001:db8::/64": "18446744073709551616",
		"2001:db8::/48": "1208925819614629174706176",
		"::/0":          "340282366920938463463374607431768211456",
	}
	for in, want := range tests {
		if got := AddressCount(netip.MustParsePrefix(in)).String(); got != want {
			t.Errorf("AddressCount(%s) = %s, want %s", in, got, want)
		}
	}
}

// FuzzParsePrefix: never panics; whatever it accepts is masked, of a valid
// length and round-trips through its canonical text; every suggestion it
// makes is itself accepted.
func FuzzParsePrefix(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8", "10.0.0.1/8", "::ffff:1.2.3.4/120", "fe80::%eth0/64",
		"010.1.1.1/32", "2001:DB8::/32", "", " ", "1.2.3.4", "/", "::/0", "0.0.0.0/0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePrefix(s)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error of type %T", err)
			}
			if pe.Suggestion != "" {
				if _, err := ParseCanonical(pe.Suggestion); err != nil {
					t.Fatalf("suggestion %q for %q is not canonical: %v", pe.Suggestion, s, err)
				}
			}
			return
		}
		if !p.IsValid() || p.Masked() != p || p.Addr().Zone() != "" || p.Addr().Is4In6() {
			t.Fatalf("accepted %q as %v", s, p)
		}
		back, err := ParseCanonical(p.String())
		if err != nil || back != p {
			t.Fatalf("canonical text %q of %q does not round-trip: %v %v", p.String(), s, back, err)
		}
	})
}

func TestParsePrefixTooLong(t *testing.T) {
	_, err := ParsePrefix(strings.Repeat("1", 65))
	if err == nil || err.Error() != "is longer than any CIDR (64 characters at most)" {
		t.Errorf("got %v", err)
	}
	if _, err := ParsePrefix("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128"); err != nil {
		t.Errorf("the longest canonical CIDR: %v", err)
	}
}
