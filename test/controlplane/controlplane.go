// Package controlplane starts a real Kubernetes control plane on 127.0.0.1
// for the integration tests, the end-to-end tests and `make dev`: etcd,
// kube-apiserver and, on request, kube-controller-manager, cert-manager
// (controller and CA injector) and Cluster API's CRDs. Binaries come from
// KUBEBUILDER_ASSETS, which `make test` and `make dev` point at bin/assets
// (see hack/build-tools.sh).
//
// Every port is picked at random, so tests can run in parallel, and every
// process is stopped by Stop, and by the kernel if the harness dies first.
package controlplane

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// AssetsEnv names the directory of the control plane's binaries.
const AssetsEnv = "KUBEBUILDER_ASSETS"

// Options configure a control plane.
type Options struct {
	// Dir holds the state: etcd data, certificates, kubeconfigs and, under
	// logs/, one log per process. It is created if missing.
	Dir string
	// Assets is the directory of the binaries; default $KUBEBUILDER_ASSETS.
	Assets string
	// ControllerManager also runs kube-controller-manager, so namespaces
	// finish deleting and garbage collection works as in a cluster.
	ControllerManager bool
	// CertManager installs cert-manager's CRDs and runs its controller and
	// CA injector.
	CertManager bool
	// ClusterAPI installs Cluster API's IPAddressClaim, IPAddress and
	// Cluster CRDs (from $Assets/cluster-api-crds; CRDs only, no Cluster
	// API controllers) and waits until they are Established.
	ClusterAPI bool
	// APIServerArgs are extra kube-apiserver flags ("--name=value").
	APIServerArgs []string
}

// ControlPlane is a running control plane.
type ControlPlane struct {
	Dir string
	// Kubeconfig is the path of a kubeconfig for the cluster admin
	// (group system:masters).
	Kubeconfig string
	// Config is the admin's REST config.
	Config *rest.Config
	// URL is the API server's address, https://127.0.0.1:<port>.
	URL string
	// CAFile is the CA that signed the API server's serving certificate and
	// every client certificate.
	CAFile string
	Assets string

	ca       *authority
	logDir   string
	etcdPort int

	mu        sync.Mutex
	processes []*Process // in start order
	apiArgs   []string
}

// Start starts the control plane and waits until the API server is ready.
// On error, everything started so far is stopped.
func Start(ctx context.Context, opts Options) (_ *ControlPlane, err error) {
	if opts.Assets == "" {
		opts.Assets = os.Getenv(AssetsEnv)
	}
	if opts.Assets == "" {
		return nil, fmt.Errorf("%s is not set: run the tests through `make test`, which builds the control plane's binaries into bin/assets", AssetsEnv)
	}
	for _, name := range []string{"etcd", "kube-apiserver", "kubectl"} {
		if _, err := os.Stat(filepath.Join(opts.Assets, name)); err != nil {
			return nil, fmt.Errorf("%s: %w (run hack/build-tools.sh or `make test`)", name, err)
		}
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{Dir: dir, Assets: opts.Assets, logDir: filepath.Join(dir, "logs")}
	defer func() {
		if err != nil {
			cp.Stop()
		}
	}()

	ports, err := FreePorts(3)
	if err != nil {
		return nil, err
	}
	cp.etcdPort = ports[0]
	if err := cp.startEtcd(ports[1]); err != nil {
		return nil, err
	}
	if err := cp.startAPIServer(ctx, ports[2], opts.APIServerArgs); err != nil {
		return nil, err
	}
	if opts.ControllerManager {
		if err := cp.startControllerManager(); err != nil {
			return nil, err
		}
	}
	if opts.CertManager {
		if err := cp.startCertManager(ctx); err != nil {
			return nil, err
		}
	}
	if opts.ClusterAPI {
		if err := cp.installClusterAPI(ctx); err != nil {
			return nil, err
		}
	}
	return cp, nil
}

// EtcdURL is etcd's client address (plain HTTP on 127.0.0.1), for tests
// that read what the API server stored.
func (cp *ControlPlane) EtcdURL() string { return "http://127.0.0.1:" + itoa(cp.etcdPort) }

func (cp *ControlPlane) startEtcd(peerPort int) error {
	data := filepath.Join(cp.Dir, "etcd")
	client := "http://127.0.0.1:" + itoa(cp.etcdPort)
	peer := "http://127.0.0.1:" + itoa(peerPort)
	args := []string{
		"--name=default", "--data-dir=" + data,
		"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=default=" + peer,
		// A test cluster: no fsync, and keep the log to warnings.
		"--unsafe-no-fsync", "--log-level=warn",
	}
	p, err := cp.start("etcd", filepath.Join(cp.Assets, "etcd"), args, nil)
	if err != nil {
		return err
	}
	return waitFor(p, cp.logDir, 30*time.Second, func() error {
		resp, err := http.Get(client + "/health")
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("health: %s", resp.Status)
		}
		return nil
	})
}

