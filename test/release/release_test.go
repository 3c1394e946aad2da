//go:build e2e

// Package release tests what `make release` ships: dist/install.yaml on a
// fresh control plane that runs cert-manager and not Prometheus Operator,
// the image it names by digest (loaded from the release's OCI archive), and
// the checksums.
package release

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/subnet-operator/subnet-operator/test/controlplane"
	"github.com/subnet-operator/subnet-operator/test/environment"
)

const version = "v0.0.0-test"

func TestReleaseInstallsWithCertManagerAlone(t *testing.T) {
	ctx := context.Background()
	root, err := environment.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dist := filepath.Join(t.TempDir(), "dist")
	release := exec.CommandContext(ctx, filepath.Join(root, "hack", "release.sh"))
	release.Dir = root
	release.Env = append(os.Environ(), "VERSION="+version, "DIST="+dist, "ASSETS="+os.Getenv(controlplane.AssetsEnv))
	if out, err := release.CombinedOutput(); err != nil {
		t.Fatalf("hack/release.sh: %v\n%s", err, out)
	}
	verifyChecksums(t, dist)
	verifyKrewManifest(t, dist)
	installPath := filepath.Join(dist, "install.yaml")
	install, err := os.ReadFile(installPath)
	if err != nil {
		t.Fatal(err)
	}
	images := regexp.MustCompile(`(?m)^\s+image: (\S+)$`).FindAllSubmatch(install, -1)
	if len(images) != 1 || !regexp.MustCompile(`@sha256:[0-9a-f]{64}$`).Match(images[0][1]) {
		t.Fatalf("install.yaml should name one image, by digest: %q", images)
	}
	image := string(images[0][1])
	if _, err := os.Stat(filepath.Join(dist, "subnet-operator-image-"+version+".tar")); err != nil {
		t.Errorf("the release lacks its image archive: %v", err)
	}
	// The packaged chart is the release's version and pins the same image.
	chart := filepath.Join(dist, "subnet-operator-"+strings.TrimPrefix(version, "v")+".tgz")
	values, err := exec.CommandContext(ctx, filepath.Join(os.Getenv(controlplane.AssetsEnv), "helm"), "template", "subnet-operator", chart).Output()
	if err != nil {
		t.Fatalf("helm template %s: %v", chart, err)
	}
	if !strings.Contains(string(values), "image: "+image) || !strings.Contains(string(values), `app.kubernetes.io/version: `+version) {
		t.Errorf("the packaged chart does not run %s at version %s", image, version)
	}

	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: filepath.Join(t.TempDir(), "cp"), CertManager: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	kubectl := func(args ...string) (string, string, error) {
		return cp.KubectlOutput(ctx, cp.Kubeconfig, nil, args...)
	}
	if _, _, err := kubectl("get", "crd", "servicemonitors.monitoring.coreos.com"); err == nil {
		t.Fatal("Prometheus Operator's CRDs are installed: the release is not checked without them")
	}

	// What a user runs first. On a cluster that has never seen the
	// release, kubectl's dry run creates no Namespace for the objects after
	// it, so those, and only those, fail; with the namespace created first
	// (as docs/operations.md says), everything is accepted.
	_, stderr, err := kubectl("apply", "--dry-run=server", "-f", installPath)
	for line := range strings.Lines(stderr) {
		if !strings.Contains(line, `namespaces "subnet-operator-system" not found`) {
			t.Errorf("on a fresh cluster, the dry run fails for another reason than the namespace: %s", line)
		}
	}
	if err == nil {
		t.Log("kubectl's server-side dry run now creates the namespace: the step below is no longer needed")
	}
	if out, stderr, err := kubectl("create", "namespace", "subnet-operator-system"); err != nil {
		t.Fatalf("%v\n%s%s", err, out, stderr)
	}
	out, stderr, err := kubectl("apply", "--dry-run=server", "-f", installPath)
	if err != nil {
		t.Fatalf("kubectl apply --dry-run=server -f dist/install.yaml: %v\n%s%s", err, out, stderr)
	}
	if n := strings.Count(out, "(server dry run)"); n < 20 {
		t.Errorf("only %d objects accepted:\n%s", n, out)
	}
	if out, stderr, err := kubectl("apply", "-f", installPath); err != nil {
		t.Fatalf("kubectl apply -f dist/install.yaml: %v\n%s%s", err, out, stderr)
	}
	if out, stderr, err := kubectl("wait", "-n", "subnet-operator-system", "--for=condition=Ready", "--timeout=120s", "certificates.cert-manager.io", "--all"); err != nil {
		t.Fatalf("cert-manager did not issue the release's certificates: %v\n%s%s", err, out, stderr)
	}

	// The manager from the image the manifest names, loaded from the archive.
	if out, err := exec.CommandContext(ctx, "podman", "load", "--quiet", "--input", filepath.Join(dist, "subnet-operator-image-"+version+".tar")).CombinedOutput(); err != nil {
		t.Fatalf("podman load: %v\n%s", err, out)
	}
	mgr, err := environment.RunInstalled(ctx, cp, install, image, filepath.Join(t.TempDir(), "manager"))
	if err != nil {
		t.Fatal(err)
	}
	defer mgr.Stop()
	if err := mgr.PointWebhooks(ctx); err != nil {
		t.Fatal(err)
	}
	if out, stderr, err := kubectl("create", "namespace", "team-a"); err != nil {
		t.Fatalf("%v\n%s%s", err, out, stderr)
	}
	// The release takes root pools in the default address space only from
	// namespaces the platform labels.
	if out, stderr, err := kubectl("label", "namespace", "team-a", "ipam.subnet-operator.io/root-pools=true"); err != nil {
		t.Fatalf("%v\n%s%s", err, out, stderr)
	}
	objects := `
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: SubnetPool
metadata: {name: datacenter, namespace: team-a}
spec: {cidr: 10.20.0.0/16, defaultPrefixLength: 24}
---
apiVersion: ipam.subnet-operator.io/v1alpha2
kind: Subnet
metadata: {name: web, namespace: team-a}
spec: {poolRef: {name: datacenter}}
`
	if out, stderr, err := cp.KubectlOutput(ctx, cp.Kubeconfig, []byte(objects), "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s%s", err, out, stderr)
	}
	if out, stderr, err := kubectl("wait", "-n", "team-a", "--for=condition=Ready", "--timeout=60s", "subnet/web"); err != nil {
		t.Fatalf("the Subnet was not allocated: %v\n%s%s\n%s", err, out, stderr, mgr.Manager.Log())
	}
	cidr, _, err := kubectl("get", "-n", "team-a", "subnet/web", "-o", "jsonpath={.status.cidr}")
	if err != nil || !strings.HasPrefix(cidr, "10.20.") || !strings.HasSuffix(cidr, "/24") {
		t.Errorf("subnet web holds %q (%v), want a /24 of 10.20.0.0/16", cidr, err)
	}
	// The validating webhook answers too.
	overlap := `{"apiVersion":"ipam.subnet-operator.io/v1alpha2","kind":"Subnet","metadata":{"name":"overlap","namespace":"team-a"},"spec":{"poolRef":{"name":"datacenter"},"cidr":"` + cidr + `"}}`
	if _, stderr, err := cp.KubectlOutput(ctx, cp.Kubeconfig, []byte(overlap), "create", "-f", "-"); err == nil || !strings.Contains(stderr, "overlaps Subnet team-a/web") {
		t.Errorf("an overlapping Subnet: err %v, %s; want it refused as overlapping team-a/web", err, stderr)
	}
}

