#!/usr/bin/env bash
# Builds the binaries of the local control plane from the Go module proxy,
# pinned by the go.mod files under hack/tools/, and caches them under bin/ by
# version:
#   bin/k8s-<v>/            kube-apiserver, kube-controller-manager, kubectl
#   bin/etcd-<v>/etcd
#   bin/cert-manager-<v>/   cert-manager-local (our launcher) and its CRDs
#   bin/prometheus-operator-<v>/crds   the ServiceMonitor and PrometheusRule
#                           CRDs, to check config/ against a real API server
#   bin/cluster-api-<v>/crds  Cluster API's IPAddressClaim, IPAddress and
#                           Cluster CRDs, for `make dev` and the tests of
#                           our Cluster API IPAM provider
#   bin/prometheus-<v>/     prometheus and promtool, to test the alert rules
#                           and the dashboard against the running manager
#   bin/helm-<v>/helm       to test the chart and package it for releases
# Then it points bin/assets/ (what KUBEBUILDER_ASSETS names) at them.
# A first build takes ~30 minutes on 2 cores; later runs find the cache and
# return at once.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bin=${LOCALBIN:-$root/bin}
export GOWORK=off CGO_ENABLED=0

# modversion DIR MODULE prints the version DIR/go.mod requires of MODULE.
modversion() {
  awk -v m="$2" '$1 == m {print $2; exit} $1 == "require" && $2 == m {print $3; exit}' "$1/go.mod"
}

k8s_version=$(modversion hack/tools/kube k8s.io/kubernetes)
etcd_version=$(modversion hack/tools/etcd go.etcd.io/etcd/server/v3)
cm_version=$(modversion hack/tools/certmanager github.com/cert-manager/cert-manager)
prom_version=$(modversion hack/tools/prometheus github.com/prometheus/prometheus)
helm_version=$(modversion hack/tools/helm helm.sh/helm/v3)
# Newer versions are refused by the module proxy here; only CRDs are used.
promop_version=v0.85.0
# Cluster API: only its CRDs are used (our controller imports the types-only
# module sigs.k8s.io/cluster-api/api through the main go.mod). Pinned here
# because v1.14.3 and newer are refused by the module proxy here.
capi_version=v1.14.2

