package environment

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/subnet-operator/subnet-operator/test/controlplane"
)

// HubKubeconfigSecret is the Secret, in Namespace, where a fleet member's
// manager finds its hub's kubeconfig (key "value"), as config/fleet-member
// names it.
const HubKubeconfigSecret = "subnet-operator-hub-kubeconfig"

// AsFleetMember makes the environment a fleet member named clusterName of
// the hub whose kubeconfig is hubKubeconfig (docs/fleet.md): the manager's
// two flags, and the Secret they name, written before the manager starts.
func (o *Options) AsFleetMember(clusterName string, hubKubeconfig []byte) {
	o.ManagerArgs = append(o.ManagerArgs, "--hub-kubeconfig-secret="+Namespace+"/"+HubKubeconfigSecret, "--cluster-name="+clusterName)
	before := o.BeforeInstall
	o.BeforeInstall = func(ctx context.Context, cp *controlplane.ControlPlane) error {
		if before != nil {
			if err := before(ctx, cp); err != nil {
				return err
			}
		}
		c, err := client.New(cp.Config, client.Options{})
		if err != nil {
			return err
		}
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return c.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: HubKubeconfigSecret},
			Data:       map[string][]byte{"value": hubKubeconfig},
		})
	}
}
