package main

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// metricsAuthLogInterval bounds how often the metrics endpoint logs a
// refused request: anyone who can reach the port can send them.
const metricsAuthLogInterval = time.Minute

// metricsAuthFilter is the metrics endpoint's FilterProvider: like
// controller-runtime's filters.WithAuthenticationAndAuthorization (the same
// delegating authenticator and authorizer, TokenReview and
// SubjectAccessReview through the API server), but with the answers of
// Kubernetes' own servers instead of 500 and an error log with a stack
// trace per request: a token the API server rejects is 401, no token 401,
// a caller not allowed `get` on the path 403. A refused request is logged
// at most once per logInterval, at info level, with the count since.
func metricsAuthFilter(logInterval time.Duration) func(*rest.Config, *http.Client) (metricsserver.Filter, error) {
	return func(config *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
		authn, authz, err := delegatingAuth(config, httpClient)
		if err != nil {
			return nil, err
		}
		authn = newReviewBudget(authn)
		return func(log logr.Logger, handler http.Handler) (http.Handler, error) {
			return authorizeMetrics(log, logInterval, authn, authz, handler), nil
		}, nil
	}
}

// delegatingAuth builds the authenticator and authorizer that ask the API
// server, configured as controller-runtime's filter configures them.
func delegatingAuth(config *rest.Config, httpClient *http.Client) (authenticator.Request, authorizer.Authorizer, error) {
	authnClient, err := authenticationv1.NewForConfigAndClient(config, httpClient)
	if err != nil {
		return nil, nil, err
	}
	authzClient, err := authorizationv1.NewForConfigAndClient(config, httpClient)
	if err != nil {
		return nil, nil, err
	}
	// The API server's default retry of its own authentication webhooks.
	backoff := &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: false},
		CacheTTL:                 time.Minute,
		TokenAccessReviewClient:  authnClient,
		TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff:      backoff,
	}.New()
	if err != nil {
		return nil, nil, fmt.Errorf("creating the metrics authenticator: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: authzClient,
		AllowCacheTTL:             5 * time.Minute,
		DenyCacheTTL:              30 * time.Second,
		WebhookRetryBackoff:       backoff,
	}.New()
	if err != nil {
		return nil, nil, fmt.Errorf("creating the metrics authorizer: %w", err)
	}
	return authn, authz, nil
}

// authorizeMetrics serves handler to callers that authn authenticates and
// authz allows.
//
// The delegating authenticator returns an error both for a token the API
// server rejects (TokenReview's status.error) and for a TokenReview that
// could not be made; the two cannot be told apart, and either way the
// caller is not authenticated: 401, as the API server itself answers an
// unknown token. An authorization error (a SubjectAccessReview that failed)
// concerns an authenticated caller and stays a 500.
func authorizeMetrics(log logr.Logger, logInterval time.Duration, authn authenticator.Request, authz authorizer.Authorizer, handler http.Handler) http.Handler {
	refusals := &refusalLog{log: log, every: rate.Sometimes{Interval: logInterval}}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		res, ok, err := authn.AuthenticateRequest(req)
		if errors.Is(err, errReviewBudgetSpent) {
			refusals.note("Refused a metrics request: too many unknown tokens", nil)
			w.Header().Set("Retry-After", "1")
			http.Error(w, "Too many requests", http.StatusTooManyRequests)
			return
		}
		if err != nil || !ok {
			refusals.note("Refused a metrics request: not authenticated", err)
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		attributes := authorizer.AttributesRecord{User: res.User, Verb: strings.ToLower(req.Method), Path: req.URL.Path}
		decision, reason, err := authz.Authorize(req.Context(), attributes)
		if err != nil {
			refusals.note("Refused a metrics request: authorization failed", err, "user", res.User.GetName())
			http.Error(w, "Authorization failed", http.StatusInternalServerError)
			return
		}
		if decision != authorizer.DecisionAllow {
			refusals.note("Refused a metrics request: not authorized", nil, "user", res.User.GetName(), "reason", reason)
			http.Error(w, "Forbidden", http.StatusForbidden)
			return
		}
		handler.ServeHTTP(w, req)
	})
}

