package environment

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/subnet-operator/subnet-operator/test/controlplane"
)

// Installed is the manager of an install applied to a control plane
// (config/default, the Helm chart, the release manifest), run from an image
// as the install's Deployment says, one replica.
//
// The API server here reaches no Service (there are no Pods and no
// kube-proxy), so the replica stands in for the webhook Service: its
// certificates are issued for 127.0.0.1 by the install's own Issuers (an
// extra Certificate beside each of the install's), and the webhook
// configurations point at its URL (PointWebhooks), which is all that changes
// what was installed. Certificates are copied once; the e2e suite covers
// their rotation.
type Installed struct {
	Manager *Manager
	Pod     *Pod

	cp  *controlplane.ControlPlane
	cs  *kubernetes.Clientset
	dyn dynamic.Interface
	dir string
	// original holds each webhook's client config before PointWebhooks,
	// by "kind/configuration/index".
	original map[string]admissionregistrationv1.WebhookClientConfig
}

// RunInstalled reads the Deployment from manifests (what was applied to
// cp), waits for cert-manager to issue its Secrets, and starts its manager
// from image with the files under dir. Stop it with Stop.
func RunInstalled(ctx context.Context, cp *controlplane.ControlPlane, manifests []byte, image, dir string) (*Installed, error) {
	pod, err := ManagerPod(manifests)
	if err != nil {
		return nil, err
	}
	if err := RemoveOrphanContainers(ctx); err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		return nil, err
	}
	in := &Installed{Pod: pod, cp: cp, cs: cs, dyn: dyn, dir: dir, original: map[string]admissionregistrationv1.WebhookClientConfig{}}
	secretDirs := map[string]string{}
	for _, m := range pod.Mounts {
		secretDirs[m.Secret] = filepath.Join(dir, "secrets", m.Secret)
		if err := in.copyServingSecret(ctx, m.Secret, secretDirs[m.Secret]); err != nil {
			return nil, err
		}
	}
	saDir := filepath.Join(dir, "serviceaccount")
	if err := WriteServiceAccount(ctx, cp.Config, cp.CAFile, saDir, pod.Namespace, pod.ServiceAccount); err != nil {
		return nil, err
	}
	user, err := ImageUser(ctx, image)
	if err != nil {
		return nil, err
	}
	host, port, err := apiHostPort(cp)
	if err != nil {
		return nil, err
	}
	ports, err := controlplane.FreePorts(3)
	if err != nil {
		return nil, err
	}
	m := &Manager{Name: "manager", WebhookPort: ports[0], MetricsPort: ports[1], ProbePort: ports[2],
		Container: fmt.Sprintf("subnet-operator-test-%d-%s", os.Getpid(), filepath.Base(dir))}
	m.args, err = pod.PodmanRun(m.Container, image, user, host, port, saDir, secretDirs, testLabels(), nil, []string{
		"--webhook-host=127.0.0.1", fmt.Sprintf("--webhook-port=%d", m.WebhookPort),
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", m.MetricsPort),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", m.ProbePort),
	})
	if err != nil {
		return nil, err
	}
	m.logPath = filepath.Join(cp.LogDir(), m.Name+".log")
	if info, err := os.Stat(m.logPath); err == nil {
		m.logFrom = info.Size()
	}
	if m.Process, err = ContainerProcess(cp, m.Name, m.Container, m.args); err != nil {
		return nil, err
	}
	in.Manager = m
	if err := m.WaitReady(ctx, 2*time.Minute); err != nil {
		in.Stop()
		return nil, err
	}
	return in, nil
}

// Stop stops the replica.
func (in *Installed) Stop() {
	if in.Manager != nil && in.Manager.Process != nil {
		in.Manager.Process.Stop(30 * time.Second)
	}
}

