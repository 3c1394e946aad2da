//go:build tools

// Package helm pins helm, which hack/build-tools.sh builds into bin/ for
// the chart's tests and `make release`.
package helm

import _ "helm.sh/helm/v3/cmd/helm"
