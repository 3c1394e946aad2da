// Package api_test checks that the generated files of every API version are
// current.
package api_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedFilesAreCurrent regenerates the DeepCopy code, the CRDs, the
// manager's role and the webhook configurations with the controller-gen
// pinned in go.mod and fails if the committed files differ: run
// `make generate manifests` and commit the result.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	objects, crds := filepath.Join(tmp, "objects"), filepath.Join(tmp, "crds")
	rbac, webhooks := filepath.Join(tmp, "rbac"), filepath.Join(tmp, "webhooks")
	for _, args := range [][]string{
		{"object", "paths=./api/v1alpha1", "output:object:dir=" + filepath.Join(objects, "v1alpha1")},
		{"object", "paths=./api/v1alpha2", "output:object:dir=" + filepath.Join(objects, "v1alpha2")},
		{"crd", "paths=./api/...", "output:crd:dir=" + crds},
		{"rbac:roleName=manager-role", "webhook", "paths=./...", "output:rbac:dir=" + rbac, "output:webhook:dir=" + webhooks},
	} {
		cmd := exec.Command("go", append([]string{"tool", "controller-gen"}, args...)...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("controller-gen %v: %v\n%s", args, err, out)
		}
	}
	compare := func(generated, committed string) {
		want, err := os.ReadFile(generated)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(committed)
		if err != nil {
			t.Fatalf("%v (run `make generate manifests`)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run `make generate manifests` and commit the result", committed)
		}
	}
	for _, version := range []string{"v1alpha1", "v1alpha2"} {
		compare(filepath.Join(objects, version, "zz_generated.deepcopy.go"), filepath.Join(root, "api", version, "zz_generated.deepcopy.go"))
	}
	compare(filepath.Join(rbac, "role.yaml"), filepath.Join(root, "config/rbac/role.yaml"))
	compare(filepath.Join(webhooks, "manifests.yaml"), filepath.Join(root, "config/webhook/manifests.yaml"))
	entries, err := os.ReadDir(crds)
	if err != nil {
		t.Fatal(err)
	}
	committed, _ := filepath.Glob(filepath.Join(root, "config/crd/bases/*.yaml"))
	if len(entries) != len(committed) {
		t.Errorf("controller-gen makes %d CRDs, config/crd/bases has %d files", len(entries), len(committed))
	}
	for _, e := range entries {
		compare(filepath.Join(crds, e.Name()), filepath.Join(root, "config/crd/bases", e.Name()))
	}
}
