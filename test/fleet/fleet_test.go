//go:build integration

// Package fleet tests a member cluster's root pools delegated from a hub
// cluster through real API servers: a hub and a member control plane, each
// with the operator installed and the manager binary (race detector)
// running; the member's manager reaches the hub with a kubeconfig Secret
// whose user has only config/fleet-hub's Role in its hub namespace.
package fleet

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/test/controlplane"
	"github.com/subnet-operator/subnet-operator/test/environment"
)

// managerBinary is built once for every control plane of the package.
var managerBinary string

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard()) // the clients' logs are not the test's
	dir, err := os.MkdirTemp("", "subnet-operator-fleet-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	root, err := environment.RepoRoot()
	if err == nil {
		managerBinary, err = environment.BuildManager(context.Background(), root, dir, true)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

const (
	platform = "platform" // the hub namespace of the plan
	plan     = "plan"     // the hub pool members take their ranges from
)

// cluster is one control plane with the operator, and an admin client.
type cluster struct {
	*environment.Environment
	c client.Client
}

func start(t *testing.T, opts environment.Options) *cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	opts.Dir, opts.Manager = t.TempDir(), managerBinary
	env, err := environment.Start(ctx, opts)
	if err != nil {
		t.Fatalf("starting a control plane: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, m := range env.Managers {
				t.Logf("%s log:\n%s", m.Name, tail(m.Log(), 60))
			}
		}
		env.Stop()
	})
	c, err := environment.AdminClient(env)
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{Environment: env, c: c}
}

// startHub starts the hub with the plan: 10.0.0.0/8, open to every
// namespace (each member claims from its own).
func startHub(t *testing.T) *cluster {
	t.Helper()
	return startHubWith(t, environment.Options{})
}

// startHubWith starts a hub with opts, and its plan: 10.0.0.0/8 in the
// platform namespace, open to every namespace.
func startHubWith(t *testing.T, opts environment.Options) *cluster {
	t.Helper()
	hub := start(t, opts)
	if err := environment.CreateIsolatedNamespace(context.Background(), hub.c, platform, nil); err != nil {
		t.Fatal(err)
	}
	create(t, hub.c, &ipamv1.SubnetPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: platform, Name: plan},
		Spec: ipamv1.SubnetPoolSpec{CIDR: "10.0.0.0/8", DefaultPrefixLength: ptr.To[int32](16),
			AllowedNamespaces: &ipamv1.AllowedNamespaces{From: ipamv1.FromAll}},
	})
	return hub
}

// startMember gives the member cluster name a namespace in the hub, a hub
// user bound to config/fleet-hub's Role there only, and starts the member
// with that user's kubeconfig in a Secret.
func startMember(t *testing.T, hub *cluster, name string) *cluster {
	t.Helper()
	ctx := context.Background()
	create(t, hub.c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	overlay := t.TempDir()
	component, err := filepath.Rel(overlay, filepath.Join(hub.RepoRoot, "config", "fleet-hub")) // kustomize takes relative paths only
	if err != nil {
		t.Fatal(err)
	}
	kustomization := fmt.Sprintf(`namespace: %s
components:
- %s
patches:
- target: {kind: RoleBinding, name: subnet-operator-fleet-member}
  patch: |-
    - op: replace
      path: /subjects/0/name
      value: %s
`, name, component, name)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := hub.Kubectl(ctx, nil, "apply", "-k", overlay); err != nil {
		t.Fatalf("applying config/fleet-hub for %s: %v\n%s", name, err, out)
	}
	kubeconfigPath, err := hub.AddUser(name)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := os.ReadFile(kubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	opts := environment.Options{}
	opts.AsFleetMember(name, kubeconfig)
	member := start(t, opts)
	if err := environment.CreateIsolatedNamespace(ctx, member.c, "network", nil); err != nil {
		t.Fatal(err)
	}
	return member
}

// delegated is a member root pool asking the hub's plan for a /16, or for
// cidr when it is set.
func delegated(name, cidr string) *ipamv1.SubnetPool {
	p := &ipamv1.SubnetPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "network", Name: name},
		Spec: ipamv1.SubnetPoolSpec{CIDR: cidr, DefaultPrefixLength: ptr.To[int32](24),
			Delegation: &ipamv1.PoolDelegation{PoolRef: ipamv1.PoolReference{Namespace: platform, Name: plan}}},
	}
	if cidr == "" {
		p.Spec.Delegation.PrefixLength = ptr.To[int32](16)
	}
	return p
}

