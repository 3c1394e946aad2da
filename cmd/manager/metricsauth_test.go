package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// fakeReviewServer answers TokenReviews and SubjectAccessReviews as an API
// server does: the token "reader" is user reader, allowed get /metrics;
// "stranger" is user stranger, allowed nothing; any other token is
// rejected with status.error, as the API server rejects an unknown token.
func fakeReviewServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/apis/authentication.k8s.io/v1/tokenreviews":
			var review authenticationv1.TokenReview
			if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			switch review.Spec.Token {
			case "reader", "stranger":
				review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: review.Spec.Token}}
			default:
				review.Status = authenticationv1.TokenReviewStatus{Error: "[invalid bearer token, token lookup failed]"}
			}
			_ = json.NewEncoder(w).Encode(&review)
		case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
			var review authorizationv1.SubjectAccessReview
			if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			na := review.Spec.NonResourceAttributes
			review.Status.Allowed = review.Spec.User == "reader" && na != nil && na.Path == "/metrics" && na.Verb == "get"
			_ = json.NewEncoder(w).Encode(&review)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// The metrics endpoint answers a caller it cannot authenticate with 401,
// a caller not allowed with 403, and logs refusals at most once per
// interval, without a stack trace: anyone who reaches the port can send
// them. (controller-runtime's filter answered an invalid token with 500
// and an error log with a stack trace per request.)
func TestMetricsAuthRefusesQuietly(t *testing.T) {
	srv := fakeReviewServer(t)
	config := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	httpClient, err := rest.HTTPClientFor(config)
	if err != nil {
		t.Fatal(err)
	}
	filter, err := metricsAuthFilter(time.Hour)(config, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	log := zap.New(zap.WriteTo(&logs)) // production: a stack trace on every error-level entry
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = fmt.Fprintln(w, "metric 1") })
	handler, err := filter(log, metrics)
	if err != nil {
		t.Fatal(err)
	}

	get := func(token string) int {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		return rec.Code
	}
	const flood = 20
	for range flood {
		// The same token each time: its rejection is cached, so this
		// floods the log, not the budget of TokenReviews of unknown tokens.
		if code := get("forged"); code != http.StatusUnauthorized {
			t.Fatalf("an invalid token: status %d, want 401", code)
		}
	}
	if code := get(""); code != http.StatusUnauthorized {
		t.Errorf("no token: status %d, want 401", code)
	}
	if code := get("stranger"); code != http.StatusForbidden {
		t.Errorf("an authenticated caller without get /metrics: status %d, want 403", code)
	}
	if code := get("reader"); code != http.StatusOK {
		t.Errorf("a caller allowed get /metrics: status %d, want 200", code)
	}

	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 1 {
		t.Errorf("%d refused requests logged %d lines, want 1 per interval:\n%s", flood+2, len(lines), logs.String())
	}
	if strings.Contains(logs.String(), "stacktrace") || strings.Contains(logs.String(), `"level":"error"`) {
		t.Errorf("a refusal logged at error level, with a stack trace:\n%s", logs.String())
	}
}
