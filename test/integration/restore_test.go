//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// TestARestoredStatusDoesNotCarryARangeIntoAnotherPool: a backup tool
// restores a Subnet and then its status (Velero restores status on
// request), Ready with a range that another namespace's claim holds since
// (a stale backup, or a forged one). The arbiter did not grant it: the
// controller takes it back (Ready=False, the range dropped, never recorded
// in spec.cidr) and decides the claim again; the holder keeps its range.
func TestARestoredStatusDoesNotCarryARangeIntoAnotherPool(t *testing.T) {
	ctx := context.Background()
	other, ns := versionsNamespace(t, "other"), versionsNamespace(t, "tenant")
	// A full pool: the restored claim waits, so that only the restore
	// writes its status.
	if _, stderr, err := kubectl(t, strings.NewReplacer("OTHER", other, "NS", ns).Replace(`apiVersion: ipam.subnet-operator.io/v1alpha2
kind: SubnetPool
metadata: {name: dc, namespace: OTHER}
spec: {cidr: 10.0.0.0/23, defaultPrefixLength: 24, allowedNamespaces: {from: All}}
---
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: Subnet
metadata: {name: db, namespace: OTHER}
spec: {poolRef: {name: dc}, cidr: 10.0.1.0/24}
---
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: Subnet
metadata: {name: infra, namespace: OTHER}
spec: {poolRef: {name: dc}, cidr: 10.0.0.0/24}
`), "create", "-f", "-"); err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	for _, name := range []string{"db", "infra"} {
		eventually(t, time.Minute, func() error {
			var s ipamv1.Subnet
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: other, Name: name}, &s); err != nil {
				return err
			}
			if !meta.IsStatusConditionTrue(s.Status.Conditions, ipamv1.ConditionReady) {
				return fmt.Errorf("%s not Ready: %+v", name, s.Status)
			}
			return nil
		})
	}
	// The restore: the object as backed up (before its range was recorded
	// in spec), then its status.
	length := int32(24)
	web := &ipamv1.Subnet{}
	web.Namespace, web.Name = ns, "web"
	web.Spec = ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Namespace: other, Name: "dc"}, PrefixLength: &length}
	if err := k8s.Create(ctx, web); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(web), web); err != nil {
			return err
		}
		if ready := meta.FindStatusCondition(web.Status.Conditions, ipamv1.ConditionReady); ready == nil || ready.Reason != ipamv1.ReasonPoolExhausted {
			return fmt.Errorf("web not waiting PoolExhausted: %+v", web.Status)
		}
		return nil
	})
	web.Status.CIDR = "10.0.1.0/24"
	meta.SetStatusCondition(&web.Status.Conditions, metav1.Condition{Type: ipamv1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: ipamv1.ReasonAllocated, Message: "restored from a backup", ObservedGeneration: web.Generation})
	if err := k8s.Status().Update(ctx, web); err != nil {
		t.Fatal(err)
	}
	// The controller takes the range back and decides web again: the pool
	// is full, so it waits.
	eventually(t, time.Minute, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(web), web); err != nil {
			return err
		}
		ready := meta.FindStatusCondition(web.Status.Conditions, ipamv1.ConditionReady)
		if ready == nil || ready.Reason != ipamv1.ReasonPoolExhausted || web.Status.CIDR != "" {
			return fmt.Errorf("web not waiting PoolExhausted with its range dropped: %+v", web.Status)
		}
		return nil
	})
	if web.Spec.CIDR != "" {
		t.Errorf("the restored range was recorded in web's spec.cidr: %q", web.Spec.CIDR)
	}
	var db ipamv1.Subnet
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: other, Name: "db"}, &db); err != nil {
		t.Fatal(err)
	}
	if !meta.IsStatusConditionTrue(db.Status.Conditions, ipamv1.ConditionReady) || db.Status.CIDR != "10.0.1.0/24" {
		t.Errorf("db lost its range: %+v", db.Status)
	}
}
