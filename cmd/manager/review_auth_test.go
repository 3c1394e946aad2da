package main

// Adversarial review of commit 5183fd1 (webhook client authentication,
// the conversion port, the metrics filter). Each test here FAILS on that
// commit and names the finding it proves.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/conversion"
)

// reviewServer is a webhook server with --webhook-client-ca-file and a
// conversion port, the builder's conversion handler registered, started.
type reviewServer struct {
	f         flags
	roots     *x509.CertPool
	clientCA  *testCA
	clientCAs *clientCAPool
	srv       webhook.Server
}

func startReviewServer(t *testing.T, tlsOpts ...func(*tls.Config)) *reviewServer {
	t.Helper()
	dir := t.TempDir()
	servingCA, clientCA := newTestCA(t, "serving"), newTestCA(t, "client")
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
	srv, clientCAs, err := newWebhookServer(f, append([]func(*tls.Config){func(c *tls.Config) {
		c.MinVersion = tls.VersionTLS12
		c.NextProtos = []string{"http/1.1"}
	}}, tlsOpts...))
	if err != nil {
		t.Fatal(err)
	}
	// What the builder registers for a type with a conversion (builder/webhook.go).
	srv.Register(conversionPath, conversion.NewWebhookHandler(runtime.NewScheme(), conversion.NewRegistry()))
	srv.Register("/validate", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = fmt.Fprint(w, "answered") }))
	serveUntilTheTestEnds(t, srv)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(servingCA.pem)
	return &reviewServer{f: f, roots: roots, clientCA: clientCA, clientCAs: clientCAs, srv: srv}
}

// countingReader is an endless JSON string, `{"request":{"uid":"AAAA…`,
// that stops after limit bytes, and counts what the server read of it.
type countingReader struct {
	limit, read int64
	prefix      []byte
}

func (r *countingReader) Read(p []byte) (int, error) {
	if r.read >= r.limit {
		return 0, io.EOF
	}
	n := int64(len(p))
	if n > r.limit-r.read {
		n = r.limit - r.read
	}
	for i := range p[:n] {
		if off := r.read + int64(i); off < int64(len(r.prefix)) {
			p[i] = r.prefix[off]
		} else {
			p[i] = 'A'
		}
	}
	atomic.AddInt64(&r.read, n)
	return int(n), nil
}

// conversionBodyBound is a generous cap for a ConversionReview: the API
// server converts a whole list in one review, so a cap must exceed a large
// list of Subnets (10,000 objects of ~2 KiB is 20 MiB), far less than this.
const conversionBodyBound = 64 << 20

// FINDING (medium): the conversion port answers anyone (no client
// certificate, by design) and controller-runtime's conversion handler
// decodes the request body with no size limit (its admission handler caps
// at 7 MiB; conversion.go does json.NewDecoder(r.Body).Decode). Any Pod
// that reaches port 9444 makes the manager buffer as much as it sends: a
// single endless JSON string grows the decoder's buffer without bound.
func TestReviewConversionPortBoundsTheRequestBody(t *testing.T) {
	s := startReviewServer(t)
	body := &countingReader{limit: conversionBodyBound + 32<<20, prefix: []byte(`{"request":{"uid":"`)}
	c := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.roots, MinVersion: tls.VersionTLS12}}}
	req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("https://127.0.0.1:%d%s", s.f.conversionPort, conversionPath), body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = -1 // chunked: the server cannot refuse it by its length
	resp, err := c.Do(req)
	status := 0
	if err == nil {
		status = resp.StatusCode
		_ = resp.Body.Close()
	}
	// What the client wrote includes what the two kernels buffer on
	// loopback (send and receive buffers grow to several MiB: 4-5 MiB
	// measured past a 64 MiB cap), not only what the server read; the
	// unbounded server reads all 96 MiB.
	const socketBuffers = 16 << 20
	if read := atomic.LoadInt64(&body.read); read > conversionBodyBound+socketBuffers {
		t.Errorf("an unauthenticated caller made the conversion port read %d MiB of one request (HTTP %d, %v); want it to stop near %d MiB",
			read>>20, status, err, conversionBodyBound>>20)
	}
}

// tokenReviewCounter is an API server that rejects every token, as it
// rejects an unknown one (status.error), and counts the TokenReviews.
func tokenReviewCounter(t *testing.T) (*rest.Config, *int64) {
	t.Helper()
	var reviews int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/apis/authentication.k8s.io/v1/tokenreviews" {
			http.NotFound(w, r)
			return
		}
		atomic.AddInt64(&reviews, 1)
		var review authenticationv1.TokenReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		review.Status = authenticationv1.TokenReviewStatus{Error: "[invalid bearer token, token lookup failed]"}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&review)
	}))
	t.Cleanup(srv.Close)
	// The manager's client-side limits (--kube-api-qps, --kube-api-burst).
	return &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: 50, Burst: 100}, &reviews
}

func metricsHandler(t *testing.T, config *rest.Config) http.Handler {
	t.Helper()
	httpClient, err := rest.HTTPClientFor(config)
	if err != nil {
		t.Fatal(err)
	}
	filter, err := metricsAuthFilter(time.Hour)(config, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	handler, err := filter(zap.New(zap.WriteTo(io.Discard)), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintln(w, "metric 1")
	}))
	if err != nil {
		t.Fatal(err)
	}
	return handler
}

