package v1alpha1

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/randfill"

	"github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// rounds is how many random objects each round trip converts.
const rounds = 2000

// filler makes random objects whose names and namespaces are ones the API
// server accepts (a reference is never "a/b/c"), so that every difference
// a round trip shows is the conversion's.
func filler(seed int64) *randfill.Filler {
	names := []string{"", "a", "corp", "team-a", "dc.example"}
	pick := func(c randfill.Continue) string { return names[c.Intn(len(names))] }
	return randfill.NewWithSeed(seed).NilChance(0.2).Funcs(
		func(m *metav1.ObjectMeta, c randfill.Continue) {
			c.FillNoCustom(m)
			m.Namespace = pick(c)
			// The annotations that carry references, as a client may write
			// them: well formed or not, agreeing with the reference or not.
			for _, reserved := range []string{AnnotationPoolRef, AnnotationParentRef, AnnotationAllowedNamespaces, AnnotationDelegation} {
				switch c.Intn(4) {
				case 0:
					delete(m.Annotations, reserved)
				case 1:
					if m.Annotations == nil {
						m.Annotations = map[string]string{}
					}
					m.Annotations[reserved] = pick(c) + "/" + pick(c)
				case 2:
					if m.Annotations == nil {
						m.Annotations = map[string]string{}
					}
					m.Annotations[reserved] = pick(c)
				}
			}
		},
		func(r *v1alpha2.PoolReference, c randfill.Continue) {
			r.Name, r.Namespace = pick(c), pick(c)
			if strings.Contains(r.Namespace, ".") { // v1alpha2's schema refuses it
				r.Namespace = ""
			}
			if r.Name == "" {
				r.Name = "p"
			}
		},
		func(s *SubnetSpec, c randfill.Continue) {
			c.FillNoCustom(s)
			s.PoolRef = pick(c)
		},
		func(s *SubnetPoolSpec, c randfill.Continue) {
			c.FillNoCustom(s)
			s.ParentRef = pick(c)
		},
		// The pool a status was decided for: none (the own namespace's),
		// one that names a pool, or junk.
		func(s *SubnetStatus, c randfill.Continue) {
			c.FillNoCustom(s)
			s.DecidedFor = decidedForOf(c, pick)
		},
		func(s *SubnetPoolStatus, c randfill.Continue) {
			c.FillNoCustom(s)
			s.DecidedFor = decidedForOf(c, pick)
		},
	)
}

func decidedForOf(c randfill.Continue, pick func(randfill.Continue) string) string {
	switch c.Intn(3) {
	case 0:
		return ""
	case 1:
		return pick(c) + "/" + pick(c)
	}
	return pick(c)
}

// decidedByV1alpha1 is what a v1alpha1 status means after a round trip
// through v1alpha2, given the reference's name and its annotation as
// carriedByV1alpha1 left them: kept if it was decided for the reference
// the object converts to (recorded in decidedFor, or the own namespace's
// pool without one), otherwise dropped; decidedFor then names that
// reference if it is in another namespace. It returns the new decidedFor
// and whether the rest of the status stays.
func decidedByV1alpha1(meta *metav1.ObjectMeta, name, annotation, recorded string) (string, bool) {
	carried := meta.Annotations[annotation]
	ref := carried
	if ref == "" {
		ref = meta.Namespace + "/" + name
	}
	if recorded == "" {
		recorded = meta.Namespace + "/" + name
	}
	return carried, recorded == ref
}

// sameNamespace is ref as the operator reads it: an empty namespace is the
// referring object's own, which is what v1alpha1 can say.
func sameNamespace(ref *v1alpha2.PoolReference, own string) {
	if ref != nil && ref.Namespace == "" {
		ref.Namespace = own
	}
}

// withoutAnnotation is meta without the reserved annotation: a v1alpha2
// object's copy of it is not data, and does not survive a round trip.
func withoutAnnotation(meta *metav1.ObjectMeta, annotation string) {
	delete(meta.Annotations, annotation)
	if len(meta.Annotations) == 0 {
		meta.Annotations = nil
	}
}