func (cp *ControlPlane) startAPIServer(ctx context.Context, port int, extra []string) error {
	pki := filepath.Join(cp.Dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return err
	}
	ca, err := newAuthority()
	if err != nil {
		return err
	}
	cp.ca = ca
	cp.CAFile = filepath.Join(pki, "ca.crt")
	if err := os.WriteFile(cp.CAFile, ca.certPEM, 0o600); err != nil {
		return err
	}
	serving, err := ca.issue("kube-apiserver", nil, []string{"127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"})
	if err != nil {
		return err
	}
	servingCert, servingKey := filepath.Join(pki, "apiserver.crt"), filepath.Join(pki, "apiserver.key")
	if err := writePair(servingCert, servingKey, serving); err != nil {
		return err
	}
	saKey, saPub, err := serviceAccountKey(pki)
	if err != nil {
		return err
	}
	cp.URL = "https://127.0.0.1:" + itoa(port)
	args := []string{
		"--etcd-servers=http://127.0.0.1:" + itoa(cp.etcdPort),
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=" + itoa(port),
		"--tls-cert-file=" + servingCert, "--tls-private-key-file=" + servingKey,
		"--client-ca-file=" + cp.CAFile,
		"--service-account-issuer=" + cp.URL, "--service-account-key-file=" + saPub,
		"--service-account-signing-key-file=" + saKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--authorization-mode=RBAC",
		"--cert-dir=" + pki,
		"--profiling=false",
		// The kubernetes Service would point at 127.0.0.1, which the
		// endpoint reconciler refuses; nothing here needs that Service.
		"--endpoint-reconciler-type=none",
	}
	args = mergeFlags(args, extra)
	cp.apiArgs = args
	p, err := cp.start("kube-apiserver", filepath.Join(cp.Assets, "kube-apiserver"), args, nil)
	if err != nil {
		return err
	}

	admin, err := ca.issue("admin", []string{"system:masters"}, nil)
	if err != nil {
		return err
	}
	cp.Kubeconfig = filepath.Join(cp.Dir, "kubeconfig")
	if err := cp.writeKubeconfig(cp.Kubeconfig, "admin", admin); err != nil {
		return err
	}
	cp.Config, err = clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		return err
	}
	return cp.waitReady(ctx, p)
}

// waitReady polls the API server's /readyz as the admin.
func (cp *ControlPlane) waitReady(ctx context.Context, p *Process) error {
	transport, err := rest.TransportFor(cp.Config)
	if err != nil {
		return err
	}
	httpClient := &http.Client{Transport: transport, Timeout: 5 * time.Second}
	return waitFor(p, cp.logDir, 2*time.Minute, func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		resp, err := httpClient.Get(cp.URL + "/readyz")
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz: %s", resp.Status)
		}
		return nil
	})
}

