//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1alpha1 "github.com/subnet-operator/subnet-operator/api/v1alpha1"
	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// A real claim into another namespace's pool, made through v1alpha2, keeps
// its range when a v1alpha1 client whose types lack status.decidedFor reads
// it and writes it back (a GitOps tool's read-modify-write), even after the
// pool withdrew its consent (then a dropped status could not come back).
func TestCrossNamespaceClaimKeepsItsRangeThroughV1alpha1(t *testing.T) {
	ctx := context.Background()
	serveV1alpha1Everywhere(t)
	other, ns := versionsNamespace(t, "other"), versionsNamespace(t, "tenant")
	if _, stderr, err := kubectl(t, strings.NewReplacer("OTHER", other, "NS", ns).Replace(`apiVersion: ipam.subnet-operator.io/v1alpha2
kind: SubnetPool
metadata: {name: dc, namespace: OTHER}
spec: {cidr: 10.0.0.0/16, defaultPrefixLength: 24, allowedNamespaces: {from: All}}
---
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: Subnet
metadata: {name: web, namespace: NS}
spec: {poolRef: {name: dc, namespace: OTHER}, prefixLength: 24}
`), "create", "-f", "-"); err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	key := client.ObjectKey{Namespace: ns, Name: "web"}
	var web ipamv1.Subnet
	eventually(t, time.Minute, func() error {
		if err := k8s.Get(ctx, key, &web); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(web.Status.Conditions, ipamv1.ConditionReady) || web.Spec.CIDR == "" || web.Spec.CIDR != web.Status.CIDR {
			return fmt.Errorf("not Ready with its range recorded: spec %+v status %+v", web.Spec, web.Status)
		}
		return nil
	})
	held := web.Status.CIDR
	if _, stderr, err := kubectl(t, "", "patch", "subnetpool.v1alpha2.ipam.subnet-operator.io", "dc", "-n", other, "--type=merge",
		"-p", `{"spec":{"allowedNamespaces":{"from":"Same"}}}`); err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}

	scheme := runtime.NewScheme()
	if err := ipamv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	legacy, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	for i, write := range []string{"update", "update with status.decidedFor dropped", "merge patch of a label"} {
		var old ipamv1alpha1.Subnet
		if err := legacy.Get(ctx, key, &old); err != nil {
			t.Fatal(err)
		}
		if old.Status.DecidedFor != other+"/dc" {
			t.Errorf("v1alpha1 status.decidedFor %q; want %s/dc", old.Status.DecidedFor, other)
		}
		switch i {
		case 0, 1:
			if i == 1 {
				old.Status.DecidedFor = ""
			}
			old.Labels = map[string]string{"step": fmt.Sprint(i)}
			err = legacy.Update(ctx, &old)
		case 2:
			err = legacy.Patch(ctx, &old, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"labels":{"step":"2"}}}`)))
		}
		if err != nil {
			t.Fatalf("%s through v1alpha1: %v", write, err)
		}
		var now ipamv1.Subnet
		if err := k8s.Get(ctx, key, &now); err != nil {
			t.Fatal(err)
		}
		if now.Status.CIDR != held || !meta.IsStatusConditionTrue(now.Status.Conditions, ipamv1.ConditionReady) || now.Spec.PoolRef.Namespace != other {
			t.Errorf("after a v1alpha1 %s: poolRef %s, status %+v; want %s/dc still holding %s", write, now.Spec.PoolRef, now.Status, other, held)
		}
	}
}
