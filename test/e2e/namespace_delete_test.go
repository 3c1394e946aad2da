//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestDeletingANamespaceWithNestedPools: kubectl delete namespace of a
// namespace holding a root pool, a child pool and a Subnet finishes. The
// namespace controller deletes pools in name order and retries what is
// refused; the pool webhook refused the parent while its child existed,
// so every retry stopped at the parent and the namespace stayed
// Terminating. In a namespace being deleted the webhook stands aside and
// the finalizers keep the order.
func TestDeletingANamespaceWithNestedPools(t *testing.T) {
	ns := namespace(t)
	mustKubectl(t, strings.ReplaceAll(`apiVersion: ipam.subnet-operator.io/v1alpha2
kind: SubnetPool
metadata: {name: a-parent, namespace: NS}
spec: {cidr: 10.60.0.0/16, defaultPrefixLength: 24}
---
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: SubnetPool
metadata: {name: b-child, namespace: NS}
spec: {cidr: 10.60.0.0/20, defaultPrefixLength: 24, parentRef: {name: a-parent}}
---
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: Subnet
metadata: {name: web, namespace: NS}
spec: {poolRef: {name: b-child}}
`, "NS", ns), "create", "-f", "-")
	mustKubectl(t, "", "wait", "--for=condition=Ready", "subnet/web", "-n", ns, "--timeout=60s")
	// Outside a namespace being deleted the refusal stands.
	if _, stderr, err := kubectl(t, "", "delete", "subnetpool", "a-parent", "-n", ns, "--wait=false"); err == nil || !strings.Contains(stderr, "in use by") {
		t.Fatalf("deleting the parent in use: err %v, %s", err, stderr)
	}
	mustKubectl(t, "", "delete", "namespace", ns, "--wait=false")
	eventually(t, 3*time.Minute, func() error {
		var n corev1.Namespace
		err := k8s.Get(context.Background(), client.ObjectKey{Name: ns}, &n)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		left, _, _ := kubectl(t, "", "get", "subnetpools,subnets", "-n", ns, "-o", "name")
		return fmt.Errorf("namespace %s still %s; left: %s", ns, n.Status.Phase, strings.Join(strings.Fields(left), " "))
	})
}
