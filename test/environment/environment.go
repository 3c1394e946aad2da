// Package environment runs subnet-operator as a user would on the local
// control plane of package controlplane: it applies config/dev (CRDs, webhook
// configurations, the cert-manager Issuers and Certificates a cluster uses),
// waits for cert-manager to issue the webhook's certificate and cainjector to
// inject its CA, keeps the certificate's files in step with its Secret (as a
// kubelet does for a mounted Secret), and runs the manager binary, one or
// more replicas. `make dev` and the integration and end-to-end tests use it.
package environment

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/subnet-operator/subnet-operator/test/controlplane"
)

// Namespace is where config/dev puts the operator's own objects.
const Namespace = "subnet-operator-system"

// Options configure an environment.
type Options struct {
	// Dir holds the control plane's state and the manager's files.
	Dir string
	// RepoRoot is the repository, for config/; default: found from the
	// working directory.
	RepoRoot string
	// Manager is the manager binary; default: built into Dir (BuildManager).
	Manager string
	// Image, when set, runs the replicas from this container image instead
	// of the binary, with podman, the way config/default's Deployment runs
	// them: its arguments, environment, certificate mounts, security
	// settings and service account (whose RBAC from config/rbac applies).
	Image string
	// Replicas of the manager; with more than one, leader election is on and
	// the webhook URL points at a round-robin TCP proxy in front of them.
	Replicas int
	// ManagerArgs are extra flags for every replica.
	ManagerArgs []string
	// ManagerEnv is extra environment (NAME=value) for every replica, such
	// as GOMEMLIMIT: set here, not in this process's environment, which the
	// control plane's Go processes inherit too.
	ManagerEnv []string
	// ControllerManager also runs kube-controller-manager.
	ControllerManager bool
	// ClusterAPI installs Cluster API's CRDs (IPAddressClaim, IPAddress,
	// Cluster) with the control plane, before the operator is installed
	// and the replicas start: the manager decides at start, by discovery,
	// whether to serve IPAddressClaims.
	ClusterAPI bool
	// WebhookClientAuth has the webhook require the API server's client
	// certificate, as config/webhook-client-auth sets it up: cert-manager
	// issues it, the API server presents it (an admission configuration
	// written before it starts, see clientauth.go), the manager checks it
	// (--webhook-client-ca-file) and serves the CRD conversion webhook on a
	// port of its own.
	WebhookClientAuth bool
	// APIServerArgs are extra kube-apiserver flags.
	APIServerArgs []string
	// BeforeInstall, when set, runs on the bare control plane before the
	// operator is installed: to leave there what an earlier release did.
	BeforeInstall func(ctx context.Context, cp *controlplane.ControlPlane) error
	// ReplicaKubeconfig, when set, gives each replica run from the binary
	// a kubeconfig of its own instead of the admin's: it is called once
	// per replica, with the replica's name, once the control plane runs
	// and before the replica first starts, and returns the kubeconfig's
	// path. A test can put something of its own between a replica and
	// the API server this way (a proxy that delays a watch). Unused for
	// replicas run from an Image.
	ReplicaKubeconfig func(ctx context.Context, cp *controlplane.ControlPlane, name string) (string, error)
	// RestartManagers, when set, restarts a replica whose process exits,
	// with back-off, as a Deployment's Pod is restarted (restart.go).
	RestartManagers *RestartPolicy
}

// Environment is a control plane with the operator installed and running.
type Environment struct {
	*controlplane.ControlPlane
	RepoRoot string
	Managers []*Manager
	// WebhookURL is where the API server sends admission requests.
	WebhookURL string
	// ConversionURL is where it sends CRD conversion requests: WebhookURL,
	// or with Options.WebhookClientAuth a port of its own.
	ConversionURL string

	opts    Options
	certDir string
	// pod is config/default's manager Pod, when replicas run from Image.
	pod       *Pod
	imageUser string
	proxies   []*proxy
	stopSync  context.CancelFunc
	syncDone  sync.WaitGroup
	// stopSupervision ends Options.RestartManagers' restarts.
	stopSupervision context.CancelFunc
	supervision     sync.WaitGroup
}

