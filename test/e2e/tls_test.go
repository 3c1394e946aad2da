//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/subnet-operator/subnet-operator/test/environment"
)

func secret(t *testing.T, name string) *corev1.Secret {
	t.Helper()
	var s corev1.Secret
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: environment.Namespace, Name: name}, &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

// servedCertificate dials the webhook's address and returns the leaf
// certificate it serves, verified against roots.
func servedCertificate(addr string, roots *x509.CertPool) (*x509.Certificate, error) {
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	return conn.ConnectionState().PeerCertificates[0], nil
}

func webhookAddr() string { return strings.TrimPrefix(env.WebhookURL, "https://") }

// The webhook serves the certificate cert-manager issued, and cainjector
// put its CA into both webhook configurations: that is the only trust the
// API server has in the webhook.
func TestWebhookServedWithCertManagerCertificate(t *testing.T) {
	s := secret(t, "webhook-server-cert")
	for _, kind := range []string{"validatingwebhookconfiguration", "mutatingwebhookconfiguration"} {
		name := "subnet-operator-" + strings.TrimSuffix(kind, "webhookconfiguration") + "-webhook-configuration"
		out := mustKubectl(t, "", "get", kind, name, "-o", "jsonpath={.webhooks[*].clientConfig.caBundle}")
		bundles := strings.Fields(out)
		if len(bundles) != 2 {
			t.Fatalf("%s: %d caBundles", name, len(bundles))
		}
		for _, b := range bundles {
			pemData, err := base64.StdEncoding.DecodeString(b)
			if err != nil || !bytes.Equal(pemData, s.Data["ca.crt"]) {
				t.Errorf("%s: the caBundle is not the CA of cert-manager's Certificate", name)
			}
		}
	}

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(s.Data["ca.crt"])
	leaf, err := servedCertificate(webhookAddr(), roots)
	if err != nil {
		t.Fatalf("the webhook's certificate does not verify against the injected CA: %v", err)
	}
	issued, err := parseCertificate(s.Data["tls.crt"])
	if err != nil {
		t.Fatal(err)
	}
	if leaf.SerialNumber.Cmp(issued.SerialNumber) != 0 {
		t.Errorf("the webhook serves serial %s, cert-manager issued %s", leaf.SerialNumber, issued.SerialNumber)
	}
	// Without the injected CA, nobody trusts it.
	if _, err := servedCertificate(webhookAddr(), x509.NewCertPool()); err == nil {
		t.Error("the webhook's certificate verified without its CA")
	}
}

func parseCertificate(certPEM []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

// Renewing the webhook's certificate while clients create Subnets: every
// admission succeeds, the replicas pick the new certificate up from their
// files without a restart, and serve it.
func TestCertificateRotationUnderLoad(t *testing.T) {
	ns := namespace(t)
	mustKubectl(t, fmt.Sprintf("apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: SubnetPool\nmetadata: {name: rot, namespace: %s}\nspec: {cidr: 10.30.0.0/16, defaultPrefixLength: 28}\n", ns), "create", "-f", "-")
	s := secret(t, "webhook-server-cert")
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(s.Data["ca.crt"])
	before, err := servedCertificate(webhookAddr(), roots)
	if err != nil {
		t.Fatal(err)
	}
	pids := map[string]int{}
	for _, m := range env.Managers {
		pids[m.Name] = m.Process.Pid()
	}

	var created, failed atomic.Int64
	var failures sync.Map
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				manifest := fmt.Sprintf("apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: Subnet\nmetadata: {name: r%d-%d, namespace: %s}\nspec: {poolRef: {name: rot}}\n", w, i, ns)
				if _, stderr, err := kubectl(t, manifest, "create", "-f", "-"); err != nil {
					failed.Add(1)
					failures.Store(fmt.Sprintf("r%d-%d", w, i), stderr)
				} else {
					created.Add(1)
				}
			}
		}()
	}

	// What `cmctl renew` does: mark the Certificate as Issuing.
	time.Sleep(time.Second)
	patch := `[{"op":"add","path":"/status/conditions/-","value":{"type":"Issuing","status":"True","reason":"ManuallyTriggered","message":"renewal forced by the e2e test"}}]`
	mustKubectl(t, "", "patch", "certificate", "-n", environment.Namespace, "subnet-operator-serving-cert", "--subresource=status", "--type=json", "-p", patch)

	var after *x509.Certificate
	eventually(t, 2*time.Minute, func() error {
		s := secret(t, "webhook-server-cert")
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(s.Data["ca.crt"])
		var err error
		if after, err = servedCertificate(webhookAddr(), roots); err != nil {
			return err
		}
		if after.SerialNumber.Cmp(before.SerialNumber) == 0 {
			return errors.New("still the old certificate")
		}
		// Both replicas (the proxy alternates): dial each directly.
		for _, m := range env.Managers {
			leaf, err := servedCertificate(fmt.Sprintf("127.0.0.1:%d", m.WebhookPort), roots)
			if err != nil {
				return err
			}
			if leaf.SerialNumber.Cmp(before.SerialNumber) == 0 {
				return fmt.Errorf("%s still serves the old certificate", m.Name)
			}
		}
		return nil
	})
	time.Sleep(time.Second) // creates keep going on the new certificate
	close(stop)
	wg.Wait()

	t.Logf("rotation: serial %s -> %s; %d creates during it, %d failed", before.SerialNumber, after.SerialNumber, created.Load(), failed.Load())
	failures.Range(func(k, v any) bool { t.Errorf("create %v failed: %v", k, v); return true })
	if created.Load() == 0 {
		t.Error("no create ran during the rotation")
	}
	for _, m := range env.Managers {
		if m.Process.Pid() != pids[m.Name] {
			t.Errorf("%s was restarted", m.Name)
		}
	}
}
