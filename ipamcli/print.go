package ipamcli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"sigs.k8s.io/yaml"

	"github.com/subnet-operator/subnet-operator/statuscalc"
)

// printer writes a result as a table (for people) or as JSON or YAML (for
// scripts, whose field names are the result types' json tags).
type printer struct {
	out    io.Writer
	format string // "", "json" or "yaml"
	color  bool   // ANSI colours: only on a terminal, and never with NO_COLOR
}

// structured writes v as JSON or YAML and reports true, or reports false
// for a table.
func (p printer) structured(v any) (bool, error) {
	switch p.format {
	case "":
		return false, nil
	case "json":
		enc := json.NewEncoder(p.out)
		enc.SetIndent("", "  ")
		return true, enc.Encode(v)
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return true, err
		}
		_, err = p.out.Write(b)
		return true, err
	}
	return true, fmt.Errorf("unknown output format %q: use json or yaml", p.format)
}

func (p printer) table() *tabwriter.Writer {
	return tabwriter.NewWriter(p.out, 0, 0, 2, ' ', 0)
}

// barWidth is the width of a utilization bar, in cells.
const barWidth = 10

// bar draws a utilization bar. On a terminal it is coloured by how full the
// pool is (green, yellow from 70%, red from 90%); every colour code has the
// same length, so the table's columns stay aligned.
func (p printer) bar(percent int32) string {
	filled := int(min(max(percent, 0), 100)) * barWidth / 100
	b := strings.Repeat("█", filled) + strings.Repeat("░", barWidth-filled)
	if !p.color {
		return b
	}
	colour := "32"
	switch {
	case percent >= 90:
		colour = "31"
	case percent >= 70:
		colour = "33"
	}
	return "\x1b[" + colour + "m" + b + "\x1b[0m"
}

func (p printer) tree(roots []PoolNode) error {
	if ok, err := p.structured(roots); ok {
		return err
	}
	if len(roots) == 0 {
		_, err := fmt.Fprintln(p.out, "No SubnetPools found.")
		return err
	}
	w := p.table() // buffers: a write error shows at Flush
	_, _ = fmt.Fprintln(w, "POOL\tCIDR\tREADY\tUSED\t\tFREE\tLARGEST FREE\tSUBNETS")
	var walk func(n PoolNode, prefix, branch string)
	walk = func(n PoolNode, prefix, branch string) {
		name := n.Namespace + "/" + n.Name
		if n.ParentNamespace != "" {
			name += " (parent in " + n.ParentNamespace + ")"
		}
		if n.MissingParent != "" {
			name += " (parent " + n.MissingParent + " not found)"
		}
		if n.InCycle {
			name += " (on a parentRef cycle)"
		}
		ready := n.Ready
		if n.Ready != "True" && n.Reason != "" {
			ready += " (" + n.Reason + ")"
		}
		used, free, largest := "", orDash(statuscalc.ReadableCount(n.Free)), orDash(n.LargestFreeBlock)
		if n.Utilization != "" {
			used = n.Utilization
		}
		_, _ = fmt.Fprintf(w, "%s%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", prefix, branch+name, n.CIDR, ready, p.bar(n.UtilizationPercent), orDash(used), free, largest, n.Subnets)
		next := prefix
		switch branch {
		case "├─ ":
			next += "│  "
		case "└─ ":
			next += "   "
		}
		last := len(n.Children) + len(n.Members) - 1
		branchAt := func(i int) string {
			if i == last {
				return "└─ "
			}
			return "├─ "
		}
		for i, c := range n.Children {
			walk(c, next, branchAt(i))
		}
		// A hub pool's member claims, after its child pools: the Subnet,
		// then which member cluster and which of its pools holds the range.
		for i, m := range n.Members {
			ready := m.Ready
			if m.Ready != "True" && m.Reason != "" {
				ready += " (" + m.Reason + ")"
			}
			name := m.Namespace + "/" + m.Name + "  (" + m.Cluster + ": " + orDash(m.Pool) + ")"
			_, _ = fmt.Fprintf(w, "%s%s\t%s\t%s\t\t-\t-\t-\t-\n", next, branchAt(len(n.Children)+i)+name, orDash(m.CIDR), ready)
		}
	}
	for _, r := range roots {
		walk(r, "", "")
	}
	return w.Flush()
}

