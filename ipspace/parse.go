// Package ipspace is the CIDR engine of subnet-operator: strict parsing, an
// ordered index of claimed ranges with O(log n) overlap queries, and a
// free-space map that allocates best-fit and reports capacity and
// fragmentation figures. It is pure: no Kubernetes client, no I/O, so the
// webhooks, the reconcilers and statuscalc share exactly the same arithmetic.
package ipspace

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode"
)

// ParseError says why a string is not an acceptable CIDR and, where one is
// obvious, what to write instead.
type ParseError struct {
	Input      string
	Reason     string
	Suggestion string // canonical CIDR the user probably meant; may be empty
}

func (e *ParseError) Error() string {
	if e.Suggestion != "" {
		return fmt.Sprintf("%s; did you mean %q?", e.Reason, e.Suggestion)
	}
	return e.Reason
}

// maxCIDRLength bounds the text of a CIDR: the longest, an IPv6 address
// with an embedded IPv4 address and a /128, has 49 characters. It is also the
// CRDs' maxLength.
const maxCIDRLength = 64

// ParsePrefix parses a CIDR strictly. Unlike netip.ParsePrefix it rejects,
// with a message a person can act on: host bits set (peers silently mask
// them), IPv4-mapped IPv6, zones, leading zeros, and surrounding spaces. It
// accepts IPv6 text that is valid but not canonical (upper case, uncompressed
// zeros); use Canonical or p.String() to get the canonical text.
func ParsePrefix(s string) (netip.Prefix, error) {
	fail := func(reason, suggestion string) (netip.Prefix, error) {
		return netip.Prefix{}, &ParseError{Input: s, Reason: reason, Suggestion: suggestion}
	}
	if s == "" {
		return fail("must not be empty; write a CIDR such as 10.0.0.0/24 or 2001:db8::/64", "")
	}
	if len(s) > maxCIDRLength {
		return fail(fmt.Sprintf("is longer than any CIDR (%d characters at most)", maxCIDRLength), "")
	}
	if trimmed := strings.TrimSpace(s); trimmed != s {
		if p, err := ParsePrefix(trimmed); err == nil {
			return fail("must not contain spaces", p.String())
		}
		return fail("must not contain spaces", "")
	}
	for _, r := range s {
		if r > unicode.MaxASCII || unicode.IsSpace(r) {
			return fail(fmt.Sprintf("contains %q; a CIDR uses only ASCII digits, the letters a-f, '.', ':' and '/'", r), "")
		}
	}
	addrText, lengthText, hasSlash := strings.Cut(s, "/")
	if !hasSlash {
		if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" && !a.Is4In6() {
			return fail("missing prefix length", netip.PrefixFrom(a, a.BitLen()).String())
		}
		return fail("missing prefix length; write a CIDR such as 10.0.0.0/24 or 2001:db8::/64", "")
	}
	if strings.Contains(addrText, "%") {
		zoneless, _, _ := strings.Cut(addrText, "%")
		suggestion := ""
		if p, err := ParsePrefix(zoneless + "/" + lengthText); err == nil {
			suggestion = p.String()
		}
		return fail("zones (such as %eth0) are not allowed in a CIDR", suggestion)
	}

	addr, err := netip.ParseAddr(addrText)
	if err != nil {
		if fixed, ok := stripIPv4LeadingZeros(addrText); ok {
			suggestion := ""
			if p, err := ParsePrefix(fixed + "/" + lengthText); err == nil {
				suggestion = p.String()
			}
			return fail("leading zeros are not allowed in IPv4 addresses (they are read as octal by some tools)", suggestion)
		}
		return fail(fmt.Sprintf("%q is not an IPv4 or IPv6 address", addrText), "")
	}

	bits, ok := parsePrefixLength(lengthText)
	if !ok {
		return fail(fmt.Sprintf("prefix length %q is not a number from 0 to %d", lengthText, addr.BitLen()), "")
	}

	if addr.Is4In6() {
		suggestion := ""
		if bits >= 96 && bits <= 128 {
			suggestion = netip.PrefixFrom(addr.Unmap(), bits-96).Masked().String()
		}
		return fail("IPv4-mapped IPv6 is not allowed; write the IPv4 form", suggestion)
	}
	if bits > addr.BitLen() {
		return fail(fmt.Sprintf("prefix length %d is out of range for %s (0-%d)", bits, Family(addr), addr.BitLen()), "")
	}

	p := netip.PrefixFrom(addr, bits)
	if masked := p.Masked(); masked != p {
		return fail("host bits set", masked.String())
	}
	return p, nil
}

// Canonical returns the canonical text of a CIDR (lower case, zeros
// compressed) or the ParseError that ParsePrefix reports.
func Canonical(s string) (string, error) {
	p, err := ParsePrefix(s)
	if err != nil {
		return "", err
	}
	return p.String(), nil
}

// ParseCanonical is ParsePrefix that also requires the canonical text, as
// stored objects must use.
func ParseCanonical(s string) (netip.Prefix, error) {
	p, err := ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	var buf [64]byte // canonical text fits; avoids an allocation per call
	if c := p.AppendTo(buf[:0]); string(c) != s {
		return netip.Prefix{}, &ParseError{Input: s, Reason: "not in canonical form", Suggestion: string(c)}
	}
	return p, nil
}

// Family names the address family of an address: "IPv4" or "IPv6".
func Family(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// parsePrefixLength accepts decimal digits without leading zeros.
func parsePrefixLength(s string) (int, bool) {
	if s == "" || len(s) > 3 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// stripIPv4LeadingZeros turns "010.000.001.002" into "10.0.1.2" when that is
// the only thing wrong with a dotted quad.
func stripIPv4LeadingZeros(s string) (string, bool) {
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return "", false
	}
	changed := false
	for i, part := range parts {
		if part == "" || len(part) > 3 {
			return "", false
		}
		n, err := strconv.Atoi(part)
		if err != nil || n < 0 || n > 255 {
			return "", false
		}
		if stripped := strconv.Itoa(n); stripped != part {
			parts[i] = stripped
			changed = true
		}
	}
	return strings.Join(parts, "."), changed
}
