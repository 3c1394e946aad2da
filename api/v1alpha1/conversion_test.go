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
			for _, reserved := range []string{AnnotationPoolRef, AnnotationParentRef, AnnotationAllowedNamespaces} {
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
	)
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
	if !found || ns == "" || ns == meta.Namespace || name == "" || carriedName != name {
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
	for _, carried := range []string{"corp", "netops/other", "/corp"} {
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
