package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	stdlog "log"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// newWebhookServer is the webhook server of the flags: with
// --webhook-client-ca-file, one that requires the API server's client
// certificate, and returns the CA pool to run (it re-reads the file).
func newWebhookServer(f flags, tlsOpts []func(*tls.Config)) (webhook.Server, *clientCAPool, error) {
	opts := webhook.Options{
		Host: f.webhookHost, Port: f.webhookPort,
		CertDir: f.webhookCertDir, CertName: f.webhookCertName, KeyName: f.webhookKeyName,
		TLSOpts: tlsOpts,
	}
	if f.webhookClientCAFile == "" {
		return webhook.NewServer(opts), nil, nil
	}
	log := ctrl.Log.WithName("webhook-client-ca")
	clientCAs, err := newClientCAPool(f.webhookClientCAFile, log)
	if err != nil {
		return nil, nil, fmt.Errorf("--webhook-client-ca-file: %w", err)
	}
	srv := &clientAuthServer{
		Server:         webhook.NewServer(opts),
		options:        opts,
		clientCAs:      clientCAs,
		conversionPort: f.conversionPort,
		conversionMux:  http.NewServeMux(),
		conversions:    make(chan struct{}, maxConcurrentConversions),
		log:            ctrl.Log.WithName("webhook-server"),
		started:        clientCAs.startedChecker(f.webhookHost, f.webhookPort),
	}
	srv.handshakeRefusals = &refusalLog{log: srv.log, every: rate.Sometimes{Interval: handshakeRefusalLogInterval}}
	return srv, clientCAs, nil
}

// clientCAReloadInterval is how often the client CA file is read again.
// Polling, not a file watch: a mounted Secret changes by a symlink swap,
// and cert-manager renews a CA rarely (its Certificate lasts years).
const clientCAReloadInterval = 10 * time.Second

// clientCAPool is the CA bundle that signs the API server's client
// certificate, read from a file and read again when the file changes.
//
// It also trusts probe, a self-signed certificate made at start whose key
// never leaves this process: the readiness check presents it, so that its
// handshake (every few seconds) succeeds instead of logging a TLS
// handshake error each time, as net/http does for every refused client.
type clientCAPool struct {
	file  string
	log   logr.Logger
	probe tls.Certificate

	mu   sync.RWMutex
	pem  []byte
	pool *x509.CertPool
}

// newClientCAPool reads file; an unreadable or empty bundle is an error
// at start, not a webhook that refuses every caller.
func newClientCAPool(file string, log logr.Logger) (*clientCAPool, error) {
	probe, err := selfSignedClientCertificate()
	if err != nil {
		return nil, err
	}
	p := &clientCAPool{file: file, log: log, probe: probe}
	if _, err := p.reload(); err != nil {
		return nil, err
	}
	return p, nil
}

// selfSignedClientCertificate makes the readiness check's certificate.
func selfSignedClientCertificate() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "subnet-operator-readiness-check"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(100 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// reload reads the file again and reports whether the bundle changed.
func (p *clientCAPool) reload() (bool, error) {
	data, err := os.ReadFile(p.file)
	if err != nil {
		return false, fmt.Errorf("reading the webhook client CA: %w", err)
	}
	p.mu.RLock()
	same := bytes.Equal(data, p.pem)
	p.mu.RUnlock()
	if same {
		return false, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return false, fmt.Errorf("the webhook client CA %s holds no PEM certificate", p.file)
	}
	pool.AddCert(p.probe.Leaf)
	p.mu.Lock()
	p.pem, p.pool = data, pool
	p.mu.Unlock()
	return true, nil
}

func (p *clientCAPool) current() *x509.CertPool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.pool
}

// Start re-reads the file until ctx ends; a bad read keeps the last good
// bundle (a rotation half written, a Secret briefly empty).
func (p *clientCAPool) Start(ctx context.Context) error {
	ticker := time.NewTicker(clientCAReloadInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			changed, err := p.reload()
			if err != nil {
				p.log.Info("Keeping the previous webhook client CA", "file", p.file, "error", err.Error())
			} else if changed {
				p.log.Info("Reloaded the webhook client CA", "file", p.file)
			}
		}
	}
}

// NeedLeaderElection: every replica serves the webhook.
func (p *clientCAPool) NeedLeaderElection() bool { return false }

