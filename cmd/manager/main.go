// Command manager runs subnet-operator: the admission webhooks on every
// replica, the controllers on the leader. This file is wiring only; see
// docs/architecture.md for what each part does.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	ipamv1alpha1 "github.com/subnet-operator/subnet-operator/api/v1alpha1"
	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/capi"
	"github.com/subnet-operator/subnet-operator/fleet"
	"github.com/subnet-operator/subnet-operator/ledger"
	"github.com/subnet-operator/subnet-operator/reconcilers"
	"github.com/subnet-operator/subnet-operator/webhooks"
)

type flags struct {
	metricsAddr, probeAddr, pprofAddr               string
	secureMetrics, enableHTTP2                      bool
	metricsCertDir, metricsCertName, metricsKeyName string
	webhookHost                                     string
	webhookPort                                     int
	webhookCertDir, webhookCertName, webhookKeyName string
	webhookClientCAFile                             string
	conversionPort                                  int
	leaderElect                                     bool
	leaderElectionID, leaderElectionNS              string
	leaseDuration, renewDeadline, retryPeriod       time.Duration
	qps, recordRate                                 float64
	burst                                           int
	subnetWorkers, poolWorkers                      int
	reconcileTimeout                                time.Duration
	freshnessTimeout                                time.Duration
	auditInterval                                   time.Duration
	rootPoolNamespaces                              string
	poolAlertsLabel                                 string
	clusterAPI                                      string
	addressReuseAfter                               time.Duration
	claimWorkers                                    int
	hubKubeconfigSecret, clusterName                string
	clusterProfileNamespace                         string
}