func (cp *ControlPlane) startControllerManager() error {
	kcm, err := cp.ca.issue("system:kube-controller-manager", []string{"system:masters"}, nil)
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(cp.Dir, "kube-controller-manager.kubeconfig")
	if err := cp.writeKubeconfig(kubeconfig, "system:kube-controller-manager", kcm); err != nil {
		return err
	}
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		// Serve nothing: no port to collide with, no delegated authn lookups.
		"--secure-port=0",
		"--service-account-private-key-file=" + filepath.Join(cp.Dir, "pki", "sa.key"),
		"--root-ca-file=" + cp.CAFile,
		"--use-service-account-credentials=false",
	}
	_, err = cp.start("kube-controller-manager", filepath.Join(cp.Assets, "kube-controller-manager"), args, nil)
	return err
}

func (cp *ControlPlane) startCertManager(ctx context.Context) error {
	// kubectl reads a symlink as a file; resolve it to the directory.
	crds, err := filepath.EvalSymlinks(filepath.Join(cp.Assets, "cert-manager-crds"))
	if err != nil {
		return err
	}
	if _, err := cp.Kubectl(ctx, nil, "apply", "--server-side", "-f", crds); err != nil {
		return fmt.Errorf("installing cert-manager's CRDs: %w", err)
	}
	if _, err := cp.Kubectl(ctx, nil, "wait", "--for=condition=Established", "--timeout=60s", "-f", crds); err != nil {
		return err
	}
	if _, err := cp.Kubectl(ctx, nil, "create", "namespace", "cert-manager"); err != nil {
		return err
	}
	cm, err := cp.ca.issue("cert-manager", []string{"system:masters"}, nil)
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(cp.Dir, "cert-manager.kubeconfig")
	if err := cp.writeKubeconfig(kubeconfig, "cert-manager", cm); err != nil {
		return err
	}
	// KUBECONFIG too, so that nothing in it can fall back to ~/.kube/config.
	_, err = cp.start("cert-manager", filepath.Join(cp.Assets, "cert-manager-local"),
		[]string{"--kubeconfig=" + kubeconfig, "--v=1"}, []string{"KUBECONFIG=" + kubeconfig})
	return err
}

// installClusterAPI applies Cluster API's CRDs and waits until they are
// served: installed bare, without Cluster API's conversion webhook, so only
// their storage version (v1beta2) is safe to use.
func (cp *ControlPlane) installClusterAPI(ctx context.Context) error {
	// kubectl reads a symlink as a file; resolve it to the directory.
	crds, err := filepath.EvalSymlinks(filepath.Join(cp.Assets, "cluster-api-crds"))
	if err != nil {
		return fmt.Errorf("%w (run hack/build-tools.sh or `make tools`)", err)
	}
	if _, err := cp.Kubectl(ctx, nil, "apply", "--server-side", "-f", crds); err != nil {
		return fmt.Errorf("installing Cluster API's CRDs: %w", err)
	}
	_, err = cp.Kubectl(ctx, nil, "wait", "--for=condition=Established", "--timeout=60s", "-f", crds)
	return err
}

// StartProcess starts another process that Stop will stop, with its log in
// the control plane's log directory.
func (cp *ControlPlane) StartProcess(name, binary string, args, env []string) (*Process, error) {
	return cp.start(name, binary, args, env)
}

func (cp *ControlPlane) start(name, binary string, args, env []string) (*Process, error) {
	p, err := StartProcess(name, binary, args, env, cp.logDir)
	if err != nil {
		return nil, err
	}
	cp.mu.Lock()
	cp.processes = append(cp.processes, p)
	cp.mu.Unlock()
	return p, nil
}

// Processes returns the running processes, in start order.
func (cp *ControlPlane) Processes() []*Process {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return slices.Clone(cp.processes)
}

// LogDir is the directory of the processes' logs.
func (cp *ControlPlane) LogDir() string { return cp.logDir }