// requireClientCert makes a TLS server refuse, in the handshake, a client
// without a certificate that the pool's current CA signed. The pool is
// read per connection, so a rotated CA applies to the next handshake.
func (p *clientCAPool) requireClientCert(c *tls.Config) {
	c.ClientAuth = tls.RequireAndVerifyClientCert
	c.ClientCAs = p.current()
	c.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		// Cloned at handshake time, so it includes what the webhook
		// server sets after the options ran (its certificate watcher).
		perConn := c.Clone()
		perConn.GetConfigForClient = nil
		perConn.ClientCAs = p.current()
		return perConn, nil
	}
}

// verifyEachRequest answers only requests whose client certificate the
// pool's CURRENT CA signed. The handshake checked it against the CA of its
// time; a keep-alive connection outlives a rotation (re-issuing the CA is
// how a leaked client certificate is revoked), so each request is checked
// again, and a refused one closes its connection.
func (p *clientCAPool) verifyEachRequest(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := p.verify(r.TLS); err != nil {
			w.Header().Set("Connection", "close")
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (p *clientCAPool) verify(state *tls.ConnectionState) error {
	if state == nil || len(state.PeerCertificates) == 0 {
		return errors.New("no client certificate")
	}
	intermediates := x509.NewCertPool()
	for _, c := range state.PeerCertificates[1:] {
		intermediates.AddCert(c)
	}
	_, err := state.PeerCertificates[0].Verify(x509.VerifyOptions{
		Roots: p.current(), Intermediates: intermediates,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	return err
}

// startedChecker is healthy once the server at host:port answers a
// request over a connection with the probe certificate (controller-runtime's
// checker presents none, which this server refuses, and logs). Any HTTP
// answer will do: the path is not a webhook's.
func (p *clientCAPool) startedChecker(host string, port int) healthz.Checker {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{p.probe}}, //nolint:gosec // checks that it serves, not who
		DisableKeepAlives: true,
	}}
	url := "https://" + net.JoinHostPort(host, strconv.Itoa(port)) + "/readiness-check"
	return func(*http.Request) error {
		resp, err := client.Get(url)
		if err != nil {
			return fmt.Errorf("webhook server is not reachable: %w", err)
		}
		return resp.Body.Close()
	}
}

// conversionPath is where controller-runtime's builder registers the CRD
// conversion webhook.
const conversionPath = "/convert"

const (
	// maxConversionBody caps a ConversionReview's body. Generous: the API
	// server converts a whole list in one review (10,000 Subnets of ~2 KiB
	// are 20 MiB), but bounded: the conversion port answers anyone, and
	// controller-runtime's conversion handler reads the body without limit.
	maxConversionBody = 64 << 20
	// maxConcurrentConversions bounds how many conversion bodies are read
	// at once (memory is their number times maxConversionBody); more wait
	// for a turn, as long as their caller waits.
	maxConcurrentConversions = 8
	// webhookReadTimeout bounds reading one request, its body included
	// (a slow sender holds a goroutine and a conversion turn): the API
	// server gives up on a webhook after at most 30 s anyway.
	webhookReadTimeout = time.Minute
	// handshakeRefusalLogInterval bounds how often a refused TLS handshake
	// is logged: any Pod that reaches the port can cause one.
	handshakeRefusalLogInterval = time.Minute
)

// clientAuthServer is the webhook server when the admission port
// requires the API server's client certificate. The API server presents
// one to admission webhooks (its admission configuration's kubeconfig)
// but never to CRD conversion webhooks (k8s.io/apiextensions-apiserver
// builds their client without a kubeconfig). So /convert is also served
// on a second port, when there is one, without client certificates, and
// only /convert: a conversion is a pure function of the objects the
// caller sends, it reads nothing of the cluster. Everything is registered
// on the embedded server's mux, so the builder's duplicate check
// (WebhookMux) sees it.
//
// It serves both ports itself rather than through controller-runtime's
// server, which sets neither an ErrorLog (net/http would write one
// unsampled line per refused handshake to the standard logger) nor a read
// timeout.
type clientAuthServer struct {
	webhook.Server // the admission port's mux
	options        webhook.Options
	clientCAs      *clientCAPool
	// conversionPort is 0 without a conversion port.
	conversionPort int
	conversionMux  *http.ServeMux
	// conversions holds a token per conversion request being served.
	conversions       chan struct{}
	log               logr.Logger
	handshakeRefusals *refusalLog
	started           healthz.Checker

	mu                sync.Mutex
	conversionStarted bool
}

func (s *clientAuthServer) Register(path string, hook http.Handler) {
	if path == conversionPath {
		hook = s.boundConversions(hook)
		if s.conversionPort != 0 {
			s.conversionMux.Handle(path, hook)
		}
	}
	s.Server.Register(path, hook)
}

// boundConversions caps the body of a conversion request and how many are
// served at once.
func (s *clientAuthServer) boundConversions(hook http.Handler) http.Handler {
	bounded := http.MaxBytesHandler(hook, maxConversionBody)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case s.conversions <- struct{}{}:
			defer func() { <-s.conversions }()
			bounded.ServeHTTP(w, r)
		case <-r.Context().Done():
		}
	})
}

