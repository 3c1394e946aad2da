//go:build tools

// Package kube pins the Kubernetes binaries the tests and `make dev` run
// (kube-apiserver, kube-controller-manager, kubectl). It is its own module so
// that k8s.io/kubernetes never enters the operator's dependency graph.
package kube

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
