//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/subnet-operator/subnet-operator/test/doctest"
)

// TestDocs runs every terminal session of README.md and docs/*.md (console
// blocks; test/doctest reads them) as a user would after `make dev`: the
// samples applied, kubectl and the kubectl-ipam plugin on the PATH, in the
// repository's root. Each page is a subtest, its commands run in order as
// subtests named by their line, and each must print what the page shows,
// modulo ages, timestamps, UIDs, generated names and column padding. A
// block that cannot run here is marked in the page, with the reason.
//
// The pages use the samples' namespaces (and plan-demo), which no other
// test here uses: they create random namespaces with address spaces of
// their own. A listing over every namespace would show other tests'
// objects, so the pages list one namespace, or ask who-has about ranges
// (10.100.0.0/16, 10.20.0.0/16) no other test here uses.
func TestDocs(t *testing.T) {
	ctx := context.Background()
	path := docsPath(t)
	t.Cleanup(func() { removeSamples(t) })
	for _, dir := range devSamples {
		applySettled(t, dir)
	}

	pages, err := doctest.Pages(env.RepoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range pages {
		f, err := os.Open(filepath.Join(env.RepoRoot, page))
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := doctest.Parse(page, f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Run(page, func(t *testing.T) {
			differs := map[int][]string{} // by the command's line
			for _, b := range blocks {
				if b.Lang == "console" && !b.Runs() {
					why := b.Skip
					if b.Environment != "" {
						why = "runs in " + b.Environment
					}
					t.Logf("%s:%d not run here: %s", b.File, b.Line, why)
				}
				if !b.Runs() {
					continue
				}
				for _, c := range b.Commands {
					t.Run(fmt.Sprintf("line_%d", c.Line), func(t *testing.T) {
						if got, ok := runSession(ctx, t, e2eShell(path), b, c); !ok {
							differs[c.Line] = got
						}
					})
				}
			}
			if len(differs) > 0 && os.Getenv(updateDocs) == "1" {
				rewritePage(t, page, blocks, differs)
			}
		})
	}
}

// readOnly matches the commands that may run again until their output
// settles (a status written a moment after the object): reads only.
var readOnly = regexp.MustCompile(`^kubectl\s+(get|describe|ipam\s+(tree|free|next|who-has|spaces))\s`)

// settleTimeout bounds how long a read waits for the output the page shows.
const settleTimeout = 20 * time.Second

// updateDocs names the environment variable that, set to 1, makes TestDocs
// write what the commands printed into the pages where it differs (except
// under an ellipsis), as SUBNET_OPERATOR_UPDATE_GOLDEN does for test/plugin.
// Review the diff: it is the output the pages will promise.
const updateDocs = "SUBNET_OPERATOR_UPDATE_DOCS"

// runSession runs one command of a page with bash and compares its output
// with the page's. It returns what the command printed and whether that
// matches.
func runSession(ctx context.Context, t *testing.T, sh shell, b doctest.Block, c doctest.Command) ([]string, bool) {
	deadline := time.Now().Add(settleTimeout)
	for {
		got := runShell(ctx, t, sh, c.Shell)
		if doctest.Match(c.Want, got) {
			// The comparison is a real one: the page with one line
			// changed would not have passed.
			if mutated, ok := changeOneLine(c.Want); ok && doctest.Match(mutated, got) {
				t.Errorf("%s: the output also matches the page with a line changed (%q): the check is too loose", b.Where(c), mutated)
			}
			return got, true
		}
		if !readOnly.MatchString(c.Shell) || time.Now().After(deadline) {
			report := doctest.Report(b.Where(c), c.Shell, c.Want, got)
			if os.Getenv(updateDocs) == "1" {
				t.Log(report)
			} else {
				t.Error(report + "\n(after a deliberate change of output, rewrite the pages with " + updateDocs + "=1 and review the diff)")
			}
			return got, false
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// rewritePage writes what the commands printed into the page where it
// differs from what the page shows.
func rewritePage(t *testing.T, page string, blocks []doctest.Block, got map[int][]string) {
	file := filepath.Join(env.RepoRoot, page)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := doctest.Rewrite(strings.Split(strings.TrimSuffix(string(data), "\n"), "\n"), blocks, got)
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("rewrote the output of %d commands in %s", len(got), page)
}

// changeOneLine returns want with its last line of output (not an
// ellipsis) changed, or false if it has none.
func changeOneLine(want []string) ([]string, bool) {
	for i := len(want) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(want[i]); l != "" && l != doctest.Ellipsis {
			out := append([]string(nil), want...)
			out[i] += " changed"
			return out, true
		}
	}
	return nil, false
}

// shell is where a page's commands run: the directory (paths in the pages
// are relative to the repository's root) and the environment variables.
type shell struct {
	dir string
	env []string
}

// e2eShell runs in the repository's root, as the e2e environment's admin.
func e2eShell(path string) shell {
	return shell{dir: env.RepoRoot, env: []string{"PATH=" + path, "KUBECONFIG=" + env.Kubeconfig, "NO_COLOR=1"}}
}

// runShell runs a page's command with bash and returns what a terminal
// would show: standard output and error, interleaved.
func runShell(ctx context.Context, t *testing.T, sh shell, command string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", command)
	cmd.Dir = sh.dir
	cmd.Env = append(os.Environ(), sh.env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil && ctx.Err() != nil {
		t.Fatalf("%q did not finish in time: %v\n%s", command, err, out.String())
	}
	return doctest.Lines(out.String())
}

// docsPath returns a PATH with the control plane's kubectl and a freshly
// built kubectl-ipam first, as `make install-plugin` leaves a user's.
func docsPath(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "kubectl-ipam"), "./cmd/kubectl-ipam")
	build.Dir = env.RepoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building kubectl-ipam: %v\n%s", err, out)
	}
	if err := os.Symlink(filepath.Join(env.Assets, "kubectl"), filepath.Join(dir, "kubectl")); err != nil {
		t.Fatal(err)
	}
	return dir + string(os.PathListSeparator) + os.Getenv("PATH")
}

// applySettled applies a sample directory as make dev does (hack/dev),
// but one resource file at a time in the order its kustomization lists
// them, each file's Subnets, pools and IPAddressClaims Ready before the
// next. Which range a dynamic Subnet gets depends on what its pool holds
// when it is decided; applied at once, that is a race (config/samples/
// tenancy's team-a/web gets 10.100.0.0/24 if it is decided before the
// team-b/apps pool is admitted, 10.100.80.0/24 after), and the pages show
// the outcome of the listed order, as on a quiet machine.
func applySettled(t *testing.T, dir string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(env.RepoRoot, dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", dir, err)
	}
	for _, file := range k.Resources {
		path := filepath.Join(env.RepoRoot, dir, file)
		mustKubectl(t, "", "apply", "-f", path)
		if withReady, err := hasReadyCondition(path); err != nil {
			t.Fatal(err)
		} else if withReady {
			mustKubectl(t, "", "wait", "--for=condition=Ready", "--timeout=60s", "-f", path)
		}
	}
}

// hasReadyCondition reports whether a manifest file holds only kinds whose
// Ready condition the operator sets.
func hasReadyCondition(path string) (bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var o struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			return false, fmt.Errorf("%s: %w", path, err)
		}
		switch o.Kind {
		case "Subnet", "SubnetPool", "IPAddressClaim":
		default:
			return false, nil
		}
	}
	return true, nil
}

