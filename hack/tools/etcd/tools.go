//go:build tools

// Package etcd pins the etcd server that backs the local kube-apiserver in
// tests and `make dev`. It is its own module so that etcd's dependencies
// never meet the operator's.
package etcd

import (
	_ "go.etcd.io/etcd/server/v3"
)
