// Package capi makes a Subnet an IP address pool of Cluster API's IPAM
// provider contract: IPAddressClaims whose spec.poolRef names
// {apiGroup: ipam.subnet-operator.io, kind: Subnet} are answered with an
// IPAddress holding one address of the Subnet's range (docs/cluster-api.md).
//
// The addresses are decided by the ledger's arbiter (ledger/addresses.go),
// under the same decision lock as every range; this package reads and
// writes the Cluster API objects around those decisions. It runs only when
// the API server serves the Cluster API IPAM types (Served), so a cluster
// without Cluster API pays nothing for it.
package capi

import (
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	capiipam "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/subnet-operator/subnet-operator/ledger"
)

// The contract's finalizers (the names the in-cluster provider uses).
const (
	// FinalizerReleaseAddress on a claim: its address is released before
	// the claim goes.
	FinalizerReleaseAddress = "ipam.cluster.x-k8s.io/ReleaseAddress"
	// FinalizerProtectAddress on an IPAddress: only the provider removes
	// it. Here it also keeps a released address's IPAddress, terminating,
	// for the cool-down: the object is the record that the address is not
	// to be handed out again yet, across restarts and hand-overs.
	FinalizerProtectAddress = "ipam.cluster.x-k8s.io/ProtectAddress"
)

// Options configure the Cluster API controllers.
type Options struct {
	// ReuseAfter is the cool-down: a released address is handed out again
	// only this long after its IPAddress was deleted.
	ReuseAfter time.Duration
	// Workers is the number of concurrent claim reconciles.
	Workers int
	// Timeout bounds one reconcile.
	Timeout time.Duration
	// Clusters: the API server serves Cluster API Clusters, so a claim's
	// cluster can be paused.
	Clusters bool
}

// AddToScheme registers the Cluster API types the package reads.
func AddToScheme(s *runtime.Scheme) {
	utilruntime.Must(capiipam.AddToScheme(s))
	utilruntime.Must(clusterv1.AddToScheme(s))
}

// Served asks the API server's discovery whether it serves the Cluster
// API IPAM types in v1beta2 (ipam), and Clusters in v1beta2 (clusters).
func Served(cfg *rest.Config) (ipam, clusters bool, err error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return false, false, err
	}
	has := func(gv string, resources ...string) (bool, error) {
		list, err := dc.ServerResourcesForGroupVersion(gv)
		if err != nil {
			if discovery.IsGroupDiscoveryFailedError(err) || apierrors.IsNotFound(err) {
				return false, nil
			}
			return false, fmt.Errorf("discovering %s: %w", gv, err)
		}
		for _, want := range resources {
			if !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == want }) {
				return false, nil
			}
		}
		return true, nil
	}
	if ipam, err = has(capiipam.GroupVersion.String(), "ipaddressclaims", "ipaddresses"); err != nil || !ipam {
		return ipam, false, err
	}
	clusters, err = has(clusterv1.GroupVersion.String(), "clusters")
	return ipam, clusters, err
}

// Setup registers the address feed and the controllers with the manager.
// Call it only when Served says the types are served.
func Setup(mgr ctrl.Manager, l *ledger.Ledger, opts Options) error {
	if opts.ReuseAfter < 0 {
		return fmt.Errorf("the address cool-down must not be negative, got %s", opts.ReuseAfter)
	}
	registerMetrics(l)
	claims := &ClaimReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Ledger: l,
		Recorder: mgr.GetEventRecorder("subnet-operator"), Options: opts,
	}
	if err := claims.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("ipaddressclaim controller: %w", err)
	}
	return (&SubnetGuard{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Ledger: l,
		Recorder: mgr.GetEventRecorder("subnet-operator"), Claims: claims, Served: true,
	}).SetupWithManager(mgr)
}

// SetupOff registers what a manager without the provider still owes it:
// Subnets protected while it was on (their address-protection finalizer)
// would otherwise stay Terminating for good. The guard lets the finalizer
// go once the API server has no IPAddress of the Subnet (none can exist if
// it does not serve them: served is what Served said), letting go of the
// IPAddresses released while it was on once their cool-down (reuseAfter)
// ended.
func SetupOff(mgr ctrl.Manager, l *ledger.Ledger, served bool, reuseAfter time.Duration) error {
	if reuseAfter < 0 {
		return fmt.Errorf("the address cool-down must not be negative, got %s", reuseAfter)
	}
	return (&SubnetGuard{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Ledger: l,
		Recorder: mgr.GetEventRecorder("subnet-operator"), Served: served, ReuseAfter: reuseAfter,
	}).SetupWithManager(mgr)
}