// carriedByV1alpha1 is what a v1alpha1 object's reserved annotation means
// after a round trip through v1alpha2: kept if it names, in another
// namespace, the pool the reference names; otherwise dropped.
func carriedByV1alpha1(meta *metav1.ObjectMeta, name, annotation string) {
	carried, ok := meta.Annotations[annotation]
	if !ok {
		return
	}
	ns, carriedName, found := strings.Cut(carried, "/")
	if !found || ns == "" || strings.Contains(ns, ".") || ns == meta.Namespace || name == "" || carriedName != name {
		withoutAnnotation(meta, annotation)
	}
}

// allowedCarriedByV1alpha1 is what a v1alpha1 pool's allowedNamespaces
// annotation means after a round trip: kept, in the form v1alpha2 writes
// it, if it decodes; otherwise dropped.
func allowedCarriedByV1alpha1(meta *metav1.ObjectMeta) {
	carried, ok := meta.Annotations[AnnotationAllowedNamespaces]
	if !ok {
		return
	}
	var allowed v1alpha2.AllowedNamespaces
	if json.Unmarshal([]byte(carried), &allowed) != nil {
		withoutAnnotation(meta, AnnotationAllowedNamespaces)
		return
	}
	data, _ := json.Marshal(allowed)
	meta.Annotations[AnnotationAllowedNamespaces] = string(data)
}

// jsonCarriedByV1alpha1 is what an annotation carrying a v1alpha2 field as
// JSON means after a round trip: kept, in the form v1alpha2 writes it, if it
// decodes; otherwise dropped.
func jsonCarriedByV1alpha1[T any](meta *metav1.ObjectMeta, annotation string) {
	carried, ok := meta.Annotations[annotation]
	if !ok {
		return
	}
	var value T
	if json.Unmarshal([]byte(carried), &value) != nil {
		withoutAnnotation(meta, annotation)
		return
	}
	data, _ := json.Marshal(value)
	meta.Annotations[annotation] = string(data)
}

func TestSubnetRoundTrips(t *testing.T) {
	ctx := context.Background()
	f := filler(1)
	for range rounds {
		var hub v1alpha2.Subnet
		f.Fill(&hub)
		var spoke Subnet
		if err := ConvertSubnetFromHub(ctx, &hub, &spoke); err != nil {
			t.Fatal(err)
		}
		var back v1alpha2.Subnet
		if err := ConvertSubnetToHub(ctx, &spoke, &back); err != nil {
			t.Fatalf("%v\n%+v", err, spoke)
		}
		want := hub.DeepCopy()
		want.TypeMeta = metav1.TypeMeta{}
		sameNamespace(&want.Spec.PoolRef, want.Namespace)
		withoutAnnotation(&want.ObjectMeta, AnnotationPoolRef)
		if !apiequality.Semantic.DeepEqual(want, &back) {
			t.Fatalf("v1alpha2 -> v1alpha1 -> v1alpha2 (-want +got):\n%s", cmp.Diff(want, &back))
		}
	}
	for range rounds {
		var spoke Subnet
		f.Fill(&spoke)
		var hub v1alpha2.Subnet
		if err := ConvertSubnetToHub(ctx, &spoke, &hub); err != nil {
			t.Fatal(err)
		}
		if _, carried := spoke.Annotations[AnnotationPoolRef]; !carried && hub.Spec.PoolRef.Namespace != spoke.Namespace {
			t.Fatalf("poolRef %q of a Subnet in %q became %+v", spoke.Spec.PoolRef, spoke.Namespace, hub.Spec.PoolRef)
		}
		var back Subnet
		if err := ConvertSubnetFromHub(ctx, &hub, &back); err != nil {
			t.Fatal(err)
		}
		want := spoke.DeepCopy()
		want.TypeMeta = metav1.TypeMeta{}
		carriedByV1alpha1(&want.ObjectMeta, want.Spec.PoolRef, AnnotationPoolRef)
		decided, kept := decidedByV1alpha1(&want.ObjectMeta, want.Spec.PoolRef, AnnotationPoolRef, want.Status.DecidedFor)
		if !kept {
			want.Status = SubnetStatus{}
		}
		want.Status.DecidedFor = decided
		if !apiequality.Semantic.DeepEqual(want, &back) {
			t.Fatalf("v1alpha1 -> v1alpha2 -> v1alpha1 (-want +got):\n%s", cmp.Diff(want, &back))
		}
	}
}

