//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// What a user is told at admission and sees in kubectl get, for the rows of
// issue 32 that admission and the printed columns answer: a prefixLength
// that can never fit its pool is refused, one that waits for space says
// so with the largest free block, the gateway in effect is shown, an edit
// of an immutable field gets one message that says what to do, and a pool
// shows its utilization once. Through v1alpha2: v1alpha1 requests reach
// the same webhooks (matchPolicy Equivalent), and its CRD rules and
// columns are checked in api/v1alpha1; serving v1alpha1 here would change
// the CRDs under the tests that follow (TestWebhookCallsPerLifecycle counts
// calls that a CRD being re-served retries).

// apply runs kubectl with manifest on its standard input and returns its
// error output (warnings and refusals) and whether it succeeded.
func apply(t *testing.T, manifest string, args ...string) (string, bool) {
	t.Helper()
	_, stderr, err := kubectl(t, manifest, args...)
	return strings.TrimSpace(stderr), err == nil
}

func subnetManifest(version, ns, name, spec string) string {
	return fmt.Sprintf("apiVersion: ipam.subnet-operator.io/%s\nkind: Subnet\nmetadata: {name: %s, namespace: %s}\nspec: %s\n", version, name, ns, spec)
}

func poolManifest(ns, name, spec string) string {
	return fmt.Sprintf("apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: SubnetPool\nmetadata: {name: %s, namespace: %s}\nspec: %s\n", name, ns, spec)
}

// Row 4 (a): a length no block of the pool can ever have is refused, with
// the lengths that would fit. The pool's own prefix and bounds were
// refused before; a length that only the reserved ranges rule out was
// accepted and waited PoolExhausted forever.
func TestPrefixLengthThatCanNeverFitIsRefused(t *testing.T) {
	ns := namespace(t)
	if msg, ok := apply(t, poolManifest(ns, "rsv", "{cidr: 10.41.0.0/18, reserved: [10.41.63.0/24], maxPrefixLength: 28}"), "create", "-f", "-"); !ok {
		t.Fatalf("creating the pool: %s", msg)
	}
	for _, tc := range []struct{ name, spec, want string }{
		{"shorter than the pool", "{poolRef: {name: rsv}, prefixLength: 17}",
			`The Subnet "big" is invalid: spec.prefixLength: Invalid value: 17: prefix length 17 does not fit SubnetPool ` + ns + `/rsv (10.41.0.0/18): use 19 to 28`},
		{"longer than maxPrefixLength", "{poolRef: {name: rsv}, prefixLength: 30}",
			`The Subnet "big" is invalid: spec.prefixLength: Invalid value: 30: prefix length 30 is longer than maxPrefixLength 28 of SubnetPool ` + ns + `/rsv: use 19 to 28`},
		{"another family's length", "{poolRef: {name: rsv}, prefixLength: 64}",
			`The Subnet "big" is invalid: spec.prefixLength: Invalid value: 64: prefix length 64 does not fit SubnetPool ` + ns + `/rsv (10.41.0.0/18): use 19 to 28`},
		{"ruled out by the reserved ranges", "{poolRef: {name: rsv}, prefixLength: 18}",
			`The Subnet "big" is invalid: spec.prefixLength: Invalid value: 18: no /18 of SubnetPool ` + ns + `/rsv (10.41.0.0/18) is clear of its reserved ranges (10.41.63.0/24): use 19 to 28`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if msg, ok := apply(t, subnetManifest("v1alpha2", ns, "big", tc.spec), "create", "-f", "-"); ok || msg != tc.want {
				t.Errorf("created %v, kubectl printed\n%s\nwant\n%s", ok, msg, tc.want)
			}
		})
	}
}

