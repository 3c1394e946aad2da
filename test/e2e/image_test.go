//go:build e2e

package e2e

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/subnet-operator/subnet-operator/test/environment"
)

// The replicas every other test here talks to are the image, run as
// config/default's Deployment says: its command and arguments first (only
// listeners and test timings follow), its environment, its certificate
// mounts, its security settings, and the service account's credentials in
// place of any kubeconfig.
func TestReplicasRunFromTheImageAsTheDeploymentSays(t *testing.T) {
	rendered := mustKubectl(t, "", "kustomize", filepath.Join(env.RepoRoot, "config", "default"))
	pod, err := environment.ManagerPod([]byte(rendered))
	if err != nil {
		t.Fatal(err)
	}
	if len(pod.Args) == 0 || len(pod.Mounts) == 0 || len(pod.Env) == 0 {
		t.Fatalf("config/default's manager container has no args, mounts or env: %+v", pod)
	}
	for _, m := range env.Managers {
		if m.Container == "" {
			t.Fatalf("%s does not run in a container", m.Name)
		}
		out, err := exec.Command("podman", "container", "inspect", m.Container).Output()
		if err != nil {
			t.Fatalf("podman inspect %s: %v", m.Container, err)
		}
		var inspected []struct {
			Image  string
			Path   string
			Args   []string
			Config struct {
				User string
				Env  []string
			}
			HostConfig struct {
				ReadonlyRootfs bool
				CapDrop        []string
				SecurityOpt    []string
				NetworkMode    string
			}
			Mounts []struct{ Source, Destination string }
		}
		if err := json.Unmarshal(out, &inspected); err != nil || len(inspected) != 1 {
			t.Fatalf("podman inspect %s: %v\n%s", m.Container, err, out)
		}
		c := inspected[0]
		if c.Image != imageID {
			t.Errorf("%s runs image %s, not the one built: %s", m.Name, c.Image, imageID)
		}
		if want := append(slices.Clone(pod.Command), pod.Args...); !slices.Equal(append([]string{c.Path}, c.Args...)[:len(want)], want) {
			t.Errorf("%s runs %s %v; the Deployment's command and args are %v", m.Name, c.Path, c.Args, want)
		}
		if c.Config.User != "65532:65532" {
			t.Errorf("%s runs as %q", m.Name, c.Config.User)
		}
		for _, e := range pod.Env {
			if !slices.Contains(c.Config.Env, e) {
				t.Errorf("%s lacks the Deployment's env %s: %v", m.Name, e, c.Config.Env)
			}
		}
		for _, e := range c.Config.Env {
			if strings.HasPrefix(e, "KUBECONFIG=") {
				t.Errorf("%s has a kubeconfig: %s", m.Name, e)
			}
		}
		if !c.HostConfig.ReadonlyRootfs || len(c.HostConfig.CapDrop) < 10 || !slices.Contains(c.HostConfig.SecurityOpt, "no-new-privileges") {
			t.Errorf("%s's security settings differ from the Deployment's: %+v", m.Name, c.HostConfig)
		}
		var mounted []string
		for _, mount := range c.Mounts {
			mounted = append(mounted, mount.Destination)
		}
		for _, want := range pod.Mounts {
			if !slices.Contains(mounted, want.Path) {
				t.Errorf("%s does not mount Secret %s at %s: %v", m.Name, want.Secret, want.Path, mounted)
			}
		}
		if !slices.Contains(mounted, "/var/run/secrets/kubernetes.io/serviceaccount") {
			t.Errorf("%s has no service account mount: %v", m.Name, mounted)
		}
	}
}
