package ipamcli

import (
	"bytes"
	"context"
	"net/netip"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	capiipam "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// in moves an object into a namespace.
func in[T client.Object](namespace string, o T) T {
	o.SetNamespace(namespace)
	return o
}

// who-has lists the outermost range first across namespaces: the platform's
// root, then a tenant's child pool, then the Subnet, then the Cluster API
// IPAddress on the address, named with its claim.
func TestWhoHasIsOutermostFirstAcrossNamespacesAndNamesIPAddresses(t *testing.T) {
	root := in("platform", pool("dc1", "172.16.0.0/16", "", 10))
	team := in("payments", pool("team", "172.16.64.0/20", "", 5))
	team.Spec.ParentRef = &ipamv1.PoolReference{Namespace: "platform", Name: "dc1"}
	sn := in("apps", held("machines", "team", "172.16.64.0/24"))
	sn.Spec.PoolRef = ipamv1.PoolReference{Namespace: "payments", Name: "team"}
	addr := &capiipam.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "md-0-abc"},
		Spec: capiipam.IPAddressSpec{
			ClaimRef: capiipam.IPAddressClaimReference{Name: "md-0-abc-claim"},
			PoolRef:  capiipam.IPPoolReference{APIGroup: ipamv1.GroupVersion.Group, Kind: "Subnet", Name: "machines"},
			Address:  "172.16.64.5", Prefix: ptr.To[int32](24),
		},
	}
	elsewhere := addr.DeepCopy()
	elsewhere.Name, elsewhere.Spec.Address = "other", "172.16.64.6"

	c := fakeClientWithCAPI(t, root, team, sn, addr, elsewhere)
	holders, err := WhoHas(context.Background(), c, "", mustQuery(t, "172.16.64.5"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range holders {
		got = append(got, h.Kind+" "+h.Namespace+"/"+h.Name)
	}
	want := "SubnetPool platform/dc1, SubnetPool payments/team, Subnet apps/machines, IPAddress apps/md-0-abc"
	if strings.Join(got, ", ") != want {
		t.Fatalf("who-has: %s\nwant:    %s", strings.Join(got, ", "), want)
	}
	last := holders[len(holders)-1]
	if last.Claim != "md-0-abc-claim" || last.Pool != "machines" || !last.Holds {
		t.Errorf("IPAddress holder %+v: want its claim and Subnet named, held", last)
	}
	var out bytes.Buffer
	if err := (printer{out: &out}).whoHas("172.16.64.5", holders); err != nil || !strings.Contains(out.String(), "md-0-abc-claim") {
		t.Errorf("table does not name the claim: %q, %v", out.String(), err)
	}
}

// Without the Cluster API CRDs (or the right to list them) who-has still
// answers for pools and Subnets.
func TestWhoHasWithoutClusterAPI(t *testing.T) {
	c := fakeClient(t, pool("p", "10.0.0.0/24", "", 0))
	holders, err := WhoHas(context.Background(), c, "", mustQuery(t, "10.0.0.1"))
	if err != nil || len(holders) != 1 {
		t.Fatalf("who-has without Cluster API: %v, %v", holders, err)
	}
}

// tree -n payments shows a parent in another namespace as being there, not
// as missing.
func TestTreeNamesAParentInAnotherNamespace(t *testing.T) {
	root := in("platform", pool("dc1", "172.16.0.0/16", "", 10))
	team := in("payments", pool("team", "172.16.64.0/20", "", 5))
	team.Spec.ParentRef = &ipamv1.PoolReference{Namespace: "platform", Name: "dc1"}
	gone := in("payments", pool("lost", "172.17.0.0/24", "", 0))
	gone.Spec.ParentRef = &ipamv1.PoolReference{Namespace: "platform", Name: "gone"}
	c := fakeClient(t, root, team, gone)
	roots, err := Tree(context.Background(), c, "payments")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := (printer{out: &out}).tree(roots); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "payments/team (parent in platform)") || !strings.Contains(s, "payments/lost (parent platform/gone not found)") {
		t.Errorf("tree -n payments:\n%s", s)
	}
}

// next on a pool without a default length asks for --length instead of
// talking about a /-1.
func TestNextWithoutDefaultLengthAsksForOne(t *testing.T) {
	p := pool("nodef", "10.0.0.0/24", "", 0)
	p.Spec.DefaultPrefixLength = nil
	_, err := Next(context.Background(), fakeClient(t, p), "ns", "nodef", -1)
	if err == nil || !strings.Contains(err.Error(), "--length") || strings.Contains(err.Error(), "/-1") {
		t.Errorf("next without a default length: %v, want a hint to pass --length", err)
	}
}

// Counts read as English and IPv6 figures as powers of two.
func TestFreeOutputPluralsAndIPv6Counts(t *testing.T) {
	var out bytes.Buffer
	one := FreeResult{Namespace: "ns", Pool: "p", CIDR: "10.0.0.0/24", Total: "256", Blocks: []FreeBlock{{CIDR: "10.0.0.0/24", Addresses: "256"}}}
	if err := (printer{out: &out}).free(one); err != nil || !strings.Contains(out.String(), "256 free addresses in 1 block\n") {
		t.Errorf("free with one block: %q", out.String())
	}
	out.Reset()
	l := 26
	one.Length, one.Total, one.Blocks[0].Fits = &l, "4", "4"
	if err := (printer{out: &out}).free(one); err != nil || !strings.Contains(out.String(), "from 1 block\n") {
		t.Errorf("free --length with one block: %q", out.String())
	}
	out.Reset()
	v6 := FreeResult{Namespace: "ns", Pool: "v6", CIDR: "2001:db8::/48", Total: "1208925819614629174706176",
		Blocks: []FreeBlock{{CIDR: "2001:db8::/48", Addresses: "1208925819614629174706176"}}}
	if err := (printer{out: &out}).free(v6); err != nil || !strings.Contains(out.String(), "2^80 free addresses") || strings.Contains(out.String(), "1208925819614629174706176") {
		t.Errorf("IPv6 free: %q", out.String())
	}
}

func mustQuery(t *testing.T, s string) netip.Prefix {
	t.Helper()
	p, err := ParseQuery(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func fakeClientWithCAPI(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := ipamv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := capiipam.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
}
