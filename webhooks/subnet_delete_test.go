package webhooks

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	capiipam "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
)

// addressWorld is a Subnet "machines" of team-a whose addresses n
// IPAddresses (m-0, m-1, ...) hold, in the ledger and, unless the test
// says otherwise, at the API server.
type addressWorld struct {
	ledger *ledger.Ledger
	subnet *ipamv1.Subnet
	api    client.Client
}

func newAddressWorld(t *testing.T, n int, atAPIServer func(i int) bool) *addressWorld {
	t.Helper()
	l := ledger.New()
	l.MarkSynced()
	pool := &ipamv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dc", UID: "pool"}, Spec: ipamv1.SubnetPoolSpec{CIDR: "10.0.0.0/16"}}
	l.ApplyPool(pool, ledger.Created, nil)
	s := allocated(&ipamv1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "machines", UID: "subnet", Finalizers: []string{ipamv1.FinalizerAddressProtection}},
		Spec:       ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Namespace: ns, Name: "dc"}, CIDR: "10.0.1.0/24"},
	}, "10.0.1.0/24")
	l.ApplySubnet(s, ledger.Created, nil)

	scheme := runtime.NewScheme()
	if err := capiipam.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	api := fake.NewClientBuilder().WithScheme(scheme)
	for i := range n {
		name := fmt.Sprintf("m-%d", i)
		addr := netip.MustParseAddr(fmt.Sprintf("10.0.1.%d", 10+i))
		l.ApplyAddress(ledger.AddressRecord{Namespace: ns, Name: name, UID: types.UID("a-" + name), ResourceVersion: fmt.Sprint(i + 1),
			Subnet: "machines", Address: addr}, ledger.Created)
		if atAPIServer == nil || atAPIServer(i) {
			api.WithObjects(&capiipam.IPAddress{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec: capiipam.IPAddressSpec{Address: addr.String(), Prefix: ptr.To(int32(24)), ClaimRef: capiipam.IPAddressClaimReference{Name: name},
					PoolRef: capiipam.IPPoolReference{APIGroup: ipamv1.GroupVersion.Group, Kind: "Subnet", Name: "machines"}},
			})
		}
	}
	return &addressWorld{ledger: l, subnet: s, api: api.Build()}
}

func (w *addressWorld) validateDelete() error {
	v := &SubnetValidator{Ledger: w.ledger, fresh: newFreshness(w.api, w.ledger, time.Second, time.Second)}
	_, err := v.ValidateDelete(withOp(admissionv1.Delete), w.subnet)
	return err
}

// A Subnet whose addresses machines use is refused at admission, naming the
// IPAddresses (a few, then a count) and saying what to do, instead of
// "deleted" and a Subnet that hangs Terminating.
func TestSubnetDeleteRefusedWhileAddressesInUse(t *testing.T) {
	err := newAddressWorld(t, 5, nil).validateDelete()
	if !apierrors.IsForbidden(err) {
		t.Fatalf("delete of a Subnet with 5 IPAddresses in use: %v, want Forbidden", err)
	}
	want := "5 IPAddresses of this Subnet are in use by Cluster API machines (team-a/m-0, team-a/m-1, team-a/m-2 and 2 more); " +
		"delete their IPAddressClaims (or the Machines that own them) first, then the Subnet"
	if !strings.Contains(err.Error(), want) {
		t.Errorf("refusal %q\nwant it to contain %q", err.Error(), want)
	}
}

// What must still go through: the refusal is for addresses in use only,
// so that whatever deletes the IPAddresses too (namespace deletion, the
// garbage collector, clusterctl move) converges.
func TestSubnetDeleteAllowed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		world func(t *testing.T) *addressWorld
	}{
		{"no Cluster API: no address ever held", func(t *testing.T) *addressWorld { return newAddressWorld(t, 0, nil) }},
		{"the ledger lags: the IPAddresses are gone at the API server (clusterctl move)", func(t *testing.T) *addressWorld {
			return newAddressWorld(t, 5, func(int) bool { return false })
		}},
		{"every address released, cooling down", func(t *testing.T) *addressWorld {
			w := newAddressWorld(t, 2, nil)
			for i := range 2 {
				name := fmt.Sprintf("m-%d", i)
				w.ledger.ApplyAddress(ledger.AddressRecord{Namespace: ns, Name: name, UID: types.UID("a-" + name), ResourceVersion: fmt.Sprint(10 + i),
					Subnet: "machines", Address: netip.MustParseAddr(fmt.Sprintf("10.0.1.%d", 10+i)), Releasing: t0}, ledger.Updated)
			}
			return w
		}},
		{"already terminating: a repeated delete", func(t *testing.T) *addressWorld {
			w := newAddressWorld(t, 2, nil)
			w.subnet.DeletionTimestamp = &metav1.Time{Time: t0}
			return w
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.world(t).validateDelete(); err != nil {
				t.Errorf("delete refused: %v", err)
			}
		})
	}
}

// Only the IPAddresses the API server still has, in use, are named and
// counted; a read that fails lets the finalizer decide.
func TestSubnetDeleteNamesOnlyLiveAddresses(t *testing.T) {
	err := newAddressWorld(t, 3, func(i int) bool { return i == 2 }).validateDelete()
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "1 IPAddress of this Subnet is in use by Cluster API machines (team-a/m-2)") {
		t.Errorf("refusal %v, want it to name team-a/m-2 only", err)
	}
}

// A read of the IPAddresses that fails lets the delete through: the
// finalizer holds the Subnet if they are in use, and a delete is not
// blocked on an API server that cannot answer.
func TestSubnetDeleteAllowedWhenTheReadFails(t *testing.T) {
	w := newAddressWorld(t, 2, nil)
	w.api = interceptor.NewClient(w.api.(client.WithWatch), interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return apierrors.NewServiceUnavailable("the API server is restarting")
		},
	})
	if err := w.validateDelete(); err != nil {
		t.Errorf("delete refused on a failed read: %v", err)
	}
}