// copyServingSecret finds the install's Certificate that fills Secret
// name, has its Issuer issue a second one for 127.0.0.1 (the install's
// Certificate is left alone: changing it while cert-manager issues it left
// it "RequestChanged" for good), and copies that one's files into dir, to be
// mounted where the Deployment mounts name. Signed by the same CA, it is
// trusted by the CA cainjector puts in the webhook configurations.
func (in *Installed) copyServingSecret(ctx context.Context, name, dir string) error {
	ns := in.Pod.Namespace
	out, err := in.cp.Kubectl(ctx, nil, "get", "certificates.cert-manager.io", "-n", ns,
		"-o", `jsonpath={range .items[*]}{.spec.secretName}{" "}{.spec.issuerRef.kind}{" "}{.spec.issuerRef.name}{"\n"}{end}`)
	if err != nil {
		return err
	}
	var issuerKind, issuer string
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) == 3 && f[0] == name {
			issuerKind, issuer = f[1], f[2]
		}
	}
	if issuer == "" {
		return fmt.Errorf("no Certificate in %s fills Secret %s", ns, name)
	}
	loopback := name + "-loopback"
	certificate := fmt.Sprintf(`{"apiVersion":"cert-manager.io/v1","kind":"Certificate","metadata":{"name":%q,"namespace":%q},`+
		`"spec":{"secretName":%q,"ipAddresses":["127.0.0.1"],"dnsNames":["localhost"],"issuerRef":{"kind":%q,"name":%q}}}`,
		loopback, ns, loopback, issuerKind, issuer)
	if _, err := in.cp.Kubectl(ctx, []byte(certificate), "apply", "-f", "-"); err != nil {
		return err
	}
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		s, err := in.cs.CoreV1().Secrets(ns).Get(ctx, loopback, metav1.GetOptions{})
		last = err
		return err == nil && namesLoopback(s), nil
	}); err != nil {
		status, _ := in.cp.Kubectl(ctx, nil, "get", "certificates.cert-manager.io", loopback, "-n", ns, "-o", "jsonpath={.status}")
		return fmt.Errorf("cert-manager did not issue Secret %s/%s for 127.0.0.1 (Certificate status: %s): %w", ns, loopback, status, errors.Join(err, last))
	}
	s, err := in.cs.CoreV1().Secrets(ns).Get(ctx, loopback, metav1.GetOptions{})
	if err != nil {
		return err
	}
	return writeCertFiles(dir, s.Data)
}

// namesLoopback reports whether a TLS Secret's certificate is valid for
// 127.0.0.1.
func namesLoopback(s *corev1.Secret) bool {
	block, _ := pem.Decode(s.Data[corev1.TLSCertKey])
	if block == nil {
		return false
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return false
	}
	for _, ip := range cert.IPAddresses {
		if ip.Equal(net.IPv4(127, 0, 0, 1)) {
			return true
		}
	}
	return false
}

// PointWebhooks points every webhook of the install's configurations, and
// every CRD conversion webhook, that calls a Service in the install's
// namespace at the replica, once
// cainjector has injected their CA. UnpointWebhooks undoes it: do so before
// an upgrade, so that Helm finds what it installed.
func (in *Installed) PointWebhooks(ctx context.Context) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pending, err := in.rewriteWebhooks(ctx, in.pointAtReplica)
		return pending == 0, err
	})
	if wait.Interrupted(err) {
		return errors.New("cainjector did not inject the CA into the webhook configurations and the CRDs")
	}
	return err
}

// UnpointWebhooks gives the webhooks PointWebhooks changed their Service
// back.
func (in *Installed) UnpointWebhooks(ctx context.Context) error {
	_, err := in.rewriteWebhooks(ctx, func(key string, c admissionregistrationv1.WebhookClientConfig) (*admissionregistrationv1.WebhookClientConfig, bool) {
		original, ok := in.original[key]
		if !ok {
			return nil, false
		}
		original.CABundle = c.CABundle
		return &original, false
	})
	return err
}

