package fleet

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// The Role made for a ClusterProfile's member is config/fleet-hub's, rule
// for rule: a member onboarded from a profile may do what one onboarded by
// hand may, and no more. (test/fleet checks what it grants in an API
// server.)
func TestMemberRulesAreConfigFleetHubs(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "config", "fleet-hub", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var roles []rbacv1.Role
	docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var role rbacv1.Role
		if err := yaml.Unmarshal(doc, &role); err != nil {
			t.Fatal(err)
		}
		if role.Kind == "Role" {
			roles = append(roles, role)
		}
	}
	if len(roles) != 1 {
		t.Fatalf("config/fleet-hub/role.yaml has %d Roles, want 1", len(roles))
	}
	if roles[0].Name != MemberAccessName {
		t.Errorf("config/fleet-hub's Role is %s, the profiles' %s", roles[0].Name, MemberAccessName)
	}
	if d := cmp.Diff(roles[0].Rules, MemberRules()); d != "" {
		t.Errorf("MemberRules differ from config/fleet-hub/role.yaml (-role.yaml +MemberRules):\n%s", d)
	}
}

// A profile's name becomes a namespace's only if it is a DNS label and not
// one of Kubernetes' own (kube-*, default), which exist in every cluster
// and must never be a member's.
func TestInvalidClusterName(t *testing.T) {
	for name, valid := range map[string]bool{
		"member-1":               true,
		"edge7":                  true,
		"subnet-operator-system": true, // exists in a hub: refused as a conflict (unlabelled), not by name
		"kube-system":            false,
		"kube-public":            false,
		"kube-node-lease":        false,
		"kube-anything":          false,
		"default":                false,
		"member.one":             false, // a valid profile name (DNS subdomain), not a namespace's
		"Member-1":               false,
		"a-very-long-cluster-name-that-is-longer-than-sixty-three-characters": false,
	} {
		if got := invalidClusterName(name) == ""; got != valid {
			t.Errorf("invalidClusterName(%q) = %q, want valid %v", name, invalidClusterName(name), valid)
		}
	}
}
