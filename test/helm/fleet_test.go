//go:build e2e

package helm

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// withoutHelmLabels drops the labels Helm's conventions add, so that a
// render compares with kustomize's.
func withoutHelmLabels(objs map[string]object) map[string]object {
	for _, o := range objs {
		meta := o["metadata"].(map[string]any)
		labels, _ := meta["labels"].(map[string]any)
		for _, l := range []string{"helm.sh/chart", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "app.kubernetes.io/version"} {
			delete(labels, l)
		}
		if len(labels) == 0 {
			delete(meta, "labels")
		}
	}
	return objs
}

// The hub side: fleet.hub.members renders, for each member, what
// config/fleet-hub's overlay for that member does (docs/fleet.md): the Role
// and RoleBinding in the member's hub namespace, bound to its identity.
func TestChartFleetHubIsConfigFleetHub(t *testing.T) {
	overlay := t.TempDir()
	component, err := filepath.Rel(overlay, filepath.Join(root, "config", "fleet-hub"))
	if err != nil {
		t.Fatal(err)
	}
	kustomization := fmt.Sprintf(`namespace: member-1
components:
- %s
patches:
- target: {kind: RoleBinding, name: subnet-operator-fleet-member}
  patch: |-
    - op: replace
      path: /subjects/0/name
      value: member-1
`, component)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o600); err != nil {
		t.Fatal(err)
	}
	want := objects(t, kubectl(t, "", "kustomize", overlay))
	all := withoutHelmLabels(objects(t, template(t, release, namespace, "fleet.hub.members[0].name=member-1", "fleet.hub.members[0].user=member-1")))
	got := map[string]object{}
	for id, o := range all {
		if strings.Contains(id, "/member-1/") {
			got[id] = o
		}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("fleet.hub.members differs from config/fleet-hub (-kustomize +helm):\n%s", d)
	}
	if _, ok := all["Role/"+namespace+"/subnet-operator-hub-kubeconfig-reader"]; ok {
		t.Error("a hub renders the member's Secret reader")
	}
}

// The fleet values change what they name, in another release and namespace:
// the member's Secret and cluster name, the hub's namespaces and subjects;
// and a member without a cluster name, or a hub member without exactly one
// identity, is refused at render.
func TestChartFleetValues(t *testing.T) {
	got := objects(t, template(t, "ipam", "infra",
		"fleet.member.enabled=true", "fleet.member.clusterName=edge-7",
		"fleet.member.hubKubeconfigSecret.namespace=fleet-system", "fleet.member.hubKubeconfigSecret.name=hub",
		"fleet.hub.members[0].name=member-1", "fleet.hub.members[0].namespace=fleet-member-1", "fleet.hub.members[0].group=fleet-members",
		"fleet.hub.members[1].name=member-2", "fleet.hub.members[1].serviceAccount.name=member-2", "fleet.hub.members[1].createNamespace=true"))
	args := fmt.Sprint(got["Deployment/infra/ipam-subnet-operator-controller-manager"]["spec"])
	for _, want := range []string{"--hub-kubeconfig-secret=fleet-system/hub", "--cluster-name=edge-7"} {
		if !strings.Contains(args, want) {
			t.Errorf("the manager lacks %s", want)
		}
	}
	reader := got["Role/fleet-system/ipam-subnet-operator-hub-kubeconfig-reader"]
	if s := fmt.Sprint(reader["rules"]); s != "[map[apiGroups:[] resourceNames:[hub] resources:[secrets] verbs:[get]]]" {
		t.Errorf("the Secret reader's rules: %s", s)
	}
	binding := got["RoleBinding/fleet-system/ipam-subnet-operator-hub-kubeconfig-reader"]
	if s := fmt.Sprint(binding["subjects"]); s != "[map[kind:ServiceAccount name:ipam-subnet-operator-controller-manager namespace:infra]]" {
		t.Errorf("the Secret reader is bound to %s", s)
	}
	for id, subjects := range map[string]string{
		"RoleBinding/fleet-member-1/ipam-subnet-operator-fleet-member": "[map[apiGroup:rbac.authorization.k8s.io kind:Group name:fleet-members]]",
		"RoleBinding/member-2/ipam-subnet-operator-fleet-member":       "[map[kind:ServiceAccount name:member-2 namespace:member-2]]",
	} {
		if s := fmt.Sprint(got[id]["subjects"]); s != subjects {
			t.Errorf("%s binds %s, want %s", id, s, subjects)
		}
	}
	if _, ok := got["Namespace//member-2"]; !ok {
		t.Error("createNamespace did not render member-2's namespace")
	}
	if _, ok := got["Namespace//fleet-member-1"]; ok {
		t.Error("a namespace rendered without createNamespace")
	}

	for _, tc := range []struct {
		set  []string
		want string
	}{
		{[]string{"fleet.member.enabled=true"}, "fleet.member.clusterName"},
		{[]string{"fleet.hub.members[0].name=member-1"}, "give exactly one of user, group or serviceAccount"},
		{[]string{"fleet.hub.members[0].name=member-1", "fleet.hub.members[0].user=a", "fleet.hub.members[0].group=b"}, "give exactly one of user, group or serviceAccount"},
		{[]string{"fleet.hub.members[0].user=a"}, "fleet.hub.members[0].name"},
	} {
		args := []string{"template", release, chart, "--namespace", namespace}
		for _, s := range tc.set {
			args = append(args, "--set", s)
		}
		if out, err := helmOutput(args...); err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("--set %v: %v, want refused with %q:\n%s", tc.set, err, tc.want, out)
		}
	}
}

