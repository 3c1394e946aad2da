// Command cert-manager-local runs cert-manager's certificate controllers and
// its CA injector in one process against a given API server, for `make dev`
// and the end-to-end tests. cert-manager's own cmd/* modules are not served by
// the Go module proxy, so this launcher is built on the public packages of the
// root module instead: the controllers register themselves on import, and
// pkg/controller/cainjector sets up the injectors on a controller-runtime
// manager.
//
// It runs only what issuing a certificate from a CA or self-signed issuer
// needs; no ACME, no webhook, no metrics or health listeners, no leader
// election. It never falls back to ~/.kube/config: --kubeconfig is required.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	logf "github.com/cert-manager/cert-manager/pkg/logs"

	// Controllers register themselves with controllerpkg on import.
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"

	// Issuer implementations register themselves with the issuer factory.
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// enabledControllers are the controllers that take a Certificate from an
// Issuer of type CA or SelfSigned to a Secret, and renew it.
var enabledControllers = []string{
	"issuers",
	"clusterissuers",
	"certificaterequests-approver",
	"certificaterequests-issuer-ca",
	"certificaterequests-issuer-selfsigned",
	"certificates-trigger",
	"certificates-issuing",
	"certificates-key-manager",
	"certificates-request-manager",
	"certificates-readiness",
	"certificates-revision-manager",
}

func main() {
	// Our own flag set: controller-runtime registers --kubeconfig on the
	// global one, with a fallback to ~/.kube/config that we do not want.
	flags := flag.NewFlagSet("cert-manager-local", flag.ExitOnError)
	kubeconfig := flags.String("kubeconfig", "", "path of the kubeconfig of the API server to run against (required)")
	clusterResourceNamespace := flags.String("cluster-resource-namespace", "cert-manager", "namespace of the Secrets that ClusterIssuers read")
	workers := flags.Int("workers", 5, "workers per controller")
	klog.InitFlags(flags)
	_ = flags.Parse(os.Args[1:]) // ExitOnError
	if *kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "cert-manager-local: --kubeconfig is required (it never falls back to ~/.kube/config)")
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log := klog.NewKlogr()
	ctx = logf.NewContext(ctx, log)
	ctrl.SetLogger(log)

	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for name, run := range map[string]func(context.Context) error{
		"controller": func(ctx context.Context) error {
			return runController(ctx, *kubeconfig, *clusterResourceNamespace, *workers)
		},
		"cainjector": func(ctx context.Context) error { return runCAInjector(ctx, log, *kubeconfig) },
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	select {
	case err := <-errs:
		log.Error(err, "Stopping")
		stop()
		wg.Wait()
		os.Exit(1)
	case <-ctx.Done():
		wg.Wait()
	}
}

// runController builds cert-manager's controller context and runs the
// enabled controllers until ctx ends.
func runController(ctx context.Context, kubeconfig, clusterResourceNamespace string, workers int) error {
	factory, err := controllerpkg.NewContextFactory(ctx, controllerpkg.ContextOptions{
		Kubeconfig:         kubeconfig,
		KubernetesAPIQPS:   50,
		KubernetesAPIBurst: 100,
		IssuerOptions:      controllerpkg.IssuerOptions{ClusterResourceNamespace: clusterResourceNamespace},
		CertificateOptions: controllerpkg.CertificateOptions{
			// cert-manager's defaults.
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	})
	if err != nil {
		return err
	}

	var wg sync.WaitGroup
	errs := make(chan error, len(enabledControllers))
	for _, name := range enabledControllers {
		construct, ok := controllerpkg.Known()[name]
		if !ok {
			return fmt.Errorf("controller %q is not registered", name)
		}
		c, err := construct(factory)
		if err != nil {
			return fmt.Errorf("creating controller %q: %w", name, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Run(workers, ctx); err != nil {
				errs <- fmt.Errorf("controller %q: %w", name, err)
			}
		}()
	}

	// The informer factories are shared by every controller built from the
	// factory; start them once all controllers have registered informers.
	shared, err := factory.Build()
	if err != nil {
		return err
	}
	shared.SharedInformerFactory.Start(ctx.Done())
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	shared.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())

	select {
	case err := <-errs:
		return err
	case <-ctx.Done():
		wg.Wait()
		return ctx.Err()
	}
}

// runCAInjector runs the injectors for webhook configurations on a
// controller-runtime manager until ctx ends.
func runCAInjector(ctx context.Context, log logr.Logger, kubeconfig string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	// The injectors derive their server-side apply field manager from the
	// user agent; an empty one is refused by the API server.
	cfg.UserAgent = "cert-manager-cainjector"
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, admissionregistrationv1.AddToScheme, apiextensionsv1.AddToScheme,
		apiregistrationv1.AddToScheme, cmapi.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Logger:                 log.WithName("cainjector"),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Secrets are read directly and watched as metadata only, as
		// cert-manager's cainjector does: no cache of every Secret.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
	})
	if err != nil {
		return err
	}
	if err := cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   true,
			cainjector.ValidatingWebhookConfigurationName: true,
			cainjector.CustomResourceDefinitionName:       true,
		},
	}); err != nil {
		return err
	}
	return mgr.Start(ctx)
}