// The happy path and the faults that need no second member, in order, on
// one hub and one member: each step starts from what the one before left.
func TestMemberPoolTakesItsRangeFromTheHub(t *testing.T) {
	hub := startHub(t)
	member := startMember(t, hub, "member-a")
	claimKey := types.NamespacedName{Namespace: "member-a", Name: "member-a.network.pods"}
	var granted string

	t.Run("granted, recorded and served", func(t *testing.T) {
		create(t, member.c, delegated("pods", ""))
		p := waitPool(t, member.c, "pods", func(p *ipamv1.SubnetPool) error {
			if p.Spec.CIDR == "" || p.Status.CIDR != p.Spec.CIDR || !meta.IsStatusConditionTrue(p.Status.Conditions, ipamv1.ConditionReady) {
				return fmt.Errorf("not serving a recorded range: spec %q status %q %v", p.Spec.CIDR, p.Status.CIDR, p.Status.Conditions)
			}
			return condition(p, ipamv1.ConditionDelegated, metav1.ConditionTrue, ipamv1.ReasonDelegated)
		})
		granted = p.Spec.CIDR
		if !strings.HasPrefix(granted, "10.") || !strings.HasSuffix(granted, "/16") {
			t.Fatalf("granted %s, not a /16 of the hub's 10.0.0.0/8", granted)
		}
		var claim ipamv1.Subnet
		if err := hub.c.Get(context.Background(), claimKey, &claim); err != nil {
			t.Fatal(err)
		}
		if claim.Status.CIDR != granted || claim.Labels[ipamv1.LabelMemberCluster] != "member-a" ||
			claim.Annotations[ipamv1.AnnotationMemberPool] != "network/pods" || claim.Annotations[ipamv1.AnnotationMemberPoolUID] != string(p.UID) {
			t.Fatalf("the hub's claim does not say who holds what: %+v %+v", claim.ObjectMeta, claim.Status)
		}
		waitSubnetReady(t, member.c, subnet("web", "pods"))
	})

	t.Run("a range the hub does not grant is not served", func(t *testing.T) {
		// A tenant writes a range of its choosing, outside the hub's plan:
		// the hub refuses the claim, and the member serves nothing.
		create(t, member.c, delegated("chosen", "192.168.0.0/16"))
		waitPool(t, member.c, "chosen", func(p *ipamv1.SubnetPool) error {
			if err := condition(p, ipamv1.ConditionReady, metav1.ConditionFalse, ipamv1.ReasonDelegationPending); err != nil {
				return err
			}
			if c := meta.FindStatusCondition(p.Status.Conditions, ipamv1.ConditionDelegated); c == nil || !strings.Contains(c.Message, "the hub refused the claim") {
				return fmt.Errorf("Delegated does not say the hub refused: %+v", c)
			}
			if p.Status.CIDR != "" {
				return fmt.Errorf("serves %s", p.Status.CIDR)
			}
			return nil
		})
	})

	t.Run("claim deleted in the hub: DelegationLost, the claim keeps the range until the pool goes", func(t *testing.T) {
		ctx := context.Background()
		var claim ipamv1.Subnet
		if err := hub.c.Get(ctx, claimKey, &claim); err != nil {
			t.Fatal(err)
		}
		oldUID := claim.UID
		if err := hub.c.Delete(ctx, &claim); err != nil {
			t.Fatal(err)
		}
		waitPool(t, member.c, "pods", func(p *ipamv1.SubnetPool) error {
			if err := condition(p, ipamv1.ConditionReady, metav1.ConditionTrue, ipamv1.ReasonAvailable); err != nil {
				return err
			}
			return condition(p, ipamv1.ConditionDelegated, metav1.ConditionFalse, ipamv1.ReasonDelegationLost)
		})
		// Still serving what it holds, and the hub still holds it for the
		// member: the member's finalizer keeps the claim.
		waitSubnetReady(t, member.c, subnet("while-lost", "pods"))
		if err := hub.c.Get(ctx, claimKey, &claim); err != nil {
			t.Fatal(err)
		}
		if claim.UID != oldUID || claim.DeletionTimestamp == nil || claim.Status.CIDR != granted {
			t.Fatalf("the deleted claim is not kept holding %s: uid %s (was %s), deletion %v, status %q", granted, claim.UID, oldUID, claim.DeletionTimestamp, claim.Status.CIDR)
		}
	})

	t.Run("member pool deleted: claim released once the pool holds nothing; restored: asks for its range back", func(t *testing.T) {
		ctx := context.Background()
		for _, name := range []string{"web", "while-lost"} {
			if err := member.c.Delete(ctx, subnet(name, "pods")); err != nil {
				t.Fatal(err)
			}
		}
		var p ipamv1.SubnetPool
		if err := member.c.Get(ctx, client.ObjectKey{Namespace: "network", Name: "pods"}, &p); err != nil {
			t.Fatal(err)
		}
		backup := delegated("pods", p.Spec.CIDR) // what a backup holds: spec, no status
		if err := member.c.Delete(ctx, &p); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, func() error { return gone(ctx, hub.c, member.c, claimKey) })

		// Restored: it asks for the recorded range and gets it.
		create(t, member.c, backup.DeepCopy())
		waitPool(t, member.c, "pods", func(p *ipamv1.SubnetPool) error {
			if p.Status.CIDR != granted {
				return fmt.Errorf("serves %q, want %s", p.Status.CIDR, granted)
			}
			return condition(p, ipamv1.ConditionDelegated, metav1.ConditionTrue, ipamv1.ReasonDelegated)
		})

		// Deleted again, and the range taken in the hub meanwhile: the
		// restored pool says why it does not get it back. This time the
		// backup tool restores its status too (and the manager's
		// annotation, which names the old object): a status is not a
		// grant, and the pool must not serve what the hub gave away.
		var served ipamv1.SubnetPool
		if err := member.c.Get(ctx, client.ObjectKeyFromObject(backup), &served); err != nil {
			t.Fatal(err)
		}
		withStatus := backup.DeepCopy()
		withStatus.Annotations = served.Annotations
		withStatus.Status = served.Status
		if err := member.c.Delete(ctx, &served); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, func() error { return gone(ctx, hub.c, member.c, claimKey) })
		create(t, hub.c, &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: platform, Name: "taken"},
			Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Namespace: platform, Name: plan}, CIDR: granted}})
		restored := withStatus.DeepCopy()
		create(t, member.c, restored)
		// As Velero's restoreStatus: the exported status onto the new
		// object, retried while the manager writes it too.
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := member.c.Get(ctx, client.ObjectKeyFromObject(restored), restored); err != nil {
				return err
			}
			restored.Status = withStatus.Status
			return member.c.Status().Update(ctx, restored)
		}); err != nil {
			t.Fatal(err)
		}
		waitPool(t, member.c, "pods", func(p *ipamv1.SubnetPool) error {
			if err := condition(p, ipamv1.ConditionReady, metav1.ConditionFalse, ipamv1.ReasonDelegationPending); err != nil {
				return err
			}
			if c := meta.FindStatusCondition(p.Status.Conditions, ipamv1.ConditionDelegated); c == nil ||
				!strings.Contains(c.Message, "the hub refused the claim") || !strings.Contains(c.Message, "overlaps") {
				return fmt.Errorf("Delegated does not say the range is taken in the hub: %+v", c)
			}
			// The range its status shows is kept from local roots, not
			// served, and not proven for this object.
			if p.Status.GrantedToUID == p.UID {
				return fmt.Errorf("status.grantedToUID names the restored object: %+v", p.Status)
			}
			if r := meta.FindStatusCondition(p.Status.Conditions, ipamv1.ConditionReady); !strings.Contains(r.Message, "not served") {
				return fmt.Errorf("Ready does not say the range shown is not served: %s", r.Message)
			}
			return nil
		})

	})
}