k8s_dir=$bin/k8s-$k8s_version
if [ ! -f "$k8s_dir/.complete" ]; then
  echo "Building kube-apiserver, kube-controller-manager, kubectl $k8s_version into bin/ (once; ~10 min on 2 cores)"
  # Stamp the real version into the binaries, as Kubernetes' own build does.
  commit=$(cd hack/tools/kube && go mod download -json "k8s.io/kubernetes@$k8s_version" |
    sed -n 's/.*"Hash": "\([0-9a-f]*\)".*/\1/p' | head -n1)
  minor=$(echo "$k8s_version" | cut -d. -f2)
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitCommit=${commit:-unknown} -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  mkdir -p "$k8s_dir"
  (cd hack/tools/kube && go build -trimpath -ldflags "$ldflags" -o "$k8s_dir/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl)
  touch "$k8s_dir/.complete"
fi

etcd_dir=$bin/etcd-$etcd_version
if [ ! -f "$etcd_dir/.complete" ]; then
  echo "Building etcd $etcd_version into bin/ (once; ~1 min)"
  mkdir -p "$etcd_dir"
  (cd hack/tools/etcd && go build -trimpath -ldflags "-s -w" -o "$etcd_dir/etcd" go.etcd.io/etcd/server/v3)
  touch "$etcd_dir/.complete"
fi

cm_dir=$bin/cert-manager-$cm_version
if [ ! -f "$cm_dir/.complete" ]; then
  echo "Building cert-manager $cm_version (controller + cainjector launcher) into bin/ (once; ~3 min)"
  mkdir -p "$cm_dir/crds"
  (cd hack/tools/certmanager && go build -trimpath -ldflags "-s -w" -o "$cm_dir/cert-manager-local" .)
  # The module cache is read-only; copy the CRDs so they can be replaced.
  src=$(cd hack/tools/certmanager && go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)
  cp "$src"/deploy/crds/*.yaml "$cm_dir/crds/"
  chmod u+w "$cm_dir"/crds/*.yaml
  touch "$cm_dir/.complete"
fi

promop_dir=$bin/prometheus-operator-$promop_version
if [ ! -f "$promop_dir/.complete" ]; then
  echo "Fetching the Prometheus Operator $promop_version CRDs into bin/ (once)"
  mkdir -p "$promop_dir/crds"
  src=$(cd hack/tools/kube && go mod download -json "github.com/prometheus-operator/prometheus-operator@$promop_version" |
    sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  for crd in servicemonitors prometheusrules; do
    cp "$src/example/prometheus-operator-crd/monitoring.coreos.com_$crd.yaml" "$promop_dir/crds/"
  done
  chmod u+w "$promop_dir"/crds/*.yaml
  touch "$promop_dir/.complete"
fi

capi_dir=$bin/cluster-api-$capi_version
if [ ! -f "$capi_dir/.complete" ]; then
  echo "Fetching the Cluster API $capi_version CRDs into bin/ (once)"
  mkdir -p "$capi_dir/crds"
  # The root module, downloaded only (in the tools module, not the main
  # go.mod); since v1.14 its CRDs are under core/.
  src=$(cd hack/tools/kube && go mod download -json "sigs.k8s.io/cluster-api@$capi_version" |
    sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  for crd in ipam.cluster.x-k8s.io_ipaddressclaims ipam.cluster.x-k8s.io_ipaddresses cluster.x-k8s.io_clusters; do
    cp "$src/core/config/crd/bases/$crd.yaml" "$capi_dir/crds/"
  done
  chmod u+w "$capi_dir"/crds/*.yaml
  touch "$capi_dir/.complete"
fi

prom_dir=$bin/prometheus-$prom_version
if [ ! -f "$prom_dir/.complete" ]; then
  echo "Building prometheus and promtool $prom_version into bin/ (once; ~12 min on 2 cores)"
  # Module v0.3XY.Z is Prometheus 3.XY.Z; stamp it as Prometheus' build does.
  minor=$(echo "$prom_version" | cut -d. -f2)
  patch=$(echo "$prom_version" | cut -d. -f3)
  ldflags="-s -w -X github.com/prometheus/common/version.Version=${minor:0:1}.$((10#${minor:1})).$patch"
  mkdir -p "$prom_dir"
  (cd hack/tools/prometheus && go build -trimpath -ldflags "$ldflags" -o "$prom_dir/" \
    github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool)
  touch "$prom_dir/.complete"
fi

helm_dir=$bin/helm-$helm_version
if [ ! -f "$helm_dir/.complete" ]; then
  echo "Building helm $helm_version into bin/ (once; ~1 min)"
  # Stamped as helm's own Makefile does: its version, and the Kubernetes
  # version lint and template assume (that of its client-go).
  commit=$(cd hack/tools/helm && go mod download -json "helm.sh/helm/v3@$helm_version" |
    sed -n 's/.*"Hash": "\([0-9a-f]*\)".*/\1/p' | head -n1)
  kminor=$(cd hack/tools/helm && go list -m -f '{{.Version}}' k8s.io/client-go | cut -d. -f2)
  ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version"
  ldflags+=" -X helm.sh/helm/v3/internal/version.gitCommit=${commit:-unknown} -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$kminor"
  done
  mkdir -p "$helm_dir"
  (cd hack/tools/helm && go build -trimpath -ldflags "$ldflags" -o "$helm_dir/helm" helm.sh/helm/v3/cmd/helm)
  touch "$helm_dir/.complete"
fi

assets=$bin/assets
mkdir -p "$assets"
ln -sfn "$k8s_dir/kube-apiserver" "$assets/kube-apiserver"
ln -sfn "$k8s_dir/kube-controller-manager" "$assets/kube-controller-manager"
ln -sfn "$k8s_dir/kubectl" "$assets/kubectl"
ln -sfn "$etcd_dir/etcd" "$assets/etcd"
ln -sfn "$cm_dir/cert-manager-local" "$assets/cert-manager-local"
ln -sfn "$cm_dir/crds" "$assets/cert-manager-crds"
ln -sfn "$promop_dir/crds" "$assets/prometheus-operator-crds"
ln -sfn "$capi_dir/crds" "$assets/cluster-api-crds"
ln -sfn "$prom_dir/prometheus" "$assets/prometheus"
ln -sfn "$prom_dir/promtool" "$assets/promtool"
ln -sfn "$helm_dir/helm" "$assets/helm"