func getMetrics(handler http.Handler, token string) int {
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, req)
	return rec.Code
}

// FINDING (low): the metrics filter caches no rejection. The delegating
// authenticator turns TokenReview's status.error (how the API server
// rejects an unknown token) into an error, and its cache keeps no errors
// (cacheErrs false): the SAME invalid token, sent again, is reviewed again.
// The comment in metricsauth_test.go ("the authenticator caches answers
// per token") is wrong for rejected tokens.
func TestReviewMetricsRejectedTokenIsReviewedOnce(t *testing.T) {
	config, reviews := tokenReviewCounter(t)
	handler := metricsHandler(t, config)
	const requests = 20
	for range requests {
		if code := getMetrics(handler, "the-same-forged-token"); code != http.StatusUnauthorized {
			t.Fatalf("status %d, want 401", code)
		}
	}
	if n := atomic.LoadInt64(reviews); n > 1 {
		t.Errorf("%d requests with one rejected token made %d TokenReviews; want the rejection cached (1)", requests, n)
	}
}

// FINDING (low): nothing but the client-side limit (--kube-api-qps 50,
// burst 100, a limiter of the TokenReview client's own) bounds the
// TokenReviews that unauthenticated callers cause: one per request with a
// fresh random token, 50 a second for as long as they send them, and a
// legitimate scraper whose cached review expired queues behind them
// (controller-runtime's filter is the same; the threat model counts anyone
// who reaches the port). Want a small budget for reviews of tokens not in
// the cache (a token bucket; over it, 429 without a review).
func TestReviewMetricsBoundsTokenReviewsOfUnknownTokens(t *testing.T) {
	config, reviews := tokenReviewCounter(t)
	handler := metricsHandler(t, config)
	const requests, budget = 150, 20
	for i := range requests {
		if code := getMetrics(handler, fmt.Sprintf("random-%d", i)); code == http.StatusOK {
			t.Fatalf("a forged token was served")
		}
	}
	if n := atomic.LoadInt64(reviews); n > budget {
		t.Errorf("%d unauthenticated requests made %d TokenReviews to the API server; want at most %d per burst", requests, n, budget)
	}
}

// FINDING (low): every caller the admission port refuses in the handshake
// writes a line to the process's log ("http: TLS handshake error from
// ...: tls: client didn't provide a certificate"): net/http logs each
// failed handshake through the standard logger (controller-runtime's
// httpserver.New sets no ErrorLog), unsampled. The commit gives the
// readiness check a certificate so that probes do not log these, but any
// Pod that reaches 9443 writes one line per TCP connection, without limit:
// the refusal logging the metrics filter bounds (once a minute) is
// unbounded here.
func TestReviewRefusedHandshakesLogQuietly(t *testing.T) {
	s := startReviewServer(t)
	var logs lockedBuffer
	stdlog.SetOutput(&logs)
	t.Cleanup(func() { stdlog.SetOutput(os.Stderr) })
	const attempts = 50
	for range attempts {
		conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", s.f.webhookPort), &tls.Config{RootCAs: s.roots, MinVersion: tls.VersionTLS12})
		if err == nil {
			// TLS 1.3: the refusal arrives after the client's handshake ends.
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			_, _ = conn.Read(make([]byte, 1))
			_ = conn.Close()
		}
	}
	// The server logs after it sent the alert: wait until it has logged
	// all refusals, or settled below them.
	deadline := time.Now().Add(5 * time.Second)
	for logs.lines() < attempts && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := logs.lines(); n > 1 {
		t.Errorf("%d refused handshakes wrote %d log lines; want at most one per interval. First: %q", attempts, n, strings.SplitN(logs.String(), "\n", 2)[0])
	}
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *lockedBuffer) lines() int { return strings.Count(b.String(), "TLS handshake error") }

// FINDING (low): a CA rotation (the way to revoke a leaked client
// certificate: re-issue the CA) reaches only new handshakes. A connection
// made with the old CA's certificate keeps being answered after the
// reload, for as long as its holder keeps it busy (the server's idle
// timeout is 90 s, reset by every request). Want each request on the
// admission port checked against the current pool (wrap the handlers
// Register gets: verify r.TLS.PeerCertificates with p.current()), or
// connections of a replaced CA closed.
func TestReviewRotationCutsLiveConnections(t *testing.T) {
	s := startReviewServer(t)
	var conns int64
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: s.roots, Certificates: s.clientCA.clientCert(t), MinVersion: tls.VersionTLS12},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			atomic.AddInt64(&conns, 1)
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}}
	post := func() (int, error) {
		resp, err := c.Post(fmt.Sprintf("https://127.0.0.1:%d/validate", s.f.webhookPort), "application/json", strings.NewReader("{}"))
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := post(); code != http.StatusOK {
		t.Fatalf("the client CA's certificate: %d %v", code, err)
	}
	if err := os.WriteFile(s.f.webhookClientCAFile, newTestCA(t, "rotated").pem, 0o600); err != nil {
		t.Fatal(err)
	}
	if changed, err := s.clientCAs.reload(); err != nil || !changed {
		t.Fatalf("reload: %v %v", changed, err)
	}
	if code, _ := post(); code == http.StatusOK {
		t.Errorf("after the CA was replaced, the old CA's certificate was still answered on its open connection (%d connection(s) dialed)", atomic.LoadInt64(&conns))
	}
}