// RestartAPIServer stops kube-apiserver and starts it again with the same
// flags and port, for fault tests; etcd keeps the data.
func (cp *ControlPlane) RestartAPIServer(ctx context.Context) error {
	cp.mu.Lock()
	var old *Process
	for i, p := range cp.processes {
		if p.Name == "kube-apiserver" {
			old = p
			cp.processes = slices.Delete(cp.processes, i, i+1)
			break
		}
	}
	cp.mu.Unlock()
	if old == nil {
		return errors.New("kube-apiserver is not running")
	}
	old.Stop(20 * time.Second)
	p, err := cp.start("kube-apiserver", filepath.Join(cp.Assets, "kube-apiserver"), cp.apiArgs, nil)
	if err != nil {
		return err
	}
	return cp.waitReady(ctx, p)
}

// Stop stops every process, latest first, and waits for them to exit.
func (cp *ControlPlane) Stop() {
	cp.mu.Lock()
	processes := slices.Clone(cp.processes)
	cp.processes = nil
	cp.mu.Unlock()
	for i := len(processes) - 1; i >= 0; i-- {
		processes[i].Stop(15 * time.Second)
	}
}

// Kubectl runs the control plane's kubectl as the admin, with stdin if not
// nil, and returns its standard output; the error includes standard error.
func (cp *ControlPlane) Kubectl(ctx context.Context, stdin []byte, args ...string) (string, error) {
	return cp.KubectlAs(ctx, cp.Kubeconfig, stdin, args...)
}

// KubectlAs runs kubectl with the given kubeconfig.
func (cp *ControlPlane) KubectlAs(ctx context.Context, kubeconfig string, stdin []byte, args ...string) (string, error) {
	stdout, stderr, err := cp.KubectlOutput(ctx, kubeconfig, stdin, args...)
	if err != nil {
		return stdout, fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr))
	}
	return stdout, nil
}

// KubectlOutput runs kubectl with the given kubeconfig and returns both its
// outputs: warnings go to standard error even when kubectl succeeds.
func (cp *ControlPlane) KubectlOutput(ctx context.Context, kubeconfig string, stdin []byte, args ...string) (stdout, stderr string, err error) {
	cmd := exec.CommandContext(ctx, filepath.Join(cp.Assets, "kubectl"), append([]string{"--kubeconfig=" + kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// AddUser writes a kubeconfig for a user in groups, signed by the control
// plane's CA, and returns its path.
func (cp *ControlPlane) AddUser(name string, groups ...string) (string, error) {
	pair, err := cp.ca.issue(name, groups, nil)
	if err != nil {
		return "", err
	}
	path := filepath.Join(cp.Dir, "user-"+name+".kubeconfig")
	return path, cp.writeKubeconfig(path, name, pair)
}

// ServingCertificate issues a certificate for hosts signed by the control
// plane's CA (for servers that tests start) and returns it and the CA.
func (cp *ControlPlane) ServingCertificate(hosts ...string) (tls.Certificate, *x509.CertPool, error) {
	pair, err := cp.ca.issue(hosts[0], nil, hosts)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	cert, err := tls.X509KeyPair(pair.certPEM, pair.keyPEM)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cp.ca.cert)
	return cert, pool, nil
}

func (cp *ControlPlane) writeKubeconfig(path, user string, pair keyPair) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: cp.URL, CertificateAuthorityData: cp.ca.certPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: pair.certPEM, ClientKeyData: pair.keyPEM}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: user}
	cfg.CurrentContext = "local"
	return clientcmd.WriteToFile(*cfg, path)
}

func writePair(certFile, keyFile string, pair keyPair) error {
	if err := os.WriteFile(certFile, pair.certPEM, 0o600); err != nil {
		return err
	}
	return os.WriteFile(keyFile, pair.keyPEM, 0o600)
}

// mergeFlags appends extra "--name=value" flags, replacing defaults of the
// same name.
func mergeFlags(defaults, extra []string) []string {
	out := slices.Clone(defaults)
	for _, e := range extra {
		name, _, _ := strings.Cut(e, "=")
		out = slices.DeleteFunc(out, func(d string) bool { n, _, _ := strings.Cut(d, "="); return n == name })
		out = append(out, e)
	}
	return out
}
