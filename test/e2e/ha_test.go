//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"crypto/tls"

	admissionv1 "k8s.io/api/admission/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/test/environment"
)

// review sends an AdmissionReview for a Subnet create straight to one
// replica's validating webhook and returns whether it was allowed.
func review(t *testing.T, m *environment.Manager, roots *x509.CertPool, s *ipamv1.Subnet) (bool, error) {
	t.Helper()
	raw, _ := json.Marshal(s)
	body, _ := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "e2e", Operation: admissionv1.Create, Namespace: s.Namespace, Name: s.Name,
			Kind:     metav1.GroupVersionKind{Group: "ipam.subnet-operator.io", Version: "v1alpha2", Kind: "Subnet"},
			Resource: metav1.GroupVersionResource{Group: "ipam.subnet-operator.io", Version: "v1alpha2", Resource: "subnets"},
			Object:   runtime.RawExtension{Raw: raw},
		},
	})
	// As the API server calls it: with its client certificate.
	clientCert, err := env.WebhookClientCertificate()
	if err != nil {
		return false, err
	}
	tlsConfig := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", Certificates: clientCert, MinVersion: tls.VersionTLS12}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	url := fmt.Sprintf("https://127.0.0.1:%d/validate-ipam-subnet-operator-io-v1alpha2-subnet", m.WebhookPort)
	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(resp.Body)
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(data, &out); err != nil || out.Response == nil {
		return false, fmt.Errorf("bad review response %q: %w", data, err)
	}
	return out.Response.Allowed, nil
}

// Both replicas answer admissions; only the leader allocates; killing the
// leader hands the controllers to the other replica within the lease, and
// no range is handed out twice.
func TestLeaderElectionAndFailover(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	mustKubectl(t, fmt.Sprintf("apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: SubnetPool\nmetadata: {name: ha, namespace: %s}\nspec: {cidr: 10.40.0.0/16, defaultPrefixLength: 27}\n", ns), "create", "-f", "-")

	s := secret(t, "webhook-server-cert")
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(s.Data["ca.crt"])
	for _, m := range env.Managers {
		probe := &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"}, Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: "ha", Namespace: ns}, CIDR: "10.40.200.0/24"}}
		eventually(t, 10*time.Second, func() error {
			allowed, err := review(t, m, roots, probe)
			if err != nil || !allowed {
				return fmt.Errorf("%s: allowed=%v: %w", m.Name, allowed, err)
			}
			return nil
		})
	}

	old := leader(t)
	createBatch := func(from, to int) {
		var wg sync.WaitGroup
		for i := from; i < to; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("h%03d", i)}, Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: "ha"}}}
				for attempt := 0; ; attempt++ {
					err := k8s.Create(ctx, s.DeepCopy())
					if err == nil || attempt == 50 {
						if err != nil {
							t.Errorf("create %s: %v", s.Name, err)
						}
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
			}()
		}
		wg.Wait()
	}
	createBatch(0, 100)
	killed := time.Now()
	old.Process.Kill()
	// Back to two replicas for the tests that follow, whatever happens here.
	t.Cleanup(func() {
		if err := env.StartManager(ctx, old); err != nil {
			t.Error(err)
		}
	})
	createBatch(100, 200) // during the hand-over: the other replica's webhook admits them
	next := leader(t)
	if next == old {
		t.Fatal("the killed replica is still the leader")
	}

	var list ipamv1.SubnetList
	eventually(t, 2*time.Minute, func() error {
		if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, s := range list.Items {
			if !meta.IsStatusConditionTrue(s.Status.Conditions, ipamv1.ConditionReady) {
				return fmt.Errorf("%s not Ready", s.Name)
			}
		}
		if len(list.Items) != 200 {
			return fmt.Errorf("%d Subnets", len(list.Items))
		}
		return nil
	})
	t.Logf("leader %s killed; %s allocated all 200 Subnets %s later (lease %s)", old.Name, next.Name, time.Since(killed).Round(time.Millisecond), leaseDuration)
	// The hand-over is on record for an operator: client-go's leader
	// election reports it as a core/v1 Event on the Lease (RBAC must allow
	// it; the API server refused it once).
	eventually(t, 30*time.Second, func() error {
		var lease coordinationv1.Lease
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: environment.Namespace, Name: "subnet-operator.ipam.subnet-operator.io"}, &lease); err != nil {
			return err
		}
		holder := ptr.Deref(lease.Spec.HolderIdentity, "")
		var events corev1.EventList
		if err := k8s.List(ctx, &events, client.InNamespace(environment.Namespace)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Reason == "LeaderElection" && e.InvolvedObject.Kind == "Lease" && e.Message == holder+" became leader" {
				return nil
			}
		}
		return fmt.Errorf("no LeaderElection Event for the holder %q among %d Events", holder, len(events.Items))
	})
	var held []netip.Prefix
	for _, s := range list.Items {
		held = append(held, netip.MustParsePrefix(s.Status.CIDR))
	}
	slices.SortFunc(held, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	for i := 1; i < len(held); i++ {
		if held[i-1].Overlaps(held[i]) {
			t.Fatalf("duplicate allocation: %s and %s", held[i-1], held[i])
		}
	}
}