// Start serves both ports until ctx ends; either failing stops both.
func (s *clientAuthServer) Start(ctx context.Context) error {
	certWatcher, err := certwatcher.New(filepath.Join(s.options.CertDir, s.options.CertName), filepath.Join(s.options.CertDir, s.options.KeyName))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// As controller-runtime's server builds it: h2 unless the options
	// say otherwise, the serving certificate re-read when it changes.
	tlsConfig := func(opts []func(*tls.Config)) *tls.Config {
		c := &tls.Config{NextProtos: []string{"h2"}}
		for _, o := range opts {
			o(c)
		}
		c.GetCertificate = certWatcher.GetCertificate
		return c
	}
	admission := tlsConfig(append(slices.Clone(s.options.TLSOpts), s.clientCAs.requireClientCert))
	errs := make(chan error, 3)
	go func() { errs <- certWatcher.Start(ctx) }()
	servers := 1
	go func() {
		errs <- s.serve(ctx, s.options.Port, admission, s.clientCAs.verifyEachRequest(s.Server.WebhookMux()), nil)
	}()
	if s.conversionPort != 0 {
		servers++
		go func() {
			errs <- s.serve(ctx, s.conversionPort, tlsConfig(s.options.TLSOpts), s.conversionMux, func() {
				s.mu.Lock()
				s.conversionStarted = true
				s.mu.Unlock()
			})
		}()
	}
	var all []error
	for range servers + 1 {
		err := <-errs
		cancel()
		all = append(all, err)
	}
	return errors.Join(all...)
}

// serve runs one TLS server on port until ctx ends.
func (s *clientAuthServer) serve(ctx context.Context, port int, config *tls.Config, handler http.Handler, listening func()) error {
	addr := net.JoinHostPort(s.options.Host, strconv.Itoa(port))
	listener, err := tls.Listen("tcp", addr, config)
	if err != nil {
		return err
	}
	if listening != nil {
		listening()
	}
	s.log.Info("Serving webhooks", "address", addr)
	srv := &http.Server{
		BaseContext:       func(net.Listener) context.Context { return ctx },
		Handler:           handler,
		MaxHeaderBytes:    1 << 20,
		ReadHeaderTimeout: 32 * time.Second,
		ReadTimeout:       webhookReadTimeout,
		IdleTimeout:       90 * time.Second,
		ErrorLog:          stdlog.New(serverErrorLog{s}, "", 0),
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := srv.Shutdown(shutdown); err != nil {
			s.log.Info("Webhook server shut down with an error", "address", addr, "error", err.Error())
		}
	}()
	if err := srv.Serve(listener); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	<-closed
	return nil
}

// serverErrorLog is the webhook servers' ErrorLog: a refused handshake
// (a caller without the client certificate) is a refusal, logged at most
// once per interval with a count; anything else net/http logs is logged.
type serverErrorLog struct{ s *clientAuthServer }

func (l serverErrorLog) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	if strings.Contains(line, "TLS handshake error") {
		l.s.handshakeRefusals.note("Refused a TLS handshake on the webhook server", errors.New(line))
	} else {
		l.s.log.Info(line)
	}
	return len(p), nil
}

// StartedChecker is healthy once the servers answer.
func (s *clientAuthServer) StartedChecker() healthz.Checker {
	if s.conversionPort == 0 {
		return s.started
	}
	addr := net.JoinHostPort(s.options.Host, strconv.Itoa(s.conversionPort))
	conversion := func(*http.Request) error {
		s.mu.Lock()
		started := s.conversionStarted
		s.mu.Unlock()
		if !started {
			return errors.New("the conversion webhook server has not been started yet")
		}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // checks that it serves, not who
		if err != nil {
			return fmt.Errorf("the conversion webhook server is not reachable: %w", err)
		}
		return conn.Close()
	}
	return func(req *http.Request) error {
		return errors.Join(s.started(req), conversion(req))
	}
}
