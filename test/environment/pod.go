package environment

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Pod is how an install runs the manager, read from the Deployment it
// renders (config/default, the Helm chart, the release manifest), so that
// the tests run the image the way a cluster would: the manager container's
// command, arguments, environment, Secret mounts and security settings, and
// the Pod's service account.
type Pod struct {
	Namespace      string
	ServiceAccount string
	Command, Args  []string
	Env            []string // NAME=value
	Mounts         []SecretMount
	// RunAsUser is the Pod's or container's runAsUser, if set.
	RunAsUser              *int64
	RunAsNonRoot           bool
	ReadOnlyRootFilesystem bool
	NoNewPrivileges        bool
	DropAllCapabilities    bool
}

// SecretMount is a Secret volume mounted at Path.
type SecretMount struct{ Secret, Path string }

// ManagerPod finds the Deployment with a container named "manager" in
// manifests (multi-document YAML) and reads its Pod. What this harness
// cannot reproduce (an environment variable from a field or resource, a
// volume that is not a Secret) is an error, not silently dropped.
func ManagerPod(manifests []byte) (*Pod, error) {
	docs, err := Documents(manifests)
	if err != nil {
		return nil, err
	}
	for _, doc := range docs {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal(doc, &meta); err != nil || meta.Kind != "Deployment" {
			continue
		}
		var d appsv1.Deployment
		if err := yaml.UnmarshalStrict(doc, &d); err != nil {
			return nil, fmt.Errorf("decoding a Deployment: %w", err)
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Name == "manager" {
				return podOf(&d, &c)
			}
		}
	}
	return nil, errors.New("no Deployment with a container named manager in the manifests")
}

func podOf(d *appsv1.Deployment, c *corev1.Container) (*Pod, error) {
	spec := d.Spec.Template.Spec
	p := &Pod{Namespace: d.Namespace, ServiceAccount: spec.ServiceAccountName, Command: c.Command, Args: c.Args}
	if p.ServiceAccount == "" {
		p.ServiceAccount = "default"
	}
	if len(c.EnvFrom) > 0 {
		return nil, errors.New("the manager container uses envFrom, which the tests do not reproduce")
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			return nil, fmt.Errorf("env %s comes from a field or resource, which the tests do not reproduce", e.Name)
		}
		p.Env = append(p.Env, e.Name+"="+e.Value)
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	for _, m := range c.VolumeMounts {
		v, ok := volumes[m.Name]
		if !ok || v.Secret == nil {
			return nil, fmt.Errorf("volume %s is not a Secret, which the tests do not reproduce", m.Name)
		}
		if !m.ReadOnly {
			return nil, fmt.Errorf("volume %s (a Secret) is mounted writable", m.Name)
		}
		p.Mounts = append(p.Mounts, SecretMount{Secret: v.Secret.SecretName, Path: m.MountPath})
	}
	if psc := spec.SecurityContext; psc != nil {
		p.RunAsUser = psc.RunAsUser
		p.RunAsNonRoot = psc.RunAsNonRoot != nil && *psc.RunAsNonRoot
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			p.RunAsUser = sc.RunAsUser
		}
		if sc.RunAsNonRoot != nil {
			p.RunAsNonRoot = *sc.RunAsNonRoot
		}
		p.ReadOnlyRootFilesystem = sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem
		p.NoNewPrivileges = sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation
		if sc.Capabilities != nil {
			for _, cap := range sc.Capabilities.Drop {
				if cap == "ALL" {
					p.DropAllCapabilities = true
				}
			}
		}
	}
	return p, nil
}

// PodmanRun is what runs the Pod's container from image with podman here:
// on the host's network (the replicas here share it: extraArgs, appended to
// the container's, move the listeners to 127.0.0.1 and their own ports),
// each Secret from secretDirs (Secret name to a directory this harness keeps
// in step with it) mounted read-only where the Deployment mounts it, and
// serviceAccountDir (token, ca.crt, namespace) where a kubelet mounts the
// service account, with the API server's address in the environment, so the
// manager configures itself as in a Pod. It returns podman's arguments.
func (p *Pod) PodmanRun(name, image, imageUser, apiHost, apiPort, serviceAccountDir string,
	secretDirs map[string]string, labels map[string]string, extraEnv, extraArgs []string) ([]string, error) {
	if p.RunAsNonRoot && p.RunAsUser == nil && !nonRootUser(imageUser) {
		// The kubelet refuses to start such a container.
		return nil, fmt.Errorf("runAsNonRoot, and the image's user %q is not a numeric non-root user", imageUser)
	}
	args := []string{
		// runc, not the default crun: crun fails on these machines' hybrid cgroups.
		"--runtime", "runc", "run", "--rm", "--name", name,
		"--network", "host", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
		"--env", "KUBERNETES_SERVICE_HOST=" + apiHost, "--env", "KUBERNETES_SERVICE_PORT=" + apiPort,
		"--volume", serviceAccountDir + ":/var/run/secrets/kubernetes.io/serviceaccount:ro",
	}
	for k, v := range labels {
		args = append(args, "--label", k+"="+v)
	}
	if p.RunAsUser != nil {
		args = append(args, "--user", strconv.FormatInt(*p.RunAsUser, 10))
	}
	if p.ReadOnlyRootFilesystem {
		args = append(args, "--read-only")
	}
	if p.NoNewPrivileges {
		args = append(args, "--security-opt", "no-new-privileges")
	}
	if p.DropAllCapabilities {
		args = append(args, "--cap-drop", "ALL")
	}
	for _, e := range append(append([]string(nil), p.Env...), extraEnv...) {
		args = append(args, "--env", e)
	}
	for _, m := range p.Mounts {
		dir, ok := secretDirs[m.Secret]
		if !ok {
			return nil, fmt.Errorf("the Deployment mounts Secret %s, which the tests do not keep on disk", m.Secret)
		}
		args = append(args, "--volume", dir+":"+m.Path+":ro")
	}
	command := p.Command
	if len(command) > 0 {
		args = append(args, "--entrypoint", command[0])
		command = command[1:]
	}
	args = append(args, image)
	args = append(args, command...)
	args = append(args, p.Args...)
	return append(args, extraArgs...), nil
}

// nonRootUser reports whether an image's user ("uid" or "uid:gid") is a
// numeric uid other than 0, as the kubelet requires under runAsNonRoot.
func nonRootUser(user string) bool {
	uid, _, _ := strings.Cut(user, ":")
	n, err := strconv.ParseInt(uid, 10, 64)
	return err == nil && n != 0
}

// Documents splits multi-document YAML into its documents.
func Documents(manifests []byte) ([][]byte, error) {
	var docs [][]byte
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifests)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		docs = append(docs, doc)
	}
}