// The hub's API server really stopped: the member keeps serving what it
// holds, a new delegated pool waits HubUnreachable, nothing local is
// granted over a delegated range; with the hub back, the new pool is
// delegated.
func TestMemberServesWhatItHoldsWhileTheHubIsDown(t *testing.T) {
	hub := startHub(t)
	member := startMember(t, hub, "member-a")
	ctx := context.Background()
	create(t, member.c, delegated("pods", ""))
	p := waitPool(t, member.c, "pods", func(p *ipamv1.SubnetPool) error {
		return condition(p, ipamv1.ConditionDelegated, metav1.ConditionTrue, ipamv1.ReasonDelegated)
	})

	apiServer := process(t, hub.ControlPlane, "kube-apiserver")
	apiServer.Stop(20 * time.Second)
	if err := hub.c.Get(ctx, client.ObjectKey{Name: platform}, &corev1.Namespace{}); err == nil {
		t.Fatal("the hub's API server still answers")
	}

	// The member's manager restarted while the hub is down: what the pool
	// holds it still serves, before the hub is asked again.
	restartCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for _, m := range member.Managers {
		m.Process.Stop(15 * time.Second)
		if err := member.StartManager(restartCtx, m); err != nil {
			t.Fatal(err)
		}
	}
	waitSubnetReady(t, member.c, subnet("web", "pods"))
	if err := member.c.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	if err := condition(p, ipamv1.ConditionReady, metav1.ConditionTrue, ipamv1.ReasonAvailable); err != nil {
		t.Fatalf("after the member's restart, with the hub down: %v", err)
	}
	create(t, member.c, delegated("more", ""))
	waitPool(t, member.c, "more", func(p *ipamv1.SubnetPool) error {
		if err := condition(p, ipamv1.ConditionReady, metav1.ConditionFalse, ipamv1.ReasonHubUnreachable); err != nil {
			return err
		}
		return condition(p, ipamv1.ConditionDelegated, metav1.ConditionFalse, ipamv1.ReasonHubUnreachable)
	})
	// A local root pool over the delegated range is refused.
	local := &ipamv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Namespace: "network", Name: "local"},
		Spec: ipamv1.SubnetPoolSpec{CIDR: p.Spec.CIDR}}
	if err := member.c.Create(ctx, local); !apierrors.IsInvalid(err) {
		t.Fatalf("a local root pool over the delegated %s: %v, want refused", p.Spec.CIDR, err)
	}

	if err := hub.RestartAPIServer(restartCtx); err != nil {
		t.Fatal(err)
	}
	for _, m := range hub.Managers {
		if !m.Running() { // it lost its lease with the API server
			if err := hub.StartManager(restartCtx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitPool(t, member.c, "more", func(p *ipamv1.SubnetPool) error {
		if p.Status.CIDR == "" {
			return fmt.Errorf("serves nothing yet: %v", p.Status.Conditions)
		}
		return condition(p, ipamv1.ConditionDelegated, metav1.ConditionTrue, ipamv1.ReasonDelegated)
	})
}

// Two members asking the hub at once get disjoint ranges, each recorded in
// its own pool: the hub's arbiter decides between their claims.
func TestTwoMembersAskingAtOnceGetDisjointRanges(t *testing.T) {
	hub := startHub(t)
	members := []*cluster{startMember(t, hub, "member-a"), startMember(t, hub, "member-b")}
	done := make(chan error, len(members))
	for _, m := range members {
		go func() { done <- m.c.Create(context.Background(), delegated("pods", "")) }()
	}
	for range members {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	var ranges []netip.Prefix
	for _, m := range members {
		p := waitPool(t, m.c, "pods", func(p *ipamv1.SubnetPool) error {
			if p.Spec.CIDR == "" || p.Status.CIDR != p.Spec.CIDR {
				return fmt.Errorf("not serving a recorded range: spec %q status %q", p.Spec.CIDR, p.Status.CIDR)
			}
			return condition(p, ipamv1.ConditionDelegated, metav1.ConditionTrue, ipamv1.ReasonDelegated)
		})
		ranges = append(ranges, netip.MustParsePrefix(p.Spec.CIDR))
	}
	if ranges[0].Overlaps(ranges[1]) {
		t.Fatalf("members were granted overlapping ranges %s and %s", ranges[0], ranges[1])
	}
	var claims ipamv1.SubnetList
	if err := hub.c.List(context.Background(), &claims, client.HasLabels{ipamv1.LabelMemberCluster}); err != nil {
		t.Fatal(err)
	}
	held := map[string]string{}
	for _, s := range claims.Items {
		held[s.Labels[ipamv1.LabelMemberCluster]] = s.Status.CIDR
	}
	if want := map[string]string{"member-a": ranges[0].String(), "member-b": ranges[1].String()}; !maps.Equal(held, want) {
		t.Fatalf("the hub's claims say %v, the members serve %v", held, want)
	}
}

func process(t *testing.T, cp *controlplane.ControlPlane, name string) *controlplane.Process {
	t.Helper()
	for _, p := range cp.Processes() {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no %s running", name)
	return nil
}

func subnet(name, pool string) *ipamv1.Subnet {
	return &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: "network", Name: name},
		Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Namespace: "network", Name: pool}, PrefixLength: ptr.To[int32](24)}}
}

