package ipamcli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

func pool(name, cidr, parent string, percent int32) *ipamv1.SubnetPool {
	p := &ipamv1.SubnetPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, CreationTimestamp: metav1.Now()},
		Spec:       ipamv1.SubnetPoolSpec{CIDR: cidr, ParentRef: parentRef(parent), DefaultPrefixLength: ptr.To[int32](26)},
		Status:     ipamv1.SubnetPoolStatus{CIDR: cidr, UtilizationPercent: ptr.To(percent), Utilization: "x%"},
	}
	meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: ipamv1.ConditionReady, Status: metav1.ConditionTrue, Reason: ipamv1.ReasonAvailable})
	return p
}

func held(name, pool, cidr string) *ipamv1.Subnet {
	s := &ipamv1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.Now()},
		Spec:       ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: pool}, CIDR: cidr},
		Status:     ipamv1.SubnetStatus{CIDR: cidr},
	}
	meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: ipamv1.ConditionReady, Status: metav1.ConditionTrue, Reason: ipamv1.ReasonAllocated})
	return s
}

func fakeClient(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := ipamv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithIndex(&ipamv1.Subnet{}, "spec.poolRef.name", func(o client.Object) []string { return []string{o.(*ipamv1.Subnet).Spec.PoolRef.Name} }).
		WithIndex(&ipamv1.SubnetPool{}, "spec.parentRef.name", func(o client.Object) []string {
			if ref := o.(*ipamv1.SubnetPool).Spec.ParentRef; ref != nil {
				return []string{ref.Name}
			}
			return nil
		}).
		Build()
}

// Every pool appears once: roots with their children, a pool whose parent
// is missing as a root that says so, and pools on a parentRef cycle (which
// hang from no root) as a tree of their own.
func TestTreeShowsEveryPoolOnce(t *testing.T) {
	c := fakeClient(t,
		pool("root", "10.0.0.0/16", "", 10), pool("child", "10.0.0.0/20", "root", 5), pool("orphan", "10.1.0.0/24", "gone", 0),
		pool("loop-a", "10.2.0.0/24", "loop-b", 0), pool("loop-b", "10.2.0.0/24", "loop-a", 0))
	roots, err := Tree(context.Background(), c, "")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var walk func(n PoolNode, depth int)
	walk = func(n PoolNode, depth int) {
		s := strings.Repeat(">", depth) + n.Name
		if n.MissingParent != "" {
			s += "(missing " + n.MissingParent + ")"
		}
		if n.InCycle {
			s += "(cycle)"
		}
		names = append(names, s)
		for _, c := range n.Children {
			walk(c, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	if got, want := strings.Join(names, " "), "orphan(missing gone) root >child loop-a(cycle) >loop-b"; got != want {
		t.Errorf("tree: %s, want %s", got, want)
	}
}

// Colours do not break the table: every bar cell has the same width on
// screen, and the escape codes the same length, whatever the colour.
func TestColouredBarsKeepColumnsAligned(t *testing.T) {
	plain, coloured := printer{}, printer{color: true}
	lengths := map[int]bool{}
	for _, percent := range []int32{0, 45, 70, 89, 90, 100} {
		if n := utf8.RuneCountInString(plain.bar(percent)); n != barWidth {
			t.Errorf("bar(%d) is %d cells, want %d", percent, n, barWidth)
		}
		lengths[len(coloured.bar(percent))] = true
	}
	if len(lengths) != 1 {
		t.Errorf("coloured bars differ in byte length: %v", lengths)
	}
	if strings.Contains(plain.bar(95), "\x1b") {
		t.Error("colour without a terminal")
	}
	if !strings.Contains(coloured.bar(95), "\x1b[31m") || !strings.Contains(coloured.bar(75), "\x1b[33m") || !strings.Contains(coloured.bar(10), "\x1b[32m") {
		t.Error("bars are not coloured by fullness")
	}
}

// next decides on a private ledger: it names the range the controller's
// best fit would take, and the same answer twice (nothing is allocated).
func TestNextIsBestFitAndAllocatesNothing(t *testing.T) {
	c := fakeClient(t, pool("p", "10.0.0.0/24", "", 0),
		held("a", "p", "10.0.0.0/25"), held("b", "p", "10.0.0.128/26"))
	for range 2 {
		r, err := Next(context.Background(), c, "ns", "p", -1)
		if err != nil {
			t.Fatal(err)
		}
		if r.CIDR != "10.0.0.192/26" || r.Length != 26 {
			t.Errorf("next: %+v, want 10.0.0.192/26 (the only free /26)", r)
		}
	}
	r, err := Next(context.Background(), c, "ns", "p", 25)
	if err != nil {
		t.Fatal(err)
	}
	if r.CIDR != "" || r.Reason != ipamv1.ReasonPoolExhausted {
		t.Errorf("next /25 in a pool with a /26 left: %+v, want PoolExhausted", r)
	}
	var out bytes.Buffer
	if err := (printer{out: &out}).next(r); err != nil || !strings.Contains(out.String(), "No /25 would be allocated from SubnetPool ns/p: PoolExhausted") {
		t.Errorf("next printed %q, %v", out.String(), err)
	}
}

func TestParseQuery(t *testing.T) {
	for arg, want := range map[string]string{"10.0.0.1": "10.0.0.1/32", "2001:db8::1": "2001:db8::1/128", "10.0.0.0/24": "10.0.0.0/24"} {
		if p, err := ParseQuery(arg); err != nil || p.String() != want {
			t.Errorf("ParseQuery(%q) = %v, %v; want %s", arg, p, err, want)
		}
	}
	for _, arg := range []string{"10.0.0.1/24", "fe80::1%eth0", "pool-a", ""} {
		if _, err := ParseQuery(arg); err == nil {
			t.Errorf("ParseQuery(%q) accepted", arg)
		}
	}
}

// parentRef references the parent pool name in the pool's own namespace;
// none for "".
func parentRef(name string) *ipamv1.PoolReference {
	if name == "" {
		return nil
	}
	return &ipamv1.PoolReference{Name: name}
}
