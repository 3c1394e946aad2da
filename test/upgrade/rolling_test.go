//go:build integration

package upgrade

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	ipamv1alpha1 "github.com/subnet-operator/subnet-operator/api/v1alpha1"
	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/test/controlplane"
	"github.com/subnet-operator/subnet-operator/test/environment"
)

// During a rolling upgrade the earlier release's manager is still
// the leader for a while, reading and writing v1alpha1. Its pool controller
// writes status with a JSON merge patch computed between two copies of the
// object it read (client.MergeFromWithOptimisticLock): a field its types do
// not know, status.decidedFor, is not in the patch, so the API server keeps
// the decidedFor that the conversion from v1alpha2 wrote on the read, which
// always matches the reference the object converts to. Once the planted
// child pool is stored as v1alpha2 (any write does that: this release's
// controller, the tenant's own label update, or the old controller's own
// first status write, whose status is dropped), the old controller's next
// grant, decided for the tenant's pool tenant/corp, lands as the status of
// a child of netops/corp: the range that pool never granted, held beside
// its own claim on it.
func TestEarlierReleaseCannotGrantAMovedClaimDuringARollingUpgrade(t *testing.T) {
	ctrllog.SetLogger(logr.Discard())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// A rolling upgrade: the earlier release's manager still holds the
	// lease; this release's replica serves the webhooks and the conversion.
	env, k8s := startUpgraded(ctx, t, environment.Options{
		ManagerArgs: []string{"--leader-elect"},
		BeforeInstall: func(ctx context.Context, cp *controlplane.ControlPlane) error {
			if err := leavePlantedAnnotations(ctx, cp); err != nil {
				return err
			}
			return holdLeaseAsEarlierRelease(ctx, cp)
		},
	})
	old, err := legacyClient(env.ControlPlane.Config)
	if err != nil {
		t.Fatal(err)
	}
	serveV1alpha1(ctx, t, env, old)

	// The tenant labels its child pool (no webhook: the spec is unchanged):
	// it is stored as v1alpha2 now, its status dropped.
	key := client.ObjectKey{Namespace: tenant, Name: "team"}
	if err := k8s.Patch(ctx, &ipamv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "team"}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"touched":"yes"}}}`))); err != nil {
		t.Fatal(err)
	}
	var dropped ipamv1.SubnetPool
	if err := k8s.Get(ctx, key, &dropped); err != nil {
		t.Fatal(err)
	}
	if dropped.Status.CIDR != "" {
		t.Fatalf("precondition: team's status through v1alpha2 %+v; want it dropped", dropped.Status)
	}

	// The earlier release's pool controller, which reads parentRef "corp"
	// in the pool's own namespace, grants it 10.0.2.0/24 from tenant/corp
	// and patches the status as it does (a merge patch of what changed).
	const oldMessage = "granted by the earlier release's controller from tenant/corp"
	var team ipamv1alpha1.SubnetPool
	if err := old.Get(ctx, key, &team); err != nil {
		t.Fatal(err)
	}
	before := team.DeepCopy()
	team.Status.CIDR = "10.0.2.0/24"
	team.Status.ObservedGeneration = team.Generation
	meta.SetStatusCondition(&team.Status.Conditions, metav1.Condition{Type: ipamv1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: ipamv1.ReasonAvailable, Message: oldMessage, ObservedGeneration: team.Generation})
	// v1alpha1's schema refuses it: a status decided for a pool in another
	// namespace gets its range from this release's controller only.
	if err := old.Status().Patch(ctx, &team, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsInvalid(err) {
		t.Fatal(err)
	}

	// The earlier release's manager stops and releases the lease; this
	// release's replica becomes the leader and decides team.
	if _, err := env.Kubectl(ctx, nil, "delete", "lease", "-n", environment.Namespace, "subnet-operator.ipam.subnet-operator.io"); err != nil {
		t.Fatal(err)
	}
	var now ipamv1.SubnetPool
	waitFor(ctx, t, "team decided again by this release", func() (bool, string) {
		if err := k8s.Get(ctx, key, &now); err != nil {
			return false, err.Error()
		}
		ready := meta.FindStatusCondition(now.Status.Conditions, ipamv1.ConditionReady)
		return ready != nil && ready.Message != oldMessage, fmt.Sprintf("%+v", now.Status)
	})
	if now.Status.CIDR != "" || meta.IsStatusConditionTrue(now.Status.Conditions, ipamv1.ConditionReady) {
		t.Errorf("child pool %s/team (parentRef %v, moved by a planted annotation) holds %q from %s/corp, Ready %+v: the earlier release's grant from %s/corp came along",
			tenant, now.Spec.ParentRef, now.Status.CIDR, platform, meta.FindStatusCondition(now.Status.Conditions, ipamv1.ConditionReady), tenant)
	}
	if overlaps := readyOverlaps(ctx, t, k8s); len(overlaps) > 0 {
		t.Errorf("Ready claims that overlap in one pool:\n%s", strings.Join(overlaps, "\n"))
	}
}

// serveV1alpha1 serves the deprecated v1alpha1 of both kinds, as
// config/serve-v1alpha1 does (the earlier release's manager, still running
// during a rolling upgrade, reads and writes it), and waits until the API
// server serves it.
func serveV1alpha1(ctx context.Context, t *testing.T, env *environment.Environment, old client.Client) {
	t.Helper()
	const served = `[{"op":"test","path":"/spec/versions/0/name","value":"v1alpha1"},{"op":"replace","path":"/spec/versions/0/served","value":true}]`
	for _, crd := range []string{"subnetpools.ipam.subnet-operator.io", "subnets.ipam.subnet-operator.io"} {
		if _, err := env.Kubectl(ctx, nil, "patch", "crd", crd, "--type=json", "-p", served); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(ctx, t, "v1alpha1 served", func() (bool, string) {
		for _, list := range []client.ObjectList{&ipamv1alpha1.SubnetList{}, &ipamv1alpha1.SubnetPoolList{}} {
			if err := old.List(ctx, list, client.Limit(1)); err != nil {
				return false, err.Error()
			}
		}
		return true, ""
	})
}

// holdLeaseAsEarlierRelease takes the manager's leader lease in the name of
// the earlier release's manager, still running in a rolling upgrade: this
// release's replicas serve the webhooks and the conversion, but decide
// nothing and write nothing.
func holdLeaseAsEarlierRelease(ctx context.Context, cp *controlplane.ControlPlane) error {
	lease := fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %s
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: subnet-operator.ipam.subnet-operator.io
  namespace: %s
spec:
  holderIdentity: earlier-release-manager
  leaseDurationSeconds: 3600
  acquireTime: %s
  renewTime: %s
`, environment.Namespace, environment.Namespace, metav1.NowMicro().UTC().Format("2006-01-02T15:04:05.000000Z"), metav1.NowMicro().UTC().Format("2006-01-02T15:04:05.000000Z"))
	_, err := cp.Kubectl(ctx, []byte(lease), "apply", "-f", "-")
	return err
}
