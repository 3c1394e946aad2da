package environment

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The webhook client certificate (Options.WebhookClientAuth), as a cluster
// gets it from config/webhook-client-auth: cert-manager issues it into the
// Secret apiserver-webhook-client-cert; the harness keeps the Secret's
// files in step (certsync.go, as for the serving certificates) in the
// directory the API server's admission kubeconfig names.
//
// Why copy cert-manager's Secret rather than make a CA before the API
// server starts: the test then exercises the same Issuers and Certificate
// a cluster applies, and the manager checks callers against the CA that
// cert-manager keeps. It works because the API server reads the kubeconfig
// at start but the certificate files only when it first builds a client
// for the webhook, at the first admission call, which comes after the
// files are written (Start waits for them before the manager starts); it
// re-reads them every 5 minutes (client-go's certificate rotation).
const (
	clientCertSecret = "apiserver-webhook-client-cert"
	clientCertKind   = "apiserver-webhook-client"
)

// clientAuthComponent is the component that turns client authentication
// on for config/default; its issuance part alone for config/dev.
var clientAuthComponent = filepath.Join("config", "webhook-client-auth")

// certSecrets maps the Secrets cert-manager writes to the directories the
// manager reads them from (and, for the client certificate, the API server).
func (env *Environment) certSecrets() map[string]string {
	secrets := map[string]string{
		"webhook-server-cert": "webhook",
		"metrics-server-cert": "metrics",
	}
	if env.opts.WebhookClientAuth {
		secrets[clientCertSecret] = clientCertKind
	}
	return secrets
}

// writeAdmissionConfig writes the API server's admission configuration:
// both webhook admission plugins present the client certificate to
// webhookHostPort (the host and port of the webhook URLs, the key the API
// server looks a webhook's credentials up by; in a cluster it is the
// Service's DNS name, webhook-service.<namespace>.svc). It returns the
// kube-apiserver flag.
func writeAdmissionConfig(dir, certDir, webhookHostPort string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	kubeconfig := filepath.Join(dir, "webhook-kubeconfig.yaml")
	certFile := filepath.Join(certDir, clientCertKind, "tls.crt")
	keyFile := filepath.Join(certDir, clientCertKind, "tls.key")
	if err := os.WriteFile(kubeconfig, fmt.Appendf(nil, `apiVersion: v1
kind: Config
users:
- name: %q
  user:
    client-certificate: %s
    client-key: %s
`, webhookHostPort, certFile, keyFile), 0o600); err != nil {
		return "", err
	}
	config := filepath.Join(dir, "admission-config.yaml")
	var b strings.Builder
	b.WriteString("apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n")
	for _, plugin := range []string{"ValidatingAdmissionWebhook", "MutatingAdmissionWebhook"} {
		fmt.Fprintf(&b, "- name: %s\n  configuration:\n    apiVersion: apiserver.config.k8s.io/v1\n    kind: WebhookAdmissionConfiguration\n    kubeConfigFile: %s\n", plugin, kubeconfig)
	}
	if err := os.WriteFile(config, []byte(b.String()), 0o600); err != nil {
		return "", err
	}
	return "--admission-control-config-file=" + config, nil
}

// renderWithComponent renders base (a directory of the repository, such as
// config/default) with a component, through a kustomization of its own in
// dir: kustomize takes neither absolute paths nor a component on the
// command line.
func (env *Environment) renderWithComponent(ctx context.Context, dir, base, component string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	rel := func(p string) (string, error) { return filepath.Rel(dir, filepath.Join(env.RepoRoot, p)) }
	b, err := rel(base)
	if err != nil {
		return "", err
	}
	c, err := rel(component)
	if err != nil {
		return "", err
	}
	kustomization := fmt.Sprintf("resources: [%s]\ncomponents: [%s]\n", b, c)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kustomization), 0o600); err != nil {
		return "", err
	}
	return env.Kubectl(ctx, nil, "kustomize", dir)
}

// WebhookClientCertificate is the certificate the API server presents to
// the webhook, for a test that calls the webhook as the API server does;
// with Options.WebhookClientAuth off, none (and none is needed).
func (env *Environment) WebhookClientCertificate() ([]tls.Certificate, error) {
	if !env.opts.WebhookClientAuth {
		return nil, nil
	}
	dir := env.CertDir(clientCertKind)
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		return nil, err
	}
	return []tls.Certificate{cert}, nil
}