// Row 4 (b): a length that fits the pool's range but no free block now is
// accepted, and the warning names the largest free block.
func TestWaitingForSpaceWarnsWithTheLargestFreeBlock(t *testing.T) {
	ns := namespace(t)
	if msg, ok := apply(t, poolManifest(ns, "dc", "{cidr: 10.40.0.0/18}")+"---\n"+subnetManifest("v1alpha2", ns, "web", "{poolRef: {name: dc}, cidr: 10.40.0.0/24}"), "create", "-f", "-"); !ok {
		t.Fatalf("setup: %s", msg)
	}
	subnetReason(t, ns, "web", ipamv1.ReasonAllocated)

	msg, ok := apply(t, subnetManifest("v1alpha2", ns, "big", "{poolRef: {name: dc}, prefixLength: 18}"), "create", "-f", "-")
	want := "Warning: no /18 is free in " + ns + "/dc now: the largest free block is 10.40.32.0/19; this Subnet waits (PoolExhausted) until space frees"
	if !ok || msg != want {
		t.Errorf("created %v, kubectl printed\n%s\nwant\n%s", ok, msg, want)
	}
	subnetReason(t, ns, "big", ipamv1.ReasonPoolExhausted)

	// A length that is free now draws no warning.
	if msg, ok := apply(t, subnetManifest("v1alpha2", ns, "small", "{poolRef: {name: dc}, prefixLength: 19}"), "create", "-f", "-"); !ok || msg != "" {
		t.Errorf("a /19 that fits now: created %v, kubectl printed %q, want nothing", ok, msg)
	}
}

