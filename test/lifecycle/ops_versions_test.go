//go:build integration

package lifecycle

// The deprecated API version (v1alpha1, served here as the
// config/serve-v1alpha1 component serves it) and the annotations its
// conversion reads (../shared/design.md, "Untrusted callers": no
// annotation or older API version can move a claim past a check the
// current version enforces):
//
//	operation                 weight  exercises
//	v1alpha1-round-trip          3    a Subnet or pool read and written back through v1alpha1, as a GitOps tool
//	                                  on the old version does: unchanged (it must keep what it holds, the
//	                                  conversion's status and annotations included); or, as a hostile tenant,
//	                                  with the pool-ref (parent-ref) annotation naming another namespace's pool
//	                                  of the same name, or with its gateway changed: both refused (V1)
//
// V1 (the driver's own check): a hostile v1alpha1 write is refused. What
// an accepted one did is judged by the history's checks like any write:
// one holder per range (S1), consent across namespaces (S5).

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	ipamv1alpha1 "github.com/subnet-operator/subnet-operator/api/v1alpha1"
	"github.com/subnet-operator/subnet-operator/test/environment"
)

const opV1alpha1RoundTrip = "v1alpha1-round-trip"

// The ways a v1alpha1 round trip changes the object.
const (
	v1alpha1Unchanged  = "unchanged"
	v1alpha1MoveRef    = "move-reference" // the reference annotation names another namespace
	v1alpha1NewGateway = "new-gateway"
)

// v1alpha1Op is a request's v1alpha1 round trip.
type v1alpha1Op struct {
	change string
	// foreign is the namespace the moved reference names.
	foreign string
}

// v1alpha1RoundTrip draws a round trip of one of ns's Subnets or pools.
func (g *generator) v1alpha1RoundTrip(ns *nsPlan) *operation {
	subnets, pools := sortedKeys(ns.subnets), sortedKeys(ns.pools)
	for _, d := range sortedKeys(ns.delegated) { // those of a range the generator does not know too
		if ns.pools[d] == nil {
			pools = append(pools, d)
		}
	}
	kind, names := kindSubnet, subnets
	if len(pools) > 0 && (len(subnets) == 0 || g.chance(0.3)) {
		kind, names = kindPool, pools
	}
	if len(names) == 0 {
		return g.make(opCreateDynamic)
	}
	v := &v1alpha1Op{change: v1alpha1Unchanged}
	switch n := g.rng.IntN(4); {
	case n == 2:
		var others []string
		for _, o := range g.nss {
			if o != ns {
				others = append(others, o.name)
			}
		}
		if len(others) > 0 {
			v.change, v.foreign = v1alpha1MoveRef, g.pick(others)
		}
	case n == 3 && kind == kindSubnet:
		v.change = v1alpha1NewGateway
	}
	return &operation{kind: opV1alpha1RoundTrip, requests: []*request{{
		rec:      opRecord{Op: opV1alpha1RoundTrip, Verb: "update-v1alpha1", Kind: kind, Namespace: ns.name, Name: g.pick(names), Message: v.change},
		v1alpha1: v,
	}}}
}

// sendV1alpha1 sends a v1alpha1 round trip; handled is false for any other
// request.
func (d *driver) sendV1alpha1(ctx context.Context, r *request, rec *opRecord) (handled bool, err error) {
	if r.v1alpha1 == nil {
		return false, nil
	}
	resource := "subnets"
	annotation := ipamv1alpha1.AnnotationPoolRef
	refField := []string{"spec", "poolRef"}
	if rec.Kind == kindPool {
		resource, annotation, refField = "subnetpools", ipamv1alpha1.AnnotationParentRef, []string{"spec", "parentRef"}
	}
	// The deprecation warning of every v1alpha1 request is expected here.
	cfg := rest.CopyConfig(d.env.Config)
	cfg.WarningHandler = rest.NoWarnings{}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return true, err
	}
	c := dyn.Resource(schema.GroupVersionResource{Group: "ipam.subnet-operator.io", Version: "v1alpha1", Resource: resource}).Namespace(rec.Namespace)
	o, err := c.Get(ctx, rec.Name, metav1.GetOptions{})
	if err != nil {
		return true, err
	}
	hostile := false
	switch r.v1alpha1.change {
	case v1alpha1MoveRef:
		ref, _, _ := unstructured.NestedString(o.Object, refField...)
		if ref == "" {
			break // a root pool: nothing to move; written back unchanged
		}
		annotations := o.GetAnnotations()
		if annotations == nil {
			annotations = map[string]string{}
		}
		current, target := annotations[annotation], r.v1alpha1.foreign+"/"+ref
		if current == "" {
			current = rec.Namespace + "/" + ref
		}
		if target == current {
			break // it already names that namespace's pool: nothing moves
		}
		annotations[annotation] = target
		o.SetAnnotations(annotations)
		hostile = true
	case v1alpha1NewGateway:
		_ = unstructured.SetNestedField(o.Object, "192.0.2.1", "spec", "gateway")
		hostile = true
	}
	updated, err := c.Update(ctx, o, metav1.UpdateOptions{})
	if err != nil {
		return true, err // a conflict (written since the read) is an outcome too
	}
	rec.Outcome = outcomeUpdated
	rec.RV, rec.UID = parseRV(updated.GetResourceVersion()), updated.GetUID()
	if hostile {
		d.fail("V1", fmt.Sprintf("%s/%s/%s/%d", rec.Kind, rec.Namespace, rec.Name, rec.RV),
			"a v1alpha1 write with %s was accepted (rv %d): %s %s/%s", r.v1alpha1.change, rec.RV, rec.Kind, rec.Namespace, rec.Name)
	}
	return true, nil
}

// serveV1alpha1 serves the deprecated version of both CRDs, as the
// config/serve-v1alpha1 component does, and waits until it answers.
func serveV1alpha1(ctx context.Context, e *environment.Environment) error {
	dyn, err := dynamic.NewForConfig(e.Config)
	if err != nil {
		return err
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	patch := []byte(`[{"op":"test","path":"/spec/versions/0/name","value":"v1alpha1"},{"op":"replace","path":"/spec/versions/0/served","value":true}]`)
	for _, name := range []string{"subnetpools.ipam.subnet-operator.io", "subnets.ipam.subnet-operator.io"} {
		if _, err := crds.Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("serving v1alpha1 of %s: %w", name, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, resource := range []string{"subnets", "subnetpools"} {
		for {
			_, err := dyn.Resource(schema.GroupVersionResource{Group: "ipam.subnet-operator.io", Version: "v1alpha1", Resource: resource}).List(ctx, metav1.ListOptions{Limit: 1})
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("v1alpha1 %s not served: %w", resource, err)
			}
			sleep(ctx, 200*time.Millisecond)
		}
	}
	return nil
}
