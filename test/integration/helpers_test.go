//go:build integration

package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// createInParallel starts creating the Subnets from workers goroutines and
// returns at once, so the caller can inject a fault meanwhile. Each create is
// retried every 100 ms, up to attempts times, while the API server or the
// webhook is away, as a client would; "already exists" counts as created
// (an earlier attempt landed). wait blocks until every create is done and
// returns the error of each Subnet that could not be created, by name.
func createInParallel(subnets []*ipamv1.Subnet, workers, attempts int) (wait func() map[string]error) {
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed = map[string]error{}
	)
	queue := make(chan *ipamv1.Subnet, len(subnets))
	for _, s := range subnets {
		queue <- s
	}
	close(queue)
	for range workers {
		wg.Go(func() {
			for s := range queue {
				var err error
				for range attempts {
					if err = k8s.Create(context.Background(), s.DeepCopy()); err == nil || apierrors.IsAlreadyExists(err) {
						err = nil
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				if err != nil {
					mu.Lock()
					failed[s.Name] = err
					mu.Unlock()
				}
			}
		})
	}
	return func() map[string]error {
		wg.Wait()
		return failed
	}
}

// setWebhookOperations sets the operations both webhooks of a webhook
// configuration (the Subnet's and the pool's) match, ops being a JSON list,
// and returns a function that puts back the operations each had.
func setWebhookOperations(t *testing.T, configuration, ops string) (restore func()) {
	t.Helper()
	var was [2]string
	for i := range was {
		out, stderr, err := kubectl(t, "", "get", configuration, "-o", fmt.Sprintf("jsonpath={.webhooks[%d].rules[0].operations}", i))
		if err != nil {
			t.Fatalf("%v: %s", err, stderr)
		}
		was[i] = out
	}
	patch := func(ops [2]string) {
		t.Helper()
		p := fmt.Sprintf(`[{"op":"replace","path":"/webhooks/0/rules/0/operations","value":%s},{"op":"replace","path":"/webhooks/1/rules/0/operations","value":%s}]`, ops[0], ops[1])
		if _, stderr, err := kubectl(t, "", "patch", configuration, "--type=json", "-p", p); err != nil {
			t.Fatalf("%v: %s", err, stderr)
		}
	}
	patch([2]string{ops, ops})
	return func() { patch(was) }
}

const (
	validatingConfiguration = "validatingwebhookconfiguration/subnet-operator-validating-webhook-configuration"
	mutatingConfiguration   = "mutatingwebhookconfiguration/subnet-operator-mutating-webhook-configuration"
	noOperations            = `["CONNECT"]`
)
