//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// hostile is one bad input: an object to create, or a change to a stored
// one, and the rule it breaks. want is a part of what kubectl prints.
type hostile struct {
	rule string
	// create: a manifest (YAML or JSON) with NS for the namespace.
	create string
	// or patch: kubectl patch arguments of an existing object.
	patch []string
	// or delete: kubectl delete arguments.
	remove []string
	// or raw: POST create to this API path (what kubectl cannot express).
	raw  string
	want string
}

// catalog is the hostile-input catalog of docs/validation.md.
func catalog() []hostile {
	sub := func(name, spec string) string {
		return fmt.Sprintf("apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: Subnet\nmetadata: {name: %s, namespace: NS}\nspec: %s\n", name, spec)
	}
	subJSON := func(name, cidr string) string {
		raw, _ := json.Marshal(cidr)
		return fmt.Sprintf(`{"apiVersion":"ipam.subnet-operator.io/v1alpha2","kind":"Subnet","metadata":{"name":%q,"namespace":"NS"},"spec":{"poolRef":{"name":"dc"},"cidr":%s}}`, name, raw)
	}
	pool := func(name, spec string) string {
		return fmt.Sprintf("apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: SubnetPool\nmetadata: {name: %s, namespace: NS}\nspec: %s\n", name, spec)
	}
	many := make([]string, 300)
	for i := range many {
		many[i] = fmt.Sprintf("172.16.%d.%d/32", i/256, i%256)
	}
	manyJSON, _ := json.Marshal(many)
	return []hostile{
		// Malformed CIDRs.
		{rule: "prefix length beyond the family", create: subJSON("h1", "10.0.0.0/33"), want: `prefix length 33 is out of range for IPv4 (0-32)`},
		{rule: "truncated address", create: subJSON("h2", "10.0.0/24"), want: `"10.0.0" is not an IPv4 or IPv6 address`},
		{rule: "leading zeros", create: subJSON("h3", "010.0.0.0/8"), want: `leading zeros are not allowed in IPv4 addresses (they are read as octal by some tools); did you mean "10.0.0.0/8"?`},
		{rule: "zone", create: subJSON("h4", "fe80::1%eth0/64"), want: `zones (such as %eth0) are not allowed in a CIDR`},
		{rule: "IPv4-mapped IPv6", create: subJSON("h5", "::ffff:10.0.0.0/104"), want: `IPv4-mapped IPv6 is not allowed; write the IPv4 form; did you mean "10.0.0.0/8"?`},
		{rule: "trailing space", create: subJSON("h6", "10.0.2.0/24 "), want: `must not contain spaces; did you mean "10.0.2.0/24"?`},
		{rule: "leading space", create: subJSON("h7", " 10.0.2.0/24"), want: `must not contain spaces; did you mean "10.0.2.0/24"?`},
		{rule: "unicode digits", create: subJSON("h8", "١٠.0.0.0/8"), want: `contains '١'; a CIDR uses only ASCII digits, the letters a-f, '.', ':' and '/'`},
		{rule: "control character", create: subJSON("h9", "10.0.2.0/24\n"), want: `must not contain spaces; did you mean "10.0.2.0/24"?`},
		{rule: "empty string", create: subJSON("h10", ""), want: `spec.cidr: Invalid value: "": spec.cidr in body should be at least 1 chars long`},
		{rule: "very long string", create: subJSON("h11", strings.Repeat("1", 5000)), want: `is longer than any CIDR (64 characters at most)`},
		{rule: "no prefix length", create: subJSON("h12", "10.0.2.0"), want: `missing prefix length; did you mean "10.0.2.0/32"?`},
		{rule: "empty prefix length", create: subJSON("h13", "10.0.2.0/"), want: `prefix length "" is not a number from 0 to 32`},
		{rule: "two prefix lengths", create: subJSON("h14", "10.0.2.0/24/24"), want: `prefix length "24/24" is not a number from 0 to 32`},
		{rule: "negative prefix length", create: subJSON("h15", "10.0.2.0/-1"), want: `prefix length "-1" is not a number from 0 to 32`},
		{rule: "prefix length with a leading zero", create: subJSON("h16", "10.0.2.0/024"), want: `prefix length "024" is not a number from 0 to 32`},
		{rule: "octet beyond 255", create: subJSON("h17", "256.0.0.0/8"), want: `"256.0.0.0" is not an IPv4 or IPv6 address`},
		{rule: "hexadecimal", create: subJSON("h18", "0x0a000000/8"), want: `"0x0a000000" is not an IPv4 or IPv6 address`},
		{rule: "host bits set", create: subJSON("h19", "10.0.2.1/24"), want: `host bits set; did you mean "10.0.2.0/24"?`},
		{rule: "host bits set (IPv6)", create: sub("h20", "{poolRef: {name: v6}, cidr: '2001:db8:0:1::1/64'}"), want: `host bits set; did you mean "2001:db8:0:1::/64"?`},
		// The pool's rules.
		{rule: "family mismatch", create: subJSON("h21", "2001:db8::/64"), want: `is IPv6 but SubnetPool NS/dc (10.0.0.0/16) is IPv4`},
		{rule: "outside the pool", create: subJSON("h22", "10.1.0.0/24"), want: `lies outside SubnetPool NS/dc (10.0.0.0/16)`},
		{rule: "on a reserved range", create: subJSON("h23", "10.0.64.0/25"), want: `overlaps reserved range 10.0.64.0/24 of SubnetPool NS/dc`},
		{rule: "shorter than minPrefixLength", create: subJSON("h24", "10.0.32.0/19"), want: `prefix length 19 is shorter than minPrefixLength 20 of SubnetPool NS/dc: use 20 to 28`},
		{rule: "longer than maxPrefixLength", create: sub("h25", "{poolRef: {name: dc}, prefixLength: 29}"), want: `prefix length 29 is longer than maxPrefixLength 28 of SubnetPool NS/dc: use 20 to 28`},
		{rule: "prefixLength shorter than the pool", create: sub("h25b", "{poolRef: {name: dc}, prefixLength: 12}"), want: `prefix length 12 does not fit SubnetPool NS/dc (10.0.0.0/16): use 20 to 28`},
		{rule: "prefixLength beyond 128", create: sub("h26", "{poolRef: {name: dc}, prefixLength: 129}"), want: `spec.prefixLength: Invalid value: 129: must be between 0 and 128`},
		{rule: "negative prefixLength", create: sub("h27", "{poolRef: {name: dc}, prefixLength: -1}"), want: `spec.prefixLength: Invalid value: -1: must be between 0 and 128`},
		{rule: "cidr and a prefixLength it disagrees with", create: sub("h28", "{poolRef: {name: dc}, cidr: 10.0.2.0/24, prefixLength: 25}"), want: `spec.prefixLength: Invalid value: 25: disagrees with cidr 10.0.2.0/24: set either cidr (an explicit range) or prefixLength (a range the controller allocates)`},
		// A gateway (for Cluster API machines).
		{rule: "gateway without an explicit cidr", create: sub("g1", "{poolRef: {name: dc}, prefixLength: 24, gateway: 10.0.2.1}"), want: `spec.gateway: Invalid value: needs an explicit cidr: the gateway of a range not allocated yet cannot be known`},
		{rule: "gateway outside the range", create: sub("g2", "{poolRef: {name: dc}, cidr: 10.0.2.0/24, gateway: 10.0.3.1}"), want: `spec.gateway: Invalid value: is outside spec.cidr 10.0.2.0/24: the gateway must be an address in that range, of its family`},
		{rule: "gateway on the network address", create: sub("g3", "{poolRef: {name: dc}, cidr: 10.0.2.0/24, gateway: 10.0.2.0}"), want: `spec.gateway: Invalid value: "10.0.2.0": is the network address of 10.0.2.0/24; use a host address such as 10.0.2.1`},
		{rule: "gateway on the broadcast address", create: sub("g4", "{poolRef: {name: dc}, cidr: 10.0.2.0/24, gateway: 10.0.2.255}"), want: `spec.gateway: Invalid value: "10.0.2.255": is the broadcast address of 10.0.2.0/24; use a host address such as 10.0.2.1`},
		{rule: "gateway that is not an address", create: sub("g5", "{poolRef: {name: dc}, cidr: 10.0.2.0/24, gateway: 10.0.2.1/24}"), want: `spec.gateway: Invalid value: "10.0.2.1/24": must be an IP address such as 10.0.1.1 or 2001:db8::1`},
		// Overlaps.
		{rule: "equal to a Subnet", create: subJSON("h29", "10.0.1.0/24"), want: `overlaps Subnet NS/web (10.0.1.0/24)`},
		{rule: "containing a Subnet", create: subJSON("h30", "10.0.0.0/22"), want: `overlaps Subnet NS/web (10.0.1.0/24)`},
		{rule: "contained in a Subnet", create: subJSON("h31", "10.0.1.128/25"), want: `overlaps Subnet NS/web (10.0.1.0/24)`},
		{rule: "inside a child pool", create: subJSON("h32", "10.0.200.0/24"), want: `overlaps SubnetPool NS/team (10.0.128.0/17)`},
		// The pool reference.
		{rule: "empty poolRef", create: sub("h33", `{poolRef: {name: ""}, cidr: 10.0.2.0/24}`), want: `spec.poolRef.name: Required value: name the SubnetPool to claim from`},
		{rule: "blank poolRef", create: sub("h34", `{poolRef: {name: "  "}, cidr: 10.0.2.0/24}`), want: `spec.poolRef.name: Required value: name the SubnetPool to claim from`},
		{rule: "missing poolRef", create: sub("h35", `{cidr: 10.0.2.0/24}`), want: `spec.poolRef.name: Required value`},
		{rule: "a poolRef that is not a name", create: sub("h37", `{poolRef: {name: Team_Pool}, cidr: 10.0.2.0/24}`),
			want: `spec.poolRef.name: Invalid value: "Team_Pool": must be the name of a SubnetPool: a lowercase RFC 1123 subdomain`},
		{rule: "empty namespace (a create without one)", raw: "/apis/ipam.subnet-operator.io/v1alpha2/subnets",
			create: `{"apiVersion":"ipam.subnet-operator.io/v1alpha2","kind":"Subnet","metadata":{"name":"h36"},"spec":{"poolRef":{"name":"dc"},"cidr":"10.0.2.0/24"}}`,
			want:   `the server could not find the requested resource`},
		// Pools.
		{rule: "a pool in another namespace that does not allow it", create: sub("h38", `{poolRef: {name: dc, namespace: OTHER}, cidr: 10.0.2.0/24}`),
			want: `spec.poolRef: Forbidden: SubnetPool OTHER/dc allows claims only from its own namespace OTHER (spec.allowedNamespaces.from: Same), not from NS; ask its owners to allow this namespace in spec.allowedNamespaces`},
		{rule: "a parent in another namespace that does not allow it", create: pool("across", "{parentRef: {name: dc, namespace: OTHER}, cidr: 10.0.32.0/20}"),
			want: `spec.parentRef: Forbidden: SubnetPool OTHER/dc allows claims only from its own namespace OTHER (spec.allowedNamespaces.from: Same), not from NS`},
		{rule: "allowedNamespaces Selector without a selector", create: pool("consent", "{cidr: 192.168.0.0/16, allowedNamespaces: {from: Selector}}"),
			want: `spec.allowedNamespaces.selector: Required value: from: Selector needs a namespace label selector, such as {matchLabels: {ipam.subnet-operator.io/tenant: "true"}}`},
		{rule: "allowedNamespaces from a value it does not know", create: pool("consent", "{cidr: 192.168.0.0/16, allowedNamespaces: {from: Everyone}}"),
			want: `spec.allowedNamespaces.from: Unsupported value: "Everyone": supported values: "Same", "All", "Selector"`},
		{rule: "a per-namespace address cap that is not a number", create: pool("caps", "{cidr: 192.168.0.0/16, allowedNamespaces: {from: All, perNamespace: {maxAddresses: 4k}}}"),
			want: `spec.allowedNamespaces.perNamespace.maxAddresses: Invalid value: "4k": must be a whole number of addresses written in decimal`},
		{rule: "its own parent", create: pool("self", "{parentRef: {name: self}, cidr: 10.0.32.0/20}"), want: `spec.parentRef: Invalid value: "self": must not name the pool itself`},
		{rule: "missing parent", create: pool("orphan", "{parentRef: {name: nowhere}, cidr: 10.0.32.0/20}"), want: `SubnetPool NS/nowhere does not exist; create the parent pool first`},
		{rule: "a parentRef that is not a name", create: pool("badparent", "{parentRef: {name: Parent_Pool}, cidr: 10.0.32.0/20}"),
			want: `spec.parentRef.name: Invalid value: "Parent_Pool": must be the name of a SubnetPool: a lowercase RFC 1123 subdomain`},
		{rule: "child outside its parent", create: pool("out", "{parentRef: {name: dc}, cidr: 10.1.0.0/20}"), want: `lies outside parent SubnetPool NS/dc (10.0.0.0/16)`},
		{rule: "child over a sibling", create: pool("over", "{parentRef: {name: dc}, cidr: 10.0.192.0/18}"), want: `overlaps SubnetPool NS/team (10.0.128.0/17) in parent SubnetPool NS/dc`},
		{rule: "child over a Subnet of its parent", create: pool("over2", "{parentRef: {name: dc}, cidr: 10.0.0.0/20}"), want: `overlaps Subnet NS/web (10.0.1.0/24) in parent SubnetPool NS/dc`},
		{rule: "child over its parent's reserved range", create: pool("over3", "{parentRef: {name: dc}, cidr: 10.0.64.0/20}"), want: `overlaps reserved range 10.0.64.0/24 of parent SubnetPool NS/dc`},
		{rule: "minPrefixLength above maxPrefixLength", create: pool("bounds", "{cidr: 172.16.0.0/12, minPrefixLength: 28, maxPrefixLength: 24}"), want: `spec.minPrefixLength: Invalid value: 28: must not be greater than maxPrefixLength (24)`},
		{rule: "defaultPrefixLength below minPrefixLength", create: pool("bounds2", "{cidr: 172.16.0.0/12, minPrefixLength: 24, defaultPrefixLength: 20}"), want: `spec.defaultPrefixLength: Invalid value: 20: must not be less than minPrefixLength (24)`},
		{rule: "reserved range outside the pool", create: pool("res", "{cidr: 172.16.0.0/16, reserved: [172.17.0.0/24]}"), want: `spec.reserved[0]: Invalid value: "172.17.0.0/24": must lie inside spec.cidr 172.16.0.0/16`},
		{rule: "reserved range with host bits", create: pool("res2", "{cidr: 172.16.0.0/16, reserved: [172.16.0.1/24]}"), want: `host bits set; did you mean "172.16.0.0/24"?`},
		{rule: "huge reserved list", create: pool("res3", fmt.Sprintf("{cidr: 172.16.0.0/12, reserved: %s}", manyJSON)), want: `spec.reserved: Too many: 300: must have at most 256 items`},
		{rule: "pool CIDR with host bits", create: pool("hb", "{cidr: 172.16.0.1/12}"), want: `host bits set; did you mean "172.16.0.0/12"?`},
		// Changes to what is stored.
		{rule: "shrinking a pool below its claims", patch: []string{"subnetpool", "dc", "--type=merge", "-p", `{"spec":{"cidr":"10.0.0.0/17"}}`},
			want: `would leave claims outside the pool: SubnetPool NS/team (10.0.128.0/17)`},
		{rule: "a reserved range over a claim", patch: []string{"subnetpool", "dc", "--type=merge", "-p", `{"spec":{"reserved":["10.0.64.0/24","10.0.1.0/26"]}}`},
			want: `covers ranges already claimed: Subnet NS/web (10.0.1.0/24)`},
		{rule: "changing a Subnet's poolRef", patch: []string{"subnet", "web", "--type=merge", "-p", `{"spec":{"poolRef":{"name":"v6"}}}`}, want: `poolRef is immutable`},
		{rule: "changing a Subnet's cidr", patch: []string{"subnet", "web", "--type=merge", "-p", `{"spec":{"cidr":"10.0.3.0/24"}}`}, want: `cidr is immutable`},
		{rule: "changing a pool's parentRef", patch: []string{"subnetpool", "team", "--type=merge", "-p", `{"spec":{"parentRef":{"name":"v6"}}}`}, want: `parentRef is immutable`},
		{rule: "deleting a pool in use", remove: []string{"subnetpool", "dc"}, want: `SubnetPool NS/dc is in use by 1 Subnets and 1 child pools (Subnet NS/web, SubnetPool NS/team); delete them first`},
		// Sizes.
		{rule: "annotations beyond the limit", create: fmt.Sprintf(`{"apiVersion":"ipam.subnet-operator.io/v1alpha2","kind":"Subnet","metadata":{"name":"big","namespace":"NS","annotations":{"a":%q}},"spec":{"poolRef":{"name":"dc"}}}`, strings.Repeat("x", 300000)),
			want: `metadata.annotations: Too long: may not be more than 262144 bytes`},
		{rule: "a name beyond 253 characters", create: subJSON(strings.Repeat("n", 300), "10.0.2.0/24"), want: `metadata.name: Invalid value`},
	}
}