func create(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

func waitSubnetReady(t *testing.T, c client.Client, s *ipamv1.Subnet) {
	t.Helper()
	create(t, c, s)
	eventually(t, time.Minute, func() error {
		var got ipamv1.Subnet
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(s), &got); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(got.Status.Conditions, ipamv1.ConditionReady) {
			return fmt.Errorf("Subnet %s not Ready: %v", s.Name, got.Status.Conditions)
		}
		return nil
	})
}

// waitPool waits until the member pool name satisfies cond, and returns it.
func waitPool(t *testing.T, c client.Client, name string, cond func(*ipamv1.SubnetPool) error) *ipamv1.SubnetPool {
	t.Helper()
	var p ipamv1.SubnetPool
	eventually(t, time.Minute, func() error {
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "network", Name: name}, &p); err != nil {
			return err
		}
		return cond(&p)
	})
	return &p
}

func condition(p *ipamv1.SubnetPool, typ string, status metav1.ConditionStatus, reason string) error {
	c := meta.FindStatusCondition(p.Status.Conditions, typ)
	if c == nil || c.Status != status || c.Reason != reason {
		return fmt.Errorf("SubnetPool %s: %s is %+v, want %s/%s", p.Name, typ, c, status, reason)
	}
	return nil
}

// gone says whether the member pool network/pods and its claim in the hub
// are both gone.
func gone(ctx context.Context, hub, member client.Client, claimKey types.NamespacedName) error {
	if err := hub.Get(ctx, claimKey, &ipamv1.Subnet{}); !apierrors.IsNotFound(err) {
		return fmt.Errorf("the hub's claim is still there (%v)", err)
	}
	if err := member.Get(ctx, client.ObjectKey{Namespace: "network", Name: "pods"}, &ipamv1.SubnetPool{}); !apierrors.IsNotFound(err) {
		return fmt.Errorf("the member pool is still there (%v)", err)
	}
	return nil
}

