package webhooks

import (
	"cmp"
	"fmt"
	"slices"
	"sync"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ledger"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

// PoolHints suggests the pool a reference that names no pool most likely
// meant: the same name in another namespace (`poolRef: {name: corp}` from
// team-a, where netops/corp exists), or a name a typo away (`paymnets`).
// The admission warning of such a create and the Subnet's PoolNotFound
// condition share it (SuggestPool), so both name the same pool.
//
// The ledger answers "does this pool exist" but cannot list pools by name
// or namespace without a walk of every claim; PoolHints keeps the names
// from the ledger's pool events. They are candidates only: each is checked
// against the ledger (it exists, the claim's namespace may use it) when a
// suggestion is made, so a name kept a moment too long is never suggested.
type PoolHints struct {
	ledger *ledger.Ledger

	mu sync.RWMutex
	// byName: the namespaces that have a pool of each name; byNamespace:
	// the pool names of each namespace.
	byName      map[string]map[string]struct{}
	byNamespace map[string]map[string]struct{}
}

// hintsByLedger gives every user of one ledger (the webhook, the Subnet
// controller) the same PoolHints, so the pools are indexed once.
var hintsByLedger sync.Map // *ledger.Ledger → *PoolHints

// PoolHintsFor returns the ledger's PoolHints, made on first use: it
// subscribes to the ledger's events, then reads the pools it knows once.
func PoolHintsFor(l *ledger.Ledger) *PoolHints {
	if h, ok := hintsByLedger.Load(l); ok {
		return h.(*PoolHints)
	}
	h := &PoolHints{ledger: l, byName: map[string]map[string]struct{}{}, byNamespace: map[string]map[string]struct{}{}}
	if actual, loaded := hintsByLedger.LoadOrStore(l, h); loaded {
		return actual.(*PoolHints)
	}
	// Subscribed before the read: a pool created meanwhile is in one or
	// the other (or both, which changes nothing).
	l.Subscribe(func(e ledger.Event) {
		if e.Kind == statuscalc.KindSubnetPool && e.Type != ledger.Deleted {
			h.add(e.Namespace, e.Name)
		}
		// Deleted pools stay candidates until checked: SuggestPool checks
		// every one against the ledger.
	})
	_, pools := l.Objects()
	for _, p := range pools {
		h.add(p.Namespace, p.Name)
	}
	return h
}

func (h *PoolHints) add(namespace, name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byName[name] == nil {
		h.byName[name] = map[string]struct{}{}
	}
	h.byName[name][namespace] = struct{}{}
	if h.byNamespace[namespace] == nil {
		h.byNamespace[namespace] = map[string]struct{}{}
	}
	h.byNamespace[namespace][name] = struct{}{}
}

// maxTypos is how far (in edits: a letter added, dropped, changed, or two
// swapped) a pool's name may be from the reference's to be suggested.
const maxTypos = 2

// SuggestPool returns the pool a Subnet of namespace whose reference ref
// names no pool most likely meant, as "namespace/name", or "" if none is
// close. It suggests only pools the namespace may see and use: pools of
// its own namespace, and pools whose allowedNamespaces admit it. A pool of
// another namespace that does not admit it is never named, not even as
// "exists elsewhere": that would tell a tenant of another's plan.
//
// Candidates: the same name in any namespace, and names a few typos away
// in the Subnet's namespace and in the one the reference names. Pools of
// other namespaces are not searched for typos: that would be a walk of
// every pool per missing reference. Closest first; then the Subnet's own
// namespace, the referenced one, and name order.
func (h *PoolHints) SuggestPool(ref ipamv1.PoolReference, namespace string) string {
	type candidate struct {
		pool     ipamv1.PoolReference
		distance int
		rank     int // 0: the Subnet's namespace, 1: the referenced one, 2: another
	}
	var found []candidate
	consider := func(pool ipamv1.PoolReference, distance int) {
		if pool == ref || distance > maxTypos || distance*2 >= len(ref.Name) && distance > 0 {
			return
		}
		rank := 2
		switch pool.Namespace {
		case namespace:
			rank = 0
		case ref.Namespace:
			rank = 1
		}
		found = append(found, candidate{pool, distance, rank})
	}
	h.mu.RLock()
	for ns := range h.byName[ref.Name] {
		consider(ipamv1.PoolReference{Namespace: ns, Name: ref.Name}, 0)
	}
	for _, ns := range []string{namespace, ref.Namespace} {
		for name := range h.byNamespace[ns] {
			if name != ref.Name {
				consider(ipamv1.PoolReference{Namespace: ns, Name: name}, typos(ref.Name, name))
			}
		}
		if ref.Namespace == namespace {
			break
		}
	}
	h.mu.RUnlock()
	slices.SortFunc(found, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(a.distance, b.distance), cmp.Compare(a.rank, b.rank),
			cmp.Compare(a.pool.Namespace, b.pool.Namespace), cmp.Compare(a.pool.Name, b.pool.Name))
	})
	for _, c := range found {
		if h.usable(c.pool, namespace) {
			return c.pool.String()
		}
	}
	return ""
}

// usable: the pool exists and a Subnet of namespace may claim from it.
func (h *PoolHints) usable(pool ipamv1.PoolReference, namespace string) bool {
	if pool.Namespace == namespace {
		_, ok := h.ledger.Pool(pool.Namespace, pool.Name)
		return ok
	}
	allowed, _, found := h.ledger.Consent(pool, namespace)
	return found && allowed
}

// typos is the optimal string alignment distance between a and b: the
// edits (insert, delete, substitute, swap two neighbours) that turn one
// into the other. Pool names are DNS labels: bytes are letters.
func typos(a, b string) int {
	if d := len(a) - len(b); d > maxTypos || -d > maxTypos {
		return maxTypos + 1 // cannot be close: spare the table
	}
	// rows[i][j]: the distance between a[:i] and b[:j].
	rows := make([][]int, len(a)+1)
	for i := range rows {
		rows[i] = make([]int, len(b)+1)
		rows[i][0] = i
	}
	for j := range rows[0] {
		rows[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			rows[i][j] = min(rows[i-1][j]+1, rows[i][j-1]+1, rows[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				rows[i][j] = min(rows[i][j], rows[i-2][j-2]+1)
			}
		}
	}
	return rows[len(a)][len(b)]
}

// PoolNotFoundMessage is the admission warning of a Subnet created before
// its pool: it waits, and if a pool is likely meant, DidYouMean.
func PoolNotFoundMessage(h *PoolHints, ref ipamv1.PoolReference, namespace string) string {
	return fmt.Sprintf("SubnetPool %s does not exist yet; the Subnet waits (Ready=False, reason PoolNotFound) until it is created", ref) +
		h.DidYouMean(ref, namespace)
}

// DidYouMean is what the create warning and the PoolNotFound condition
// add when a pool is likely meant: which one, and how to use it (the
// reference is immutable); "" when none is.
func (h *PoolHints) DidYouMean(ref ipamv1.PoolReference, namespace string) string {
	meant := h.SuggestPool(ref, namespace)
	if meant == "" {
		return ""
	}
	return fmt.Sprintf(". Did you mean %s? spec.poolRef cannot change: delete the Subnet and create it again with poolRef %s", meant, meant)
}
