package reconcilers

import (
	"net/netip"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
)

// status.grantedToUID names the pool object only when the ledger serves a
// delegated pool its spec.cidr; a range kept without that (a restored
// status) keeps the UID its status had, so a restore never proves itself.
func TestGrantedToNamesOnlyTheServedObject(t *testing.T) {
	delegated := func(statusCIDR string, grantedTo types.UID) *ipamv1.SubnetPool {
		return &ipamv1.SubnetPool{
			ObjectMeta: metav1.ObjectMeta{Namespace: "network", Name: "pods", UID: "new"},
			Spec: ipamv1.SubnetPoolSpec{CIDR: "10.7.0.0/16", Delegation: &ipamv1.PoolDelegation{
				PoolRef: ipamv1.PoolReference{Namespace: "platform", Name: "plan"}}},
			Status: ipamv1.SubnetPoolStatus{CIDR: statusCIDR, GrantedToUID: grantedTo},
		}
	}
	served := ledger.Decision{Reason: ipamv1.ReasonAvailable, CIDR: netip.MustParsePrefix("10.7.0.0/16")}
	kept := ledger.Decision{Reason: ipamv1.ReasonDelegationPending, CIDR: netip.MustParsePrefix("10.7.0.0/16")}
	local := delegated("10.7.0.0/16", "")
	local.Spec.Delegation = nil
	for _, tt := range []struct {
		name string
		p    *ipamv1.SubnetPool
		d    ledger.Decision
		want types.UID
	}{
		{"served: this object", delegated("", ""), served, "new"},
		{"restored status kept, not served: the old UID stays", delegated("10.7.0.0/16", "old"), kept, "old"},
		{"not served, nothing shown", delegated("", "old"), ledger.Decision{Reason: ipamv1.ReasonDelegationPending}, ""},
		{"a pool that is not delegated", local, served, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := grantedTo(tt.p, tt.d); got != tt.want {
				t.Errorf("grantedTo = %q, want %q", got, tt.want)
			}
		})
	}
}