// Manager is one replica of the manager.
type Manager struct {
	Name        string
	Process     *controlplane.Process
	WebhookPort int
	// ConversionPort serves only /convert, with Options.WebhookClientAuth.
	ConversionPort int
	MetricsPort    int
	ProbePort      int
	// args are the binary's, or podman's for a replica in container.
	args []string
	// kubeconfig is the one the binary connects with.
	kubeconfig string
	// Container is the replica's podman container, when it runs from the image.
	Container string
	// logPath is the replica's log; logFrom where its current run starts in
	// it (a restarted replica appends to it).
	logPath string
	logFrom int64
}

// Start brings up the control plane, installs the operator and starts the
// manager replicas. On error, everything started is stopped.
func Start(ctx context.Context, opts Options) (_ *Environment, err error) {
	if opts.Replicas == 0 {
		opts.Replicas = 1
	}
	if opts.RepoRoot == "" {
		if opts.RepoRoot, err = RepoRoot(); err != nil {
			return nil, err
		}
	}
	// The webhook's and the conversion webhook's ports, before the API
	// server starts: its admission configuration names the webhook's.
	ports, err := controlplane.FreePorts(2)
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	certDir := filepath.Join(dir, "certs")
	apiServerArgs := opts.APIServerArgs
	if opts.WebhookClientAuth {
		flag, err := writeAdmissionConfig(filepath.Join(dir, "admission"), certDir, fmt.Sprintf("127.0.0.1:%d", ports[0]))
		if err != nil {
			return nil, err
		}
		apiServerArgs = append(slices.Clone(apiServerArgs), flag)
	}
	cp, err := controlplane.Start(ctx, controlplane.Options{
		Dir: opts.Dir, ControllerManager: opts.ControllerManager, CertManager: true, ClusterAPI: opts.ClusterAPI,
		APIServerArgs: apiServerArgs,
	})
	if err != nil {
		return nil, err
	}
	env := &Environment{ControlPlane: cp, RepoRoot: opts.RepoRoot, opts: opts, certDir: certDir}
	defer func() {
		if err != nil {
			env.Stop()
		}
	}()
	if opts.Image != "" {
		if err := env.readPod(ctx); err != nil {
			return nil, err
		}
	} else if env.opts.Manager == "" {
		if env.opts.Manager, err = BuildManager(ctx, opts.RepoRoot, filepath.Join(cp.Dir, "manager"), false); err != nil {
			return nil, err
		}
	}

	env.WebhookURL = fmt.Sprintf("https://127.0.0.1:%d", ports[0])
	env.ConversionURL = env.WebhookURL
	if opts.WebhookClientAuth {
		env.ConversionURL = fmt.Sprintf("https://127.0.0.1:%d", ports[1])
	}
	if opts.BeforeInstall != nil {
		if err := opts.BeforeInstall(ctx, cp); err != nil {
			return nil, fmt.Errorf("before install: %w", err)
		}
	}
	if err := env.install(ctx); err != nil {
		return nil, err
	}
	if err := env.startCertSync(); err != nil {
		return nil, err
	}
	if env.pod != nil {
		if err := WriteServiceAccount(ctx, cp.Config, cp.CAFile, env.serviceAccountDir(), env.pod.Namespace, env.pod.ServiceAccount); err != nil {
			return nil, err
		}
	}

	var backends, conversionBackends []string
	for i := range opts.Replicas {
		name := fmt.Sprintf("manager-%d", i)
		kubeconfig := cp.Kubeconfig
		if opts.ReplicaKubeconfig != nil && env.pod == nil {
			if kubeconfig, err = opts.ReplicaKubeconfig(ctx, cp, name); err != nil {
				return nil, fmt.Errorf("kubeconfig of %s: %w", name, err)
			}
		}
		m, err := env.newManager(name, opts.Replicas == 1, ports, kubeconfig)
		if err != nil {
			return nil, err
		}
		env.Managers = append(env.Managers, m)
		backends = append(backends, fmt.Sprintf("127.0.0.1:%d", m.WebhookPort))
		conversionBackends = append(conversionBackends, fmt.Sprintf("127.0.0.1:%d", m.ConversionPort))
	}
	if opts.Replicas > 1 {
		p, err := startProxy(fmt.Sprintf("127.0.0.1:%d", ports[0]), backends)
		if err != nil {
			return nil, err
		}
		env.proxies = append(env.proxies, p)
		if opts.WebhookClientAuth {
			if p, err = startProxy(fmt.Sprintf("127.0.0.1:%d", ports[1]), conversionBackends); err != nil {
				return nil, err
			}
			env.proxies = append(env.proxies, p)
		}
	}
	for _, m := range env.Managers {
		if err := env.startFirst(ctx, m); err != nil {
			return nil, err
		}
	}
	if err := env.waitCAInjected(ctx); err != nil {
		return nil, err
	}
	if err := env.waitAdmissionPolicy(ctx); err != nil {
		return nil, err
	}
	if opts.RestartManagers != nil {
		env.superviseManagers(opts.RestartManagers)
	}
	return env, nil
}