// refusalLog logs refused requests at most once per interval, with how
// many were refused since the last line. Info level, and the error as a
// string: an error-level entry would carry a stack trace, and a refusal is
// the caller's fault, not ours.
type refusalLog struct {
	log     logr.Logger
	every   rate.Sometimes
	refused atomic.Int64
}

func (r *refusalLog) note(msg string, err error, keysAndValues ...any) {
	r.refused.Add(1)
	r.every.Do(func() {
		kv := append([]any{"refusedSinceLastLog", r.refused.Swap(0)}, keysAndValues...)
		if err != nil {
			kv = append(kv, "error", err.Error())
		}
		r.log.Info(msg, kv...)
	})
}

const (
	// rejectedTokenTTL is how long a token the API server rejected is
	// refused without asking again (the authorizer's deny cache TTL): the
	// delegating authenticator caches no rejection (it sees an error).
	rejectedTokenTTL = 30 * time.Second
	// acceptedTokenTTL is the authenticator's own cache TTL: a token it
	// accepted within it is answered from that cache, not reviewed.
	acceptedTokenTTL = time.Minute
	// unknownTokenReviews and unknownTokenBurst budget the TokenReviews of
	// tokens neither cache knows: anyone who reaches the port can send
	// fresh tokens, each one a request to the API server, and a scraper
	// whose cached review expired would queue behind them. A few
	// scrapers, each reviewed once a minute, need far less.
	unknownTokenReviews = 2 // per second
	unknownTokenBurst   = 10
	// tokenCacheSize bounds each cache (at most the budget's reviews per
	// TTL enter it).
	tokenCacheSize = 4096
)

// errReviewBudgetSpent: a token neither cache knows, and no TokenReview
// left in the budget.
var errReviewBudgetSpent = errors.New("too many TokenReviews of unknown tokens")

// reviewBudget wraps the delegating authenticator: a token it rejected is
// refused again for rejectedTokenTTL without a TokenReview, and tokens
// not seen recently are reviewed within a token bucket. Tokens are kept
// as their SHA-256, never in the clear.
type reviewBudget struct {
	authn    authenticator.Request
	rejected *utilcache.LRUExpireCache
	accepted *utilcache.LRUExpireCache
	unknown  *rate.Limiter
}

func newReviewBudget(authn authenticator.Request) *reviewBudget {
	return &reviewBudget{
		authn:    authn,
		rejected: utilcache.NewLRUExpireCache(tokenCacheSize),
		accepted: utilcache.NewLRUExpireCache(tokenCacheSize),
		unknown:  rate.NewLimiter(unknownTokenReviews, unknownTokenBurst),
	}
}

func (b *reviewBudget) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	token, ok := bearerToken(req)
	if !ok {
		return b.authn.AuthenticateRequest(req) // no TokenReview without a token
	}
	key := sha256.Sum256([]byte(token))
	if _, rejected := b.rejected.Get(key); rejected {
		return nil, false, nil
	}
	if _, accepted := b.accepted.Get(key); !accepted && !b.unknown.Allow() {
		return nil, false, errReviewBudgetSpent
	}
	res, ok, err := b.authn.AuthenticateRequest(req)
	// A rejection and a failed review look alike (both errors): either
	// way the token is refused for a while, at worst a scrape or two.
	if err != nil || !ok {
		b.rejected.Add(key, struct{}{}, rejectedTokenTTL)
	} else {
		b.accepted.Add(key, struct{}{}, acceptedTokenTTL)
	}
	return res, ok, err
}

// bearerToken is the token of an "Authorization: Bearer" header, as the
// bearer token authenticator reads it.
func bearerToken(req *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(req.Header.Get("Authorization")), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") || token == "" {
		return "", false
	}
	return token, true
}
