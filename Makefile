# subnet-operator — see README.md for the two commands a newcomer runs.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

# Tools are built from the Go module proxy, pinned here (controller-gen is
# pinned by the `tool` directive in go.mod), and cached under bin/ by
# version: the first build takes a while and says so, later runs are instant.
LOCALBIN ?= $(CURDIR)/bin
GOLANGCI_LINT_VERSION ?= v2.15.0
BENCHSTAT_VERSION ?= v0.0.0-20260908200009-22c9c6c9d4da

GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
BENCHSTAT ?= $(LOCALBIN)/benchstat-$(BENCHSTAT_VERSION)
# The control plane's binaries (etcd, kube-apiserver, kube-controller-manager,
# kubectl, cert-manager), built by hack/build-tools.sh from the versions that
# hack/tools/*/go.mod pin.
ASSETS ?= $(LOCALBIN)/assets
CONTROLLER_GEN ?= go tool controller-gen

# Benchmarks: -count 5 so that docs/benchmarks.md can report medians.
BENCH_COUNT ?= 5
BENCH_TIME ?= 1s
# Load runs (test/load): Subnets per run (comma-separated) and clients.
LOAD_N ?= 1000
LOAD_CLIENTS ?= 8
# Fleet load runs (test/fleetload): members asking the hub at once.
FLEET_LOAD_N ?= 50

##@ General

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  %-14s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: ## Generate DeepCopy methods for the API types.
	$(CONTROLLER_GEN) object paths="./api/v1alpha1"
	$(CONTROLLER_GEN) object paths="./api/v1alpha2"

.PHONY: manifests
manifests: ## Generate the CRDs, the manager's RBAC role and the webhook configurations, then the chart's files.
	$(CONTROLLER_GEN) crd paths="./api/..." output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=manager-role webhook paths="./..." output:rbac:artifacts:config=config/rbac output:webhook:artifacts:config=config/webhook
	$(MAKE) chart

.PHONY: chart
chart: tools ## Render config/default and config/monitoring into the Helm chart's files/ (run after editing config/).
	go run ./hack/sync-chart -kubectl $(ASSETS)/kubectl -chart charts/subnet-operator

.PHONY: fmt
fmt: ## Run gofmt on the tree.
	gofmt -w $$(git ls-files '*.go')

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint (config: .golangci.yml).
	$(GOLANGCI_LINT) run ./...

##@ Build

.PHONY: build
build: ## Build the manager into bin/manager.
	go build -o $(LOCALBIN)/manager ./cmd/manager

# kubectl finds a plugin by its name (kubectl-ipam) on the PATH.
PLUGIN_DIR ?= $(shell go env GOPATH)/bin
.PHONY: install-plugin
install-plugin: ## Install the kubectl plugin (kubectl ipam) into PLUGIN_DIR (default: GOPATH/bin, put it on your PATH).
	go build -o $(PLUGIN_DIR)/kubectl-ipam ./cmd/kubectl-ipam
	@echo "installed $(PLUGIN_DIR)/kubectl-ipam: run kubectl ipam --help"

# The manager's container image (see the Dockerfile), built with podman.
IMAGE ?= localhost/subnet-operator:dev
VERSION ?= dev

.PHONY: image
image: ## Build the manager's container image IMAGE with podman (installs podman and runc if missing); prints the image ID.
	@IMAGE=$(IMAGE) VERSION=$(VERSION) LOCALBIN=$(LOCALBIN) hack/build-image.sh

.PHONY: release
release: tools ## Build a release into dist/: install.yaml (image by digest), the Helm chart, the image as an OCI archive, checksums. VERSION=v1.2.3
	VERSION=$(VERSION) ASSETS=$(ASSETS) hack/release.sh

.PHONY: dev
dev: tools build ## Run a local control plane with cert-manager, the operator and the samples (Ctrl-C stops it).
	go build -o $(LOCALBIN)/dev ./hack/dev
	KUBEBUILDER_ASSETS=$(ASSETS) $(LOCALBIN)/dev --dir .dev --manager $(LOCALBIN)/manager

.PHONY: dev-fleet
dev-fleet: tools build ## Run a hub and two member control planes, each with the operator, the members' pools delegated from the hub's plan (docs/fleet.md; Ctrl-C stops it).
	go build -o $(LOCALBIN)/dev-fleet ./hack/devfleet
	KUBEBUILDER_ASSETS=$(ASSETS) $(LOCALBIN)/dev-fleet --dir .dev/fleet --manager $(LOCALBIN)/manager

