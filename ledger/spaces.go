package ledger

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
	"github.com/subnet-operator/subnet-operator/ipspace"
	"github.com/subnet-operator/subnet-operator/statuscalc"
)

// Address spaces. A root pool is a claim on its address space, exactly as
// a child pool is a claim on its parent: each space has one slot per
// family whose pool is synthetic (it serves the whole family and exists
// while the space does), and a root pool's claim on it asks for the
// pool's spec.cidr. So the arbiter keeps root pools of a space apart with
// the rules it keeps any claims apart with: the sweep in winner order, a
// grant never revoked, a grant assumed until the API shows it (the root
// pool's status.cidr), collisions reported, and consent (the space's
// rootPoolNamespaces) checked for a claim that holds nothing.
//
// The slots live under a namespace no object can have ("@space"), so no
// reference from a Subnet or a pool can name them.

// KindAddressSpace is the Kind of the events an AddressSpace publishes.
const KindAddressSpace = "AddressSpace"

const spaceNamespace = "@space"

// spaceID is the slot of a space's root pools of one family.
func spaceID(space string, v6 bool) poolID {
	family := "v4"
	if v6 {
		family = "v6"
	}
	return poolIDOf(spaceNamespace, space+"."+family)
}

// isSpace reports whether the id is an address space's slot.
func (id poolID) isSpace() bool { return id.namespace() == spaceNamespace }

// spaceName is the name of the space whose slot id is.
func (id poolID) spaceName() string {
	name := id.name()
	return name[:strings.LastIndexByte(name, '.')]
}

// spaceOf returns the space a root pool belongs to.
func spaceOf(p *ipamv1.SubnetPool) string {
	if p.Spec.AddressSpace != "" {
		return p.Spec.AddressSpace
	}
	return ipamv1.DefaultAddressSpace
}

// universe is the range a space's slot of a family serves: all of it.
func universe(id poolID) netip.Prefix {
	if strings.HasSuffix(string(id), ".v6") {
		return netip.PrefixFrom(netip.IPv6Unspecified(), 0)
	}
	return netip.PrefixFrom(netip.IPv4Unspecified(), 0)
}

// spaceRules says which namespaces may hold root pools in a space, as the
// consent of its slots' synthetic pool.
func spaceRules(selector *metav1.LabelSelector) consent {
	if selector == nil {
		return consent{from: ipamv1.FromSelector, selector: labels.Nothing(), key: "nothing"}
	}
	return consentOf(&ipamv1.AllowedNamespaces{From: ipamv1.FromSelector, Selector: selector})
}

// everyNamespace is the default space's rules when neither the flag nor an
// AddressSpace named default restricts it.
var everyNamespace = consent{from: ipamv1.FromAll, key: string(ipamv1.FromAll)}

// spaceConsent returns a space's rules, and whether the space exists. The
// default space always exists: an AddressSpace named default sets its
// rules, else --root-pool-namespace-selector (SetDefaultSpaceRules).
func (b *book) spaceConsent(space string) (consent, bool) {
	if c, ok := b.spaces[space]; ok {
		return c, true
	}
	if space == ipamv1.DefaultAddressSpace {
		return b.defaultSpace, true
	}
	return consent{}, false
}

// attachSpace gives a space slot its synthetic pool while the space
// exists, with the space's current rules, and takes it away otherwise. It
// returns the claims to wake when that changed anything.
func (b *book) attachSpace(s *slot) []claimID {
	rules, exists := b.spaceConsent(s.id.spaceName())
	switch {
	case !exists && s.pool == nil:
		return nil
	case !exists:
		s.pool = nil
	case s.pool == nil:
		s.pool = &pool{id: s.id, spec: universe(s.id), defaultLen: -1, minLen: -1, maxLen: -1, consent: rules, synthetic: true}
		s.opened = true
	case s.pool.consent.key == rules.key:
		return nil
	default:
		s.pool = &pool{id: s.id, spec: universe(s.id), defaultLen: -1, minLen: -1, maxLen: -1, consent: rules, synthetic: true}
	}
	b.rebuildSpace(s)
	s.sweep = true
	return b.waiters(s)
}

// spaceChanged re-attaches both slots of a space after its rules changed.
func (b *book) spaceChanged(space string) []claimID {
	var wake []claimID
	for _, v6 := range []bool{false, true} {
		id := spaceID(space, v6)
		if s := b.slots[id]; s != nil {
			wake = append(wake, b.attachSpace(s)...)
			b.dropIfEmpty(s)
		}
	}
	return wake
}