// Every hostile input is refused with its message, and changes nothing that
// is stored. With SUBNET_OPERATOR_UPDATE_DOCS=1 it rewrites
// docs/validation.md from what kubectl printed; otherwise it checks that the
// document lists each message.
func TestHostileInputCatalog(t *testing.T) {
	ns := namespace(t)
	setupPools(t, ns)
	create(t, newPool(ns, "v6", "2001:db8::/48", 64))
	// A pool in another namespace, which allows only its own (the default).
	other := namespace(t)
	create(t, newPool(other, "dc", "10.0.0.0/16", 24))
	dc := getPool(t, ns, "dc")
	poolShows(t, ns, "dc", allocatedIs("33024"))
	before := snapshot(t, ns)

	cases := catalog()
	if len(cases) < 40 {
		t.Fatalf("the catalog has %d inputs; it promises 40", len(cases))
	}
	var doc strings.Builder
	for _, c := range cases {
		var stderr string
		var err error
		switch {
		case c.raw != "":
			_, stderr, err = kubectl(t, c.create, "create", "--raw", c.raw, "-f", "-")
		case c.create != "":
			_, stderr, err = kubectl(t, strings.NewReplacer("NS", ns, "OTHER", other).Replace(c.create), "create", "-f", "-")
		case c.patch != nil:
			_, stderr, err = kubectl(t, "", append([]string{"patch", "-n", ns}, c.patch...)...)
		default:
			_, stderr, err = kubectl(t, "", append([]string{"delete", "-n", ns}, c.remove...)...)
		}
		printed := strings.TrimSpace(strings.NewReplacer(other, "OTHER", ns, "NS").Replace(stderr))
		if err == nil {
			t.Errorf("%s: accepted", c.rule)
			continue
		}
		if !strings.Contains(printed, c.want) {
			t.Errorf("%s: kubectl printed\n%s\nwant it to contain\n%s", c.rule, printed, c.want)
		}
		fmt.Fprintf(&doc, "| %s | `%s` |\n", c.rule, strings.ReplaceAll(c.want, "|", `\|`))
	}
	if after := snapshot(t, ns); after != before {
		t.Errorf("stored state changed:\nbefore %s\nafter  %s", before, after)
	}
	if p := getPool(t, ns, "dc"); p.Status.Allocated != "33024" || p.Generation != dc.Generation {
		t.Errorf("pool dc changed: allocated %s, generation %d -> %d", p.Status.Allocated, dc.Generation, p.Generation)
	}
	checkValidationDoc(t, len(cases), doc.String())
}

