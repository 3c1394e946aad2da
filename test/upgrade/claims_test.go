//go:build integration

package upgrade

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	ipamv1alpha1 "github.com/subnet-operator/subnet-operator/api/v1alpha1"
	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/test/controlplane"
	"github.com/subnet-operator/subnet-operator/test/environment"
)

// The platform's namespace and a tenant's, in the earlier release, where a
// reference was a name in the object's own namespace.
const (
	platform = "netops"
	tenant   = "tenant"
)

// leavePlantedAnnotations installs the earlier release's CRDs and leaves
// what a tenant could leave there: its own pool corp, a Subnet and a child
// pool granted from it, both annotated with the annotations this release
// reads as v1alpha2 references (api/v1alpha1/conversion.go) naming the
// platform's pool of the same name. The earlier release knew no such
// annotation, so nothing checked them. The platform's pool corp (the same
// range: the earlier release had no address spaces) has claims of its own
// on the same ranges.
func leavePlantedAnnotations(ctx context.Context, cp *controlplane.ControlPlane) error {
	manifest, err := os.ReadFile(filepath.Join("testdata", "v1alpha1-crds.yaml"))
	if err != nil {
		return err
	}
	if _, err := cp.Kubectl(ctx, manifest, "apply", "--server-side", "-f", "-"); err != nil {
		return err
	}
	if _, err := cp.Kubectl(ctx, nil, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/subnetpools.ipam.subnet-operator.io", "crd/subnets.ipam.subnet-operator.io"); err != nil {
		return err
	}
	for _, ns := range []string{tenant, platform} {
		if _, err := cp.Kubectl(ctx, nil, "create", "namespace", ns); err != nil {
			return err
		}
	}
	c, err := legacyClient(cp.Config)
	if err != nil {
		return err
	}
	ready := func(reason string) []metav1.Condition {
		return []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: reason, Message: "decided by the earlier release",
			LastTransitionTime: metav1.Now(), ObservedGeneration: 1}}
	}
	planted := func(ns, name, annotation string) metav1.ObjectMeta {
		m := metav1.ObjectMeta{Namespace: ns, Name: name}
		if annotation != "" {
			m.Annotations = map[string]string{annotation: platform + "/corp"}
		}
		return m
	}
	pool := func(ns, name, cidr, parent, annotation string) client.Object {
		return &ipamv1alpha1.SubnetPool{ObjectMeta: planted(ns, name, annotation), Spec: ipamv1alpha1.SubnetPoolSpec{CIDR: cidr, ParentRef: parent},
			Status: ipamv1alpha1.SubnetPoolStatus{CIDR: cidr, Conditions: ready("Available")}}
	}
	subnet := func(ns, name, cidr, annotation string) client.Object {
		return &ipamv1alpha1.Subnet{ObjectMeta: planted(ns, name, annotation), Spec: ipamv1alpha1.SubnetSpec{PoolRef: "corp", CIDR: cidr},
			Status: ipamv1alpha1.SubnetStatus{CIDR: cidr, Conditions: ready("Allocated")}}
	}
	for _, obj := range []client.Object{
		pool(tenant, "corp", "10.0.0.0/16", "", ""),
		subnet(tenant, "web", "10.0.1.0/24", ipamv1alpha1.AnnotationPoolRef),
		pool(tenant, "team", "10.0.2.0/24", "corp", ipamv1alpha1.AnnotationParentRef),
		pool(platform, "corp", "10.0.0.0/16", "", ""),
		subnet(platform, "db", "10.0.1.0/24", ""),
		subnet(platform, "infra", "10.0.2.0/24", ""),
	} {
		status := obj.DeepCopyObject().(client.Object)
		if err := c.Create(ctx, obj); err != nil {
			return err
		}
		// The earlier release's controller wrote the status.
		switch o := obj.(type) {
		case *ipamv1alpha1.Subnet:
			o.Status = status.(*ipamv1alpha1.Subnet).Status
		case *ipamv1alpha1.SubnetPool:
			o.Status = status.(*ipamv1alpha1.SubnetPool).Status
		}
		if err := c.Status().Update(ctx, obj); err != nil {
			return err
		}
	}
	return nil
}

