//go:build integration

package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/fleet"
	"github.com/subnet-operator/subnet-operator/test/controlplane"
	"github.com/subnet-operator/subnet-operator/test/environment"
)

// clusterset is the hub namespace of the ClusterProfiles in these tests.
const clusterset = "fleet-system"

// managerUser is the manager's ServiceAccount in config/default.
const managerUser = "system:serviceaccount:" + environment.Namespace + ":subnet-operator-controller-manager"

// profileCRD is the test's stand-in for SIG Multicluster's ClusterProfile
// CRD (see the file's comment).
func profileCRD(t *testing.T) string {
	t.Helper()
	root, err := environment.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "test", "fleet", "testdata", "clusterprofile-crd.yaml")
}

func installProfileCRD(ctx context.Context, cp *controlplane.ControlPlane, crd string) error {
	if out, err := cp.Kubectl(ctx, nil, "apply", "-f", crd); err != nil {
		return fmt.Errorf("installing the ClusterProfile CRD: %w: %s", err, out)
	}
	if out, err := cp.Kubectl(ctx, nil, "wait", "--for=condition=Established", "--timeout=60s", "crd/clusterprofiles.multicluster.x-k8s.io"); err != nil {
		return fmt.Errorf("the ClusterProfile CRD: %w: %s", err, out)
	}
	return nil
}

func clusterProfile(namespace, name string) *unstructured.Unstructured {
	p := &unstructured.Unstructured{}
	p.SetGroupVersionKind(fleet.ClusterProfileGVK)
	p.SetNamespace(namespace)
	p.SetName(name)
	_ = unstructured.SetNestedField(p.Object, name, "spec", "displayName")
	_ = unstructured.SetNestedField(p.Object, "test", "spec", "clusterManager", "name")
	return p
}

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := ipamv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return scheme
}

// installHubRBAC applies, from config/default with config/fleet-hub-profiles,
// the manager's ServiceAccount and every RBAC object: what the manager may
// do in a hub onboarding from profiles. It returns the manager's arguments
// the two render.
func installHubRBAC(t *testing.T, cp *controlplane.ControlPlane) []string {
	t.Helper()
	ctx := context.Background()
	root, err := environment.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	overlay := t.TempDir()
	rel := func(dir string) string {
		r, err := filepath.Rel(overlay, filepath.Join(root, "config", dir))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	kustomization := fmt.Sprintf("resources:\n- %s\ncomponents:\n- %s\n", rel("default"), rel("fleet-hub-profiles"))
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o600); err != nil {
		t.Fatal(err)
	}
	rendered, err := cp.Kubectl(ctx, nil, "kustomize", overlay)
	if err != nil {
		t.Fatalf("config/default + config/fleet-hub-profiles: %v", err)
	}
	docs, err := environment.Documents([]byte(rendered))
	if err != nil {
		t.Fatal(err)
	}
	var keep [][]byte
	var args []string
	for _, doc := range docs {
		var o unstructured.Unstructured
		if err := utilyaml.Unmarshal(doc, &o.Object); err != nil {
			t.Fatal(err)
		}
		switch o.GetKind() {
		case "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			keep = append(keep, doc)
		case "Deployment":
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			got, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
			args = got
		}
	}
	if out, err := cp.Kubectl(ctx, bytes.Join(keep, []byte("\n---\n")), "apply", "-f", "-"); err != nil {
		t.Fatalf("applying the RBAC: %v: %s", err, out)
	}
	return args
}

// startProfileReconciler runs fleet.ProfileReconciler in this process, in a
// manager that acts as the manager's ServiceAccount (impersonated): with
// only the permissions config/default and config/fleet-hub-profiles grant
// it. It returns the setup's error.
func startProfileReconciler(t *testing.T, cp *controlplane.ControlPlane) error {
	t.Helper()
	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: managerUser,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + environment.Namespace, "system:authenticated"}}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:     testScheme(t),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}, // -count=N runs it again in this process
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := (&fleet.ProfileReconciler{Namespace: clusterset, Recorder: mgr.GetEventRecorder("subnet-operator-fleet-hub")}).SetupWithManager(mgr); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Errorf("the manager: %v", err)
		}
	})
	return nil
}

