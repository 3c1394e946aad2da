package environment

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/subnet-operator/subnet-operator/test/controlplane"
)

// TestImage is the tag the tests build the manager's image under.
const TestImage = "localhost/subnet-operator:test"

// testPIDLabel marks the containers tests start with the test process's
// pid, so a later run can remove those a killed run left behind.
const testPIDLabel = "io.subnet-operator.test-pid"

// BuildImage builds the manager's image as `make image` does
// (hack/build-image.sh), tagged tag, and returns its image ID.
func BuildImage(ctx context.Context, repoRoot, tag string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(repoRoot, "hack", "build-image.sh"))
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "IMAGE="+tag)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building the image: %w: %s", err, stderr.String())
	}
	lines := strings.Fields(stdout.String())
	if len(lines) == 0 {
		return "", fmt.Errorf("building the image printed no image ID: %s", stderr.String())
	}
	return lines[len(lines)-1], nil
}

// podman runs podman with args and returns its standard output.
func podman(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "podman", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("podman %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// ImageUser is the user an image runs as ("uid:gid").
func ImageUser(ctx context.Context, image string) (string, error) {
	out, err := podman(ctx, "image", "inspect", "--format", "{{.Config.User}}", image)
	return strings.TrimSpace(out), err
}

// RemoveOrphanContainers removes the containers of test processes that are
// gone: `podman run` dies with its test, the container does not.
func RemoveOrphanContainers(ctx context.Context) error {
	out, err := podman(ctx, "ps", "--all", "--filter", "label="+testPIDLabel,
		"--format", `{{.ID}} {{index .Labels "`+testPIDLabel+`"}}`)
	if err != nil {
		return err
	}
	for line := range strings.Lines(out) {
		id, pidText, _ := strings.Cut(strings.TrimSpace(line), " ")
		pid, err := strconv.Atoi(pidText)
		if err == nil && (pid == os.Getpid() || syscall.Kill(pid, 0) == nil) {
			continue // its test still runs
		}
		if _, err := podman(ctx, "rm", "--force", "--ignore", id); err != nil {
			return err
		}
	}
	return nil
}

// WriteServiceAccount writes into dir what a kubelet mounts for a Pod of
// service account namespace/name: a token, the API server's CA and the
// namespace, readable by the container's non-root user.
func WriteServiceAccount(ctx context.Context, cfg *rest.Config, caFile, dir, namespace, name string) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	hours := int64(12 * 3600)
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &hours}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("a token for service account %s/%s: %w", namespace, name, err)
	}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for file, content := range map[string][]byte{"token": []byte(tr.Status.Token), "ca.crt": ca, "namespace": []byte(namespace)} {
		if err := os.WriteFile(filepath.Join(dir, file), content, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// ContainerProcess starts podman with podmanArgs (from Pod.PodmanRun, for
// container name) as process logName of cp, whose Stop and Kill signal the
// container.
func ContainerProcess(cp *controlplane.ControlPlane, logName, name string, podmanArgs []string) (*controlplane.Process, error) {
	if _, err := podman(context.Background(), "rm", "--force", "--ignore", name); err != nil {
		return nil, err
	}
	p, err := cp.StartProcess(logName, "podman", podmanArgs, nil)
	if err != nil {
		return nil, err
	}
	p.SetSignaler(func(sig syscall.Signal) {
		_, _ = podman(context.Background(), "kill", "--signal", strconv.Itoa(int(sig)), name)
	})
	return p, nil
}

// testLabels label a test's containers with its pid.
func testLabels() map[string]string {
	return map[string]string{testPIDLabel: strconv.Itoa(os.Getpid())}
}

// apiHostPort splits the API server's URL into what
// KUBERNETES_SERVICE_HOST and _PORT hold in a Pod.
func apiHostPort(cp *controlplane.ControlPlane) (host, port string, err error) {
	hostPort := strings.TrimPrefix(cp.URL, "https://")
	i := strings.LastIndexByte(hostPort, ':')
	if i < 0 {
		return "", "", fmt.Errorf("no port in the API server's URL %s", cp.URL)
	}
	return hostPort[:i], hostPort[i+1:], nil
}
