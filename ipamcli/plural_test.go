package ipamcli

import (
	"bytes"
	"testing"

	"k8s.io/utils/ptr"
)

func TestPlural(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{plural(0, "block"), "0 blocks"},
		{plural(1, "block"), "1 block"},
		{plural(2, "Subnet"), "2 Subnets"},
		{plural(1, "SubnetPool"), "1 SubnetPool"},
		{plural(1, "root pool"), "1 root pool"},
		{plural("1", "free address"), "1 free address"},
		{plural("256", "free address"), "256 free addresses"},
		{plural("2^80", "free address"), "2^80 free addresses"},
		{plural("1", "/24 range"), "1 /24 range"},
		{plural("≈2^70", "/64 range"), "≈2^70 /64 ranges"},
	} {
		if tc.got != tc.want {
			t.Errorf("%q, want %q", tc.got, tc.want)
		}
	}
}

// One of everything reads as one: "1 free address in 1 block", not
// "1 free addresses in 1 blocks".
func TestOutputSaysOneOfEachInTheSingular(t *testing.T) {
	for _, tc := range []struct {
		name  string
		print func(p printer) error
		want  string
	}{
		{"free", func(p printer) error {
			return p.free(FreeResult{Namespace: "team-a", Pool: "dc", CIDR: "10.0.0.0/30", Total: "1", Blocks: []FreeBlock{{CIDR: "10.0.0.3/32", Addresses: "1"}}})
		}, "SubnetPool team-a/dc (10.0.0.0/30): 1 free address in 1 block\n\nFREE BLOCK   ADDRESSES\n10.0.0.3/32  1\n"},
		{"free with a length", func(p printer) error {
			return p.free(FreeResult{Namespace: "team-a", Pool: "dc", CIDR: "10.0.0.0/16", Length: ptr.To(24), Total: "1", Blocks: []FreeBlock{{CIDR: "10.0.7.0/24", Addresses: "256", Fits: "1"}}})
		}, "SubnetPool team-a/dc (10.0.0.0/16): 1 /24 range can be allocated, from 1 block\n\nFREE BLOCK   ADDRESSES  /24 RANGES\n10.0.7.0/24  256        1\n"},
		{"migration", func(p printer) error {
			return p.migration(MigrationReport{StorageVersion: "v1alpha2", Pools: 1, Subnets: 1})
		}, "Rewrote 1 SubnetPool and 1 Subnet in v1alpha2; both CRDs now record only v1alpha2 as stored (before: subnetpools.ipam.subnet-operator.io [], subnets.ipam.subnet-operator.io []).\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := tc.print(printer{out: &out}); err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.want {
				t.Errorf("printed\n%q\nwant\n%q", out.String(), tc.want)
			}
		})
	}
}
