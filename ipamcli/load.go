// Package ipamcli is kubectl ipam, the kubectl plugin that shows the address
// space: the pool tree, a pool's free blocks, the range the next allocation
// would get, and who holds an address. It reads the cluster as the user
// (their kubeconfig and RBAC) and answers from the same code the operator
// decides with: the ledger and its arbiter, fed with what it listed.
package ipamcli

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
)

// listPageSize pages every LIST, so a cluster with 100k Subnets is read in
// bounded responses rather than one that the API server must hold whole.
const listPageSize = 500

func listPools(ctx context.Context, c client.Reader, opts ...client.ListOption) ([]ipamv1.SubnetPool, error) {
	var out []ipamv1.SubnetPool
	var page ipamv1.SubnetPoolList
	for {
		if err := c.List(ctx, &page, append(opts, client.Limit(listPageSize), client.Continue(page.Continue))...); err != nil {
			return nil, fmt.Errorf("listing SubnetPools: %w", err)
		}
		out = append(out, page.Items...)
		if page.Continue == "" {
			return out, nil
		}
	}
}

func listSubnets(ctx context.Context, c client.Reader, opts ...client.ListOption) ([]ipamv1.Subnet, error) {
	var out []ipamv1.Subnet
	var page ipamv1.SubnetList
	for {
		if err := c.List(ctx, &page, append(opts, client.Limit(listPageSize), client.Continue(page.Continue))...); err != nil {
			return nil, fmt.Errorf("listing Subnets: %w", err)
		}
		out = append(out, page.Items...)
		if page.Continue == "" {
			return out, nil
		}
	}
}

// poolLedger loads a pool, every pool of its namespace (its parent chain and
// child pools), and the Subnets that claim from it into a ledger of its own:
// the operator's record of that pool, rebuilt from what the API shows. The
// Subnets are selected on the server (spec.poolRef is a selectable field),
// so the read is the pool's size, not the cluster's. Claims may live in
// other namespaces (a pool that allows them, or did): they are listed in
// every namespace. A user who may not list cluster-wide gets the pool's
// own namespace, unless the pool allows others, where that would be a
// wrong answer: then the command says what it needs.
func poolLedger(ctx context.Context, c client.Reader, namespace, pool string) (*ledger.Ledger, *ipamv1.SubnetPool, error) {
	pools, err := listPools(ctx, c, client.InNamespace(namespace))
	if err != nil {
		return nil, nil, err
	}
	var target *ipamv1.SubnetPool
	l := ledger.New()
	for i := range pools {
		l.ApplyPool(&pools[i], ledger.Created, nil)
		if pools[i].Name == pool {
			target = &pools[i]
		}
	}
	if target == nil {
		return nil, nil, fmt.Errorf("SubnetPool %s/%s not found", namespace, pool)
	}
	shared := target.Spec.AllowedNamespaces != nil && target.Spec.AllowedNamespaces.From != "" && target.Spec.AllowedNamespaces.From != ipamv1.FromSame
	var scope []client.ListOption // every namespace
	children, err := listPools(ctx, c, client.MatchingFields{"spec.parentRef.name": pool})
	if apierrors.IsForbidden(err) && !shared {
		scope, err = []client.ListOption{client.InNamespace(namespace)}, nil // its own namespace's pools are loaded already
	}
	if err != nil {
		return nil, nil, fmt.Errorf("SubnetPool %s/%s may have child pools in other namespaces, which need a cluster-wide list: %w", namespace, pool, err)
	}
	for i := range children {
		if ref := children[i].Spec.ParentRef; children[i].Namespace != namespace && ref != nil && ref.In(children[i].Namespace) == namespace {
			l.ApplyPool(&children[i], ledger.Created, nil)
		}
	}
	subnets, err := listSubnets(ctx, c, append(scope, client.MatchingFields{"spec.poolRef.name": pool})...)
	if err != nil {
		if scope == nil {
			err = fmt.Errorf("SubnetPool %s/%s may have claims in other namespaces, whose Subnets need a cluster-wide list: %w", namespace, pool, err)
		}
		return nil, nil, err
	}
	for i := range subnets {
		// The field selector matches the name: keep the claims on this
		// namespace's pool of that name.
		if subnets[i].Spec.PoolRef.In(subnets[i].Namespace) == namespace {
			l.ApplySubnet(&subnets[i], ledger.Created, nil)
		}
	}
	return l, target, nil
}

// hypotheticalSubnet is the claim kubectl ipam next asks the arbiter about:
// a Subnet created now (so it comes after every claim that exists), never
// written anywhere.
func hypotheticalSubnet(namespace, pool string, length *int32) *ipamv1.Subnet {
	return &ipamv1.Subnet{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: fmt.Sprintf("kubectl-ipam-next-%08x", rand.Uint32()),
			UID:               types.UID(fmt.Sprintf("kubectl-ipam-next-%016x", rand.Uint64())),
			CreationTimestamp: metav1.NewTime(time.Now()),
		},
		Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: pool, Namespace: namespace}, PrefixLength: length},
	}
}