// install applies config/dev with the webhook URLs' ports (and with
// WebhookClientAuth, the cert-manager objects of config/webhook-client-auth).
func (env *Environment) install(ctx context.Context) error {
	var manifests string
	var err error
	if env.opts.WebhookClientAuth {
		manifests, err = env.renderWithComponent(ctx, filepath.Join(env.Dir, "install"), filepath.Join("config", "dev"), filepath.Join(clientAuthComponent, "issuance"))
	} else {
		manifests, err = env.Kubectl(ctx, nil, "kustomize", filepath.Join(env.RepoRoot, "config", "dev"))
	}
	if err != nil {
		return err
	}
	manifests = strings.ReplaceAll(manifests, "https://127.0.0.1:9443/convert", env.ConversionURL+"/convert")
	manifests = strings.ReplaceAll(manifests, "https://127.0.0.1:9443/", env.WebhookURL+"/")
	if _, err := env.Kubectl(ctx, []byte(manifests), "apply", "--server-side", "-f", "-"); err != nil {
		return fmt.Errorf("applying config/dev: %w", err)
	}
	if _, err := env.Kubectl(ctx, nil, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/subnetpools.ipam.subnet-operator.io", "crd/subnets.ipam.subnet-operator.io"); err != nil {
		return err
	}
	certificates := []string{"certificate/subnet-operator-serving-cert", "certificate/subnet-operator-metrics-certs"}
	if env.opts.WebhookClientAuth {
		certificates = append(certificates, "certificate/subnet-operator-apiserver-webhook-client")
	}
	if _, err := env.Kubectl(ctx, nil, append([]string{"wait", "-n", Namespace, "--for=condition=Ready", "--timeout=120s"}, certificates...)...); err != nil {
		return fmt.Errorf("cert-manager did not issue the webhook certificates: %w", err)
	}
	return nil
}

// readPod reads the manager's Pod from config/default, for replicas that
// run from the image.
func (env *Environment) readPod(ctx context.Context) error {
	if err := RemoveOrphanContainers(ctx); err != nil {
		return err
	}
	var rendered string
	var err error
	if env.opts.WebhookClientAuth {
		rendered, err = env.renderWithComponent(ctx, filepath.Join(env.Dir, "deployment"), filepath.Join("config", "default"), clientAuthComponent)
	} else {
		rendered, err = env.Kubectl(ctx, nil, "kustomize", filepath.Join(env.RepoRoot, "config", "default"))
	}
	if err != nil {
		return err
	}
	if env.pod, err = ManagerPod([]byte(rendered)); err != nil {
		return fmt.Errorf("config/default: %w", err)
	}
	env.imageUser, err = ImageUser(ctx, env.opts.Image)
	return err
}

func (env *Environment) serviceAccountDir() string {
	return filepath.Join(env.certDir, "serviceaccount")
}