// table reads a list as kubectl get does, in the API server's Table form,
// and returns its columns (name -> priority) and its rows (column -> cell).
func table(t *testing.T, version, ns, resource string) (map[string]int64, []map[string]any) {
	t.Helper()
	httpClient, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("%s/apis/ipam.subnet-operator.io/%s/namespaces/%s/%s?includeObject=None", strings.TrimSuffix(env.Config.Host, "/"), version, ns, resource)
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v: %s", url, resp.StatusCode, err, body)
	}
	var tbl struct {
		ColumnDefinitions []struct {
			Name     string `json:"name"`
			Priority int64  `json:"priority"`
		} `json:"columnDefinitions"`
		Rows []struct {
			Cells []any `json:"cells"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(body, &tbl); err != nil {
		t.Fatal(err)
	}
	columns := map[string]int64{}
	for _, c := range tbl.ColumnDefinitions {
		columns[c.Name] = c.Priority
	}
	var rows []map[string]any
	for _, r := range tbl.Rows {
		row := map[string]any{}
		for i, c := range tbl.ColumnDefinitions {
			row[c.Name] = r.Cells[i]
		}
		rows = append(rows, row)
	}
	return columns, rows
}

// Row 9: -o wide shows the gateway in effect, the first usable address
// when spec.gateway is left out, in both API versions.
func TestWideShowsTheGatewayInEffect(t *testing.T) {
	ns := namespace(t)
	manifest := poolManifest(ns, "dc", "{cidr: 10.42.0.0/16}") + "---\n" +
		subnetManifest("v1alpha2", ns, "first-usable", "{poolRef: {name: dc}, cidr: 10.42.1.0/24}") + "---\n" +
		subnetManifest("v1alpha2", ns, "own", "{poolRef: {name: dc}, cidr: 10.42.2.0/24, gateway: 10.42.2.254}") + "---\n" +
		subnetManifest("v1alpha2", ns, "dynamic", "{poolRef: {name: dc}, prefixLength: 28}")
	if msg, ok := apply(t, manifest, "create", "-f", "-"); !ok {
		t.Fatalf("setup: %s", msg)
	}
	for _, name := range []string{"first-usable", "own", "dynamic"} {
		subnetReason(t, ns, name, ipamv1.ReasonAllocated)
	}
	want := map[string]string{"first-usable": "10.42.1.1", "own": "10.42.2.254", "dynamic": "10.42.0.1"}
	eventually(t, 10*time.Second, func() error {
		columns, rows := table(t, "v1alpha2", ns, "subnets")
		if _, ok := columns["Gateway"]; !ok {
			return fmt.Errorf("no Gateway column: %v", columns)
		}
		for _, row := range rows {
			if got := row["Gateway"]; got != want[row["Name"].(string)] {
				return fmt.Errorf("Subnet %s shows gateway %v, want %s", row["Name"], got, want[row["Name"].(string)])
			}
		}
		return nil
	})
}

// Row 10: an edit of cidr or prefixLength is refused with one message per
// field that says it is immutable and what to do instead, in both API
// versions.
func TestEditingAClaimSaysWhatToDoInstead(t *testing.T) {
	ns := namespace(t)
	manifest := poolManifest(ns, "dc", "{cidr: 10.43.0.0/16}") + "---\n" +
		subnetManifest("v1alpha2", ns, "explicit", "{poolRef: {name: dc}, cidr: 10.43.1.0/24}") + "---\n" +
		subnetManifest("v1alpha2", ns, "dynamic", "{poolRef: {name: dc}, prefixLength: 24}")
	if msg, ok := apply(t, manifest, "create", "-f", "-"); !ok {
		t.Fatalf("setup: %s", msg)
	}
	subnetReason(t, ns, "explicit", ipamv1.ReasonAllocated)
	eventually(t, 20*time.Second, func() error {
		s := subnetReason(t, ns, "dynamic", ipamv1.ReasonAllocated)
		if s.Spec.CIDR != s.Status.CIDR {
			return fmt.Errorf("the allocated range %s is not recorded in spec.cidr yet", s.Status.CIDR)
		}
		return nil
	})
	cidrMsg := func(held string) string {
		return "cidr is immutable: a Subnet keeps the range it claims (" + held + ") for its lifetime; to claim another, delete this Subnet and create a new one (kubectl ipam next -n " + ns + " dc shows what the pool would allocate)"
	}
	lengthMsg := "prefixLength is immutable: a Subnet keeps the length it asked for (/24) for its lifetime; to claim another, delete this Subnet and create a new one (kubectl ipam next -n " + ns + " dc --length 23 shows what the pool would allocate)"
	for _, tc := range []struct {
		name, subnet, patch, want string
	}{
		{"explicit cidr", "explicit", `{"spec":{"cidr":"10.43.2.0/24"}}`, `spec.cidr: Invalid value: "10.43.2.0/24": ` + cidrMsg("10.43.1.0/24")},
		{"explicit cidr of another length", "explicit", `{"spec":{"cidr":"10.43.2.0/23"}}`, `spec.cidr: Invalid value: "10.43.2.0/23": ` + cidrMsg("10.43.1.0/24")},
		{"allocated cidr", "dynamic", `{"spec":{"cidr":"10.43.200.0/24"}}`, `spec.cidr: Invalid value: "10.43.200.0/24": ` + cidrMsg("10.43.0.0/24")},
		{"prefixLength", "dynamic", `{"spec":{"prefixLength":23}}`, `spec.prefixLength: Invalid value: 23: ` + lengthMsg},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg, ok := apply(t, "", "patch", "subnet", "-n", ns, tc.subnet, "--type=merge", "-p", tc.patch)
			if want := `The Subnet "` + tc.subnet + `" is invalid: ` + tc.want; ok || msg != want {
				t.Errorf("patched %v, kubectl printed\n%s\nwant\n%s", ok, msg, want)
			}
		})
	}
}

// Row 13: a pool's utilization is one column, not USED% beside
// UTILIZATION.
func TestPoolUtilizationIsOneColumn(t *testing.T) {
	ns := namespace(t)
	if msg, ok := apply(t, poolManifest(ns, "dc", "{cidr: 10.44.0.0/16}"), "create", "-f", "-"); !ok {
		t.Fatalf("setup: %s", msg)
	}
	columns, _ := table(t, "v1alpha2", ns, "subnetpools")
	var figures []string
	for name := range columns {
		if n := strings.ToLower(name); strings.Contains(n, "used") || strings.Contains(n, "utilization") {
			figures = append(figures, name)
		}
	}
	if len(figures) != 1 || columns[figures[0]] != 0 {
		t.Errorf("utilization columns %v (priorities %v); want one, in the default view", figures, columns)
	}
}
