package lifecycle

import "testing"

func TestCheckSubnetDeleteRefusals(t *testing.T) {
	refused := func(reason, msg string) *opRecord {
		return &opRecord{Verb: "delete", Kind: kindSubnet, Namespace: "a", Name: "s", Outcome: outcomeRejected, Reason: reason, Message: msg}
	}
	const tail = "; delete their IPAddressClaims (or the Machines that own them) first, then the Subnet"
	for _, tc := range []struct {
		name     string
		op       *opRecord
		findings int
	}{
		{"named in its namespace", refused("Forbidden", `subnets.ipam.subnet-operator.io "s" is forbidden: 4 IPAddresses of this Subnet are in use by Cluster API machines (a/m-1, a/m-2, a/m-3 and 1 more)`+tail), 0},
		{"one", refused("Forbidden", "1 IPAddress of this Subnet is in use by Cluster API machines (a/m-1)"+tail), 0},
		{"another namespace named", refused("Forbidden", "1 IPAddress of this Subnet is in use by Cluster API machines (b/m-1)"+tail), 1},
		{"refused for another reason", refused("Invalid", "something else"), 1},
		{"deleted", &opRecord{Verb: "delete", Kind: kindSubnet, Outcome: outcomeDeleted}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := checkSubnetDeleteRefusals([]*opRecord{tc.op}); len(got) != tc.findings {
				t.Errorf("findings %v, want %d", got, tc.findings)
			}
		})
	}
}