.PHONY: dashboard-snapshot
dashboard-snapshot: tools build ## Render every Grafana panel, evaluated by Prometheus over a local workload, to .dev/dashboard-snapshot.html (~3 min).
	KUBEBUILDER_ASSETS=$(ASSETS) go run ./hack/dashboard-snapshot --out .dev/dashboard-snapshot.html --manager $(LOCALBIN)/manager

##@ Deployment

KUBECTL ?= kubectl

.PHONY: deploy
deploy: ## Install the operator into the current kubectl context (needs cert-manager; see docs/operations.md).
	$(KUBECTL) apply -k config/default

.PHONY: undeploy
undeploy: ## Remove the operator and its CRDs from the current kubectl context.
	$(KUBECTL) delete --ignore-not-found -k config/default

##@ Test

.PHONY: test
test: tools image ## Run every test: unit, integration and end-to-end (the manager from the image), with the race detector.
	KUBEBUILDER_ASSETS=$(ASSETS) go test -race -count=1 -timeout 40m -tags integration,e2e ./...

# The randomized lifecycle checker at length (make test runs a short one):
# two replicas, hand-overs and restarts, 20,000 operations by default.
SOAK_OPS ?= 20000
SOAK_SEED ?=

.PHONY: soak
soak: tools ## Run the randomized lifecycle checker for SOAK_OPS operations (~50 min at 20000 on 2 cores); SOAK_SEED=N replays one.
	KUBEBUILDER_ASSETS=$(ASSETS) go test -race -count=1 -timeout 120m -tags integration ./test/lifecycle -run TestLifecycle -v \
		-lifecycle.ops=$(SOAK_OPS) $(if $(SOAK_SEED),-lifecycle.seed=$(SOAK_SEED)) | tee $(LOCALBIN)/soak.log

.PHONY: bench
bench: $(BENCHSTAT) ## Run the Go benchmarks (engine, statuscalc, ledger, webhook handler), then the load run (make load); see docs/benchmarks.md.
	go test -run '^$$' -bench . -benchmem -count $(BENCH_COUNT) -benchtime $(BENCH_TIME) ./ipspace/... ./statuscalc/... ./ledger/... ./webhooks/... | tee $(LOCALBIN)/bench.txt
	$(BENCHSTAT) $(LOCALBIN)/bench.txt
	$(MAKE) load

.PHONY: load
load: tools build ## Fill a pool through a real API server, webhooks on and off: LOAD_N=1000,10000 LOAD_CLIENTS=8; profiles in bin/load-profiles.
	KUBEBUILDER_ASSETS=$(ASSETS) go run ./test/load -n $(LOAD_N) -clients $(LOAD_CLIENTS) -manager $(LOCALBIN)/manager -profiles $(LOCALBIN)/load-profiles

.PHONY: fleet-load
fleet-load: tools build ## Time delegated pools from create to serving, 1 and FLEET_LOAD_N members asking a hub at once (docs/fleet.md).
	KUBEBUILDER_ASSETS=$(ASSETS) go run ./test/fleetload -n 1,$(FLEET_LOAD_N) -manager $(LOCALBIN)/manager

##@ Tools

.PHONY: tools
tools: ## Build the control plane's binaries and Prometheus, and fetch the CRDs tests install (cert-manager, Prometheus Operator, Cluster API), into bin/ (once; ~30 min on 2 cores).
	LOCALBIN=$(LOCALBIN) hack/build-tools.sh

$(BENCHSTAT):
	$(call go-install,golang.org/x/perf/cmd/benchstat,$(BENCHSTAT_VERSION),$@)

$(GOLANGCI_LINT):
	$(call go-install,github.com/golangci/golangci-lint/v2/cmd/golangci-lint,$(GOLANGCI_LINT_VERSION),$@)

# go-install builds package $(1) at version $(2) into the file $(3).
define go-install
	@echo "Building $(notdir $(1)) $(2) into bin/ (once)"
	@rm -rf $(3).d && mkdir -p $(3).d
	GOBIN=$(3).d go install $(1)@$(2)
	mv $(3).d/$(notdir $(1)) $(3) && rmdir $(3).d
endef