func (p printer) free(r FreeResult) error {
	if ok, err := p.structured(r); ok {
		return err
	}
	w := p.table()
	if r.Length == nil {
		_, _ = fmt.Fprintf(w, "SubnetPool %s/%s (%s): %s in %s\n\n", r.Namespace, r.Pool, r.CIDR, plural(statuscalc.ReadableCount(r.Total), "free address"), plural(len(r.Blocks), "block"))
		_, _ = fmt.Fprintln(w, "FREE BLOCK\tADDRESSES")
		for _, b := range r.Blocks {
			_, _ = fmt.Fprintf(w, "%s\t%s\n", b.CIDR, statuscalc.ReadableCount(b.Addresses))
		}
		return w.Flush()
	}
	_, _ = fmt.Fprintf(w, "SubnetPool %s/%s (%s): %s can be allocated, from %s\n\n", r.Namespace, r.Pool, r.CIDR, plural(statuscalc.ReadableCount(r.Total), fmt.Sprintf("/%d range", *r.Length)), plural(len(r.Blocks), "block"))
	if len(r.Blocks) == 0 {
		return w.Flush()
	}
	_, _ = fmt.Fprintf(w, "FREE BLOCK\tADDRESSES\t/%d RANGES\n", *r.Length)
	for _, b := range r.Blocks {
		_, _ = fmt.Fprintf(w, "%s\t%s\t%s\n", b.CIDR, statuscalc.ReadableCount(b.Addresses), statuscalc.ReadableCount(b.Fits))
	}
	return w.Flush()
}

func (p printer) next(r NextResult) error {
	if ok, err := p.structured(r); ok {
		return err
	}
	if r.CIDR == "" {
		_, err := fmt.Fprintf(p.out, "No /%d would be allocated from SubnetPool %s/%s: %s: %s\n", r.Length, r.Namespace, r.Pool, r.Reason, r.Message)
		return err
	}
	_, err := fmt.Fprintf(p.out, "%s\n", r.CIDR)
	return err
}

func (p printer) whoHas(query string, holders []Holder) error {
	if ok, err := p.structured(holders); ok {
		return err
	}
	if len(holders) == 0 {
		_, err := fmt.Fprintf(p.out, "Nothing holds or asks for %s.\n", query)
		return err
	}
	w := p.table()
	_, _ = fmt.Fprintln(w, "KIND\tNAMESPACE\tNAME\tCIDR\tPOOL\tSTATE\tHOLDS")
	for _, h := range holders {
		holds := "no (asks)"
		if h.Holds {
			holds = "yes"
		}
		if h.Claim != "" {
			h.State += " to claim " + h.Claim
		}
		_, _ = fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", h.Kind, h.Namespace, h.Name, h.CIDR, orDash(h.Pool), h.State, holds)
	}
	return w.Flush()
}

// plural spells a count of things, the count as a number or as printed (an
// address count from statuscalc.ReadableCount): "1 block", "3 blocks", "1 free
// address", "2^80 free addresses". thing is singular; its last word takes
// the English plural ending, "es" after a hissing sound (address, box).
func plural[N int | string](n N, thing string) string {
	count := fmt.Sprint(n)
	if count == "1" {
		return "1 " + thing
	}
	for _, hissing := range []string{"s", "x", "z", "ch", "sh"} {
		if strings.HasSuffix(thing, hissing) {
			return count + " " + thing + "es"
		}
	}
	return count + " " + thing + "s"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (p printer) migration(r MigrationReport) error {
	if ok, err := p.structured(r); ok {
		return err
	}
	_, err := fmt.Fprintf(p.out, "Rewrote %s and %s in %s; both CRDs now record only %s as stored (before: %s).\n",
		plural(r.Pools, "SubnetPool"), plural(r.Subnets, "Subnet"), r.StorageVersion, r.StorageVersion, storedBefore(r.StoredVersionsBefore))
	return err
}

// storedBefore lists the CRDs' storedVersions before a migration, in the
// order of migratedCRDs.
func storedBefore(before map[string][]string) string {
	parts := make([]string, 0, len(before))
	for _, name := range migratedCRDs {
		parts = append(parts, fmt.Sprintf("%s %v", name, before[name]))
	}
	return strings.Join(parts, ", ")
}
