package environment

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Scrape reads a replica's /metrics over HTTPS, verifying the server
// against the metrics certificate's CA, with token as the bearer token
// (none if empty). It returns the HTTP status and the body.
func (env *Environment) Scrape(ctx context.Context, m *Manager, token string) (int, string, error) {
	ca, err := os.ReadFile(filepath.Join(env.CertDir("metrics"), "ca.crt"))
	if err != nil {
		return 0, "", err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/metrics", m.MetricsPort), nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// ServiceAccountToken creates a ServiceAccount in namespace, binds it to
// clusterRole if not empty, and returns a token for it.
func (env *Environment) ServiceAccountToken(ctx context.Context, namespace, name, clusterRole string) (string, error) {
	if _, err := env.Kubectl(ctx, nil, "create", "serviceaccount", "-n", namespace, name); err != nil {
		return "", err
	}
	if clusterRole != "" {
		if _, err := env.Kubectl(ctx, nil, "create", "clusterrolebinding", namespace+"-"+name, "--clusterrole="+clusterRole,
			"--serviceaccount="+namespace+":"+name); err != nil {
			return "", err
		}
	}
	token, err := env.Kubectl(ctx, nil, "create", "token", "-n", namespace, name)
	return strings.TrimSpace(token), err
}

// MetricsReaderToken returns a token allowed to scrape /metrics: the
// metrics-reader ClusterRole of config/rbac, applied to the cluster.
func (env *Environment) MetricsReaderToken(ctx context.Context, namespace, name string) (string, error) {
	if _, err := env.Kubectl(ctx, nil, "apply", "-f", filepath.Join(env.RepoRoot, "config", "rbac", "metrics_reader_role.yaml")); err != nil {
		return "", err
	}
	return env.ServiceAccountToken(ctx, namespace, name, "metrics-reader")
}