// pointAtReplica is the client config of a webhook that calls the
// install's Service: the replica's URL. It waits (true) while the CA is
// not yet injected.
func (in *Installed) pointAtReplica(key string, c admissionregistrationv1.WebhookClientConfig) (*admissionregistrationv1.WebhookClientConfig, bool) {
	if c.Service == nil || c.Service.Namespace != in.Pod.Namespace {
		return nil, false
	}
	if len(c.CABundle) == 0 {
		return nil, true
	}
	in.original[key] = c
	url := "https://127.0.0.1:" + strconv.Itoa(in.Manager.WebhookPort)
	if c.Service.Path != nil {
		url += *c.Service.Path
	}
	return &admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: c.CABundle}, false
}

// rewriteWebhooks patches the client config of every webhook for which
// rewrite returns one, and returns how many it said to wait for.
func (in *Installed) rewriteWebhooks(ctx context.Context,
	rewrite func(key string, c admissionregistrationv1.WebhookClientConfig) (*admissionregistrationv1.WebhookClientConfig, bool)) (int, error) {
	admission := in.cs.AdmissionregistrationV1()
	pending := 0
	patch := func(kind, name string, configs []admissionregistrationv1.WebhookClientConfig, apply func([]byte) error) error {
		var ops []map[string]any
		for i, c := range configs {
			next, wait := rewrite(fmt.Sprintf("%s/%s/%d", kind, name, i), c)
			if wait {
				pending++
			}
			if next != nil {
				ops = append(ops, map[string]any{"op": "replace", "path": fmt.Sprintf("/webhooks/%d/clientConfig", i), "value": next})
			}
		}
		if len(ops) == 0 {
			return nil
		}
		data, err := json.Marshal(ops)
		if err != nil {
			return err
		}
		return apply(data)
	}
	validating, err := admission.ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	for _, v := range validating.Items {
		var configs []admissionregistrationv1.WebhookClientConfig
		for _, w := range v.Webhooks {
			configs = append(configs, w.ClientConfig)
		}
		if err := patch("validating", v.Name, configs, func(data []byte) error {
			_, err := admission.ValidatingWebhookConfigurations().Patch(ctx, v.Name, types.JSONPatchType, data, metav1.PatchOptions{})
			return err
		}); err != nil {
			return 0, err
		}
	}
	mutating, err := admission.MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	for _, m := range mutating.Items {
		var configs []admissionregistrationv1.WebhookClientConfig
		for _, w := range m.Webhooks {
			configs = append(configs, w.ClientConfig)
		}
		if err := patch("mutating", m.Name, configs, func(data []byte) error {
			_, err := admission.MutatingWebhookConfigurations().Patch(ctx, m.Name, types.JSONPatchType, data, metav1.PatchOptions{})
			return err
		}); err != nil {
			return 0, err
		}
	}
	crds, err := in.dyn.Resource(crdResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	for _, crd := range crds.Items {
		raw, found, err := unstructured.NestedMap(crd.Object, "spec", "conversion", "webhook", "clientConfig")
		if err != nil || !found {
			continue
		}
		// The CRD's clientConfig has the admission webhooks' JSON shape.
		var c admissionregistrationv1.WebhookClientConfig
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &c); err != nil {
			return 0, fmt.Errorf("CRD %s: %w", crd.GetName(), err)
		}
		next, wait := rewrite("crd/"+crd.GetName(), c)
		if wait {
			pending++
		}
		if next == nil {
			continue
		}
		data, err := json.Marshal([]map[string]any{{"op": "replace", "path": "/spec/conversion/webhook/clientConfig", "value": next}})
		if err != nil {
			return 0, err
		}
		if _, err := in.dyn.Resource(crdResource).Patch(ctx, crd.GetName(), types.JSONPatchType, data, metav1.PatchOptions{}); err != nil {
			return 0, err
		}
	}
	return pending, nil
}

// crdResource is where the CRDs whose conversion webhook PointWebhooks
// points at the replica are.
var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