// memberAccess is what a profile's member has in the hub.
type memberAccess struct {
	ns      corev1.Namespace
	sa      corev1.ServiceAccount
	role    rbacv1.Role
	binding rbacv1.RoleBinding
}

func (a *memberAccess) get(ctx context.Context, c client.Client, cluster string) error {
	key := types.NamespacedName{Namespace: cluster, Name: fleet.MemberAccessName}
	if err := c.Get(ctx, client.ObjectKey{Name: cluster}, &a.ns); err != nil {
		return err
	}
	for _, o := range []client.Object{&a.sa, &a.role, &a.binding} {
		if err := c.Get(ctx, key, o); err != nil {
			return err
		}
	}
	return nil
}

func (a *memberAccess) uids() []types.UID {
	return []types.UID{a.ns.UID, a.sa.UID, a.role.UID, a.binding.UID}
}

func waitMemberAccess(t *testing.T, c client.Client, cluster string) *memberAccess {
	t.Helper()
	var a memberAccess
	eventually(t, time.Minute, func() error { return a.get(context.Background(), c, cluster) })
	return &a
}

// waitEvent waits for an Event of type and reason about the profile name.
func waitEvent(t *testing.T, c client.Client, name, typ, reason string) eventsv1.Event {
	t.Helper()
	var found eventsv1.Event
	eventually(t, time.Minute, func() error {
		var list eventsv1.EventList
		if err := c.List(context.Background(), &list, client.InNamespace(clusterset)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.Kind == fleet.ClusterProfileGVK.Kind && e.Regarding.Name == name && e.Type == typ && e.Reason == reason {
				found = e
				return nil
			}
		}
		return fmt.Errorf("no %s event %s on ClusterProfile %s among %d", typ, reason, name, len(list.Items))
	})
	return found
}

// allowed asks the API server whether ServiceAccount namespace/name may
// verb resource (group) in ns.
func allowed(t *testing.T, c client.Client, sa types.NamespacedName, verb, group, resource, ns string) bool {
	t.Helper()
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               "system:serviceaccount:" + sa.Namespace + ":" + sa.Name,
		Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + sa.Namespace, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group, Resource: resource},
	}}
	if err := c.Create(context.Background(), review); err != nil {
		t.Fatal(err)
	}
	return review.Status.Allowed
}