// eventually polls cond every 50 ms until it returns nil or timeout passes.
func eventually(t *testing.T, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = cond(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("not within %s: %v", timeout, err)
}

func tail(log []byte, lines int) string {
	all := strings.Split(string(log), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}

// A claim deleted in the hub while the member is down (its leader failing
// over, or cut off from the hub) must not free the range the member serves:
// nobody else in the hub may be granted it meanwhile. The member's own
// finalizer on its claim keeps the range held in the hub until the member
// releases it (its pool deleted).
func TestAClaimDeletedInTheHubKeepsItsRangeWhileTheMemberServesIt(t *testing.T) {
	hub := startHub(t)
	member := startMember(t, hub, "member-a")
	ctx := context.Background()
	create(t, member.c, delegated("pods", ""))
	p := waitPool(t, member.c, "pods", func(p *ipamv1.SubnetPool) error {
		if p.Status.CIDR == "" {
			return fmt.Errorf("serves nothing yet: %v", p.Status.Conditions)
		}
		return condition(p, ipamv1.ConditionDelegated, metav1.ConditionTrue, ipamv1.ReasonDelegated)
	})
	waitSubnetReady(t, member.c, subnet("web", "pods"))

	for _, m := range member.Managers {
		m.Process.Stop(20 * time.Second)
	}
	claimKey := types.NamespacedName{Namespace: "member-a", Name: "member-a.network.pods"}
	if err := hub.c.Delete(ctx, &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: claimKey.Namespace, Name: claimKey.Name}}); err != nil {
		t.Fatal(err)
	}
	// Someone else in the hub asks for the range the member serves.
	grab := &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: platform, Name: "grab"},
		Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Namespace: platform, Name: plan}, CIDR: p.Status.CIDR}}
	if err := hub.c.Create(ctx, grab); apierrors.IsInvalid(err) {
		t.Logf("the hub refuses %s to another claim at admission: %v", p.Status.CIDR, err)
	} else if err != nil {
		t.Fatal(err)
	} else {
		waitRefused(t, hub.c, grab)
	}

	// Back up: the member still serves the range, says its claim is being
	// deleted, and releases it only with the pool.
	for _, m := range member.Managers {
		if err := member.StartManager(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	waitPool(t, member.c, "pods", func(p *ipamv1.SubnetPool) error {
		if err := condition(p, ipamv1.ConditionReady, metav1.ConditionTrue, ipamv1.ReasonAvailable); err != nil {
			return err
		}
		return condition(p, ipamv1.ConditionDelegated, metav1.ConditionFalse, ipamv1.ReasonDelegationLost)
	})
	if err := member.c.Delete(ctx, subnet("web", "pods")); err != nil {
		t.Fatal(err)
	}
	if err := member.c.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, func() error { return gone(ctx, hub.c, member.c, claimKey) })
}

// waitRefused waits until the hub decides the Subnet s, and fails the test
// if it grants it.
func waitRefused(t *testing.T, c client.Client, s *ipamv1.Subnet) {
	t.Helper()
	var decided *metav1.Condition
	eventually(t, time.Minute, func() error {
		var got ipamv1.Subnet
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(s), &got); err != nil {
			return err
		}
		if decided = meta.FindStatusCondition(got.Status.Conditions, ipamv1.ConditionReady); decided == nil {
			return fmt.Errorf("the hub has not decided Subnet %s yet", s.Name)
		}
		return nil
	})
	if decided.Status == metav1.ConditionTrue {
		t.Fatalf("the hub granted %s to Subnet %s while a member serves it (its claim deleted in the hub)", s.Spec.CIDR, s.Name)
	}
}
