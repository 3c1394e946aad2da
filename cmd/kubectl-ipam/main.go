// Command kubectl-ipam is the kubectl plugin of subnet-operator: on the PATH,
// it runs as `kubectl ipam`. See docs/kubectl-plugin.md.
package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/subnet-operator/subnet-operator/ipamcli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := ipamcli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
