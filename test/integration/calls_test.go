//go:build integration

package integration

import (
	"bufio"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

func metaOf(ns, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name}
}

// webhookCalls reads the API server's count of calls to each of our
// webhooks, by webhook name and operation ("msubnet CREATE").
func webhookCalls(t *testing.T) map[string]float64 {
	t.Helper()
	out, stderr, err := kubectl(t, "", "get", "--raw", "/metrics")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	line := regexp.MustCompile(`^apiserver_admission_webhook_admission_duration_seconds_count\{(.*)\} (\S+)$`)
	labelRe := regexp.MustCompile(`(\w+)="([^"]*)"`)
	calls := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		labels := map[string]string{}
		for _, l := range labelRe.FindAllStringSubmatch(m[1], -1) {
			labels[l[1]] = l[2]
		}
		name, ok := strings.CutSuffix(labels["name"], ".ipam.subnet-operator.io")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatal(err)
		}
		calls[name+" "+labels["operation"]] += v
	}
	return calls
}

// The API server calls a webhook only when its answer can matter
// (matchConditions in config/webhook): one lifecycle of a pool and three
// Subnets, with the edits a cluster makes to them (the controller's
// finalizer, labels), costs the calls listed here and no others. Before the
// conditions it cost 21 (every create and update called both webhooks).
func TestWebhookCallsPerLifecycle(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	before := webhookCalls(t)

	shared := newPool(ns, "p", "10.77.0.0/16", 24)
	shared.Spec.AllowedNamespaces = &ipamv1.AllowedNamespaces{From: ipamv1.FromAll}
	create(t, shared)
	poolShows(t, ns, "p", func(p *ipamv1.SubnetPool) error {
		if !slices.Contains(p.Finalizers, ipamv1.FinalizerPoolProtection) {
			return fmt.Errorf("finalizers %v", p.Finalizers)
		}
		return nil
	})
	// None writes its pool's namespace: the admission policy fills it
	// (config/admission-policy) without a webhook call; dflt also leaves
	// its length to the defaulter.
	dflt := newSubnet(ns, "dflt", "p", 0)
	dflt.Spec.PrefixLength = nil // the defaulter fills it from the pool
	create(t, newSubnet(ns, "dyn", "p", 26), explicitSubnet(ns, "exp", "p", "10.77.5.0/24"), dflt)
	for _, name := range []string{"dyn", "exp", "dflt"} {
		if s := subnetReason(t, ns, name, ipamv1.ReasonAllocated); s.Spec.PoolRef != (ipamv1.PoolReference{Namespace: ns, Name: "p"}) {
			t.Errorf("%s: poolRef %+v, want the namespace filled", name, s.Spec.PoolRef)
		}
	}
	// A tenant's claim on the shared pool names it in full: nothing to
	// default, so only the validating webhook (consent) is called.
	tenantNS := namespace(t)
	tenant := newSubnet(tenantNS, "tenant", "p", 26)
	tenant.Spec.PoolRef.Namespace = ns
	create(t, tenant)
	subnetReason(t, tenantNS, "tenant", ipamv1.ReasonAllocated)
	if err := k8s.Delete(ctx, tenant); err != nil {
		t.Fatal(err)
	}
	if s := subnetReason(t, ns, "dflt", ipamv1.ReasonAllocated); s.Spec.PrefixLength == nil || *s.Spec.PrefixLength != 24 {
		t.Errorf("dflt: prefixLength %v, want the pool's default 24", s.Spec.PrefixLength)
	}
	// Metadata edits, as tools make them.
	label := client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"labels":{"team":"a"}}}`))
	for _, name := range []string{"dyn", "exp", "dflt"} {
		if err := k8s.Patch(ctx, &ipamv1.Subnet{ObjectMeta: metaOf(ns, name)}, label); err != nil {
			t.Fatal(err)
		}
	}
	if err := k8s.Patch(ctx, &ipamv1.SubnetPool{ObjectMeta: metaOf(ns, "p")}, label); err != nil {
		t.Fatal(err)
	}
	// A change of a Subnet's spec is refused by the schema, before any
	// validating webhook.
	_, stderr, err := kubectl(t, "", "patch", "subnet", "-n", ns, "exp", "--type=merge", "-p", `{"spec":{"cidr":"10.77.6.0/24"}}`)
	if err == nil || !strings.Contains(stderr, `spec.cidr: Invalid value: "10.77.6.0/24": cidr is immutable`) {
		t.Errorf("changing a cidr: %v %s", err, stderr)
	}
	for _, name := range []string{"dyn", "exp", "dflt"} {
		if err := k8s.Delete(ctx, &ipamv1.Subnet{ObjectMeta: metaOf(ns, name)}); err != nil {
			t.Fatal(err)
		}
	}
	// The deletes were acknowledged, so the webhook's freshness barrier
	// sees the pool unused: one DELETE suffices. Wait for the controller's
	// last status write first: the API server asks the webhook again when
	// a write lands between its read and its update of the pool (a conflict
	// it retries), which would make the count below vary.
	poolShows(t, ns, "p", func(p *ipamv1.SubnetPool) error {
		if p.Status.Subnets != 0 {
			return fmt.Errorf("status counts %d Subnets", p.Status.Subnets)
		}
		return nil
	})
	if err := k8s.Delete(ctx, &ipamv1.SubnetPool{ObjectMeta: metaOf(ns, "p")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() error {
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "p"}, &ipamv1.SubnetPool{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pool still there (finalizer not removed?): %w", err)
		}
		return nil
	})

	after := webhookCalls(t)
	got := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			got[k] = d
		}
	}
	want := map[string]float64{
		"msubnet CREATE":     1, // only dflt needed defaulting (its length)
		"vsubnet CREATE":     4,
		"msubnetpool CREATE": 1,
		"vsubnetpool CREATE": 1,
		"vsubnetpool DELETE": 1, // not the finalizer's add and removal
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("webhook calls in one lifecycle:\n got %v\nwant %v", got, want)
	}
	t.Logf("webhook calls in one lifecycle: %v", got)
}