// newManager picks ports for a replica and builds its command line; a
// binary replica connects with kubeconfig. urlPorts are the webhook URL's
// and the conversion URL's.
func (env *Environment) newManager(name string, only bool, urlPorts []int, kubeconfig string) (*Manager, error) {
	ports, err := controlplane.FreePorts(4)
	if err != nil {
		return nil, err
	}
	m := &Manager{Name: name, WebhookPort: ports[0], MetricsPort: ports[1], ProbePort: ports[2], ConversionPort: ports[3], kubeconfig: kubeconfig}
	if only {
		m.WebhookPort, m.ConversionPort = urlPorts[0], urlPorts[1] // no proxy: the URLs point at it
	}
	// The replicas share this machine's network: each listens on
	// 127.0.0.1, on ports of its own.
	listeners := []string{
		"--webhook-host=127.0.0.1", fmt.Sprintf("--webhook-port=%d", m.WebhookPort),
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", m.MetricsPort),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", m.ProbePort),
	}
	if env.opts.WebhookClientAuth {
		listeners = append(listeners, fmt.Sprintf("--webhook-conversion-port=%d", m.ConversionPort))
	}
	if env.pod != nil {
		// The Deployment's flags, then the listeners and the test's own.
		m.Container = fmt.Sprintf("subnet-operator-test-%d-%s", os.Getpid(), name)
		host, port, err := apiHostPort(env.ControlPlane)
		if err != nil {
			return nil, err
		}
		secretDirs := map[string]string{}
		for secret, kind := range env.certSecrets() {
			secretDirs[secret] = env.CertDir(kind)
		}
		m.args, err = env.pod.PodmanRun(m.Container, env.opts.Image, env.imageUser, host, port, env.serviceAccountDir(),
			secretDirs, testLabels(), env.opts.ManagerEnv, append(listeners, env.opts.ManagerArgs...))
		return m, err
	}
	m.args = append([]string{
		"--kubeconfig=" + m.kubeconfig,
		"--webhook-cert-dir=" + filepath.Join(env.certDir, "webhook"),
		"--metrics-cert-dir=" + filepath.Join(env.certDir, "metrics"),
		"--leader-election-namespace=" + Namespace,
		"--zap-log-level=info",
	}, listeners...)
	if env.opts.WebhookClientAuth {
		m.args = append(m.args, "--webhook-client-ca-file="+filepath.Join(env.CertDir(clientCertKind), "ca.crt"))
	}
	if !only {
		m.args = append(m.args, "--leader-elect")
	}
	m.args = append(m.args, env.opts.ManagerArgs...)
	return m, nil
}

// StartManager starts (or restarts) a replica and waits until it is ready.
func (env *Environment) StartManager(ctx context.Context, m *Manager) error {
	return env.startManager(ctx, m, nil)
}

// startManager is StartManager, calling started (if not nil) as soon as
// the new process runs.
func (env *Environment) startManager(ctx context.Context, m *Manager, started func()) error {
	m.logPath = filepath.Join(env.LogDir(), m.Name+".log")
	m.logFrom = 0
	if info, err := os.Stat(m.logPath); err == nil {
		m.logFrom = info.Size()
	}
	var p *controlplane.Process
	var err error
	if m.Container != "" {
		p, err = ContainerProcess(env.ControlPlane, m.Name, m.Container, m.args)
	} else {
		p, err = env.StartProcess(m.Name, env.opts.Manager, m.args, append([]string{"KUBECONFIG=" + m.kubeconfig}, env.opts.ManagerEnv...))
	}
	if err != nil {
		return err
	}
	m.Process = p
	if started != nil {
		started()
	}
	return m.WaitReady(ctx, 2*time.Minute)
}

// Log returns what the replica has logged since it was last started.
func (m *Manager) Log() []byte {
	f, err := os.Open(m.logPath)
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }()
	if _, err := f.Seek(m.logFrom, io.SeekStart); err != nil {
		return nil
	}
	data, _ := io.ReadAll(f)
	return data
}

// Running reports whether the replica's process runs.
func (m *Manager) Running() bool {
	if m.Process == nil {
		return false
	}
	select {
	case <-m.Process.Exited():
		return false
	default:
		return true
	}
}

