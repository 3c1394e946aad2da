//go:build e2e

package e2e

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// forgedReview is an AdmissionReview for a Subnet create, as anyone who
// reaches the webhook's port could send it: validation answers name the
// Subnets a new one collides with, in any namespace.
func forgedReview(t *testing.T) []byte {
	t.Helper()
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "forged", Operation: admissionv1.Create, Namespace: "default", Name: "forged",
			Kind:     metav1.GroupVersionKind{Group: "ipam.subnet-operator.io", Version: "v1alpha2", Kind: "Subnet"},
			Resource: metav1.GroupVersionResource{Group: "ipam.subnet-operator.io", Version: "v1alpha2", Resource: "subnets"},
			Object: runtime.RawExtension{Raw: []byte(`{"apiVersion":"ipam.subnet-operator.io/v1alpha2","kind":"Subnet",` +
				`"metadata":{"name":"forged","namespace":"default"},"spec":{"poolRef":{"name":"p"},"cidr":"10.0.0.0/24"}}`)},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// post sends body to path on addr over TLS with tlsConfig and returns the
// HTTP status, or the error if no HTTP answer came.
func post(addr, path string, tlsConfig *tls.Config, body []byte) (int, error) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	resp, err := c.Post("https://"+addr+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// With config/webhook-client-auth the webhook refuses, in the TLS
// handshake, a caller without the API server's client certificate: a
// forged AdmissionReview never reaches the HTTP handler. The API server,
// which presents the certificate, still gets answers (kubectl create of a
// Subnet is admitted), and so does a direct call with the certificate.
// The conversion port serves /convert only.
func TestWebhookRefusesCallersWithoutTheAPIServerCertificate(t *testing.T) {
	s := secret(t, "webhook-server-cert")
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(s.Data["ca.crt"])
	const validate = "/validate-ipam-subnet-operator-io-v1alpha2-subnet"
	body := forgedReview(t)

	for _, m := range env.Managers {
		addr := fmt.Sprintf("127.0.0.1:%d", m.WebhookPort)
		// TLS 1.3: the server checks the client's certificate after the
		// client's side of the handshake; its alert arrives on the
		// first read, in place of any HTTP answer.
		status, err := post(addr, validate, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13}, body)
		if err == nil {
			t.Fatalf("%s: a forged AdmissionReview without a client certificate was answered with HTTP %d", m.Name, status)
		}
		if !strings.Contains(err.Error(), "certificate required") {
			t.Errorf("%s: refused with %v, want the TLS alert certificate required", m.Name, err)
		}
		// TLS 1.2: the handshake itself fails.
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS12})
		if err == nil {
			_ = conn.Close()
			t.Errorf("%s: a TLS 1.2 handshake without a client certificate succeeded", m.Name)
		}
		// A certificate of another CA (the webhook's own serving
		// certificate is a client certificate to nobody) is refused too.
		serving, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"])
		if err != nil {
			t.Fatal(err)
		}
		if status, err := post(addr, validate, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", Certificates: []tls.Certificate{serving}, MinVersion: tls.VersionTLS12}, body); err == nil {
			t.Errorf("%s: a caller with a certificate of another CA was answered with HTTP %d", m.Name, status)
		}

		// With the API server's certificate: answered.
		clientCert, err := env.WebhookClientCertificate()
		if err != nil {
			t.Fatal(err)
		}
		withCert := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", Certificates: clientCert, MinVersion: tls.VersionTLS12}
		if status, err := post(addr, validate, withCert, body); err != nil || status != http.StatusOK {
			t.Errorf("%s: with the API server's certificate: HTTP %d, %v; want 200", m.Name, status, err)
		}

		// The conversion port: no client certificate, and nothing but /convert.
		conversion := fmt.Sprintf("127.0.0.1:%d", m.ConversionPort)
		open := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
		if status, err := post(conversion, validate, open, body); err != nil || status != http.StatusNotFound {
			t.Errorf("%s: admission on the conversion port: HTTP %d, %v; want 404", m.Name, status, err)
		}
		if status, err := post(conversion, "/convert", open, []byte(`{}`)); err != nil || status == http.StatusNotFound {
			t.Errorf("%s: /convert on the conversion port: HTTP %d, %v; want it served", m.Name, status, err)
		}
	}

	// The API server presents the certificate: a Subnet is admitted (the
	// mutating and the validating webhook both ran: the pool is defaulted
	// and checked).
	ns := namespace(t)
	mustKubectl(t, fmt.Sprintf("apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: SubnetPool\nmetadata: {name: auth, namespace: %s}\nspec: {cidr: 10.31.0.0/16, defaultPrefixLength: 28}\n", ns), "create", "-f", "-")
	mustKubectl(t, fmt.Sprintf("apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: Subnet\nmetadata: {name: a, namespace: %s}\nspec: {poolRef: {name: auth}}\n", ns), "create", "-f", "-")
	// And a refusal still comes from the webhook through the API server.
	_, stderr, err := kubectl(t, fmt.Sprintf("apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: Subnet\nmetadata: {name: b, namespace: %s}\nspec: {poolRef: {name: auth}, cidr: 10.99.0.0/24}\n", ns), "create", "-f", "-")
	if err == nil || !strings.Contains(stderr, "lies outside SubnetPool") {
		t.Errorf("a Subnet outside its pool: %v, %s; want the webhook's refusal", err, stderr)
	}
}
