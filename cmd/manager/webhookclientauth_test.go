package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// testCA signs certificates for the tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a leaf's certificate and key PEM; serving for 127.0.0.1,
// else a client certificate.
func (ca *testCA) issue(t *testing.T, serving bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "leaf"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if serving {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

func (ca *testCA) clientCert(t *testing.T) []tls.Certificate {
	t.Helper()
	certPEM, keyPEM := ca.issue(t, false)
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return []tls.Certificate{c}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// With --webhook-client-ca-file, the webhook port refuses in the TLS
// handshake a caller without a certificate of the client CA, answers one
// with it, follows the CA file when it is rotated, and the conversion port
// serves /convert, and only that, to anyone.
func TestWebhookServerRequiresTheClientCertificate(t *testing.T) {
	dir := t.TempDir()
	servingCA, clientCA, rotatedCA := newTestCA(t, "serving"), newTestCA(t, "client"), newTestCA(t, "client-rotated")
	certPEM, keyPEM := servingCA.issue(t, true)
	for name, data := range map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM, "client-ca.crt": clientCA.pem} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f := flags{
		webhookHost: "127.0.0.1", webhookPort: freePort(t), conversionPort: freePort(t),
		webhookCertDir: dir, webhookCertName: "tls.crt", webhookKeyName: "tls.key",
		webhookClientCAFile: filepath.Join(dir, "client-ca.crt"),
	}
	srv, clientCAs, err := newWebhookServer(f, []func(*tls.Config){func(c *tls.Config) { c.MinVersion = tls.VersionTLS12 }})
	if err != nil {
		t.Fatal(err)
	}
	answer := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = fmt.Fprint(w, "answered") })
	srv.Register("/validate", answer)
	srv.Register(conversionPath, answer)
	serveUntilTheTestEnds(t, srv)

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(servingCA.pem)
	post := func(port int, path string, certs []tls.Certificate) (int, error) {
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: roots, Certificates: certs, MinVersion: tls.VersionTLS12,
		}}}
		resp, err := c.Post(fmt.Sprintf("https://127.0.0.1:%d%s", port, path), "application/json", strings.NewReader("{}"))
		if err != nil {
			return 0, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}
	refused := func(certs []tls.Certificate, what string) {
		t.Helper()
		if status, err := post(f.webhookPort, "/validate", certs); err == nil {
			t.Errorf("%s: answered with HTTP %d", what, status)
		}
	}
	answered := func(port int, path string, certs []tls.Certificate, want int, what string) {
		t.Helper()
		if status, err := post(port, path, certs); err != nil || status != want {
			t.Errorf("%s: HTTP %d, %v; want %d", what, status, err, want)
		}
	}

	refused(nil, "no client certificate")
	if _, err := post(f.webhookPort, "/validate", nil); err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Errorf("no client certificate: %v, want the TLS alert certificate required", err)
	}
	refused(rotatedCA.clientCert(t), "a certificate of another CA")
	answered(f.webhookPort, "/validate", clientCA.clientCert(t), http.StatusOK, "the client CA's certificate")

	answered(f.conversionPort, conversionPath, nil, http.StatusOK, "/convert on the conversion port")
	answered(f.conversionPort, "/validate", nil, http.StatusNotFound, "/validate on the conversion port")

	// cert-manager renews the CA: the next handshake uses the new one.
	if err := os.WriteFile(f.webhookClientCAFile, rotatedCA.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	if changed, err := clientCAs.reload(); err != nil || !changed {
		t.Fatalf("reloading the rotated CA: changed %v, %v", changed, err)
	}
	answered(f.webhookPort, "/validate", rotatedCA.clientCert(t), http.StatusOK, "the rotated CA's certificate")
	refused(clientCA.clientCert(t), "the old CA's certificate after the rotation")

	// A broken file keeps the last good CA.
	if err := os.WriteFile(f.webhookClientCAFile, []byte("half written"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := clientCAs.reload(); err == nil {
		t.Error("a file without a certificate was read as a CA")
	}
	answered(f.webhookPort, "/validate", rotatedCA.clientCert(t), http.StatusOK, "the rotated CA's certificate after a bad read")
}

// serveUntilTheTestEnds starts srv, stops it when the test ends, and waits
// until it serves.
func serveUntilTheTestEnds(t *testing.T, srv webhook.Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctrl.LoggerInto(context.Background(), ctrl.Log))
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	started := srv.StartedChecker()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return started(nil) == nil, nil }); err != nil {
		t.Fatalf("the webhook server did not start: %v", started(nil))
	}
}