func parseFlags() (flags, zap.Options) {
	var f flags
	flag.StringVar(&f.metricsAddr, "metrics-bind-address", ":8443", "Address of the metrics endpoint; \"0\" turns it off.")
	flag.BoolVar(&f.secureMetrics, "metrics-secure", true, "Serve metrics over HTTPS, to clients the API server authenticates and authorizes (get on /metrics).")
	flag.StringVar(&f.metricsCertDir, "metrics-cert-dir", "", "Directory of the metrics server's certificate; empty: a self-signed one is generated.")
	flag.StringVar(&f.metricsCertName, "metrics-cert-name", "tls.crt", "Certificate file name in --metrics-cert-dir.")
	flag.StringVar(&f.metricsKeyName, "metrics-key-name", "tls.key", "Key file name in --metrics-cert-dir.")
	flag.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", "Address of /healthz and /readyz.")
	flag.StringVar(&f.pprofAddr, "pprof-bind-address", "", "Address of Go's /debug/pprof endpoints, plain HTTP and unauthenticated: bind it to 127.0.0.1 and port-forward; empty: off.")
	flag.StringVar(&f.webhookHost, "webhook-host", "", "Address the webhook server binds to; empty: all interfaces.")
	flag.IntVar(&f.webhookPort, "webhook-port", 9443, "Port of the webhook server.")
	flag.StringVar(&f.webhookCertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs", "Directory of the webhook's serving certificate; rotated files are picked up without restart.")
	flag.StringVar(&f.webhookCertName, "webhook-cert-name", "tls.crt", "Certificate file name in --webhook-cert-dir.")
	flag.StringVar(&f.webhookKeyName, "webhook-key-name", "tls.key", "Key file name in --webhook-cert-dir.")
	flag.StringVar(&f.webhookClientCAFile, "webhook-client-ca-file", "", "CA bundle (PEM) of the API server's webhook client certificate: the webhook port then refuses, in the TLS handshake, any caller without a certificate it signed (re-read when it changes). The API server presents the certificate through its admission configuration (docs/security.md). Empty: any caller that reaches the port is answered.")
	flag.IntVar(&f.conversionPort, "webhook-conversion-port", 9444, "With --webhook-client-ca-file: a second port that serves only the CRD conversion webhook (/convert), without client certificates, since the API server presents none to conversion webhooks. 0: none.")
	flag.BoolVar(&f.enableHTTP2, "enable-http2", false, "Serve HTTP/2 on the webhook and metrics servers (off: HTTP/2 rapid reset and stream cancellation CVEs).")
	flag.BoolVar(&f.leaderElect, "leader-elect", false, "Elect a leader among replicas; only the leader runs the controllers. Turn on with more than one replica.")
	flag.StringVar(&f.leaderElectionID, "leader-election-id", "subnet-operator.ipam.subnet-operator.io", "Name of the leader election Lease.")
	flag.StringVar(&f.leaderElectionNS, "leader-election-namespace", "", "Namespace of the Lease; empty: the namespace the manager runs in.")
	flag.DurationVar(&f.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "How long a non-leader waits before taking over an unrenewed lease.")
	flag.DurationVar(&f.renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "How long the leader retries renewing before it gives up leadership (and exits).")
	flag.DurationVar(&f.retryPeriod, "leader-elect-retry-period", 2*time.Second, "How often leader election retries.")
	flag.Float64Var(&f.qps, "kube-api-qps", 50, "Requests per second to the API server (client-side limit).")
	flag.IntVar(&f.burst, "kube-api-burst", 100, "Burst of requests to the API server.")
	flag.IntVar(&f.subnetWorkers, "subnet-workers", 10, "Concurrent Subnet reconciles. Decisions are serial (the ledger's decision lock); workers overlap the status writes.")
	flag.IntVar(&f.poolWorkers, "pool-workers", 5, "Concurrent pool status reconciles.")
	flag.Float64Var(&f.recordRate, "allocation-record-rate", 0, "At most this many allocations recorded into Subnets' spec.cidr per second (each costs two writes), and only while no Subnet waits for a grant; 0: a quarter of --kube-api-qps, so records take at most half the budget.")
	flag.DurationVar(&f.reconcileTimeout, "reconcile-timeout", 90*time.Second, "Bound on one reconcile.")
	flag.DurationVar(&f.freshnessTimeout, "admission-freshness-timeout", 2*time.Second, "Bound on how long an admission waits for this replica's view to catch up with the API server.")
	flag.StringVar(&f.poolAlertsLabel, "pool-alerts-label", "ipam.subnet-operator.io/alerts", "SubnetPool label that, set to \"off\", opts a pool out of the per-pool alerts (the metric subnet_operator_pool_info says alerts=\"off\").")
	flag.StringVar(&f.rootPoolNamespaces, "root-pool-namespace-selector", "", "Label selector of the namespaces where root SubnetPools (without parentRef) may be created in the default address space, such as ipam.subnet-operator.io/root-pools=true; empty: every namespace. An AddressSpace named default, if one exists, sets this instead. Admission refuses a root pool elsewhere, and the arbiter does not grant it.")
	flag.DurationVar(&f.auditInterval, "audit-interval", 5*time.Minute, "How often the leader checks that no two Ready claims overlap and each lies inside its pool; 0 turns the audit off.")
	flag.StringVar(&f.clusterAPI, "cluster-api-ipam", "auto", "Answer Cluster API IPAddressClaims from Subnets (docs/cluster-api.md): auto (when the API server serves ipam.cluster.x-k8s.io/v1beta2 at start), on (fail to start if it does not), off.")
	flag.DurationVar(&f.addressReuseAfter, "address-reuse-after", time.Minute, "Cool-down of a released Cluster API address: it is handed out again only this long after its IPAddress was deleted (ARP/ND caches and DNS outlive a machine).")
	flag.IntVar(&f.claimWorkers, "ipaddressclaim-workers", 10, "Concurrent IPAddressClaim reconciles (decisions stay serial: the ledger's decision lock).")
	opts := zap.Options{Development: false}
	flag.StringVar(&f.hubKubeconfigSecret, "hub-kubeconfig-secret", "", "namespace/name of a Secret in this cluster holding the kubeconfig (key \"value\") of a hub cluster: root pools with spec.delegation then take their ranges from the hub's pools (docs/fleet.md). The kubeconfig context's namespace is this member's namespace in the hub (default: --cluster-name). Empty: no fleet.")
	flag.StringVar(&f.clusterName, "cluster-name", "", "This cluster's identity in the hub (a DNS label): in the names and labels of its claims there. Required with --hub-kubeconfig-secret.")
	flag.StringVar(&f.clusterProfileNamespace, "fleet-cluster-profile-namespace", "", "In a fleet's hub: the namespace of SIG Multicluster's ClusterProfiles (multicluster.x-k8s.io/v1alpha1); for each profile the manager makes the member's hub namespace, named after it, with a ServiceAccount bound to config/fleet-hub's Role (docs/fleet.md). Needs config/fleet-hub-profiles' RBAC; fails to start if the API server does not serve ClusterProfiles. Empty: off.")
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	return f, opts
}

// version is stamped by the image build (-X main.version=...).
var version = "dev"

func main() {
	f, zapOpts := parseFlags()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")
	log.Info("Starting subnet-operator", "version", version)
	if err := run(ctrl.SetupSignalHandler(), f); err != nil {
		log.Error(err, "Manager stopped")
		os.Exit(1)
	}
}

func run(ctx context.Context, f flags) error {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(ipamv1.AddToScheme(scheme))
	// v1alpha1 only for the conversion webhook: the operator works in v1alpha2.
	utilruntime.Must(ipamv1alpha1.AddToScheme(scheme))
	capi.AddToScheme(scheme)

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = float32(f.qps), f.burst

	tlsOpts := []func(*tls.Config){func(c *tls.Config) { c.MinVersion = tls.VersionTLS12 }}
	if !f.enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	metricsOpts := metricsserver.Options{
		BindAddress:   f.metricsAddr,
		SecureServing: f.secureMetrics,
		TLSOpts:       tlsOpts,
		CertDir:       f.metricsCertDir,
		CertName:      f.metricsCertName,
		KeyName:       f.metricsKeyName,
	}
	if f.secureMetrics {
		metricsOpts.FilterProvider = metricsAuthFilter(metricsAuthLogInterval)
	}

	webhookServer, clientCAs, err := newWebhookServer(f, tlsOpts)
	if err != nil {
		return err
	}

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsOpts,
		WebhookServer:                 webhookServer,
		HealthProbeBindAddress:        f.probeAddr,
		PprofBindAddress:              f.pprofAddr,
		LeaderElection:                f.leaderElect,
		LeaderElectionID:              f.leaderElectionID,
		LeaderElectionNamespace:       f.leaderElectionNS,
		LeaderElectionReleaseOnCancel: true, // the process exits right after: hand over at once
		// The lease is released only after every reconcile has returned, and
		// a reconcile finishes its write (up to 10 s) even when stopping, so
		// no grant of ours is on its way to the API server once another
		// replica can lead. This bound must exceed that; the Pod's
		// terminationGracePeriodSeconds (30) exceeds this.
		GracefulShutdownTimeout: ptr.To(20 * time.Second),
		LeaseDuration:           &f.leaseDuration,
		RenewDeadline:           &f.renewDeadline,
		RetryPeriod:             &f.retryPeriod,
		// The cache holds only what the manager reads: SubnetPools (the
		// ledger's informer); Subnets are fed to the ledger by a reflector
		// of their own and never cached (ledger.SubnetFeed). A read of any
		// other kind fails instead of quietly starting a cluster-wide
		// informer (no Secrets, no Events; the Lease has its own client).
		Cache: cache.Options{
			ReaderFailOnMissingInformer: true,
			DefaultTransform:            trimCachedObject,
		},
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}

	if clientCAs != nil {
		if err := mgr.Add(clientCAs); err != nil {
			return err
		}
	}

	if err := reconcilers.RegisterIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("registering field indexes: %w", err)
	}
	l := ledger.New()
	if f.rootPoolNamespaces != "" {
		sel, err := labels.Parse(f.rootPoolNamespaces)
		if err != nil {
			return fmt.Errorf("--root-pool-namespace-selector: %w", err)
		}
		l.SetDefaultSpaceRules(sel)
	}
	// Subnets reach the ledger from a reflector of their own, not through
	// the cache: the ledger is their only store (ledger.SubnetFeed).
	subnetClient, err := client.NewWithWatch(mgr.GetConfig(), client.Options{Scheme: scheme, Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return err
	}
	feed, err := l.Feed(ctx, mgr.GetCache(), subnetClient)
	if err != nil {
		return fmt.Errorf("feeding the ledger: %w", err)
	}
	if err := mgr.Add(feed); err != nil {
		return err
	}
	webhookOpts := webhooks.Options{FreshnessTimeout: f.freshnessTimeout}
	if err := webhooks.Setup(mgr, l, mgr.GetAPIReader(), webhookOpts); err != nil {
		return err
	}
	common := reconcilers.Options{Timeout: f.reconcileTimeout}
	subnets := &reconcilers.SubnetReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Ledger: l, Recorder: mgr.GetEventRecorder("subnet-operator"),
		Options: withWorkers(common, f.subnetWorkers),
	}
	if err := subnets.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("subnet controller: %w", err)
	}
	recordRate := f.recordRate
	if recordRate <= 0 {
		recordRate = f.qps / 4
	}
	if err := (&reconcilers.AllocationRecorder{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Ledger: l, Rate: recordRate, Workers: 2, Queued: subnets.Queued,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("allocation recorder: %w", err)
	}
	if err := (&reconcilers.PoolStatusReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Ledger: l, Recorder: mgr.GetEventRecorder("subnet-operator"),
		Options: withWorkers(common, f.poolWorkers), AlertsLabel: f.poolAlertsLabel,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("subnetpool controller: %w", err)
	}

	if err := setupClusterAPI(mgr, l, f, common); err != nil {
		return err
	}
	if err := setupFleetMember(ctx, mgr, l, f, scheme); err != nil {
		return err
	}
	if err := setupFleetHubProfiles(mgr, f); err != nil {
		return err
	}

	// The certificates' expiry, for the dashboard and the expiry alert. The
	// metrics server generates its own certificate in memory when no
	// directory is given: nothing to report then.
	certFiles := map[string]string{"webhook": filepath.Join(f.webhookCertDir, f.webhookCertName)}
	if f.secureMetrics && f.metricsCertDir != "" {
		certFiles["metrics"] = filepath.Join(f.metricsCertDir, f.metricsCertName)
	}
	if err := metrics.Registry.Register(&certificateExpiry{files: certFiles}); err != nil {
		return fmt.Errorf("registering the certificate metrics: %w", err)
	}

	if f.auditInterval > 0 {
		if err := (&reconcilers.Auditor{
			Client: mgr.GetClient(), Ledger: l, Recorder: mgr.GetEventRecorder("subnet-operator-audit"), Interval: f.auditInterval,
		}).SetupWithManager(mgr); err != nil {
			return fmt.Errorf("auditor: %w", err)
		}
	}

	// Live while the process serves; ready once the webhook server listens
	// and the ledger holds the informers' initial lists (so an admission
	// answer is never made from an empty view).
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ledger", func(*http.Request) error {
		if !l.Synced() {
			return errors.New("the ledger has not synced yet")
		}
		return nil
	}); err != nil {
		return err
	}

	ctrl.Log.WithName("setup").Info("Starting manager", "leaderElection", f.leaderElect, "webhookPort", f.webhookPort)
	return mgr.Start(ctx)
}

