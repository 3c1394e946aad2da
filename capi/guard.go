package capi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	capiipam "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

// SubnetGuard keeps a Subnet that is being deleted while IPAddresses of it
// exist: its address-protection finalizer goes only when none is left. The
// claim controller adds the finalizer with the first address it hands out
// or adopts; the guard adds it for any other IPAddress of the Subnet (one
// written by hand that no claim took) and puts it back when an update
// drops it (a replace from a manifest), so that every IPAddress holds its
// Subnet, not only the ones the provider handed out. Addresses cooling down hold it too, for at
// most the cool-down: a terminating IPAddress may still be in use (deleted
// by hand under its live claim), and the Subnet's range must not go to
// another Subnet while an address in it cools down.
//
// The Subnet webhook refuses the delete of a Subnet whose addresses are in
// use, naming them (webhooks/subnet_delete.go); that refusal is best
// effort (a claim may bind between its check and the delete, the webhook
// may be bypassed), and this finalizer is the guarantee.
type SubnetGuard struct {
	Client    client.Client
	APIReader client.Reader
	Ledger    *ledger.Ledger
	Recorder  recorder.EventRecorder
	// Claims is the claim controller, whose catch-up the guard shares: an
	// address written by the last leader must count before a finalizer
	// goes. Nil when the provider is off: the guard then only lets go of
	// the finalizers a run with the provider on left.
	Claims *ClaimReconciler
	// Served: the API server serves IPAddresses. The guard then asks it
	// for the Subnet's before the finalizer goes: the ledger may lag (or,
	// with the provider off, not know them). When they are not served,
	// none can exist.
	Served bool
	// ReuseAfter is the cool-down (--address-reuse-after). With the
	// provider off the guard lets go of released IPAddresses after it, as
	// the claim controller would: nothing else removes their finalizer.
	ReuseAfter time.Duration
}

// recheck is how soon a guard that found IPAddresses the ledger does not
// show looks again: with the provider on, the informer's event for them
// requeues it sooner; off, no event comes.
const recheck = 10 * time.Second

// SetupWithManager registers the guard: its requests are Subnets, from the
// ledger's Subnet and IPAddress events, and at start every protected
// Subnet being deleted and every Subnet with IPAddresses.
func (g *SubnetGuard) SetupWithManager(mgr ctrl.Manager) error {
	if g.Client == nil || g.APIReader == nil || g.Ledger == nil || g.Recorder == nil {
		return errors.New("SubnetGuard needs a client, an API reader, a ledger and an event recorder")
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("subnet-address-guard").
		WatchesRawSource(source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			unsubscribe := g.Ledger.Subscribe(func(e ledger.Event) {
				switch e.Kind {
				case statuscalc.KindSubnet:
					// A protected Subnet being deleted, or an unprotected
					// one that has IPAddresses; nothing to do for the rest.
					if s, ok := e.Object.(*ipamv1.Subnet); ok && g.mayHaveWork(s) {
						q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: e.Namespace, Name: e.Name}})
					}
				case ledger.KindAddress:
					q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: e.Namespace, Name: e.Subnet}})
				}
			})
			go func() {
				<-ctx.Done()
				unsubscribe()
			}()
			go func() {
				if g.Ledger.WaitForSync(ctx) != nil {
					return
				}
				for _, s := range g.atStart() {
					q.Add(reconcile.Request{NamespacedName: s})
				}
			}()
			return nil
		})).
		Complete(g)
}

// atStart lists the Subnets to look at when the guard starts: events
// published before its source started are not replayed. The protected
// Subnets being deleted, and every Subnet with IPAddresses, which may lack
// its protection: the last leader may have stopped before it added it.
func (g *SubnetGuard) atStart() []types.NamespacedName {
	return append(g.Ledger.ProtectedSubnets(), g.Ledger.AddressSubnets()...)
}

// mayHaveWork says whether a Subnet event concerns the guard: a protected
// Subnet being deleted, or a live unprotected one with IPAddresses. It runs
// on the ledger's event goroutine, after the ledger's lock is released.
func (g *SubnetGuard) mayHaveWork(s *ipamv1.Subnet) bool {
	protected := controllerutil.ContainsFinalizer(s, ipamv1.FinalizerAddressProtection)
	if s.DeletionTimestamp != nil {
		return protected
	}
	return !protected && g.hasAddresses(s.Namespace, s.Name)
}

// hasAddresses: the ledger shows an IPAddress of the Subnet, in use or
// cooling down. With the provider off it shows none.
func (g *SubnetGuard) hasAddresses(namespace, name string) bool {
	u, ok := g.Ledger.AddressUsage(namespace, name, 0)
	return g.Claims != nil && ok && u.InUse+u.CoolingDown > 0
}