// Leader waits, at most timeout, until exactly one running replica has
// acquired the leader lease in its current run (its log says so), and
// returns it.
func (env *Environment) Leader(ctx context.Context, timeout time.Duration) (*Manager, error) {
	deadline := time.Now().Add(timeout)
	for {
		var holders []*Manager
		for _, m := range env.Managers {
			if m.Running() && bytes.Contains(m.Log(), []byte("Successfully acquired lease")) {
				holders = append(holders, m)
			}
		}
		if len(holders) == 1 {
			return holders[0], nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d running replicas hold the lease after %s", len(holders), timeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitReady polls the replica's /readyz.
func (m *Manager) WaitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", m.ProbePort)
	for {
		resp, err := http.Get(url)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-m.Process.Exited():
			return fmt.Errorf("%s exited: %w; its last error: %s", m.Name, m.Process.Err(), lastError(m.Log()))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s", m.Name, timeout)
		}
	}
}

// lastError returns the last line of a manager's log that logs an error
// (its "Manager stopped" line says why it exited), or its last line: what a
// start that failed in CI must print, where the log files are gone.
func lastError(log []byte) string {
	lines := bytes.Split(bytes.TrimSpace(log), []byte("\n"))
	last := lines[len(lines)-1]
	for i := len(lines) - 1; i >= 0; i-- {
		if bytes.Contains(lines[i], []byte(`"level":"error"`)) {
			last = lines[i]
			break
		}
	}
	if len(last) == 0 {
		return "(it logged nothing)"
	}
	const most = 2000
	if len(last) > most {
		last = append(last[:most:most], "..."...)
	}
	return string(last)
}

// waitCAInjected waits until cainjector has put the CA in both webhook
// configurations and in both CRDs' conversion webhook.
func (env *Environment) waitCAInjected(ctx context.Context) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ok := true
		for name, want := range map[string]struct {
			path  string
			count int
		}{
			"validatingwebhookconfiguration/subnet-operator-validating-webhook-configuration": {"{.webhooks[*].clientConfig.caBundle}", 2},
			"mutatingwebhookconfiguration/subnet-operator-mutating-webhook-configuration":     {"{.webhooks[*].clientConfig.caBundle}", 2},
			// The conversion webhook: reads of objects stored in v1alpha1
			// need it.
			"crd/subnetpools.ipam.subnet-operator.io": {"{.spec.conversion.webhook.clientConfig.caBundle}", 1},
			"crd/subnets.ipam.subnet-operator.io":     {"{.spec.conversion.webhook.clientConfig.caBundle}", 1},
		} {
			out, err := env.Kubectl(ctx, nil, "get", name, "-o", "jsonpath="+want.path)
			if err != nil || len(strings.Fields(out)) != want.count {
				ok = false
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("cainjector did not inject the CA into the webhook configurations and the CRDs")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitAdmissionPolicy waits until the API server can apply
// config/admission-policy to a Subnet. It needs the CRD's schema for that,
// which it reads from its own OpenAPI every 5 s; until then a create that the
// policy matches fails with 503 ("Resource kind ... not found"), whatever
// the policy's failurePolicy. A server-side dry run goes through the whole
// admission chain and writes nothing: any answer but that 503 means ready.
func (env *Environment) waitAdmissionPolicy(ctx context.Context) error {
	probe := []byte("apiVersion: ipam.subnet-operator.io/v1alpha2\nkind: Subnet\n" +
		"metadata: {name: admission-ready, namespace: default}\nspec: {poolRef: {name: admission-ready}, prefixLength: 24}\n")
	deadline := time.Now().Add(time.Minute)
	for {
		_, stderr, _ := env.KubectlOutput(ctx, env.Kubeconfig, probe, "create", "--dry-run=server", "-f", "-")
		if !strings.Contains(stderr, "(ServiceUnavailable)") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the API server cannot apply the admission policy to Subnets yet: %s", stderr)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Stop stops the managers, the certificate sync, the proxy and the control
// plane.
func (env *Environment) Stop() {
	// No restart of a replica that Stop stops.
	if env.stopSupervision != nil {
		env.stopSupervision()
		env.supervision.Wait()
	}
	for _, m := range env.Managers {
		if m.Process != nil {
			m.Process.Stop(15 * time.Second)
		}
	}
	if env.stopSync != nil {
		env.stopSync()
		env.syncDone.Wait()
	}
	for _, p := range env.proxies {
		p.close()
	}
	env.ControlPlane.Stop()
}

// BuildManager builds cmd/manager into dir (with the race detector if race)
// and returns the binary's path.
func BuildManager(ctx context.Context, repoRoot, dir string, race bool) (string, error) {
	out := filepath.Join(dir, "manager")
	args := []string{"build", "-o", out}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.CommandContext(ctx, "go", append(args, "./cmd/manager")...)
	cmd.Dir = repoRoot
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building the manager: %w: %s", err, stderr.String())
	}
	return out, nil
}

// RepoRoot finds the repository root: the nearest directory above the
// working directory with a go.mod that declares the operator's module.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			bytes.HasPrefix(data, []byte("module github.com/subnet-operator/subnet-operator\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the subnet-operator repository")
		}
		dir = parent
	}
}
