package webhooks

import (
	"context"
	"errors"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// namespaceReads reads a namespace's labels from the API server, for the
// one namespace a request names (its own) when the ledger has not seen it
// yet: the defaulter's address space of a new root pool, and the re-read
// before refusing a root pool for its namespace's labels.
//
// A request's namespace is whatever the request says, and a forged
// AdmissionReview (anything that reaches the webhook port) may name a new
// one each time: so these reads share one token bucket per replica. A
// legitimate burst (a GitOps bootstrap that creates namespaces and their
// pools at once) waits a little for a token; a flood does not turn into a
// flood of reads. The informer delivers a new namespace within
// milliseconds, after which no read is needed.
type namespaceReads struct {
	reader  client.Reader
	limiter *rate.Limiter
	// maxWait bounds how long a request waits for a token.
	maxWait time.Duration
}

// Reads of namespaces the ledger does not know, per replica: a sustained
// rate and a burst, and how long one request may wait for its turn.
const (
	namespaceReadsPerSecond = 10
	namespaceReadsBurst     = 20
	namespaceReadsMaxWait   = time.Second
)

func newNamespaceReads(reader client.Reader) *namespaceReads {
	return &namespaceReads{reader: reader, limiter: rate.NewLimiter(namespaceReadsPerSecond, namespaceReadsBurst), maxWait: namespaceReadsMaxWait}
}

// errNamespaceReadsBusy: no read was made, the replica's budget for reads
// of unknown namespaces is spent.
var errNamespaceReadsBusy = errors.New("too many reads of namespaces this replica has not seen yet; retry shortly")

// labels returns the labels of namespace as the API server has them, and
// whether it exists. It reads only within the replica's budget, else
// returns errNamespaceReadsBusy.
func (n *namespaceReads) labels(ctx context.Context, namespace string) (map[string]string, bool, error) {
	if n == nil || n.reader == nil {
		return nil, false, errNamespaceReadsBusy
	}
	if !n.limiter.Allow() {
		if n.maxWait <= 0 {
			return nil, false, errNamespaceReadsBusy
		}
		waitCtx, cancel := context.WithTimeout(ctx, n.maxWait)
		defer cancel()
		if n.limiter.Wait(waitCtx) != nil {
			return nil, false, errNamespaceReadsBusy
		}
	}
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := n.reader.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		return nil, false, client.IgnoreNotFound(err)
	}
	return ns.Labels, true, nil
}
