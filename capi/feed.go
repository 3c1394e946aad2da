package capi

import (
	"context"
	"fmt"

	toolscache "k8s.io/client-go/tools/cache"
	capiipam "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/subnet-operator/subnet-operator/ledger"
)

// feed registers the ledger's handlers on the cache's IPAddress informer:
// the IPAddresses of our Subnets are the record of the addresses held
// (restore before allocate: a manager that starts, or a restore of the
// objects, finds every address in use from them). A new leader also reads
// them from the API server before its first decision (catchUp).
func (r *ClaimReconciler) feed(mgr ctrl.Manager) error {
	informer, err := mgr.GetCache().GetInformer(context.Background(), &capiipam.IPAddress{})
	if err != nil {
		return fmt.Errorf("ipaddress informer: %w", err)
	}
	apply := func(obj any, typ ledger.EventType) {
		if a, ok := obj.(*capiipam.IPAddress); ok {
			if rec, ok := record(a); ok {
				r.Ledger.ApplyAddress(rec, typ)
			}
		}
	}
	_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, _ bool) { apply(obj, ledger.Created) },
		UpdateFunc: func(_, obj any) { apply(obj, ledger.Updated) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if a, ok := obj.(*capiipam.IPAddress); ok {
				if rec, ok := record(a); ok {
					r.Ledger.DeleteAddress(rec)
				}
			}
		},
	})
	return err
}
