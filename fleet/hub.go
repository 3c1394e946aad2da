// Package fleet lets a member cluster's root pools take their ranges from a
// pool in a hub cluster (spec.delegation): the member's manager claims the
// range in the hub with a Subnet in its own namespace there, so that the
// hub pool's consent and the hub's arbiter decide, records the grant in the
// member pool's spec and serves it. Each API server stays the source of
// truth for what it stores; there is no consensus of our own
// (docs/fleet.md).
package fleet

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// KubeconfigKey is the key of the hub's kubeconfig in its Secret, as
// Cluster API and kubeadm name it.
const KubeconfigKey = "value"

// Hub is the member's connection to the hub: a client for reads and writes
// (never cached: a read must fail when the hub is unreachable, not answer
// from a stale copy) and a cache of the Subnets in the member's namespace
// there, whose events trigger the member's reconciles.
type Hub struct {
	cluster.Cluster
	// Namespace is the member's namespace in the hub: where its claims go.
	Namespace string
}

// HubFromSecret reads the hub's kubeconfig from the Secret secretRef
// ("namespace/name", key "value" or "kubeconfig") in the member and makes
// the hub's cluster, with a cache of Subnets in the member's hub namespace
// only (the member's hub credentials may read nothing else). The namespace
// is the kubeconfig context's, or clusterName when it names none.
func HubFromSecret(ctx context.Context, reader client.Reader, secretRef, clusterName string, scheme *runtime.Scheme) (*Hub, error) {
	ns, name, ok := strings.Cut(secretRef, "/")
	if !ok || ns == "" || name == "" {
		return nil, fmt.Errorf("--hub-kubeconfig-secret must be namespace/name, not %q", secretRef)
	}
	var secret corev1.Secret
	if err := reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &secret); err != nil {
		return nil, fmt.Errorf("reading the hub's kubeconfig Secret %s: %w", secretRef, err)
	}
	data := secret.Data[KubeconfigKey]
	if len(data) == 0 {
		data = secret.Data["kubeconfig"]
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("the hub's kubeconfig Secret %s has no key %q (or \"kubeconfig\")", secretRef, KubeconfigKey)
	}
	loaded, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("the hub's kubeconfig in Secret %s: %w", secretRef, err)
	}
	clientConfig := clientcmd.NewDefaultClientConfig(*loaded, nil)
	config, err := clientConfig.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("the hub's kubeconfig in Secret %s: %w", secretRef, err)
	}
	return NewHub(config, hubNamespace(loaded, clusterName), scheme)
}

// hubNamespace is the member's namespace in the hub: the kubeconfig's
// current context's namespace, else the cluster name. (clientcmd's
// ClientConfig.Namespace reports only whether an override set it, not
// whether the context names one.)
func hubNamespace(kubeconfig *clientcmdapi.Config, clusterName string) string {
	if ctx := kubeconfig.Contexts[kubeconfig.CurrentContext]; ctx != nil && ctx.Namespace != "" {
		return ctx.Namespace
	}
	return clusterName
}

// NewHub makes the hub's cluster for a member whose hub namespace is
// namespace.
func NewHub(config *rest.Config, namespace string, scheme *runtime.Scheme) (*Hub, error) {
	c, err := cluster.New(config, func(o *cluster.Options) {
		o.Scheme = scheme
		// A fixed mapping of the one kind read in the hub, not discovery:
		// a member manager that (re)starts while the hub is unreachable
		// must still start its controllers and serve what it holds, and
		// a discovery call would fail the claims' informer, and with it
		// the manager.
		o.MapperProvider = func(*rest.Config, *http.Client) (meta.RESTMapper, error) {
			mapper := meta.NewDefaultRESTMapper([]schema.GroupVersion{ipamv1.GroupVersion})
			mapper.Add(ipamv1.GroupVersion.WithKind("Subnet"), meta.RESTScopeNamespace)
			return mapper, nil
		}
		o.Cache = cache.Options{
			DefaultNamespaces: map[string]cache.Config{namespace: {}},
			// Only Subnets are watched; any other read goes around it.
			ReaderFailOnMissingInformer: true,
		}
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to the hub: %w", err)
	}
	return &Hub{Cluster: c, Namespace: namespace}, nil
}

// Start runs the hub's cache. It is added to the member's manager as a
// plain runnable, not as a cache: the manager waits for its caches to sync
// before it serves anything, and a member must serve while the hub is
// unreachable. Its informer retries the hub on its own (client-go's
// reflector back-off).
func (h *Hub) Start(ctx context.Context) error {
	return h.Cluster.Start(ctx)
}

// claimName is the name of the Subnet a member pool's claim is in the hub:
// the member's identity and the pool's namespace and name, so that one
// member's pools never share a claim and a pool restored under its name
// finds its claim again.
func claimName(clusterName string, pool types.NamespacedName) string {
	return clusterName + "." + pool.Namespace + "." + pool.Name
}

// memberPoolOf is the member pool a hub Subnet is the claim of, if it is one
// of this member's.
func memberPoolOf(s client.Object, clusterName string) (types.NamespacedName, bool) {
	if s.GetLabels()[ipamv1.LabelMemberCluster] != clusterName {
		return types.NamespacedName{}, false
	}
	ns, name, ok := strings.Cut(s.GetAnnotations()[ipamv1.AnnotationMemberPool], "/")
	if !ok || ns == "" || name == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: ns, Name: name}, true
}
