package ipamcli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// memberClaim is the Subnet a member cluster's manager makes in the hub for
// its pool network/<pool>, in the member's hub namespace.
func memberClaim(cluster, pool, cidr string) *ipamv1.Subnet {
	s := in(cluster, held(cluster+".network."+pool, "plan", cidr))
	s.Spec.PoolRef.Namespace = "platform"
	s.Labels = map[string]string{ipamv1.LabelMemberCluster: cluster}
	s.Annotations = map[string]string{ipamv1.AnnotationMemberPool: "network/" + pool}
	return s
}

// On a hub, tree shows under each hub pool the claims member clusters made
// on it: the range, the member cluster and the member's pool. A Subnet of
// the hub's own (no member label) is not a member's.
func TestTreeOnTheHubShowsMembers(t *testing.T) {
	plan := in("platform", pool("plan", "10.0.0.0/8", "", 1))
	pending := memberClaim("member-2", "pods", "")
	pending.Status.Conditions = nil
	meta.SetStatusCondition(&pending.Status.Conditions, metav1.Condition{Type: ipamv1.ConditionReady, Status: metav1.ConditionFalse, Reason: ipamv1.ReasonPoolExhausted})
	local := in("platform", held("local", "plan", "10.9.0.0/16"))
	c := fakeClient(t, plan, memberClaim("member-1", "pods", "10.0.0.0/16"), memberClaim("member-1", "pods-more", "10.1.0.0/16"), pending, local)

	roots, err := Tree(context.Background(), c, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(roots) != 1 || len(roots[0].Members) != 3 {
		t.Fatalf("tree: %+v, want the plan with 3 members", roots)
	}
	if m := roots[0].Members[0]; m.Cluster != "member-1" || m.Pool != "network/pods" || m.CIDR != "10.0.0.0/16" || m.Name != "member-1.network.pods" {
		t.Errorf("first member claim: %+v", m)
	}
	var out bytes.Buffer
	if err := (printer{out: &out}).tree(roots); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{
		"├─ member-1/member-1.network.pods  (member-1: network/pods)  10.0.0.0/16  True",
		"├─ member-1/member-1.network.pods-more  (member-1: network/pods-more)  10.1.0.0/16  True",
		"└─ member-2/member-2.network.pods  (member-2: network/pods)  -  False (PoolExhausted)",
	}
	if len(lines) != 2+len(want) {
		t.Fatalf("tree:\n%s", out.String())
	}
	for i, w := range want {
		if got := strings.Join(strings.Fields(lines[2+i]), " "); !strings.HasPrefix(got, strings.Join(strings.Fields(w), " ")) {
			t.Errorf("line %d: %q, want it to start with %q", 2+i, lines[2+i], w)
		}
	}
	if strings.Contains(out.String(), "local") {
		t.Errorf("the hub's own Subnet is shown as a member's:\n%s", out.String())
	}
}

// A user who may read the pools but not list Subnets in every namespace (a
// tenant of the hub) gets the tree without members, not an error.
func TestTreeWithoutLeaveToListMembersShowsThePools(t *testing.T) {
	plan := in("platform", pool("plan", "10.0.0.0/8", "", 1))
	c := interceptor.NewClient(fakeClient(t, plan, memberClaim("member-1", "pods", "10.0.0.0/16")).(client.WithWatch), interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*ipamv1.SubnetList); ok {
				return apierrors.NewForbidden(schema.GroupResource{Group: ipamv1.GroupVersion.Group, Resource: "subnets"}, "", nil)
			}
			return c.List(ctx, list, opts...)
		},
	})
	roots, err := Tree(context.Background(), c, "platform")
	if err != nil {
		t.Fatal(err)
	}
	if len(roots) != 1 || roots[0].Name != "plan" || len(roots[0].Members) != 0 {
		t.Errorf("tree: %+v, want the plan without members", roots)
	}
}