// In a real API server, the rendered Roles grant what docs/fleet.md says,
// and no more: the member's manager reads the hub's kubeconfig Secret and
// no other; a member's hub identity manages Subnets in its own hub
// namespace, not in another's, and reads no Secret there.
func TestChartFleetRolesInAnAPIServer(t *testing.T) {
	suffix := fmt.Sprintf("%04x", rand.IntN(1<<16))
	ns, hubNS := "fleet-"+suffix, "member-"+suffix
	kubectl(t, "", "create", "namespace", ns)
	t.Cleanup(func() {
		kubectl(t, "", "delete", "namespace", ns, hubNS, "--ignore-not-found", "--wait=false")
	})
	rendered := helm(t, "template", release, chart, "--namespace", ns, "--show-only", "templates/fleet.yaml",
		"--set", "fleet.member.enabled=true,fleet.member.clusterName=member",
		"--set", "fleet.hub.members[0].name="+hubNS+",fleet.hub.members[0].user="+hubNS+",fleet.hub.members[0].createNamespace=true")
	kubectl(t, rendered, "apply", "-f", "-")

	// SubjectAccessReviews, which need no CRD installed (kubectl auth can-i
	// would look the resource up in discovery).
	clientset, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	manager := "system:serviceaccount:" + ns + ":subnet-operator-controller-manager"
	const ipam = "ipam.subnet-operator.io"
	for _, tc := range []struct {
		as                                     string
		verb, group, resource, name, namespace string
		want                                   bool
	}{
		{manager, "get", "", "secrets", "subnet-operator-hub-kubeconfig", ns, true},
		{manager, "get", "", "secrets", "another", ns, false},
		{manager, "list", "", "secrets", "", ns, false},
		{hubNS, "create", ipam, "subnets", "", hubNS, true},
		{hubNS, "patch", ipam, "subnets", "", hubNS, true},
		{hubNS, "delete", ipam, "subnets", "", hubNS, true},
		{hubNS, "watch", ipam, "subnets", "", hubNS, true},
		{hubNS, "create", ipam, "subnets", "", ns, false},
		{hubNS, "create", ipam, "subnetpools", "", hubNS, false},
		{hubNS, "get", "", "secrets", "", hubNS, false},
	} {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: tc.as,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: tc.verb, Group: tc.group, Resource: tc.resource, Name: tc.name, Namespace: tc.namespace,
			},
		}}
		if strings.HasPrefix(tc.as, "system:serviceaccount:") {
			review.Spec.Groups = []string{"system:serviceaccounts", "system:authenticated"}
		}
		// The authorizer sees the new RoleBindings through its informers:
		// wait (with a deadline) for an allowed answer rather than assume
		// it is there.
		var answer *authorizationv1.SubjectAccessReview
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if answer, err = clientset.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), review, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if answer.Status.Allowed || !tc.want || time.Now().After(deadline) {
				break
			}
		}
		if answer.Status.Allowed != tc.want {
			t.Errorf("%s may %s %s/%s %q in %s: %v, want %v (%s)", tc.as, tc.verb, tc.group, tc.resource, tc.name, tc.namespace,
				answer.Status.Allowed, tc.want, answer.Status.Reason)
		}
	}
}
