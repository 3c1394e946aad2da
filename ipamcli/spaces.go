package ipamcli

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
)

// SpaceRoot is one root pool of an address space, as kubectl ipam spaces
// lists it.
type SpaceRoot struct {
	Space     string `json:"space"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	CIDR      string `json:"cidr,omitempty"`
	// Holds: the space granted it its range; State is its Ready reason.
	Holds bool   `json:"holds"`
	State string `json:"state,omitempty"`
	// Overlaps counts the other root pools of the space it overlaps
	// (granted before spaces were kept apart).
	Overlaps int `json:"overlaps"`
	// Rules says which namespaces may hold root pools in the space.
	Rules string `json:"rootPoolNamespaces"`
}

// Spaces lists every address space with its root pools, by space and
// range, decided as the operator decides them: every AddressSpace and
// every root pool of the cluster (a cluster-wide read).
func Spaces(ctx context.Context, c client.Reader) ([]SpaceRoot, error) {
	var spaces ipamv1.AddressSpaceList
	if err := c.List(ctx, &spaces); err != nil {
		return nil, fmt.Errorf("listing AddressSpaces: %w", err)
	}
	pools, err := listPools(ctx, c)
	if err != nil {
		return nil, err
	}
	l := ledger.New()
	for i := range spaces.Items {
		l.ApplyAddressSpace(&spaces.Items[i], ledger.Created)
	}
	state := map[string]string{}
	for i := range pools {
		p := &pools[i]
		if p.Spec.ParentRef != nil {
			continue
		}
		l.ApplyPool(p, ledger.Created, nil)
		if ready := meta.FindStatusCondition(p.Status.Conditions, ipamv1.ConditionReady); ready != nil {
			state[p.Namespace+"/"+p.Name] = ready.Reason
		}
	}
	var out []SpaceRoot
	for _, s := range l.Spaces() {
		rules := s.Rules
		switch {
		case !s.Exists:
			rules = "<no AddressSpace>"
		case s.Name == ipamv1.DefaultAddressSpace && !slices.ContainsFunc(spaces.Items, func(a ipamv1.AddressSpace) bool { return a.Name == s.Name }):
			rules = "<the manager's --root-pool-namespace-selector>"
		case rules == "":
			rules = "<every namespace>"
		}
		if len(s.Roots) == 0 {
			out = append(out, SpaceRoot{Space: s.Name, Rules: rules})
		}
		for _, r := range s.Roots {
			row := SpaceRoot{Space: s.Name, Namespace: r.Ref.Namespace, Name: r.Ref.Name, Holds: r.Held.IsValid(), Overlaps: r.Overlaps, Rules: rules,
				State: state[r.Ref.Namespace+"/"+r.Ref.Name]}
			if r.CIDR.IsValid() {
				row.CIDR = r.CIDR.String()
			}
			out = append(out, row)
		}
	}
	return out, nil
}

func (p printer) spaces(rows []SpaceRoot) error {
	if ok, err := p.structured(rows); ok {
		return err
	}
	w := p.table()
	_, _ = fmt.Fprintln(w, "SPACE\tROOT POOL NAMESPACES\tNAMESPACE\tROOT POOL\tCIDR\tSTATE\tOVERLAPS")
	for _, r := range rows {
		overlaps := "-"
		if r.Overlaps > 0 {
			overlaps = plural(r.Overlaps, "root pool")
		}
		_, _ = fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Space, r.Rules, orDash(r.Namespace), orDash(r.Name), orDash(r.CIDR), orDash(r.State), overlaps)
	}
	return w.Flush()
}
