package ipspace

import (
	"encoding/binary"
	"math/big"
	"math/bits"
	"net/netip"
)

// u128 is an address as a 128-bit unsigned integer: IPv4 addresses use the
// low 32 bits. The free-space map does its arithmetic on these because
// netip.Addr offers no bit operations.
type u128 struct{ hi, lo uint64 }

func (a u128) less(b u128) bool {
	return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo)
}

// addBit returns a + 2^n for n in [0, 127].
func (a u128) addBit(n int) u128 {
	if n >= 64 {
		return u128{hi: a.hi + 1<<(n-64), lo: a.lo}
	}
	lo, carry := bits.Add64(a.lo, 1<<n, 0)
	return u128{hi: a.hi + carry, lo: lo}
}

// clearBit returns a with bit n cleared.
func (a u128) clearBit(n int) u128 {
	if n >= 64 {
		return u128{hi: a.hi &^ (1 << (n - 64)), lo: a.lo}
	}
	return u128{hi: a.hi, lo: a.lo &^ (1 << n)}
}

// flipBit returns a with bit n inverted.
func (a u128) flipBit(n int) u128 {
	if n >= 64 {
		return u128{hi: a.hi ^ 1<<(n-64), lo: a.lo}
	}
	return u128{hi: a.hi, lo: a.lo ^ 1<<n}
}

// maskTo keeps the top `prefix` bits of a width-bit value and clears the rest.
func (a u128) maskTo(prefix, width int) u128 {
	host := width - prefix // number of host bits to clear
	switch {
	case host <= 0:
		return a
	case host >= 128:
		return u128{}
	case host >= 64:
		return u128{hi: a.hi &^ (1<<(host-64) - 1), lo: 0}
	default:
		return u128{hi: a.hi, lo: a.lo &^ (1<<host - 1)}
	}
}

func addrToU128(a netip.Addr) u128 {
	if a.Is4() {
		b := a.As4()
		return u128{lo: uint64(binary.BigEndian.Uint32(b[:]))}
	}
	b := a.As16()
	return u128{hi: binary.BigEndian.Uint64(b[:8]), lo: binary.BigEndian.Uint64(b[8:])}
}

func u128ToAddr(v u128, width int) netip.Addr {
	if width == 32 {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(v.lo))
		return netip.AddrFrom4(b)
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], v.hi)
	binary.BigEndian.PutUint64(b[8:], v.lo)
	return netip.AddrFrom16(b)
}

// block is an aligned range: the `bits`-bit prefix starting at `start`.
type block struct {
	start u128
	bits  int
}

func blockOf(p netip.Prefix) block {
	return block{start: addrToU128(p.Addr()), bits: p.Bits()}
}

func (b block) prefix(width int) netip.Prefix {
	return netip.PrefixFrom(u128ToAddr(b.start, width), b.bits)
}

// sibling is the other half of b's parent block (its buddy).
func (b block) sibling(width int) block {
	return block{start: b.start.flipBit(width - b.bits), bits: b.bits}
}

// parent is the block twice b's size that contains b.
func (b block) parent(width int) block {
	return block{start: b.start.clearBit(width - b.bits), bits: b.bits - 1}
}

// ancestor is the block of length n (n <= b.bits) that contains b.
func (b block) ancestor(n, width int) block {
	return block{start: b.start.maskTo(n, width), bits: n}
}

// upperHalf is the second half of b.
func (b block) upperHalf(width int) block {
	return block{start: b.start.addBit(width - b.bits - 1), bits: b.bits + 1}
}

// AddressCount returns the number of addresses in p: 2^(bitlen - bits).
// It is exact for any IPv6 prefix, /0 included.
func AddressCount(p netip.Prefix) *big.Int {
	return pow2(p.Addr().BitLen() - p.Bits())
}

func pow2(n int) *big.Int {
	return new(big.Int).Lsh(big.NewInt(1), uint(n))
}