// removeSamples deletes what the samples and the pages created, so that
// the tests after this one find the cluster as they would without it:
// claims, then Subnets, then pools (children before parents: a pool with
// a child is refused deletion), then the samples' namespaces. The
// namespace default stays. (So TestDocs can run again, -count=2.)
func removeSamples(t *testing.T) {
	namespaces := []string{"default", "netops", "team-a", "team-b", "machines-demo", "plan-demo"}
	run := func(args ...string) {
		if _, stderr, err := kubectl(t, "", args...); err != nil {
			t.Logf("cleaning up, kubectl %s: %v %s", strings.Join(args, " "), err, stderr)
		}
	}
	run("delete", "ipaddressclaims", "--all", "-n", "machines-demo", "--timeout=1m")
	for _, ns := range namespaces {
		run("delete", "subnets", "--all", "-n", ns, "--timeout=1m")
	}
	// A pool with a child pool is refused deletion: each pass deletes
	// the innermost; the samples and the pages nest three deep.
	for range 3 {
		for _, ns := range namespaces {
			_, _, _ = kubectl(t, "", "delete", "subnetpools", "--all", "-n", ns, "--timeout=1m")
		}
	}
	for _, ns := range namespaces {
		run("delete", "subnetpools", "--all", "-n", ns, "--timeout=1m")
	}
	run(append([]string{"delete", "namespace", "--ignore-not-found", "--timeout=2m", "team-c"}, namespaces[1:]...)...)
}
