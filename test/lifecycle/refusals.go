package lifecycle

import (
	"regexp"
	"strings"
)

// addressesInUseRefusal is the Subnet webhook's refusal of a delete while
// Cluster API machines use the Subnet's addresses: the count, the first few
// IPAddresses (namespace/name), and what to do.
var addressesInUseRefusal = regexp.MustCompile(`(\d+) IPAddress(?:es)? of this Subnet (?:is|are) in use by Cluster API machines \(([^)]*)\); delete their IPAddressClaims \(or the Machines that own them\) first, then the Subnet`)

// checkSubnetDeleteRefusals is R1, on the operation log: a Subnet delete is
// refused at admission only because IPAddresses use its addresses, and
// the refusal names at least one of them, each in the Subnet's own
// namespace (an IPAddress references a Subnet of its namespace only, and
// no refusal names another namespace's objects). Any other refusal of a
// Subnet delete is a finding: every other Subnet can always be deleted.
func checkSubnetDeleteRefusals(ops []*opRecord) []finding {
	var out []finding
	for _, o := range ops {
		if o.Kind != kindSubnet || o.Verb != "delete" || o.Outcome != outcomeRejected {
			continue
		}
		bad := func(why string) {
			out = append(out, finding{Check: "R1", Key: "R1/" + o.Namespace + "/" + o.Name + "/" + strings.TrimSpace(o.Message),
				Detail: o.String() + ": " + why})
		}
		m := addressesInUseRefusal.FindStringSubmatch(o.Message)
		if o.Reason != "Forbidden" || m == nil {
			bad("a Subnet delete refused other than for IPAddresses in use")
			continue
		}
		list := m[2]
		if i := strings.LastIndex(list, " and "); i >= 0 && strings.HasSuffix(list, " more") {
			list = list[:i]
		}
		for _, named := range strings.Split(list, ", ") {
			ns, name, ok := strings.Cut(named, "/")
			if !ok || ns != o.Namespace || name == "" {
				bad("the refusal names " + named + ", not an IPAddress of the Subnet's namespace")
			}
		}
	}
	return out
}