// Reconcile implements reconcile.Reconciler.
func (g *SubnetGuard) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	s, ok := g.Ledger.Subnet(req.Namespace, req.Name)
	if !ok {
		return reconcile.Result{}, nil
	}
	protected := controllerutil.ContainsFinalizer(s, ipamv1.FinalizerAddressProtection)
	if s.DeletionTimestamp == nil {
		if protected || !g.hasAddresses(req.Namespace, req.Name) {
			return reconcile.Result{}, nil
		}
		// protect reads the live Subnet: it may be newer than the ledger.
		_, err := g.Claims.protect(ctx, req.Namespace, req.Name, s.UID)
		if errors.Is(err, errReplaced) || apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			return reconcile.Result{}, nil // gone, replaced or being deleted: its own event follows
		}
		return reconcile.Result{}, err
	}
	if !protected {
		return reconcile.Result{}, nil
	}
	if g.Claims != nil {
		if err := g.Claims.catchUp(ctx); err != nil {
			return reconcile.Result{}, err
		}
	}
	const named = 5
	// With the provider off nothing feeds the ledger IPAddresses: only the
	// API server says which are left.
	if u, ok := g.Ledger.AddressUsage(req.Namespace, req.Name, named); g.Claims != nil && ok && u.InUse+u.CoolingDown > 0 {
		if u.InUse > 0 {
			who := strings.Join(u.Holders, ", ")
			if u.InUse > int64(len(u.Holders)) {
				who += fmt.Sprintf(" and %d more", u.InUse-int64(len(u.Holders)))
			}
			g.Recorder.Eventf(s, nil, corev1.EventTypeWarning, ipamv1.ReasonAddressesInUse, "Delete",
				"deletion waits until no IPAddress of this Subnet is left: %d in use by IPAddressClaims %s", u.InUse, who)
		}
		return reconcile.Result{}, nil // each IPAddress's going requeues it
	}
	if g.Served {
		held, err := g.addressesOf(ctx, req.Namespace, req.Name)
		if err != nil {
			return reconcile.Result{}, err
		}
		if len(held) > 0 {
			g.Recorder.Eventf(s, nil, corev1.EventTypeWarning, ipamv1.ReasonAddressesInUse, "Delete",
				"deletion waits until no IPAddress of this Subnet is left: %s exist", strings.Join(held, ", "))
			return reconcile.Result{RequeueAfter: recheck}, nil
		}
	}
	var live ipamv1.Subnet
	if err := g.APIReader.Get(ctx, req.NamespacedName, &live); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if live.UID != s.UID || !controllerutil.ContainsFinalizer(&live, ipamv1.FinalizerAddressProtection) {
		return reconcile.Result{}, nil
	}
	patch := client.MergeFromWithOptions(live.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(&live, ipamv1.FinalizerAddressProtection)
	if err := g.Client.Patch(ctx, &live, patch); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	logf.FromContext(ctx).Info("Subnet released: no address of it is in use", "subnet", req.NamespacedName)
	return reconcile.Result{}, nil
}

// addressesOf names (up to a few of) the IPAddresses of the Subnet that
// the API server has, terminating ones included. Paged; once per
// deletion, not per address. With the provider off it first lets go of
// those whose cool-down ended (letGo), so it reads them all.
func (g *SubnetGuard) addressesOf(ctx context.Context, namespace, subnet string) ([]string, error) {
	var names []string
	opts := &client.ListOptions{Namespace: namespace, Limit: 500}
	for {
		var list capiipam.IPAddressList
		if err := g.APIReader.List(ctx, &list, opts); err != nil {
			return nil, fmt.Errorf("listing the IPAddresses of Subnet %s/%s: %w", namespace, subnet, err)
		}
		for i := range list.Items {
			a := &list.Items[i]
			if !ours(a.Spec.PoolRef) || a.Spec.PoolRef.Name != subnet {
				continue
			}
			if g.Claims == nil {
				gone, err := g.letGo(ctx, a)
				if err != nil {
					return nil, err
				}
				if gone {
					continue
				}
			}
			if len(names) < 5 {
				names = append(names, a.Name)
			} else if g.Claims != nil {
				return names, nil
			}
		}
		if list.Continue == "" {
			return names, nil
		}
		opts.Continue = list.Continue
	}
}

// letGo does, with the provider off, what the claim controller does for a
// released IPAddress (terminating, its claim gone or released): its
// finalizer goes once the cool-down ended. gone: nothing keeps it now.
func (g *SubnetGuard) letGo(ctx context.Context, a *capiipam.IPAddress) (bool, error) {
	if a.DeletionTimestamp == nil || !controllerutil.ContainsFinalizer(a, FinalizerProtectAddress) ||
		time.Until(releasedAt(a).Add(g.ReuseAfter)) > 0 {
		return false, nil
	}
	if owner := metav1.GetControllerOf(a); owner != nil {
		var c capiipam.IPAddressClaim
		err := g.APIReader.Get(ctx, types.NamespacedName{Namespace: a.Namespace, Name: owner.Name}, &c)
		if client.IgnoreNotFound(err) != nil {
			return false, err
		}
		if err == nil && c.UID == owner.UID && !released(&c) {
			return false, nil // deleted under its live claim: the machine may use it
		}
	}
	patch := client.MergeFromWithOptions(a.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(a, FinalizerProtectAddress)
	if err := g.Client.Patch(ctx, a, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	}
	logf.FromContext(ctx).Info("IPAddress let go after its cool-down (provider off)", "ipaddress", client.ObjectKeyFromObject(a), "address", a.Spec.Address)
	return len(a.Finalizers) == 0, nil
}
