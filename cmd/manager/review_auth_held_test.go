package main

// Adversarial review of commit 5183fd1: attacks that HELD (these tests
// pass on that commit and guard against a regression).

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"golang.org/x/time/rate"
)

// rawRequest sends one request line and headers as written (no client
// cleaning the path) and returns the status line and the body's start.
func rawRequest(t *testing.T, port int, roots *x509.CertPool, certs []tls.Certificate, request string) string {
	t.Helper()
	conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{RootCAs: roots, Certificates: certs, MinVersion: tls.VersionTLS12})
	if err != nil {
		return "handshake refused: " + err.Error()
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte(request)); err != nil {
		return "write: " + err.Error()
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return "read: " + err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	buf := make([]byte, 64)
	n, _ := resp.Body.Read(buf)
	return resp.Status + " " + string(buf[:n])
}

// HELD: no path, method or protocol trick reaches anything but /convert on
// the conversion port (Go's ServeMux cleans the path and redirects).
func TestReviewHeldConversionPortServesOnlyConvert(t *testing.T) {
	s := startReviewServer(t)
	for _, target := range []string{
		"/validate", "//validate", "/convert/../validate", "/convert/..", "/./validate", "/convert/%2e%2e/validate",
		"/%2Fvalidate", "/validate?x=/convert", "/convert/", "/CONVERT/../validate", "http://x/validate", "*",
	} {
		for _, proto := range []string{"HTTP/1.1", "HTTP/1.0"} {
			for _, method := range []string{"POST", "GET", "OPTIONS", "PUT"} {
				got := rawRequest(t, s.f.conversionPort, s.roots, nil,
					fmt.Sprintf("%s %s %s\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", method, target, proto))
				if strings.Contains(got, "answered") {
					t.Errorf("%s %s %s on the conversion port reached the admission handler: %s", method, target, proto, got)
				}
			}
		}
	}
}

// HELD: a certificate with the readiness probe's subject, serial and
// validity but another key is refused: the pool trusts the probe's key.
func TestReviewHeldProbeSubjectCannotBeForged(t *testing.T) {
	s := startReviewServer(t)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	probe := s.clientCAs.probe.Leaf
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: probe.Subject.CommonName},
		NotBefore: probe.NotBefore, NotAfter: probe.NotAfter, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	forged := []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}
	request := "POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
	if got := rawRequest(t, s.f.webhookPort, s.roots, forged, request); strings.Contains(got, "answered") {
		t.Errorf("a certificate with the probe's subject was answered: %s", got)
	}
	// The probe itself, and a chain "leaf <- forged probe", are told apart too.
	if got := rawRequest(t, s.f.webhookPort, s.roots, []tls.Certificate{s.clientCAs.probe}, request); !strings.Contains(got, "answered") {
		t.Errorf("the probe certificate was refused: %s", got)
	}
}

// HELD (Go 1.26.8, which has the fix of CVE-2025-68121): a TLS 1.3 session
// resumed after the CA rotated is refused; a resumption does not skip the
// check of the client certificate against the current pool.
func TestReviewHeldResumptionAfterRotationIsRefused(t *testing.T) {
	s := startReviewServer(t)
	cache := tls.NewLRUClientSessionCache(4)
	oldCert := s.clientCA.clientCert(t)
	dial := func() (string, bool) {
		conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", s.f.webhookPort), &tls.Config{
			RootCAs: s.roots, Certificates: oldCert, ClientSessionCache: cache, MinVersion: tls.VersionTLS13,
		})
		if err != nil {
			return "handshake refused: " + err.Error(), false
		}
		defer func() { _ = conn.Close() }()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Write([]byte("POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")); err != nil {
			return "write: " + err.Error(), false
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return "read: " + err.Error(), conn.ConnectionState().DidResume
		}
		_ = resp.Body.Close()
		return resp.Status, conn.ConnectionState().DidResume
	}
	if got, _ := dial(); !strings.HasPrefix(got, "200") {
		t.Fatalf("the client CA's certificate: %s", got)
	}
	if got, resumed := dial(); !strings.HasPrefix(got, "200") || !resumed {
		t.Fatalf("a second connection did not resume (%s, resumed %v): this test needs resumption", got, resumed)
	}
	if err := os.WriteFile(s.f.webhookClientCAFile, newTestCA(t, "rotated").pem, 0o600); err != nil {
		t.Fatal(err)
	}
	if changed, err := s.clientCAs.reload(); err != nil || !changed {
		t.Fatalf("reload: %v %v", changed, err)
	}
	if got, resumed := dial(); strings.HasPrefix(got, "200") {
		t.Errorf("after the rotation, the old CA's session was answered (resumed %v): %s", resumed, got)
	}
}

// HELD: the CA follows a Secret volume's rotation (a ..data symlink
// swapped to a new timestamped directory), and keeps the last good bundle
// when the file disappears.
func TestReviewHeldReloadFollowsSecretSymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	write := func(stamp string, ca *testCA) {
		t.Helper()
		ts := filepath.Join(dir, stamp)
		if err := os.Mkdir(ts, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ts, "ca.crt"), ca.pem, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(stamp, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	first, second := newTestCA(t, "first"), newTestCA(t, "second")
	write("..2026_11_26_1", first)
	if err := os.Symlink(filepath.Join("..data", "ca.crt"), filepath.Join(dir, "ca.crt")); err != nil {
		t.Fatal(err)
	}
	p, err := newClientCAPool(filepath.Join(dir, "ca.crt"), funcr.New(func(string, string) {}, funcr.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	verifies := func(ca *testCA) bool {
		certPEM, keyPEM := ca.issue(t, false)
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		_, err = leaf.Verify(x509.VerifyOptions{Roots: p.current(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		return err == nil
	}
	write("..2026_11_26_2", second)
	if err := os.RemoveAll(filepath.Join(dir, "..2026_11_26_1")); err != nil {
		t.Fatal(err)
	}
	if changed, err := p.reload(); err != nil || !changed {
		t.Fatalf("after the swap: changed %v, %v", changed, err)
	}
	if !verifies(second) || verifies(first) {
		t.Errorf("after the swap: new CA trusted %v, old CA trusted %v", verifies(second), verifies(first))
	}
	if err := os.RemoveAll(filepath.Join(dir, "..2026_11_26_2")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.reload(); err == nil {
		t.Error("a missing file was read")
	}
	if !verifies(second) {
		t.Error("a missing file dropped the last good CA")
	}
}

// HELD (run with -race): concurrent refusals log one line per interval,
// and its count is the refusals since the last line.
func TestReviewHeldRefusalLogUnderConcurrency(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	log := funcr.New(func(_, args string) { mu.Lock(); lines = append(lines, args); mu.Unlock() }, funcr.Options{})
	r := &refusalLog{log: log, every: rate.Sometimes{Interval: time.Hour}}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				r.note("refused", nil)
			}
		})
	}
	wg.Wait()
	if len(lines) != 1 {
		t.Fatalf("%d lines, want 1: %v", len(lines), lines)
	}
	var logged int64
	if _, err := fmt.Sscanf(lines[0][strings.Index(lines[0], `"refusedSinceLastLog"=`)+len(`"refusedSinceLastLog"=`):], "%d", &logged); err != nil {
		t.Fatal(err)
	}
	if total := logged + r.refused.Load(); total != 8*200 {
		t.Errorf("logged %d + pending %d = %d refusals, want %d", logged, r.refused.Load(), total, 8*200)
	}
}
