//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// A Subnet whose poolRef forgot the namespace (`poolRef: {name: corp}`
// from a team's namespace, while the platform's corp pool allows it) says
// which pool it likely meant at admission, in its condition and in an
// event, and is counted in the gauge the alert reads; once the pool it
// names appears, it is allocated and no longer counted.
func TestSubnetWaitingForAMissingPoolNamesTheLikelyPool(t *testing.T) {
	ctx := context.Background()
	team, netops := namespace(t), namespace(t)
	// A name no other test's pool has: pools of other tests that allow
	// every namespace would be suggested too (the first in name order).
	corp := newPool(netops, "corp-of-waits", "10.90.0.0/16", 24)
	corp.Spec.AllowedNamespaces = &ipamv1.AllowedNamespaces{From: ipamv1.FromAll}
	create(t, corp)

	_, stderr, err := kubectl(t, fmt.Sprintf(`
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: Subnet
metadata: {name: web, namespace: %s}
spec: {poolRef: {name: corp-of-waits}, prefixLength: 26}
`, team), "create", "-f", "-")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	hint := fmt.Sprintf("Did you mean %s/corp-of-waits? spec.poolRef cannot change: delete the Subnet and create it again with poolRef %s/corp-of-waits", netops, netops)
	if !strings.Contains(stderr, hint) {
		t.Errorf("create warning %q, want it to contain %q", stderr, hint)
	}

	s := subnetReason(t, team, "web", ipamv1.ReasonPoolNotFound)
	if c := meta.FindStatusCondition(s.Status.Conditions, ipamv1.ConditionReady); !strings.Contains(c.Message, hint) {
		t.Errorf("Ready message %q, want it to contain %q", c.Message, hint)
	}
	eventually(t, 30*time.Second, func() error {
		out, _, err := kubectl(t, "", "get", "events", "-n", team, "--field-selector", "reason=PoolNotFound,type=Warning", "-o", "jsonpath={.items[*].note}{.items[*].message}")
		if err != nil || !strings.Contains(out, hint) {
			return fmt.Errorf("no PoolNotFound event naming the pool yet (%q): %v", out, err)
		}
		return nil
	})

	token, err := env.MetricsReaderToken(ctx, team, "scraper")
	if err != nil {
		t.Fatal(err)
	}
	series := fmt.Sprintf(`subnet_operator_subnets_pool_not_found{namespace=%q} 1`, team)
	scrapeShows := func(want bool) error {
		_, body, err := env.Scrape(ctx, env.Managers[0], token)
		if err != nil {
			return err
		}
		if strings.Contains(body, series) != want {
			return fmt.Errorf("scrape shows %s: %v, want %v", series, !want, want)
		}
		return nil
	}
	eventually(t, 30*time.Second, func() error { return scrapeShows(true) })

	// The pool it names appears: the waiting claim is allocated.
	create(t, newPool(team, "corp-of-waits", "10.91.0.0/16", 24))
	subnetReason(t, team, "web", ipamv1.ReasonAllocated)
	eventually(t, 30*time.Second, func() error { return scrapeShows(false) })
}