// SetDefaultSpaceRules sets which namespaces may hold root pools in the
// default space while no AddressSpace named default exists (the flag
// --root-pool-namespace-selector); nil: every namespace. Call it before
// the informers start.
func (l *Ledger) SetDefaultSpaceRules(selector labels.Selector) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if selector == nil {
		l.b.defaultSpace = everyNamespace
	} else {
		l.b.defaultSpace = consent{from: ipamv1.FromSelector, selector: selector, key: "flag:" + selector.String()}
	}
	l.b.spaceChanged(ipamv1.DefaultAddressSpace)
}

// ApplyAddressSpace records an AddressSpace as created or updated, and
// wakes the root pools that wait for it or whose rules it changed.
func (l *Ledger) ApplyAddressSpace(as *ipamv1.AddressSpace, typ EventType) {
	l.mu.Lock()
	l.b.spaces[as.Name] = spaceRules(as.Spec.RootPoolNamespaces)
	wake := l.b.spaceChanged(as.Name)
	l.mu.Unlock()
	l.publish(Event{Type: typ, Kind: KindAddressSpace, Name: as.Name, Wake: refs(wake)})
}

// DeleteAddressSpace records an AddressSpace's deletion. obj may be a
// tombstone. The root pools of the space keep the ranges they hold (a
// grant is never revoked); those waiting wait for the space again.
func (l *Ledger) DeleteAddressSpace(obj any) {
	as, ok := unwrap[*ipamv1.AddressSpace](obj)
	if !ok {
		return
	}
	l.mu.Lock()
	delete(l.b.spaces, as.Name)
	wake := l.b.spaceChanged(as.Name)
	l.mu.Unlock()
	l.publish(Event{Type: Deleted, Kind: KindAddressSpace, Name: as.Name, Wake: refs(wake)})
}

// SpaceView is what admission needs to know of a root pool's space.
type SpaceView struct {
	// Exists is false for a named space without its AddressSpace.
	Exists bool
	// Allowed: the namespace may hold root pools in the space. Known is
	// false when the namespace's labels have not reached the ledger yet.
	Allowed, Known bool
	// Missing are the requirements of the space's rules that the
	// namespace's labels do not meet, as "key=value" or "key": what to ask
	// the platform for, and no more of the rules than that.
	Missing []string
}

// Space answers admission for a root pool of namespace in space, with the
// namespace's labels as the ledger knows them.
func (l *Ledger) Space(space, namespace string) SpaceView {
	l.mu.RLock()
	defer l.mu.RUnlock()
	nsLabels, known := l.b.nsLabels[namespace]
	return l.b.spaceView(space, namespace, nsLabels, known)
}

// SpaceWithLabels is Space with the namespace's labels read from the API
// server: a namespace labelled a moment ago is not refused on a view that
// has not seen the label yet.
func (l *Ledger) SpaceWithLabels(space, namespace string, nsLabels map[string]string) SpaceView {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.b.spaceView(space, namespace, nsLabels, true)
}

func (b *book) spaceView(space, namespace string, nsLabels labels.Set, known bool) SpaceView {
	rules, exists := b.spaceConsent(space)
	if !exists {
		return SpaceView{}
	}
	// Labels matter only to a selector.
	v := SpaceView{Exists: true, Known: known || rules.from == ipamv1.FromAll, Allowed: rules.allows(spaceNamespace, namespace, nsLabels, known)}
	if !v.Allowed && known {
		v.Missing = missingRequirements(rules, nsLabels)
	}
	return v
}

// missingRequirements lists the requirements of a selector consent that
// the labels do not meet ("nothing" when it selects none).
func missingRequirements(c consent, set labels.Set) []string {
	if c.from != ipamv1.FromSelector {
		return nil
	}
	reqs, selectable := c.selector.Requirements()
	if !selectable {
		return []string{"nothing: the space admits no namespace yet"}
	}
	var out []string
	for _, r := range reqs {
		if !r.Matches(set) {
			out = append(out, r.String())
		}
	}
	return out
}

// SpaceOverlapping returns up to limit root pools of a space whose
// requested or held range overlaps p, other than the pool name of
// namespace (the object being admitted), and how many there are.
func (l *Ledger) SpaceOverlapping(space string, p netip.Prefix, namespace, name string, limit int) ([]Claimant, int) {
	id := spaceID(space, p.Addr().Is6())
	return l.Overlapping(ipamv1.PoolReference{Namespace: id.namespace(), Name: id.name()}, p, namespace, PoolKey(name), limit)
}