// A rolling upgrade: the leader is stopped gracefully (SIGTERM) in the middle
// of a burst of creates. It finishes its writes and releases the lease; the
// other replica takes over within a retry period, catches its view up with
// the API server before its first decision, and allocates the rest. No
// range is handed out twice, and every claim ends Ready.
func TestGracefulHandOverDuringABurst(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	mustKubectl(t, fmt.Sprintf("apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: SubnetPool\nmetadata: {name: burst, namespace: %s}\nspec: {cidr: 10.41.0.0/16, defaultPrefixLength: 28}\n", ns), "create", "-f", "-")
	old := leader(t)

	const n = 300
	var created sync.WaitGroup
	started := make(chan struct{}, n)
	// An explicit claim that arrives after a dynamic one was given its range
	// is refused, rightly: best fit takes the smallest free block, and the
	// explicit claims that arrived first fragment their neighbourhood.
	var refusedMu sync.Mutex
	refused := map[string]netip.Prefix{}
	for i := range n {
		created.Go(func() {
			s := &ipamv1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("b%03d", i)}, Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: "burst"}}}
			if i%10 == 0 { // some explicit claims
				s.Spec.CIDR = fmt.Sprintf("10.41.%d.0/28", 200+i/10)
			}
			started <- struct{}{}
			for attempt := 0; ; attempt++ {
				err := k8s.Create(ctx, s.DeepCopy())
				if err != nil && s.Spec.CIDR != "" && strings.Contains(err.Error(), "overlaps Subnet "+ns+"/b") {
					refusedMu.Lock()
					refused[s.Name] = netip.MustParsePrefix(s.Spec.CIDR)
					refusedMu.Unlock()
					return
				}
				// Up to 30 s of retries: the stopping leader's webhook
				// refuses or cuts requests while it stops (on two loaded
				// cores, for seconds); the survivor answers.
				if err == nil || apierrors.IsAlreadyExists(err) || attempt == 300 {
					if err != nil && !apierrors.IsAlreadyExists(err) {
						t.Errorf("create %s: %v", s.Name, err)
					}
					return
				}
				time.Sleep(100 * time.Millisecond) // the webhook of a stopping replica: retry as a client does
			}
		})
	}
	for range n / 3 {
		<-started
	}
	stopped := time.Now()
	old.Process.Stop(time.Minute) // SIGTERM: graceful, the lease is released on exit
	// Back to two replicas for the tests that follow, whatever happens here.
	t.Cleanup(func() {
		if err := env.StartManager(ctx, old); err != nil {
			t.Error(err)
		}
	})
	gone := time.Since(stopped)
	next := leader(t)
	created.Wait()
	if next == old {
		t.Fatal("the stopped replica is still the leader")
	}

	var list ipamv1.SubnetList
	eventually(t, 2*time.Minute, func() error {
		if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, s := range list.Items {
			if !meta.IsStatusConditionTrue(s.Status.Conditions, ipamv1.ConditionReady) {
				return fmt.Errorf("%s not Ready", s.Name)
			}
		}
		if len(list.Items) != n-len(refused) {
			return fmt.Errorf("%d Subnets, %d refused", len(list.Items), len(refused))
		}
		return nil
	})
	t.Logf("leader %s stopped gracefully in %s; %s allocated all %d Subnets %s after the stop began (%d explicit claims refused: their range was taken first)",
		old.Name, gone.Round(time.Millisecond), next.Name, len(list.Items), time.Since(stopped).Round(time.Millisecond), len(refused))
	var held []netip.Prefix
	for _, s := range list.Items {
		held = append(held, netip.MustParsePrefix(s.Status.CIDR))
	}
	// A refusal is right only if a Subnet that was created holds the range.
	for name, want := range refused {
		if !slices.ContainsFunc(held, want.Overlaps) {
			t.Errorf("%s was refused for %s, which no Subnet holds", name, want)
		}
	}
	slices.SortFunc(held, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	for i := 1; i < len(held); i++ {
		if held[i-1].Overlaps(held[i]) {
			t.Fatalf("duplicate allocation: %s and %s", held[i-1], held[i])
		}
	}
	logs, err := os.ReadFile(filepath.Join(env.LogDir(), next.Name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(logs, []byte("Caught up with the API server before the first decision")) {
		t.Errorf("%s's log does not show its catch-up before deciding", next.Name)
	}
}
