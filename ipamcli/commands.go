package ipamcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	capiipam "sigs.k8s.io/cluster-api/api/ipam/v1beta2"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// errNoRange: kubectl ipam next printed why no range would be allocated;
// the exit status says so to scripts.
var errNoRange = errors.New("no range would be allocated")

// Main runs kubectl ipam with args and returns the exit status.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := NewCommand(stdout, stderr)
	cmd.SetArgs(args)
	if err := cmd.ExecuteContext(ctx); err != nil {
		if !errors.Is(err, errNoRange) {
			_, _ = fmt.Fprintln(stderr, "error:", err) // nowhere left to report a failed write
		}
		return 1
	}
	return 0
}

// NewCommand returns the kubectl ipam command and its subcommands.
func NewCommand(stdout, stderr io.Writer) *cobra.Command {
	// The kubeconfig flags kubectl passes on to plugins' users: --kubeconfig,
	// --context, --namespace and the rest of clientcmd's overrides.
	loading := clientcmd.NewDefaultClientConfigLoadingRules()
	overrides := &clientcmd.ConfigOverrides{}
	kubeconfig := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loading, overrides)
	var output string
	var allNamespaces bool
	root := &cobra.Command{
		Use:         "kubectl-ipam",
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl ipam"},
		Short:       "See the address space that subnet-operator manages",
		Long: `kubectl ipam shows SubnetPools and Subnets of subnet-operator: the pool tree
with utilization, a pool's free blocks, the range the next allocation would
get (without allocating), which pool or Subnet holds an address, and the
address spaces with their root pools.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&loading.ExplicitPath, "kubeconfig", "", "Path to the kubeconfig file")
	clientcmd.BindOverrideFlags(overrides, root.PersistentFlags(), clientcmd.RecommendedConfigOverrideFlags(""))
	root.PersistentFlags().StringVarP(&output, "output", "o", "", "Output format: json or yaml (default: a table)")

	colour := false
	if f, ok := stdout.(*os.File); ok && term.IsTerminal(int(f.Fd())) && os.Getenv("NO_COLOR") == "" {
		colour = true
	}
	out := func() printer { return printer{out: stdout, format: output, color: colour && output == ""} }

	// setup returns a client and the namespace the command is about: the
	// --namespace flag, else the kubeconfig's, else "default"; "" with
	// allNamespaces.
	setup := func() (client.Client, string, error) {
		cfg, err := kubeconfig.ClientConfig()
		if err != nil {
			return nil, "", err
		}
		scheme := runtime.NewScheme()
		if err := clientgoscheme.AddToScheme(scheme); err != nil {
			return nil, "", err
		}
		if err := ipamv1.AddToScheme(scheme); err != nil {
			return nil, "", err
		}
		// who-has names the Cluster API IPAddresses handed out from Subnets.
		if err := capiipam.AddToScheme(scheme); err != nil {
			return nil, "", err
		}
		c, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			return nil, "", err
		}
		ns, _, err := kubeconfig.Namespace()
		if err != nil {
			return nil, "", err
		}
		if allNamespaces {
			ns = ""
		}
		return c, ns, nil
	}

	tree := &cobra.Command{
		Use:   "tree",
		Short: "Show pools and their child pools, with utilization and free space",
		Long: `Show SubnetPools as trees: each root pool with its child pools, with the
figures the controller keeps in their status. Every namespace unless
--namespace is given.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("namespace") {
				allNamespaces = true
			}
			c, ns, err := setup()
			if err != nil {
				return err
			}
			roots, err := Tree(cmd.Context(), c, ns)
			if err != nil {
				return err
			}
			return out().tree(roots)
		},
	}

	var freeLength int
	free := &cobra.Command{
		Use:   "free POOL",
		Short: "List a pool's free blocks, largest first, or the blocks that hold a given length",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := setup()
			if err != nil {
				return err
			}
			r, err := Free(cmd.Context(), c, ns, args[0], lengthFlag(cmd, freeLength))
			if err != nil {
				return err
			}
			return out().free(r)
		},
	}
	free.Flags().IntVar(&freeLength, "length", -1, "Only the blocks that can hold a range of this prefix length, and how many each holds")

	var nextLength int
	next := &cobra.Command{
		Use:   "next POOL",
		Short: "Show the range the next allocation from a pool would get, without allocating",
		Long: `Show the range a Subnet of the given prefix length (default: the pool's
defaultPrefixLength) would be allocated if it were created now, decided by
the operator's own arbiter on what the API shows. Nothing is allocated;
the answer holds unless something else is allocated first. Exits 1 when no
range would be allocated, and says why.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := setup()
			if err != nil {
				return err
			}
			r, err := Next(cmd.Context(), c, ns, args[0], lengthFlag(cmd, nextLength))
			if err != nil {
				return err
			}
			if err := out().next(r); err != nil {
				return err
			}
			if r.CIDR == "" {
				return errNoRange
			}
			return nil
		},
	}
	next.Flags().IntVar(&nextLength, "length", -1, "Prefix length of the range (default: the pool's defaultPrefixLength)")

	whoHas := &cobra.Command{
		Use:   "who-has IP|CIDR",
		Short: "Show which pools and Subnets hold (or ask for) an address or range",
		Long: `Show the SubnetPools and Subnets whose range contains or lies inside the
given address or CIDR, outermost first: the pools that serve it down to the
Subnet that holds it, and the Cluster API IPAddress on the address with its
claim. Every namespace unless --namespace is given.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			query, err := ParseQuery(args[0])
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("namespace") {
				allNamespaces = true
			}
			c, ns, err := setup()
			if err != nil {
				return err
			}
			holders, err := WhoHas(cmd.Context(), c, ns, query)
			if err != nil {
				return err
			}
			return out().whoHas(args[0], holders)
		},
	}
	var pageSize int64
	migrate := &cobra.Command{
		Use:   "migrate-storage",
		Short: "Rewrite every SubnetPool and Subnet in the CRDs' storage version (after an upgrade)",
		Long: `Rewrite every SubnetPool and Subnet, in every namespace, in the version the
CRDs store (a no-op update each: nothing else changes), then record in both
CRDs' status.storedVersions that nothing is stored in an older version.
Run it after an upgrade that adds an API version (docs/operations.md): the
API server then needs the operator's conversion webhook no more to read
what is stored, and the old version can later be removed from the CRDs.
Needs update on SubnetPools and Subnets and patch on
customresourcedefinitions/status. Safe to run again, and while the operator
runs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, _, err := setup()
			if err != nil {
				return err
			}
			r, err := MigrateStorage(cmd.Context(), c, pageSize)
			if err != nil {
				return err
			}
			return out().migration(r)
		},
	}
	migrate.Flags().Int64Var(&pageSize, "chunk-size", 500, "Objects read per list request")
	for _, c := range []*cobra.Command{tree, whoHas} {
		c.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "Every namespace (the default for this command)")
	}
	spaces := &cobra.Command{
		Use:   "spaces",
		Short: "Show the address spaces, who may hold root pools in each, and their root pools",
		Long: `Show every address space (the default one, and each AddressSpace) with the
namespaces that may hold root pools in it and its root pools, by range: which
holds its range, which waits and why, and which overlap another root pool of
their space (granted before spaces were kept apart). Needs a cluster-wide
list of SubnetPools and AddressSpaces.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, _, err := setup()
			if err != nil {
				return err
			}
			rows, err := Spaces(cmd.Context(), c)
			if err != nil {
				return err
			}
			return out().spaces(rows)
		},
	}
	root.AddCommand(tree, free, next, whoHas, spaces, migrate)
	return root
}

// lengthFlag is the --length flag's value, or -1 (the query's "any" or
// "the pool's default") when it was not given.
func lengthFlag(cmd *cobra.Command, value int) int {
	if !cmd.Flags().Changed("length") {
		return -1
	}
	return value
}
