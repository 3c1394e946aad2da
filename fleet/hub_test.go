package fleet

import (
	"context"
	"net"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// A member requeues only its own claims' pools: another member's claim in
// the same hub namespace, or a Subnet that is no member's claim, is none of
// its business.
func TestMemberPoolOfIsOnlyThisMembersClaims(t *testing.T) {
	pool := types.NamespacedName{Namespace: "network", Name: "pods"}
	claim := func(cluster, memberPool string) *ipamv1.Subnet {
		s := &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Name: claimName(cluster, pool)}}
		if cluster != "" {
			s.Labels = map[string]string{ipamv1.LabelMemberCluster: cluster}
		}
		if memberPool != "" {
			s.Annotations = map[string]string{ipamv1.AnnotationMemberPool: memberPool}
		}
		return s
	}
	tests := []struct {
		name  string
		s     *ipamv1.Subnet
		want  types.NamespacedName
		found bool
	}{
		{"its own", claim("member-a", "network/pods"), pool, true},
		{"another member's", claim("member-b", "network/pods"), types.NamespacedName{}, false},
		{"a Subnet of the hub's own", claim("", ""), types.NamespacedName{}, false},
		{"an annotation that names no pool", claim("member-a", "pods"), types.NamespacedName{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, found := memberPoolOf(tt.s, "member-a")
			if got != tt.want || found != tt.found {
				t.Errorf("memberPoolOf = %v, %v; want %v, %v", got, found, tt.want, tt.found)
			}
		})
	}
	if a, b := claimName("member-a", pool), claimName("member-b", pool); a == b {
		t.Errorf("two members' claims for one pool name share the name %s", a)
	}
}

// The member's hub namespace is its kubeconfig context's namespace when the
// context names one (docs/fleet.md), else its cluster name. Found by the
// lifecycle checker: the context's namespace was ignored.
func TestHubNamespaceIsTheContextsNamespace(t *testing.T) {
	kubeconfig := func(namespace string) *clientcmdapi.Config {
		c := clientcmdapi.NewConfig()
		c.Contexts["hub"] = &clientcmdapi.Context{Cluster: "hub", AuthInfo: "member", Namespace: namespace}
		c.CurrentContext = "hub"
		return c
	}
	if got := hubNamespace(kubeconfig("tenants-member-a"), "member-a"); got != "tenants-member-a" {
		t.Errorf("with a context namespace: %q, want tenants-member-a", got)
	}
	if got := hubNamespace(kubeconfig(""), "member-a"); got != "member-a" {
		t.Errorf("without one: %q, want the cluster name member-a", got)
	}
}

// A member's manager starts while the hub is unreachable (a restart during
// a hub outage): the claims' informer is registered without asking the hub
// anything, not even discovery, so the controller starts and the member
// serves what it holds. Here the hub is a port nobody listens on.
func TestHubInformerStartsWhileTheHubIsUnreachable(t *testing.T) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := listener.Addr().String()
	_ = listener.Close()
	scheme := runtime.NewScheme()
	if err := ipamv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	hub, err := NewHub(&rest.Config{Host: "https://" + addr, Timeout: time.Second}, "member-a", scheme)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := hub.GetCache().GetInformer(ctx, &ipamv1.Subnet{}, cache.BlockUntilSynced(false)); err != nil {
		t.Fatalf("the claims' informer with the hub unreachable: %v", err)
	}
}
