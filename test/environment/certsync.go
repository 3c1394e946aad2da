package environment

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
)

// startCertSync writes each certificate Secret's keys to files and rewrites
// them whenever cert-manager renews the Secret, as the kubelet does for a
// mounted Secret: the manager must pick the new files up by itself. It
// returns once the first certificates are on disk.
func (env *Environment) startCertSync() error {
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	env.stopSync = cancel
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(Namespace))
	secrets := factory.Core().V1().Secrets().Informer()
	certSecrets := env.certSecrets()
	write := func(obj any) {
		s, ok := obj.(*corev1.Secret)
		if !ok {
			return
		}
		if dir, ok := certSecrets[s.Name]; ok {
			if err := writeCertFiles(filepath.Join(env.certDir, dir), s.Data); err != nil {
				fmt.Fprintf(os.Stderr, "environment: writing %s: %v\n", s.Name, err)
			}
		}
	}
	if _, err := secrets.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    write,
		UpdateFunc: func(_, obj any) { write(obj) },
	}); err != nil {
		cancel()
		return err
	}
	env.syncDone.Add(1)
	go func() {
		defer env.syncDone.Done()
		secrets.Run(ctx.Done())
	}()
	deadline := time.Now().Add(time.Minute)
	for _, dir := range certSecrets {
		for {
			if _, err := os.Stat(filepath.Join(env.certDir, dir, "tls.key")); err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("certificate files in %s did not appear", dir)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// writeCertFiles writes tls.crt, tls.key and ca.crt, each by rename so a
// reader never sees a half-written file. Like a Secret volume's files, they
// are readable by a container's non-root user (the test's directory above
// them is private).
func writeCertFiles(dir string, data map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, name := range []string{"ca.crt", "tls.key", "tls.crt"} {
		content, ok := data[name]
		if !ok {
			continue
		}
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, content, 0o644); err != nil { //nolint:gosec // see above
			return err
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}

// CertDir is where the manager reads the certificate of kind "webhook" or
// "metrics".
func (env *Environment) CertDir(kind string) string { return filepath.Join(env.certDir, kind) }