// setupFleetMember takes delegated root pools' ranges from the hub when
// --hub-kubeconfig-secret names one. The Secret is read once, at start,
// from the API server (the manager caches no Secrets).
func setupFleetMember(ctx context.Context, mgr ctrl.Manager, l *ledger.Ledger, f flags, scheme *runtime.Scheme) error {
	if f.hubKubeconfigSecret == "" {
		return nil
	}
	if errs := validation.IsDNS1123Label(f.clusterName); len(errs) > 0 {
		return fmt.Errorf("--cluster-name %q (required with --hub-kubeconfig-secret): %s", f.clusterName, strings.Join(errs, "; "))
	}
	hub, err := fleet.HubFromSecret(ctx, mgr.GetAPIReader(), f.hubKubeconfigSecret, f.clusterName, scheme)
	if err != nil {
		return err
	}
	ctrl.Log.WithName("setup").Info("Taking delegated pools' ranges from the hub", "cluster", f.clusterName, "hubNamespace", hub.Namespace)
	if err := (&fleet.MemberReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Ledger: l, Hub: hub, ClusterName: f.clusterName}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("fleet member controller: %w", err)
	}
	return nil
}

// setupFleetHubProfiles onboards the hub's members from ClusterProfiles when
// --fleet-cluster-profile-namespace names their namespace.
func setupFleetHubProfiles(mgr ctrl.Manager, f flags) error {
	if f.clusterProfileNamespace == "" {
		return nil
	}
	ctrl.Log.WithName("setup").Info("Onboarding fleet members from ClusterProfiles", "namespace", f.clusterProfileNamespace)
	if err := (&fleet.ProfileReconciler{
		Namespace: f.clusterProfileNamespace, Recorder: mgr.GetEventRecorder("subnet-operator-fleet-hub"),
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("--fleet-cluster-profile-namespace=%s: %w", f.clusterProfileNamespace, err)
	}
	return nil
}

// setupClusterAPI starts the Cluster API IPAM provider if the flag and the
// API server say so: a cluster without Cluster API starts no informer of
// it and pays nothing.
func setupClusterAPI(mgr ctrl.Manager, l *ledger.Ledger, f flags, common reconcilers.Options) error {
	log := ctrl.Log.WithName("setup")
	switch f.clusterAPI {
	case "auto", "on", "off":
	default:
		return fmt.Errorf("--cluster-api-ipam must be auto, on or off, not %q", f.clusterAPI)
	}
	served, clusters, err := capi.Served(mgr.GetConfig())
	if err != nil {
		return err
	}
	if f.clusterAPI == "off" {
		log.Info("Cluster API IPAM provider off (--cluster-api-ipam=off)")
		return capi.SetupOff(mgr, l, served, f.addressReuseAfter) // Subnets it protected while on can still go
	}
	if !served {
		if f.clusterAPI == "on" {
			return errors.New("--cluster-api-ipam=on, but the API server does not serve ipam.cluster.x-k8s.io/v1beta2 IPAddressClaims and IPAddresses: install Cluster API's CRDs first")
		}
		log.Info("Cluster API IPAM provider not started: the API server does not serve ipam.cluster.x-k8s.io/v1beta2 (restart the manager after installing Cluster API)")
		return capi.SetupOff(mgr, l, false, f.addressReuseAfter)
	}
	log.Info("Cluster API IPAM provider on", "clusters", clusters, "addressReuseAfter", f.addressReuseAfter)
	return capi.Setup(mgr, l, capi.Options{ReuseAfter: f.addressReuseAfter, Workers: f.claimWorkers, Timeout: common.Timeout, Clusters: clusters})
}

func withWorkers(o reconcilers.Options, workers int) reconcilers.Options {
	o.Workers = workers
	return o
}

// trimCachedObject drops from cached objects what the manager never reads
// and never writes back: managedFields (most of an object's size) and
// kubectl's last-applied-configuration annotation (a second copy of the
// spec on every object created with kubectl apply). Other annotations stay:
// the recompute annotation is a trigger. Safe because every write the
// manager makes is a patch of a field it owns (status, the pool finalizer),
// computed against the cached object, so absent fields are never sent.
func trimCachedObject(in any) (any, error) {
	obj, err := meta.Accessor(in)
	if err != nil {
		return in, nil // not an object (a tombstone): leave it
	}
	if obj.GetManagedFields() != nil { // nil check: kubernetes/kubernetes#124337
		obj.SetManagedFields(nil)
	}
	// The object is fresh from the decoder and not shared yet: trim in place.
	delete(obj.GetAnnotations(), corev1.LastAppliedConfigAnnotation)
	return in, nil
}