// A hub onboarding its members from ClusterProfiles (docs/fleet.md): the
// manager, with only the RBAC config/default and config/fleet-hub-profiles
// give it, makes each member's namespace and credential, adopts nothing
// that is not the member's, makes again what is taken away, and deletes
// nothing. In order, on one bare API server: each step starts from what the
// one before left.
func TestOnboardingMembersFromClusterProfiles(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{})
	ctx := context.Background()
	admin, err := client.New(cp.Config, client.Options{Scheme: testScheme(t)})
	if err != nil {
		t.Fatal(err)
	}
	args := installHubRBAC(t, cp)
	if !slices.Contains(args, "--fleet-cluster-profile-namespace="+clusterset) {
		t.Errorf("config/fleet-hub-profiles does not add the flag to the manager's arguments: %v", args)
	}

	step(t, "without the ClusterProfile CRD the manager does not start", func(t *testing.T) {
		if err := startProfileReconciler(t, cp); !errors.Is(err, fleet.ErrClusterProfilesNotServed) {
			t.Fatalf("setup without the CRD: %v, want %v", err, fleet.ErrClusterProfilesNotServed)
		}
		// The binary, with the flag: it exits, and its log says why.
		crds, err := cp.Kubectl(ctx, nil, "kustomize", filepath.Join(mustRepoRoot(t), "config", "crd"))
		if err != nil {
			t.Fatal(err)
		}
		if out, err := cp.Kubectl(ctx, []byte(crds), "apply", "--server-side", "-f", "-"); err != nil {
			t.Fatalf("installing the operator's CRDs: %v: %s", err, out)
		}
		ports, err := controlplane.FreePorts(1)
		if err != nil {
			t.Fatal(err)
		}
		p, err := cp.StartProcess("manager-without-profiles", managerBinary, []string{
			"--kubeconfig=" + cp.Kubeconfig, "--metrics-bind-address=0", "--health-probe-bind-address=0",
			"--webhook-host=127.0.0.1", fmt.Sprintf("--webhook-port=%d", ports[0]), "--webhook-cert-dir=" + t.TempDir(),
			"--cluster-api-ipam=off", "--fleet-cluster-profile-namespace=" + clusterset,
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.Exited():
		case <-time.After(2 * time.Minute):
			p.Stop(5 * time.Second)
			t.Fatal("the manager started without the ClusterProfile CRD")
		}
		log, _ := os.ReadFile(filepath.Join(cp.LogDir(), "manager-without-profiles.log"))
		if p.Err() == nil || !bytes.Contains(log, []byte("does not serve multicluster.x-k8s.io/v1alpha1 ClusterProfiles")) {
			t.Fatalf("exit %v; the log does not say the CRD is missing:\n%s", p.Err(), tail(log, 20))
		}
	})

	if err := installProfileCRD(ctx, cp, profileCRD(t)); err != nil {
		t.Fatal(err)
	}
	create(t, admin, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: clusterset}})
	if err := startProfileReconciler(t, cp); err != nil {
		t.Fatal(err)
	}

	step(t, "a profile makes the member's namespace, ServiceAccount, Role and RoleBinding", func(t *testing.T) {
		create(t, admin, clusterProfile(clusterset, "member-a"))
		a := waitMemberAccess(t, admin, "member-a")
		for _, o := range []client.Object{&a.ns, &a.sa, &a.role, &a.binding} {
			if l := o.GetLabels(); l[ipamv1.LabelMemberCluster] != "member-a" || l[ipamv1.LabelClusterProfile] != clusterset {
				t.Errorf("%T %s: labels %v", o, o.GetName(), l)
			}
		}
		if d := cmp.Diff(fleet.MemberRules(), a.role.Rules); d != "" {
			t.Errorf("the member's Role (-config/fleet-hub +made):\n%s", d)
		}
		wantSubjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: fleet.MemberAccessName, Namespace: "member-a"}}
		if d := cmp.Diff(wantSubjects, a.binding.Subjects); d != "" || a.binding.RoleRef.Name != fleet.MemberAccessName || a.binding.RoleRef.Kind != "Role" {
			t.Errorf("the RoleBinding binds %v to %v", a.binding.Subjects, a.binding.RoleRef)
		}
		waitEvent(t, admin, "member-a", corev1.EventTypeNormal, ipamv1.ReasonMemberOnboarded)
	})

	step(t, "the member's ServiceAccount may claim in its namespace only", func(t *testing.T) {
		sa := types.NamespacedName{Namespace: "member-a", Name: fleet.MemberAccessName}
		for _, verb := range []string{"get", "list", "watch", "create", "patch", "delete"} {
			if !allowed(t, admin, sa, verb, ipamv1.GroupVersion.Group, "subnets", "member-a") {
				t.Errorf("the member may not %s Subnets in its namespace", verb)
			}
		}
		for _, c := range []struct{ verb, group, resource, ns string }{
			{"create", ipamv1.GroupVersion.Group, "subnets", "platform"},
			{"create", ipamv1.GroupVersion.Group, "subnets", clusterset},
			{"list", ipamv1.GroupVersion.Group, "subnets", ""}, // every namespace
			{"get", "", "secrets", "member-a"},
			{"list", "", "secrets", "member-a"},
			{"create", ipamv1.GroupVersion.Group, "subnetpools", "member-a"},
			{"update", ipamv1.GroupVersion.Group, "subnets/status", "member-a"},
			{"create", "rbac.authorization.k8s.io", "rolebindings", "member-a"},
		} {
			if allowed(t, admin, sa, c.verb, c.group, c.resource, c.ns) {
				t.Errorf("the member may %s %s.%s in namespace %q", c.verb, c.resource, c.group, c.ns)
			}
		}
	})

	step(t, "a namespace that is not the member's is left untouched", func(t *testing.T) {
		create(t, admin, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "taken", Labels: map[string]string{"team": "storage"}}})
		create(t, admin, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "member-x",
			Labels: map[string]string{ipamv1.LabelMemberCluster: "member-y"}}}) // another member's
		before := map[string]corev1.Namespace{}
		for _, name := range []string{"taken", "member-x", environment.Namespace, clusterset, "default", "kube-system"} {
			var ns corev1.Namespace
			if err := admin.Get(ctx, client.ObjectKey{Name: name}, &ns); err != nil {
				t.Fatal(err)
			}
			before[name] = ns
		}
		for name, reason := range map[string]string{
			"taken":               ipamv1.ReasonNamespaceConflict,
			"member-x":            ipamv1.ReasonNamespaceConflict,
			environment.Namespace: ipamv1.ReasonNamespaceConflict, // the operator's own
			clusterset:            ipamv1.ReasonNamespaceConflict, // the profiles' own
			"default":             ipamv1.ReasonInvalidClusterName,
			"kube-system":         ipamv1.ReasonInvalidClusterName,
			"member.dotted":       ipamv1.ReasonInvalidClusterName, // a profile's name, not a namespace's
		} {
			create(t, admin, clusterProfile(clusterset, name))
			e := waitEvent(t, admin, name, corev1.EventTypeWarning, reason)
			t.Logf("%s: %s", name, e.Note)
		}
		for name, was := range before {
			var ns corev1.Namespace
			if err := admin.Get(ctx, client.ObjectKey{Name: name}, &ns); err != nil {
				t.Fatal(err)
			}
			if ns.ResourceVersion != was.ResourceVersion {
				t.Errorf("namespace %s was changed: labels %v, were %v", name, ns.Labels, was.Labels)
			}
			for _, o := range []client.Object{&corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}} {
				if err := admin.Get(ctx, client.ObjectKey{Namespace: name, Name: fleet.MemberAccessName}, o); !apierrors.IsNotFound(err) {
					t.Errorf("%T %s/%s: %v, want none", o, name, fleet.MemberAccessName, err)
				}
			}
		}
	})

	step(t, "a namespace marked as the member's is adopted", func(t *testing.T) {
		// What NamespaceConflict's message says to do, for "taken".
		var ns corev1.Namespace
		if err := admin.Get(ctx, client.ObjectKey{Name: "taken"}, &ns); err != nil {
			t.Fatal(err)
		}
		ns.Labels[ipamv1.LabelMemberCluster] = "taken"
		ns.Labels[ipamv1.LabelClusterProfile] = clusterset
		if err := admin.Update(ctx, &ns); err != nil {
			t.Fatal(err)
		}
		a := waitMemberAccess(t, admin, "taken")
		if a.ns.Labels["team"] != "storage" {
			t.Errorf("the adopted namespace's labels: %v", a.ns.Labels)
		}
	})

	step(t, "a profile in another namespace is not watched", func(t *testing.T) {
		create(t, admin, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other-set"}})
		create(t, admin, clusterProfile("other-set", "elsewhere"))
		// A profile created after it, in the watched namespace, is made:
		// the one elsewhere would have been by then.
		create(t, admin, clusterProfile(clusterset, "member-b"))
		waitMemberAccess(t, admin, "member-b")
		if err := admin.Get(ctx, client.ObjectKey{Name: "elsewhere"}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
			t.Errorf("namespace elsewhere: %v, want none", err)
		}
	})

	step(t, "a deleted RoleBinding is made again", func(t *testing.T) {
		a := waitMemberAccess(t, admin, "member-a")
		if err := admin.Delete(ctx, &a.binding); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, func() error {
			var now memberAccess
			if err := now.get(ctx, admin, "member-a"); err != nil {
				return err
			}
			if now.binding.UID == a.binding.UID {
				return errors.New("the RoleBinding was not deleted yet")
			}
			return nil
		})
	})

	step(t, "a rule added to the Role by hand is taken away", func(t *testing.T) {
		a := waitMemberAccess(t, admin, "member-a")
		widened := a.role.DeepCopy()
		widened.Rules = append(widened.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}})
		if err := admin.Update(ctx, widened); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, func() error {
			var role rbacv1.Role
			if err := admin.Get(ctx, client.ObjectKeyFromObject(&a.role), &role); err != nil {
				return err
			}
			if role.ResourceVersion == a.role.ResourceVersion || !cmp.Equal(role.Rules, fleet.MemberRules()) {
				return fmt.Errorf("the Role's rules are %v", role.Rules)
			}
			return nil
		})
	})

	step(t, "deleting a profile deletes nothing", func(t *testing.T) {
		a := waitMemberAccess(t, admin, "member-a")
		if err := admin.Delete(ctx, clusterProfile(clusterset, "member-a")); err != nil {
			t.Fatal(err)
		}
		// A profile created after the delete is made: the delete has been
		// seen by then (one worker, events in order).
		create(t, admin, clusterProfile(clusterset, "member-c"))
		waitMemberAccess(t, admin, "member-c")
		var now memberAccess
		if err := now.get(ctx, admin, "member-a"); err != nil {
			t.Fatalf("member-a's access after its profile was deleted: %v", err)
		}
		if !slices.Equal(now.uids(), a.uids()) || now.ns.DeletionTimestamp != nil {
			t.Errorf("member-a's namespace, ServiceAccount, Role or RoleBinding were deleted or replaced: %v, were %v", now.uids(), a.uids())
		}
	})
}