// rootOverlaps names, up to maxNamed, the other root pools of c's space
// whose footprint overlaps what c holds: pools granted before the arbiter
// kept roots apart (an earlier release), which keep their ranges. Those
// in another namespace than viewer's are not named.
func (b *book) rootOverlaps(s *slot, c *claim) (string, int) {
	held := c.holds()
	if !held.IsValid() {
		return "", 0
	}
	var others []*claim
	s.index.Overlapping(held, func(e ipspace.Entry[claimID]) bool {
		other := b.claim(e.Owner)
		if other != nil && other != c && slices.Contains(other.footprint(), e.Prefix) && !slices.Contains(others, other) {
			others = append(others, other)
		}
		return true
	})
	if len(others) == 0 {
		return "", 0
	}
	slices.SortFunc(others, olderClaim)
	var parts []string
	for _, o := range others[:min(len(others), maxNamed)] {
		who := "a root pool in another namespace"
		if o.id.namespace() == c.id.namespace() {
			who = "SubnetPool " + string(poolIDOf(o.id.namespace(), o.key().Name()))
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", who, o.holds()))
	}
	out := strings.Join(parts, ", ")
	if extra := len(others) - maxNamed; extra > 0 {
		out += fmt.Sprintf(" and %d more", extra)
	}
	return fmt.Sprintf("%s overlaps %s in address space %s: both were granted before root pools were kept apart, and keep their ranges; delete or shrink one of them (kubectl ipam spaces lists them)",
		held, out, s.id.spaceName()), len(others)
}

// RootPool is a root pool as a space lists it.
type RootPool struct {
	Ref statuscalc.ClaimRef
	// CIDR is what it asks for; Held what it holds (invalid while it waits).
	CIDR, Held netip.Prefix
	// Overlaps counts the other root pools of the space its range
	// overlaps (granted before spaces were enforced).
	Overlaps int
}

// SpaceReport is one address space: its rules and its root pools.
type SpaceReport struct {
	Name string
	// Exists is false for a space that root pools name but no
	// AddressSpace defines.
	Exists bool
	// Rules says which namespaces may hold root pools, as a selector
	// ("" for every namespace).
	Rules string
	Roots []RootPool
}

// Spaces returns every address space that exists or that root pools
// name, by name, each with its root pools by range.
func (l *Ledger) Spaces() []SpaceReport {
	l.mu.RLock()
	defer l.mu.RUnlock()
	names := map[string]bool{ipamv1.DefaultAddressSpace: true}
	for name := range l.b.spaces {
		names[name] = true
	}
	for id := range l.b.slots {
		if id.isSpace() {
			names[id.spaceName()] = true
		}
	}
	var out []SpaceReport
	for _, name := range slices.Sorted(maps.Keys(names)) {
		rules, exists := l.b.spaceConsent(name)
		r := SpaceReport{Name: name, Exists: exists, Rules: rules.selectorString()}
		for _, v6 := range []bool{false, true} {
			s := l.b.slots[spaceID(name, v6)]
			if s == nil {
				continue
			}
			for _, c := range s.claims {
				_, overlaps := l.b.rootOverlaps(s, c)
				r.Roots = append(r.Roots, RootPool{Ref: c.id.ref(), CIDR: c.requested, Held: c.holds(), Overlaps: overlaps})
			}
		}
		slices.SortFunc(r.Roots, func(a, b RootPool) int {
			if d := a.CIDR.Addr().Compare(b.CIDR.Addr()); d != 0 {
				return d
			}
			return compareRefs(a.Ref, b.Ref)
		})
		out = append(out, r)
	}
	return out
}

// OverlappingRootPools counts, per space, the root pools whose range
// overlaps another root pool of their space: for the metric and alert.
func (l *Ledger) OverlappingRootPools() map[string]int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := map[string]int{}
	for id, s := range l.b.slots {
		if !id.isSpace() {
			continue
		}
		n := 0
		for _, c := range s.claims {
			if _, k := l.b.rootOverlaps(s, c); k > 0 {
				n++
			}
		}
		out[id.spaceName()] += n
	}
	return out
}

// selectorString spells a space's rules for kubectl ipam spaces.
func (c consent) selectorString() string {
	switch c.from {
	case ipamv1.FromAll:
		return ""
	case ipamv1.FromSelector:
		if c.key == "nothing" {
			return "<none>"
		}
		return c.selector.String()
	}
	return c.key
}