// snapshot describes every Subnet and pool of ns by name and spec
// generation.
func snapshot(t *testing.T, ns string) string {
	t.Helper()
	var subnets ipamv1.SubnetList
	var pools ipamv1.SubnetPoolList
	if err := k8s.List(context.Background(), &subnets, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if err := k8s.List(context.Background(), &pools, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, s := range subnets.Items {
		fmt.Fprintf(&b, "Subnet/%s@%d ", s.Name, s.Generation)
	}
	for _, p := range pools.Items {
		fmt.Fprintf(&b, "SubnetPool/%s@%d ", p.Name, p.Generation)
	}
	return b.String()
}

const validationDoc = "docs/validation.md"

func checkValidationDoc(t *testing.T, n int, table string) {
	t.Helper()
	path := filepath.Join(env.RepoRoot, validationDoc)
	if os.Getenv("SUBNET_OPERATOR_UPDATE_DOCS") == "1" {
		content := fmt.Sprintf(validationDocTemplate, n, table)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (write it with SUBNET_OPERATOR_UPDATE_DOCS=1)", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(table), "\n") {
		if !strings.Contains(string(data), line) {
			t.Errorf("%s does not list %q; regenerate it with SUBNET_OPERATOR_UPDATE_DOCS=1", validationDoc, line)
		}
	}
}

const validationDocTemplate = `# Validation: what is refused, and what kubectl prints

Generated by TestHostileInputCatalog (test/integration/hostile_test.go): each
of its %d hostile inputs is sent through the real API server, webhooks and CRD
schema with kubectl, and the test requires kubectl's output to contain the
message listed here. The test fails if this file stops listing a message.
Regenerate with:

    SUBNET_OPERATOR_UPDATE_DOCS=1 KUBEBUILDER_ASSETS=$PWD/bin/assets \
      go test -tags integration -run TestHostileInputCatalog ./test/integration/

NS stands for the namespace. The test also checks that no refused input
changed anything stored: the Subnets and pools of the namespace, their spec
generations, and the pool's allocation figure are the same afterwards.

Each layer answers where it can: the mutating webhook rejects malformed CIDRs
first, with a suggestion (it runs before the CRD schema); the CRD schema and
its CEL rules reject what they can say, and still do when the webhooks are
bypassed; the validating webhook checks claims against their pool and each
other; the API server itself enforces names, namespaces and sizes.

| input | kubectl prints (part) |
|---|---|
%s`