// step runs one of a test's steps in order; a failed step ends the test,
// since each starts from what the one before left.
func step(t *testing.T, name string, f func(t *testing.T)) {
	t.Helper()
	if !t.Run(name, f) {
		t.FailNow()
	}
}

func mustRepoRoot(t *testing.T) string {
	t.Helper()
	root, err := environment.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// The whole path: a hub onboards member-p from its ClusterProfile, the
// member's hub kubeconfig carries a token of the ServiceAccount made for it
// (TokenRequest), and the member's delegated pool is granted its range.
func TestAMemberOnboardedFromItsClusterProfileIsGranted(t *testing.T) {
	crd := profileCRD(t)
	hub := startHubWith(t, environment.Options{
		ManagerArgs: []string{"--fleet-cluster-profile-namespace=" + clusterset},
		BeforeInstall: func(ctx context.Context, cp *controlplane.ControlPlane) error {
			return installProfileCRD(ctx, cp, crd)
		},
	})
	ctx := context.Background()
	create(t, hub.c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: clusterset}})
	create(t, hub.c, clusterProfile(clusterset, "member-p"))
	a := waitMemberAccess(t, hub.c, "member-p")

	token := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if err := hub.c.SubResource("token").Create(ctx, &a.sa, token); err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(hub.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := clientcmd.Write(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"hub": {Server: hub.URL, CertificateAuthorityData: ca}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"member-p": {Token: token.Status.Token}},
		Contexts:       map[string]*clientcmdapi.Context{"hub": {Cluster: "hub", AuthInfo: "member-p", Namespace: "member-p"}},
		CurrentContext: "hub",
	})
	if err != nil {
		t.Fatal(err)
	}
	opts := environment.Options{}
	opts.AsFleetMember("member-p", kubeconfig)
	member := start(t, opts)
	if err := environment.CreateIsolatedNamespace(ctx, member.c, "network", nil); err != nil {
		t.Fatal(err)
	}
	create(t, member.c, delegated("pods", ""))
	p := waitPool(t, member.c, "pods", func(p *ipamv1.SubnetPool) error {
		if p.Spec.CIDR == "" || p.Status.CIDR != p.Spec.CIDR {
			return fmt.Errorf("not serving a recorded range: spec %q status %q %v", p.Spec.CIDR, p.Status.CIDR, p.Status.Conditions)
		}
		return condition(p, ipamv1.ConditionDelegated, metav1.ConditionTrue, ipamv1.ReasonDelegated)
	})
	var claim ipamv1.Subnet
	if err := hub.c.Get(ctx, client.ObjectKey{Namespace: "member-p", Name: "member-p.network.pods"}, &claim); err != nil {
		t.Fatal(err)
	}
	if claim.Status.CIDR != p.Spec.CIDR {
		t.Fatalf("the hub's claim holds %q, the member serves %s", claim.Status.CIDR, p.Spec.CIDR)
	}
}
