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
	"math/big"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
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
	clientCAs, err := newClientCAPool(f.webhookClientCAFile, ctrl.Log.WithName("webhook-client-ca"))
	if err != nil {
		return nil, nil, fmt.Errorf("--webhook-client-ca-file: %w", err)
	}
	conversion := opts // the same certificate and TLS settings, no client certificate
	opts.TLSOpts = append(slices.Clone(tlsOpts), clientCAs.requireClientCert)
	srv := &clientAuthServer{Server: webhook.NewServer(opts), started: clientCAs.startedChecker(f.webhookHost, f.webhookPort)}
	if f.conversionPort != 0 {
		conversion.Port = f.conversionPort
		srv.conversion = webhook.NewServer(conversion)
	}
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

// clientAuthServer is the webhook server when the admission port
// requires the API server's client certificate. The API server presents
// one to admission webhooks (its admission configuration's kubeconfig)
// but never to CRD conversion webhooks (k8s.io/apiextensions-apiserver
// builds their client without a kubeconfig). So /convert is also served
// on a second port, when there is one, without client certificates, and
// only /convert: a conversion is a pure function of the objects the
// caller sends, it reads nothing of the cluster. Everything is registered
// on the admission server, so the builder's duplicate check (WebhookMux)
// sees it.
type clientAuthServer struct {
	webhook.Server
	started healthz.Checker
	// conversion is nil without a conversion port.
	conversion webhook.Server
}

func (s *clientAuthServer) Register(path string, hook http.Handler) {
	s.Server.Register(path, hook)
	if s.conversion != nil && path == conversionPath {
		s.conversion.Register(path, hook)
	}
}

// Start runs the servers; either failing stops both.
func (s *clientAuthServer) Start(ctx context.Context) error {
	if s.conversion == nil {
		return s.Server.Start(ctx)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 2)
	for _, srv := range []webhook.Server{s.Server, s.conversion} {
		go func() {
			err := srv.Start(ctx)
			cancel()
			errs <- err
		}()
	}
	return errors.Join(<-errs, <-errs)
}

// StartedChecker is healthy once the servers listen.
func (s *clientAuthServer) StartedChecker() healthz.Checker {
	if s.conversion == nil {
		return s.started
	}
	conversion := s.conversion.StartedChecker()
	return func(req *http.Request) error {
		return errors.Join(s.started(req), conversion(req))
	}
}
