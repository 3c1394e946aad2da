package ipspace

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestIndexOverlapping(t *testing.T) {
	x := NewIndex[string]()
	for _, e := range []struct{ p, owner string }{
		{"10.0.0.0/8", "big"},
		{"10.1.0.0/16", "team"},
		{"10.1.2.0/24", "web"},
		{"10.1.2.0/24", "web-dup"}, // one range, two owners
		{"10.1.3.0/24", "db"},      // adjacent to web
		{"10.1.2.128/25", "inner"},
		{"2001:db8::/64", "v6"},
		{"::/0", "all-v6"},
	} {
		if !x.Insert(mp(e.p), e.owner) {
			t.Fatalf("Insert(%s, %s) = false", e.p, e.owner)
		}
	}
	if x.Insert(mp("10.1.3.0/24"), "db") {
		t.Error("second Insert of the same entry = true")
	}
	if !x.Has(mp("10.1.2.0/24"), "web-dup") || x.Has(mp("10.1.2.0/24"), "nobody") {
		t.Error("Has is wrong")
	}

	tests := []struct {
		query string
		want  []string
	}{
		// Containers first (largest first), then the run inside, by address.
		{"10.1.2.0/24", []string{"big", "team", "web", "web-dup", "inner"}},
		{"10.1.2.0/25", []string{"big", "team", "web", "web-dup"}},
		{"10.1.0.0/16", []string{"big", "team", "web", "web-dup", "inner", "db"}},
		{"10.1.4.0/24", []string{"big", "team"}},
		{"11.0.0.0/8", nil},
		{"0.0.0.0/0", []string{"big", "team", "web", "web-dup", "inner", "db"}},
		{"2001:db8::/32", []string{"all-v6", "v6"}},
		{"2001:db8:1::/48", []string{"all-v6"}},
	}
	for _, tt := range tests {
		var got []string
		x.Overlapping(mp(tt.query), func(e Entry[string]) bool { got = append(got, e.Owner); return true })
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("Overlapping(%s) (-want +got):\n%s", tt.query, diff)
		}
	}

	// fn returning false stops the walk.
	var first []string
	x.Overlapping(mp("10.1.2.0/24"), func(e Entry[string]) bool { first = append(first, e.Owner); return false })
	if diff := cmp.Diff([]string{"big"}, first); diff != "" {
		t.Errorf("stopped walk (-want +got):\n%s", diff)
	}

	if !x.Delete(mp("10.0.0.0/8"), "big") || x.Delete(mp("10.0.0.0/8"), "big") {
		t.Error("Delete twice")
	}
	var all []netip.Prefix
	x.Ascend(func(e Entry[string]) bool { all = append(all, e.Prefix); return true })
	if x.Len() != 7 || len(all) != 7 {
		t.Errorf("Len = %d, Ascend saw %d, want 7", x.Len(), len(all))
	}
}
