package webhooks

// Adversarial review of address spaces (commit 2d6d32b): each test here
// fails on that commit, and names the violation it proves.

import (
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
)

// A tenant whose namespace the default space no longer takes keeps the
// root pool it holds, and may still edit it (consent is checked on create
// only). It asks to grow it to a /12: admitted (nothing holds the /12),
// never granted (the arbiter refuses the namespace). But the ledger's
// Overlapping counts the pending request, since the pool holds something
// and so is no "outsider": the platform, which the space does take, can no
// longer create a root pool anywhere in the /12, and is told a range is
// "held" in another namespace. A refused tenant keeps a range from others.
func TestRefusedTenantsPendingRootGrowthBlocksThePlatformAtAdmission(t *testing.T) {
	w := tenancyWorld()
	w.ledger.SetDefaultSpaceRules(labels.SelectorFromSet(labels.Set{ipamv1.LabelRootPools: "true"}))
	w.ledger.ApplyNamespace("netops", map[string]string{"kubernetes.io/metadata.name": "netops", ipamv1.LabelRootPools: "true"}, ledger.Updated)
	w.ledger.ApplyNamespace("team-b", map[string]string{"kubernetes.io/metadata.name": "team-b", ipamv1.LabelRootPools: "true"}, ledger.Updated)
	v := w.poolValidator()

	// team-b held a root pool while it was allowed; then the label went.
	mine := pool("mine", "172.16.9.0/24")
	mine.Namespace, mine.UID = "team-b", types.UID("uid-team-b-mine")
	mine.Status.CIDR = mine.Spec.CIDR
	w.add(mine)
	w.ledger.ApplyNamespace("team-b", map[string]string{"kubernetes.io/metadata.name": "team-b"}, ledger.Updated)

	grown := mine.DeepCopy()
	grown.Generation++
	grown.Spec.CIDR = "172.16.0.0/12"
	if _, err := v.ValidateUpdate(withUpdate(mine), mine, grown); err != nil {
		t.Fatalf("setup: the refused tenant's growth is admitted: %v", err)
	}
	w.ledger.ApplyPool(grown, ledger.Updated, mine)
	if d, _ := w.ledger.DecidePool("team-b", "mine", grown.UID); d.CIDR.String() != "172.16.9.0/24" || d.Reason != ipamv1.ReasonNotAllowed {
		t.Fatalf("setup: the arbiter does not grant the growth: %+v", d)
	}

	edge := pool("edge", "172.20.0.0/16")
	edge.Namespace, edge.UID = "netops", types.UID("uid-netops-edge")
	if _, err := v.ValidateCreate(withOp(admissionv1.Create), edge); err != nil {
		t.Errorf("the platform's root pool over a range no one holds or will be granted is refused: %v", err)
	}
}

// A root pool that holds 10.50.0.0/16 (no Subnet yet) is edited to IPv6:
// refused (a pool's family cannot change). Were the edit applied (the
// webhook and schema bypassed), the ledger keeps the range it holds in
// its family's slot, and admission refuses another tenant's root pool
// over it.
func TestRootFamilyChangeFreesItsStillServedRangeAtAdmission(t *testing.T) {
	w := tenancyWorld()
	v := w.poolValidator()
	a := pool("a", "10.50.0.0/16")
	a.Status.CIDR = a.Spec.CIDR
	w.add(a)

	moved := a.DeepCopy()
	moved.Generation++
	moved.Spec.CIDR = "fd00:50::/48"
	_, err := v.ValidateUpdate(withUpdate(a), a, moved)
	field.ErrorMatcher{}.ByType().ByField().Test(t, field.ErrorList{field.Invalid(field.NewPath("spec", "cidr"), "", "")}, fieldErrors(t, err))
	// The schema refuses it too; bypassed, the ledger keeps the range.
	w.ledger.ApplyPool(moved, ledger.Updated, a)

	b := pool("b", "10.50.0.0/16")
	b.Namespace, b.UID = "team-b", types.UID("uid-team-b-b")
	if _, err := v.ValidateCreate(withOp(admissionv1.Create), b); err == nil {
		t.Errorf("root pool team-b/b admitted over 10.50.0.0/16, which root pool team-a/a still serves (status.cidr %s)", moved.Status.CIDR)
	}
}
