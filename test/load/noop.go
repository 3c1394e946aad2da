package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/subnet-operator/subnet-operator/test/environment"
)

// noopWebhook answers every AdmissionReview "allowed", and nothing else,
// behind the same TLS as the manager's webhook server: cert-manager's
// certificate, TLS 1.2 at least, HTTP/1.1 only. It is the floor of any
// webhook design: the API server's cost of calling a webhook at all.
type noopWebhook struct {
	server   *http.Server
	listener net.Listener
}

func startNoopWebhook(certDir string) (*noopWebhook, error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key"))
	if err != nil {
		return nil, err
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"},
	})
	if err != nil {
		return nil, err
	}
	w := &noopWebhook{listener: l, server: &http.Server{Handler: http.HandlerFunc(allow), ReadHeaderTimeout: 10 * time.Second}}
	go func() { _ = w.server.Serve(l) }()
	return w, nil
}

// allow answers an AdmissionReview with its UID, allowed.
func allow(rw http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	var review admissionv1.AdmissionReview
	if err != nil || json.Unmarshal(body, &review) != nil || review.Request == nil {
		http.Error(rw, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Response: &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true},
	})
}

func (w *noopWebhook) url() string { return "https://" + w.listener.Addr().String() }

func (w *noopWebhook) close() { _ = w.server.Close() }

// pointWebhooksAt makes both webhook configurations call base instead of
// the manager, keeping every other setting (paths, rules, timeouts, CA,
// failure policy), and waits until the API server uses them: a dry-run
// create with host bits set is refused by the CRD's own rule, not by the
// manager's mutating webhook, which would say "did you mean".
func pointWebhooksAt(ctx context.Context, env *environment.Environment, base string) error {
	for _, kind := range []string{"validatingwebhookconfiguration", "mutatingwebhookconfiguration"} {
		out, err := env.Kubectl(ctx, nil, "get", kind, "-o", "json")
		if err != nil {
			return err
		}
		replaced := strings.ReplaceAll(out, env.WebhookURL+"/", base+"/")
		if replaced == out {
			return fmt.Errorf("no %s calls %s", kind, env.WebhookURL)
		}
		if _, err := env.Kubectl(ctx, []byte(replaced), "replace", "-f", "-"); err != nil {
			return err
		}
	}
	probe := fmt.Sprintf("apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: Subnet\nmetadata: {name: probe, namespace: %s}\nspec: {poolRef: {name: %s}, cidr: 10.0.0.1/28}\n", namespace, poolName)
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := env.Kubectl(ctx, []byte(probe), "create", "--dry-run=server", "-f", "-")
		if err != nil && strings.Contains(err.Error(), "host bits set: write the network address") {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the API server still calls the manager's webhooks")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