func TestSubnetPoolRoundTrips(t *testing.T) {
	ctx := context.Background()
	f := filler(2)
	for range rounds {
		var hub v1alpha2.SubnetPool
		f.Fill(&hub)
		var spoke SubnetPool
		if err := ConvertSubnetPoolFromHub(ctx, &hub, &spoke); err != nil {
			t.Fatal(err)
		}
		var back v1alpha2.SubnetPool
		if err := ConvertSubnetPoolToHub(ctx, &spoke, &back); err != nil {
			t.Fatalf("%v\n%+v", err, spoke)
		}
		want := hub.DeepCopy()
		want.TypeMeta = metav1.TypeMeta{}
		sameNamespace(want.Spec.ParentRef, want.Namespace)
		withoutAnnotation(&want.ObjectMeta, AnnotationParentRef)
		withoutAnnotation(&want.ObjectMeta, AnnotationAllowedNamespaces)
		withoutAnnotation(&want.ObjectMeta, AnnotationDelegation)
		if !apiequality.Semantic.DeepEqual(want, &back) {
			t.Fatalf("v1alpha2 -> v1alpha1 -> v1alpha2 (-want +got):\n%s", cmp.Diff(want, &back))
		}
	}
	for range rounds {
		var spoke SubnetPool
		f.Fill(&spoke)
		var hub v1alpha2.SubnetPool
		if err := ConvertSubnetPoolToHub(ctx, &spoke, &hub); err != nil {
			t.Fatal(err)
		}
		var back SubnetPool
		if err := ConvertSubnetPoolFromHub(ctx, &hub, &back); err != nil {
			t.Fatal(err)
		}
		want := spoke.DeepCopy()
		want.TypeMeta = metav1.TypeMeta{}
		carriedByV1alpha1(&want.ObjectMeta, want.Spec.ParentRef, AnnotationParentRef)
		allowedCarriedByV1alpha1(&want.ObjectMeta)
		jsonCarriedByV1alpha1[v1alpha2.PoolDelegation](&want.ObjectMeta, AnnotationDelegation)
		decided, kept := decidedByV1alpha1(&want.ObjectMeta, want.Spec.ParentRef, AnnotationParentRef, want.Status.DecidedFor)
		if want.Spec.ParentRef == "" { // a root pool's status is decided in its address space
			decided, kept = "", true
		}
		if !kept {
			want.Status = SubnetPoolStatus{}
		}
		want.Status.DecidedFor = decided
		if !apiequality.Semantic.DeepEqual(want, &back) {
			t.Fatalf("v1alpha1 -> v1alpha2 -> v1alpha1 (-want +got):\n%s", cmp.Diff(want, &back))
		}
	}
}

