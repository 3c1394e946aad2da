package v1alpha1

import (
	"context"
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
			for _, reserved := range []string{AnnotationPoolRef, AnnotationParentRef} {
				delete(m.Annotations, reserved)
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
		if hub.Spec.PoolRef.Namespace != spoke.Namespace {
			t.Fatalf("poolRef %q of a Subnet in %q became %+v", spoke.Spec.PoolRef, spoke.Namespace, hub.Spec.PoolRef)
		}
		var back Subnet
		if err := ConvertSubnetFromHub(ctx, &hub, &back); err != nil {
			t.Fatal(err)
		}
		want := spoke.DeepCopy()
		want.TypeMeta = metav1.TypeMeta{}
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

	// A malformed annotation is an error, not a silent guess.
	spoke.Annotations[AnnotationPoolRef] = "corp"
	if err := ConvertSubnetToHub(ctx, &spoke, &back); err == nil {
		t.Error("a malformed annotation converted")
	}
}
