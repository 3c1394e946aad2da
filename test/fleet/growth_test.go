//go:build integration

package fleet

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// Growth (issue 33, item 4): a member that needs more space takes another
// delegated root pool in the same address space. The member's own address
// space still decides as for any root: delegated and local roots never
// overlap, whichever comes first.
func TestGrowthTakesAnotherDelegatedRootPool(t *testing.T) {
	hub := startHub(t)
	member := startMember(t, hub, "member-a")
	ctx := context.Background()

	serving := func(p *ipamv1.SubnetPool) error {
		if p.Spec.CIDR == "" || p.Status.CIDR != p.Spec.CIDR {
			return fmt.Errorf("not serving a recorded range: spec %q status %q %v", p.Spec.CIDR, p.Status.CIDR, p.Status.Conditions)
		}
		return condition(p, ipamv1.ConditionDelegated, metav1.ConditionTrue, ipamv1.ReasonDelegated)
	}
	create(t, member.c, delegated("pods", ""))
	first := waitPool(t, member.c, "pods", serving)
	// Full: the member needs more space, and asks for a second range.
	create(t, member.c, delegated("pods-more", ""))
	second := waitPool(t, member.c, "pods-more", serving)

	t.Run("the two delegated ranges are disjoint, in one address space, each claimed in the hub", func(t *testing.T) {
		a, b := netip.MustParsePrefix(first.Spec.CIDR), netip.MustParsePrefix(second.Spec.CIDR)
		if a.Overlaps(b) {
			t.Fatalf("the member's delegated pools got overlapping ranges %s and %s", a, b)
		}
		if first.Spec.AddressSpace != second.Spec.AddressSpace {
			t.Fatalf("address spaces %q and %q, want one", first.Spec.AddressSpace, second.Spec.AddressSpace)
		}
		var claims ipamv1.SubnetList
		if err := hub.c.List(ctx, &claims, client.InNamespace("member-a"), client.MatchingLabels{ipamv1.LabelMemberCluster: "member-a"}); err != nil {
			t.Fatal(err)
		}
		held := map[string]string{}
		for _, s := range claims.Items {
			held[s.Annotations[ipamv1.AnnotationMemberPool]] = s.Status.CIDR
		}
		if want := map[string]string{"network/pods": a.String(), "network/pods-more": b.String()}; fmt.Sprint(held) != fmt.Sprint(want) {
			t.Fatalf("the hub's claims say %v, the member serves %v", held, want)
		}
		waitSubnetReady(t, member.c, subnet("in-second", "pods-more"))
	})

	t.Run("a local root pool over a delegated range is refused at admission", func(t *testing.T) {
		inside := netip.PrefixFrom(netip.MustParsePrefix(second.Spec.CIDR).Addr(), 20)
		local := &ipamv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Namespace: "network", Name: "local-over-delegated"},
			Spec: ipamv1.SubnetPoolSpec{CIDR: inside.String()}}
		err := member.c.Create(ctx, local)
		if !apierrors.IsInvalid(err) {
			t.Fatalf("a local root pool %s inside the delegated %s: %v, want refused as invalid", inside, second.Spec.CIDR, err)
		}
		if !strings.Contains(err.Error(), "pods-more") {
			t.Errorf("the refusal does not name the delegated pool pods-more: %v", err)
		}
	})

	t.Run("a delegated pool whose hub grant overlaps a local root pool is not served, and says why", func(t *testing.T) {
		// A hub pool with room for one /24 only, so the hub's grant is
		// known in advance: the range a local root of the member holds.
		const edge, only = "edge", "172.16.0.0/24"
		create(t, hub.c, &ipamv1.SubnetPool{
			ObjectMeta: metav1.ObjectMeta{Namespace: platform, Name: edge},
			Spec: ipamv1.SubnetPoolSpec{CIDR: only, DefaultPrefixLength: ptr.To[int32](24),
				AllowedNamespaces: &ipamv1.AllowedNamespaces{From: ipamv1.FromAll}},
		})
		create(t, member.c, &ipamv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Namespace: "network", Name: "local"},
			Spec: ipamv1.SubnetPoolSpec{CIDR: only}})
		edgePods := &ipamv1.SubnetPool{
			ObjectMeta: metav1.ObjectMeta{Namespace: "network", Name: "edge-pods"},
			Spec: ipamv1.SubnetPoolSpec{DefaultPrefixLength: ptr.To[int32](26),
				Delegation: &ipamv1.PoolDelegation{PoolRef: ipamv1.PoolReference{Namespace: platform, Name: edge}, PrefixLength: ptr.To[int32](24)}},
		}
		create(t, member.c, edgePods)
		waitPool(t, member.c, "edge-pods", func(p *ipamv1.SubnetPool) error {
			if err := condition(p, ipamv1.ConditionReady, metav1.ConditionFalse, ipamv1.ReasonDelegationPending); err != nil {
				return err
			}
			c := meta.FindStatusCondition(p.Status.Conditions, ipamv1.ConditionDelegated)
			if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "the hub granted "+only) || !strings.Contains(c.Message, "local") {
				return fmt.Errorf("Delegated does not say the hub's grant %s overlaps the local pool: %+v", only, c)
			}
			if p.Status.CIDR != "" || p.Spec.CIDR != "" {
				return fmt.Errorf("holds spec %q, serves %q", p.Spec.CIDR, p.Status.CIDR)
			}
			return nil
		})
		// The local pool keeps serving its range.
		var local ipamv1.SubnetPool
		if err := member.c.Get(ctx, client.ObjectKey{Namespace: "network", Name: "local"}, &local); err != nil {
			t.Fatal(err)
		}
		if local.Status.CIDR != only {
			t.Fatalf("the local pool serves %q, want %s", local.Status.CIDR, only)
		}
	})
}
