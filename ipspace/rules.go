package ipspace

import (
	"fmt"
	"net/netip"
)

// Rules are what a pool allows a claim: its range, its reserved ranges, and
// the prefix lengths a Subnet may have. The admission webhooks and the
// arbiter check claims with the same Rules, so they give the same answer in
// the same words.
type Rules struct {
	// Name describes the pool in messages, e.g. "SubnetPool team-a/dc".
	Name     string
	Pool     netip.Prefix
	Reserved []netip.Prefix
	// MinLength and MaxLength bound a Subnet's prefix length; -1 when unset.
	MinLength, MaxLength int
}

// The rules a claim can break.
const (
	RuleFamily   = "family"
	RuleOutside  = "outside"
	RuleReserved = "reserved"
	RuleLength   = "length"
)

// Violation names the rule a claim breaks and says how, in words that follow
// the claim's value: "lies outside SubnetPool team-a/dc (10.0.0.0/16)".
type Violation struct {
	Rule   string
	Detail string
}

// CheckRange reports the first rule an explicit range breaks: the pool's
// family, its range, its reserved ranges and, with checkLength, the length
// bounds (which apply to Subnets, not to child pools).
func (r Rules) CheckRange(p netip.Prefix, checkLength bool) *Violation {
	switch {
	case p.Addr().BitLen() != r.Pool.Addr().BitLen():
		return &Violation{RuleFamily, fmt.Sprintf("is %s but %s (%s) is %s", Family(p.Addr()), r.Name, r.Pool, Family(r.Pool.Addr()))}
	case r.Pool.Bits() > p.Bits() || !r.Pool.Contains(p.Addr()):
		return &Violation{RuleOutside, fmt.Sprintf("lies outside %s (%s)", r.Name, r.Pool)}
	}
	for _, res := range r.Reserved {
		if res.Overlaps(p) {
			return &Violation{RuleReserved, fmt.Sprintf("overlaps reserved range %s of %s", res, r.Name)}
		}
	}
	if checkLength {
		return r.CheckLength(p.Bits())
	}
	return nil
}

// CheckLength reports whether a block of this prefix length may come from
// the pool: it must fit the pool and respect its bounds. The message says
// which lengths the pool allows, all rules together.
func (r Rules) CheckLength(length int) *Violation {
	width := r.Pool.Addr().BitLen()
	var why string
	switch {
	case length < r.Pool.Bits() || length > width:
		why = fmt.Sprintf("prefix length %d does not fit %s (%s)", length, r.Name, r.Pool)
	case r.MinLength >= 0 && length < r.MinLength:
		why = fmt.Sprintf("prefix length %d is shorter than minPrefixLength %d of %s", length, r.MinLength, r.Name)
	case r.MaxLength >= 0 && length > r.MaxLength:
		why = fmt.Sprintf("prefix length %d is longer than maxPrefixLength %d of %s", length, r.MaxLength, r.Name)
	default:
		return nil
	}
	switch lo, hi := r.AllowedLengths(); {
	case lo > hi:
		why += ": it allows no prefix length"
	case lo == hi:
		why += fmt.Sprintf(": use %d", lo)
	default:
		why += fmt.Sprintf(": use %d to %d", lo, hi)
	}
	return &Violation{RuleLength, why}
}

// AllowedLengths returns the prefix lengths a Subnet may have in the pool:
// those that fit its range, within its bounds. lo > hi if there are none.
func (r Rules) AllowedLengths() (lo, hi int) {
	lo, hi = r.Pool.Bits(), r.Pool.Addr().BitLen()
	if r.MinLength >= 0 {
		lo = max(lo, r.MinLength)
	}
	if r.MaxLength >= 0 {
		hi = min(hi, r.MaxLength)
	}
	return lo, hi
}