// A reference into another namespace, read and written back by a v1alpha1
// client, keeps its namespace; the annotation that carried it is gone.
func TestCrossNamespaceReferenceSurvivesV1alpha1(t *testing.T) {
	ctx := context.Background()
	hub := &v1alpha2.Subnet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "web", Annotations: map[string]string{"keep": "me"}},
		Spec:       v1alpha2.SubnetSpec{PoolRef: v1alpha2.PoolReference{Namespace: "netops", Name: "corp"}},
	}
	var spoke Subnet
	if err := ConvertSubnetFromHub(ctx, hub, &spoke); err != nil {
		t.Fatal(err)
	}
	if spoke.Spec.PoolRef != "corp" || spoke.Annotations[AnnotationPoolRef] != "netops/corp" {
		t.Fatalf("v1alpha1: poolRef %q, annotations %v", spoke.Spec.PoolRef, spoke.Annotations)
	}
	if hub.Annotations[AnnotationPoolRef] != "" {
		t.Fatal("the conversion changed its input's annotations")
	}
	spoke.Labels = map[string]string{"edited": "by a v1alpha1 client"}
	var back v1alpha2.Subnet
	if err := ConvertSubnetToHub(ctx, &spoke, &back); err != nil {
		t.Fatal(err)
	}
	if back.Spec.PoolRef != hub.Spec.PoolRef || len(back.Annotations) != 1 || back.Labels["edited"] == "" {
		t.Fatalf("back in v1alpha2: poolRef %+v, annotations %v, labels %v", back.Spec.PoolRef, back.Annotations, back.Labels)
	}

	// A malformed annotation, or one that names another pool, is dropped:
	// the reference is the name, in the object's namespace. (Whether an
	// update may change the reference is admission's check.)
	for _, carried := range []string{"corp", "netops/other", "/corp", "Netops/corp", "net.ops/corp", "netops/corp/x"} {
		spoke.Annotations = map[string]string{AnnotationPoolRef: carried}
		if err := ConvertSubnetToHub(ctx, &spoke, &back); err != nil {
			t.Fatal(err)
		}
		if want := (v1alpha2.PoolReference{Namespace: "team-a", Name: "corp"}); back.Spec.PoolRef != want || len(back.Annotations) != 0 {
			t.Errorf("annotation %q: poolRef %+v, annotations %v", carried, back.Spec.PoolRef, back.Annotations)
		}
	}
	// A v1alpha2 client's own copy of the annotation is not passed on.
	hub.Annotations = map[string]string{AnnotationPoolRef: "netops/spoofed"}
	hub.Spec.PoolRef = v1alpha2.PoolReference{Namespace: "team-a", Name: "spoofed"}
	if err := ConvertSubnetFromHub(ctx, hub, &spoke); err != nil {
		t.Fatal(err)
	}
	if len(spoke.Annotations) != 0 {
		t.Errorf("v1alpha1 shows %v for a reference in the object's own namespace", spoke.Annotations)
	}
}