// TestUpgradeDoesNotMoveClaimsThroughAnnotations upgrades over annotations
// a tenant planted under the earlier release and checks that no claim
// moved by one keeps the range another pool granted it: the pool it now
// names judges it as it judges a create (this one refuses the tenant's
// namespace), and no pool has two Ready claims that overlap.
func TestUpgradeDoesNotMoveClaimsThroughAnnotations(t *testing.T) {
	ctrllog.SetLogger(logr.Discard())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	_, k8s := startUpgraded(ctx, t, environment.Options{
		BeforeInstall: leavePlantedAnnotations,
	})

	// A create of the same claim, as the tenant would send it now.
	create := &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "web-now"},
		Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Namespace: platform, Name: "corp"}, CIDR: "10.0.1.0/24"}}
	if err := k8s.Create(ctx, create); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("a create of web's claim on %s/corp: %v; want it refused (Forbidden)", platform, err)
	}

	// The annotations are read (the references move: conversion cannot
	// tell a planted annotation from one a v1alpha1 client sends back),
	// but what the tenant's pool granted stays behind: once this release's
	// controller has decided them, no pool has two Ready claims that
	// overlap, the moved claims wait, NotAllowed, as the create was
	// refused, and the platform's claims keep their ranges.
	var web ipamv1.Subnet
	var team ipamv1.SubnetPool
	waitFor(ctx, t, "the moved claims decided by this release", func() (bool, string) {
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: tenant, Name: "web"}, &web); err != nil {
			return false, err.Error()
		}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: tenant, Name: "team"}, &team); err != nil {
			return false, err.Error()
		}
		decided := func(conditions []metav1.Condition, observed, generation int64) bool {
			ready := meta.FindStatusCondition(conditions, ipamv1.ConditionReady)
			return ready != nil && ready.Message != "decided by the earlier release" && observed == generation
		}
		return decided(web.Status.Conditions, web.Status.ObservedGeneration, web.Generation) &&
			decided(team.Status.Conditions, team.Status.ObservedGeneration, team.Generation), fmt.Sprintf("web %+v; team %+v", web.Status, team.Status)
	})
	if overlaps := readyOverlaps(ctx, t, k8s); len(overlaps) > 0 {
		t.Errorf("Ready claims that overlap in one pool:\n%s", strings.Join(overlaps, "\n"))
	}
	corp := ipamv1.PoolReference{Namespace: platform, Name: "corp"}
	webReady := meta.FindStatusCondition(web.Status.Conditions, ipamv1.ConditionReady)
	if web.Spec.PoolRef != corp || web.Status.CIDR != "" || webReady.Status != metav1.ConditionFalse || webReady.Reason != ipamv1.ReasonNotAllowed {
		t.Errorf("web: poolRef %s, status.cidr %q, Ready %+v; want %s, no range, NotAllowed", web.Spec.PoolRef, web.Status.CIDR, webReady, corp)
	}
	teamReady := meta.FindStatusCondition(team.Status.Conditions, ipamv1.ConditionReady)
	if team.Spec.ParentRef == nil || *team.Spec.ParentRef != corp || team.Status.CIDR != "" || teamReady.Status != metav1.ConditionFalse || teamReady.Reason != ipamv1.ReasonNotAllowed {
		t.Errorf("team: parentRef %v, status.cidr %q, Ready %+v; want %s, no range, NotAllowed", team.Spec.ParentRef, team.Status.CIDR, teamReady, corp)
	}
	for _, name := range []string{"db", "infra"} {
		var s ipamv1.Subnet
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: platform, Name: name}, &s); err != nil {
			t.Fatal(err)
		}
		if !meta.IsStatusConditionTrue(s.Status.Conditions, ipamv1.ConditionReady) || s.Status.CIDR != s.Spec.CIDR {
			t.Errorf("%s/%s lost its range: status %+v", platform, name, s.Status)
		}
	}
}

// readyOverlaps lists the pairs of claims that hold overlapping ranges
// from one pool: Ready Subnets, and child pools that serve a range.
func readyOverlaps(ctx context.Context, t *testing.T, k8s client.Client) []string {
	t.Helper()
	type held struct {
		claim string
		cidr  netip.Prefix
	}
	byPool := map[string][]held{}
	var subnets ipamv1.SubnetList
	if err := k8s.List(ctx, &subnets); err != nil {
		t.Fatal(err)
	}
	for _, s := range subnets.Items {
		if p, err := netip.ParsePrefix(s.Status.CIDR); err == nil && meta.IsStatusConditionTrue(s.Status.Conditions, ipamv1.ConditionReady) {
			pool := s.Spec.PoolRef.In(s.Namespace) + "/" + s.Spec.PoolRef.Name
			byPool[pool] = append(byPool[pool], held{"Subnet " + s.Namespace + "/" + s.Name, p})
		}
	}
	var pools ipamv1.SubnetPoolList
	if err := k8s.List(ctx, &pools); err != nil {
		t.Fatal(err)
	}
	for _, p := range pools.Items {
		if cidr, err := netip.ParsePrefix(p.Status.CIDR); err == nil && p.Spec.ParentRef != nil {
			parent := p.Spec.ParentRef.In(p.Namespace) + "/" + p.Spec.ParentRef.Name
			byPool[parent] = append(byPool[parent], held{"SubnetPool " + p.Namespace + "/" + p.Name, cidr})
		}
	}
	var found []string
	for pool, claims := range byPool {
		for i, a := range claims {
			for _, b := range claims[i+1:] {
				if a.cidr.Overlaps(b.cidr) {
					found = append(found, fmt.Sprintf("%s: %s %s and %s %s", pool, a.claim, a.cidr, b.claim, b.cidr))
				}
			}
		}
	}
	slices.Sort(found)
	return found
}
