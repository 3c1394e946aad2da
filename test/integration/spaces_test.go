//go:build integration

package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// Root pools of one address space never overlap, whichever namespaces they
// live in: a namespace that a platform pool refuses cannot open its own
// root pool over the platform's range and hand out the same addresses.
// The refusal names the holder only in the requester's own namespace. A
// named AddressSpace is how ranges overlap on purpose.
func TestRootPoolsOfASpaceDoNotOverlap(t *testing.T) {
	ctx := context.Background()
	id := fmt.Sprintf("%04x", rand.IntN(1<<16))
	// Namespaces in the default space (not namespace(t)'s own spaces).
	platform, tenant := "spaces-netops-"+id, "spaces-team-"+id
	for _, name := range []string{platform, tenant} {
		if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	// A range no other test of the suite uses in the default space.
	corp := &ipamv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Namespace: platform, Name: "corp"},
		Spec: ipamv1.SubnetPoolSpec{CIDR: "10.210.0.0/16", DefaultPrefixLength: ptr.To[int32](24)}}
	if err := k8s.Create(ctx, corp); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(corp), corp); err != nil {
			return err
		}
		if corp.Status.CIDR != "10.210.0.0/16" || !meta.IsStatusConditionTrue(corp.Status.Conditions, ipamv1.ConditionReady) {
			return fmt.Errorf("corp not serving yet: %+v", corp.Status)
		}
		if c := meta.FindStatusCondition(corp.Status.Conditions, ipamv1.ConditionAddressSpaceOverlap); c == nil || c.Status != metav1.ConditionFalse {
			return fmt.Errorf("corp's AddressSpaceOverlap: %+v", c)
		}
		return nil
	})

	mine := `
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: SubnetPool
metadata: {name: mine, namespace: ` + tenant + `}
spec: {cidr: 10.210.5.0/24}
`
	_, stderr, err := kubectl(t, mine, "create", "-f", "-")
	want := `spec.cidr: Invalid value: "10.210.5.0/24": overlaps a range held in another namespace (10.210.0.0/16), a root pool of address space default`
	if err == nil || !strings.Contains(stderr, want) || strings.Contains(stderr, platform) {
		t.Errorf("a tenant's root pool over the platform's range: %v\n%s\nwant %s, without the platform's namespace", err, stderr, want)
	}
	again := strings.ReplaceAll(mine, tenant, platform)
	_, stderr, err = kubectl(t, again, "create", "-f", "-")
	if err == nil || !strings.Contains(stderr, "overlaps SubnetPool "+platform+"/corp (10.210.0.0/16)") {
		t.Errorf("a root pool over another of its namespace: %v\n%s", err, stderr)
	}

	// A named space takes the tenant: the same range there is its own.
	lab := &ipamv1.AddressSpace{ObjectMeta: metav1.ObjectMeta{Name: "lab-" + id},
		Spec: ipamv1.AddressSpaceSpec{RootPoolNamespaces: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: tenant}}}}
	if err := k8s.Create(ctx, lab); err != nil {
		t.Fatal(err)
	}
	inLab := strings.Replace(mine, "spec: {cidr: 10.210.5.0/24}", "spec: {cidr: 10.210.0.0/16, addressSpace: lab-"+id+"}", 1)
	eventually(t, 10*time.Second, func() error { // the manager's view of the new space
		_, stderr, err := kubectl(t, inLab, "create", "-f", "-")
		if err != nil {
			return fmt.Errorf("%w: %s", err, stderr)
		}
		return nil
	})
	labPool := &ipamv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "mine"}}
	eventually(t, 10*time.Second, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(labPool), labPool); err != nil {
			return err
		}
		if labPool.Status.CIDR != "10.210.0.0/16" {
			return fmt.Errorf("the lab's root pool not serving yet: %+v", labPool.Status)
		}
		return nil
	})
	// The platform's namespace is not one the lab takes.
	_, stderr, err = kubectl(t, strings.ReplaceAll(inLab, tenant, platform), "create", "-f", "-")
	if err == nil || !strings.Contains(stderr, "lacks kubernetes.io/metadata.name="+tenant) {
		t.Errorf("a root pool in a space that does not take its namespace: %v\n%s", err, stderr)
	}
}