// A status is the decision of the pool it was decided in. One that an
// annotation would carry to another pool is dropped, so that the pool the
// object now names judges the claim as it judges a create; one that a
// v1alpha1 client sends back for the pool it was decided in stays.
func TestStatusStaysWithThePoolThatDecidedIt(t *testing.T) {
	ctx := context.Background()
	held := SubnetStatus{CIDR: "10.0.1.0/24", Addresses: "256", ObservedGeneration: 1,
		Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Allocated"}}}

	// Stored by the earlier release, which knew no annotation: the status
	// was decided by tenant/corp, whatever the annotation says now.
	planted := &Subnet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "web", Annotations: map[string]string{AnnotationPoolRef: "netops/corp"}},
		Spec:       SubnetSpec{PoolRef: "corp", CIDR: "10.0.1.0/24"},
		Status:     held,
	}
	var hub v1alpha2.Subnet
	if err := ConvertSubnetToHub(ctx, planted, &hub); err != nil {
		t.Fatal(err)
	}
	if want := (v1alpha2.PoolReference{Namespace: "netops", Name: "corp"}); hub.Spec.PoolRef != want {
		t.Fatalf("poolRef %+v, want %+v", hub.Spec.PoolRef, want)
	}
	if diff := cmp.Diff(v1alpha2.SubnetStatus{}, hub.Status); diff != "" {
		t.Errorf("the status tenant/corp decided came along to netops/corp (-want +got):\n%s", diff)
	}
	// Without the annotation, it stays: the earlier release's objects.
	planted.Annotations = nil
	if err := ConvertSubnetToHub(ctx, planted, &hub); err != nil {
		t.Fatal(err)
	}
	if hub.Status.CIDR != held.CIDR {
		t.Errorf("a v1alpha1 Subnet's own status: status.cidr %q, want %q", hub.Status.CIDR, held.CIDR)
	}

	// A v1alpha2 claim on netops/corp, read and written back by a v1alpha1
	// client (the API server keeps the stored status on a spec write, and
	// converts the object to the storage version with it): it stays.
	decided := &v1alpha2.Subnet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "web"},
		Spec:       v1alpha2.SubnetSpec{PoolRef: v1alpha2.PoolReference{Namespace: "netops", Name: "corp"}, CIDR: "10.0.1.0/24"},
		Status:     v1alpha2.SubnetStatus{CIDR: held.CIDR, Addresses: held.Addresses, ObservedGeneration: 1, Conditions: held.Conditions},
	}
	var spoke Subnet
	if err := ConvertSubnetFromHub(ctx, decided, &spoke); err != nil {
		t.Fatal(err)
	}
	if spoke.Status.DecidedFor != "netops/corp" {
		t.Errorf("v1alpha1 status.decidedFor %q, want netops/corp", spoke.Status.DecidedFor)
	}
	var back v1alpha2.Subnet
	if err := ConvertSubnetToHub(ctx, &spoke, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(decided.Status, back.Status); diff != "" {
		t.Errorf("a round trip lost the status (-want +got):\n%s", diff)
	}
	// The earlier release's controller, still running during an upgrade,
	// writes a status for the pool of the name in the Subnet's namespace:
	// not the one it claims from.
	spoke.Status.DecidedFor = ""
	if err := ConvertSubnetToHub(ctx, &spoke, &back); err != nil {
		t.Fatal(err)
	}
	if back.Status.CIDR != "" {
		t.Errorf("a status decided for tenant/corp kept on a claim on netops/corp: %+v", back.Status)
	}

	// A child pool's status is its parent's decision, likewise.
	child := &SubnetPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "team", Annotations: map[string]string{AnnotationParentRef: "netops/corp"}},
		Spec:       SubnetPoolSpec{CIDR: "10.0.2.0/24", ParentRef: "corp"},
		Status:     SubnetPoolStatus{CIDR: "10.0.2.0/24", Conditions: held.Conditions},
	}
	var hubPool v1alpha2.SubnetPool
	if err := ConvertSubnetPoolToHub(ctx, child, &hubPool); err != nil {
		t.Fatal(err)
	}
	if hubPool.Spec.ParentRef == nil || hubPool.Spec.ParentRef.Namespace != "netops" || hubPool.Status.CIDR != "" {
		t.Errorf("child pool: parentRef %+v, status.cidr %q; want netops/corp and no range", hubPool.Spec.ParentRef, hubPool.Status.CIDR)
	}
	child.Status.DecidedFor = "netops/corp"
	if err := ConvertSubnetPoolToHub(ctx, child, &hubPool); err != nil {
		t.Fatal(err)
	}
	if hubPool.Status.CIDR != "10.0.2.0/24" {
		t.Errorf("a child pool's status decided for netops/corp: status.cidr %q, want 10.0.2.0/24", hubPool.Status.CIDR)
	}
}

// The gateway in effect (status.gateway, kubectl get -o wide's GATEWAY)
// reads the same through v1alpha1, and a v1alpha1 client's write keeps it.
func TestSubnetGatewayInEffectConverts(t *testing.T) {
	ctx := context.Background()
	hub := &v1alpha2.Subnet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "web"},
		Spec:       v1alpha2.SubnetSpec{PoolRef: v1alpha2.PoolReference{Namespace: "team-a", Name: "dc"}, CIDR: "10.0.1.0/24"},
		Status:     v1alpha2.SubnetStatus{CIDR: "10.0.1.0/24", Addresses: "256", Gateway: "10.0.1.1"},
	}
	var spoke Subnet
	if err := ConvertSubnetFromHub(ctx, hub, &spoke); err != nil {
		t.Fatal(err)
	}
	if spoke.Status.Gateway != "10.0.1.1" {
		t.Errorf("v1alpha1 status.gateway %q, want 10.0.1.1", spoke.Status.Gateway)
	}
	var back v1alpha2.Subnet
	if err := ConvertSubnetToHub(ctx, &spoke, &back); err != nil {
		t.Fatal(err)
	}
	if back.Status.Gateway != "10.0.1.1" {
		t.Errorf("v1alpha2 status.gateway after a v1alpha1 round trip %q, want 10.0.1.1", back.Status.Gateway)
	}
}
