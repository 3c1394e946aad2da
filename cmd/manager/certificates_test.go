package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func writeCertificate(t *testing.T, file string, notAfter time.Time) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: notAfter.Add(-time.Hour), NotAfter: notAfter,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	// A chain file: the leaf first, then a block that must not be read
	// (it would not even parse).
	var out []byte
	out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der[:10]})...)
	if err := os.WriteFile(file, out, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestCertificateExpiry(t *testing.T) {
	dir := t.TempDir()
	webhook, metrics := filepath.Join(dir, "webhook.crt"), filepath.Join(dir, "metrics.crt")
	notAfter := time.Date(2027, 3, 1, 12, 0, 0, 0, time.UTC)
	writeCertificate(t, webhook, notAfter)
	if err := os.WriteFile(metrics, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &certificateExpiry{files: map[string]string{"webhook": webhook, "metrics": metrics}}

	want := fmt.Sprintf(`
# HELP subnet_operator_certificate_expiry_timestamp_seconds When the leaf certificate a server of the manager presents expires, in Unix seconds; absent while the file cannot be read.
# TYPE subnet_operator_certificate_expiry_timestamp_seconds gauge
subnet_operator_certificate_expiry_timestamp_seconds{server="webhook"} %d
# HELP subnet_operator_certificate_readable 1 when the certificate file of a server parses, 0 when it does not (missing, empty or not PEM).
# TYPE subnet_operator_certificate_readable gauge
subnet_operator_certificate_readable{server="metrics"} 0
subnet_operator_certificate_readable{server="webhook"} 1
`, notAfter.Unix())
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}

	// A rotation shows at the next scrape.
	renewed := notAfter.Add(90 * 24 * time.Hour)
	writeCertificate(t, webhook, renewed)
	if err := os.Remove(metrics); err != nil {
		t.Fatal(err)
	}
	want = strings.Replace(want, fmt.Sprint(notAfter.Unix()), fmt.Sprint(renewed.Unix()), 1)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