// verifyChecksums checks every line of checksums.txt.
func verifyChecksums(t *testing.T, dist string) {
	t.Helper()
	f, err := os.Open(filepath.Join(dist, "checksums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	lines := 0
	for s := bufio.NewScanner(f); s.Scan(); {
		sum, name, ok := strings.Cut(s.Text(), "  ")
		if !ok {
			t.Fatalf("checksums.txt: bad line %q", s.Text())
		}
		data, err := os.ReadFile(filepath.Join(dist, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != sum {
			t.Errorf("%s: checksum %s, file has %x", name, sum, got)
		}
		lines++
	}
	if lines != 8 {
		t.Errorf("checksums.txt lists %d files, want install.yaml, the chart, the image archive, four plugin archives and the krew manifest", lines)
	}
}

// verifyKrewManifest checks that the krew manifest names every plugin
// archive by its SHA-256, and that the archive for this machine holds a
// kubectl-ipam that runs.
func verifyKrewManifest(t *testing.T, dist string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dist, "ipam.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var manifest struct {
		Spec struct {
			Version   string
			Platforms []struct {
				URI, SHA256, Bin string
				Selector         struct{ MatchLabels map[string]string }
			}
		}
	}
	if err := yaml.Unmarshal(raw, &manifest); err != nil {
		t.Fatal(err)
	}
	if manifest.Spec.Version != version || len(manifest.Spec.Platforms) != 4 {
		t.Fatalf("krew manifest: version %q, %d platforms; want %s and 4", manifest.Spec.Version, len(manifest.Spec.Platforms), version)
	}
	for _, p := range manifest.Spec.Platforms {
		name := p.URI[strings.LastIndex(p.URI, "/")+1:]
		data, err := os.ReadFile(filepath.Join(dist, name))
		if err != nil {
			t.Fatalf("krew manifest names %s: %v", p.URI, err)
		}
		if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != p.SHA256 {
			t.Errorf("krew manifest: %s sha256 %s, the archive's is %x", name, p.SHA256, sum)
		}
		if p.Selector.MatchLabels["os"] != runtime.GOOS || p.Selector.MatchLabels["arch"] != runtime.GOARCH {
			continue
		}
		dir := t.TempDir()
		if out, err := exec.Command("tar", "-xzf", filepath.Join(dist, name), "-C", dir).CombinedOutput(); err != nil {
			t.Fatalf("unpacking %s: %v\n%s", name, err, out)
		}
		if out, err := exec.Command(filepath.Join(dir, p.Bin), "--help").CombinedOutput(); err != nil || !strings.Contains(string(out), "kubectl ipam") {
			t.Errorf("%s from %s --help: %v\n%s", p.Bin, name, err, out)
		}
	}
}
