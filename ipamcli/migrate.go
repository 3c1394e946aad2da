package ipamcli

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// The CRDs whose objects MigrateStorage rewrites.
var migratedCRDs = []string{"subnetpools.ipam.subnet-operator.io", "subnets.ipam.subnet-operator.io"}

// MigrationReport says what MigrateStorage did.
type MigrationReport struct {
	// StorageVersion is the version every object is now stored in.
	StorageVersion string `json:"storageVersion"`
	// Pools and Subnets rewritten; objects deleted meanwhile are not counted.
	Pools   int `json:"pools"`
	Subnets int `json:"subnets"`
	// StoredVersionsBefore is what the CRDs' status.storedVersions said
	// before, by CRD; after, each says only StorageVersion.
	StoredVersionsBefore map[string][]string `json:"storedVersionsBefore"`
}

// MigrateStorage rewrites every SubnetPool and Subnet in the CRDs' storage
// version, then records in each CRD's status.storedVersions that nothing is
// stored in another version, after which an old version can be removed from
// the CRDs. A no-op update stores an object in the storage version; it
// changes nothing else (no generation, no status). Objects created during
// the run are stored in the storage version already. It needs update on
// both kinds and patch on customresourcedefinitions/status: an
// administrator's command.
func MigrateStorage(ctx context.Context, c client.Client, pageSize int64) (MigrationReport, error) {
	r := MigrationReport{StorageVersion: ipamv1.GroupVersion.Version, StoredVersionsBefore: map[string][]string{}}
	for _, name := range migratedCRDs {
		crd, err := getCRD(ctx, c, name)
		if err != nil {
			return r, err
		}
		if storage := storageVersion(crd); storage != r.StorageVersion {
			return r, fmt.Errorf("CRD %s stores %q, this tool writes %s: upgrade the CRDs (and the operator) first", name, storage, r.StorageVersion)
		}
		stored, _, _ := unstructured.NestedStringSlice(crd.Object, "status", "storedVersions")
		r.StoredVersionsBefore[name] = stored
	}
	var err error
	if r.Pools, err = rewriteAll(ctx, c, &ipamv1.SubnetPoolList{}, pageSize); err != nil {
		return r, err
	}
	if r.Subnets, err = rewriteAll(ctx, c, &ipamv1.SubnetList{}, pageSize); err != nil {
		return r, err
	}
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"status":{"storedVersions":[%q]}}`, r.StorageVersion))
	for _, name := range migratedCRDs {
		crd := &unstructured.Unstructured{}
		crd.SetAPIVersion("apiextensions.k8s.io/v1")
		crd.SetKind("CustomResourceDefinition")
		crd.SetName(name)
		if err := c.Status().Patch(ctx, crd, patch); err != nil {
			return r, fmt.Errorf("recording in CRD %s that only %s is stored: %w", name, r.StorageVersion, err)
		}
	}
	return r, nil
}

func getCRD(ctx context.Context, c client.Client, name string) (*unstructured.Unstructured, error) {
	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	if err := c.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
		return nil, fmt.Errorf("reading CRD %s: %w", name, err)
	}
	return crd, nil
}

// storageVersion is the name of the CRD version marked storage: true.
func storageVersion(crd *unstructured.Unstructured) string {
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		if m, ok := v.(map[string]any); ok && m["storage"] == true {
			name, _ := m["name"].(string)
			return name
		}
	}
	return ""
}

// rewriteAll updates every object of the list's kind, page by page, each
// as it was read; one changed in between is read again and rewritten (a
// conflict), one deleted in between is skipped. It returns how many it
// rewrote.
func rewriteAll(ctx context.Context, c client.Client, list client.ObjectList, pageSize int64) (int, error) {
	rewritten := 0
	opts := []client.ListOption{client.Limit(pageSize)}
	for {
		if err := c.List(ctx, list, opts...); err != nil {
			return rewritten, err
		}
		items, err := meta.ExtractList(list) // pointers into the list's items
		if err != nil {
			return rewritten, err
		}
		for _, item := range items {
			o, ok := item.(client.Object)
			if !ok {
				return rewritten, fmt.Errorf("cannot rewrite a %T", item)
			}
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				err := c.Update(ctx, o)
				if apierrors.IsConflict(err) {
					// Changed in between: rewrite what is stored now.
					if getErr := c.Get(ctx, client.ObjectKeyFromObject(o), o); getErr != nil {
						return getErr
					}
				}
				return err
			})
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return rewritten, fmt.Errorf("rewriting %s/%s: %w", o.GetNamespace(), o.GetName(), err)
			default:
				rewritten++
			}
		}
		next := list.GetContinue()
		if next == "" {
			return rewritten, nil
		}
		opts = []client.ListOption{client.Limit(pageSize), client.Continue(next)}
	}
}
