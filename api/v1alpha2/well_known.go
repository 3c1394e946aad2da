package v1alpha2

// Condition types.
const (
	// ConditionReady on a Subnet: the range in status.cidr is held. On a
	// pool: the pool serves spec.cidr (for a child pool, its parent granted it).
	ConditionReady = "Ready"
	// ConditionExhausted on a pool: no block of defaultPrefixLength is left.
	ConditionExhausted = "Exhausted"
	// ConditionOverlapping on a pool: some of its claims lost arbitration.
	ConditionOverlapping = "Overlapping"
	// ConditionClaimsNotAllowed on a pool: claims hold ranges from
	// namespaces that spec.allowedNamespaces no longer allows. They keep
	// them; the message names the first few.
	ConditionClaimsNotAllowed = "ClaimsNotAllowed"
	// ConditionAddressSpaceOverlap on a root pool: it overlaps another
	// root pool of its address space. Both were granted before the arbiter
	// kept root pools apart (an earlier release) and keep their ranges;
	// the message names the other.
	ConditionAddressSpaceOverlap = "AddressSpaceOverlap"
)

// Condition reasons. They are CamelCase and stable: dashboards and alerts
// match on them.
const (
	// ReasonAllocated: the Subnet holds its range.
	ReasonAllocated = "Allocated"
	// ReasonPending: the claim has not been decided yet.
	ReasonPending = "Pending"
	// ReasonPoolNotFound: the referenced pool (or parent pool) does not exist;
	// the claim waits for it.
	ReasonPoolNotFound = "PoolNotFound"
	// ReasonPoolNotReady: the referenced pool exists but serves no range yet,
	// or is being deleted.
	ReasonPoolNotReady = "PoolNotReady"
	// ReasonOverlaps: the claim overlaps a claim that won arbitration.
	ReasonOverlaps = "Overlaps"
	// ReasonPoolExhausted: no free block of the requested length is left.
	ReasonPoolExhausted = "PoolExhausted"
	// ReasonOutOfRange: the claim lies outside the pool, inside a reserved
	// range, is of the other address family, or its prefix length is outside
	// the pool's bounds.
	ReasonOutOfRange = "OutOfRange"
	// ReasonNotAllowed: the claim references a pool in another namespace
	// whose spec.allowedNamespaces does not allow the claim's namespace.
	// On a pool's ClaimsNotAllowed condition (True): some claims that hold
	// ranges are no longer allowed.
	ReasonNotAllowed = "NotAllowed"
	// ReasonNamespaceQuotaExceeded: the claim's namespace already holds what
	// the pool's spec.allowedNamespaces.perNamespace allows each namespace;
	// the claim waits until the namespace frees room or the cap is raised.
	ReasonNamespaceQuotaExceeded = "NamespaceQuotaExceeded"
	// ReasonAddressesInUse: the Subnet is being deleted and Cluster API
	// IPAddresses still use its addresses; its address-protection
	// finalizer holds it (and its range) until none is left. The event
	// of a held deletion, and the reason the admission webhook's refusal
	// of such a delete is counted under (addresses_in_use).
	ReasonAddressesInUse = "AddressesInUse"
	// ReasonInvalidSpec: the spec cannot be parsed (only reachable when the
	// CRD schema and the webhook were both bypassed).
	ReasonInvalidSpec = "InvalidSpec"

	// ReasonAvailable: the pool serves its range.
	ReasonAvailable = "Available"
	// ReasonTerminating: the pool is being deleted and waits for its claims
	// to go.
	ReasonTerminating = "Terminating"
	// ReasonCycle: the pool's parentRef chain leads back to itself.
	ReasonCycle = "Cycle"
	// ReasonClaimsOutside: spec.cidr shrank below claims the pool still
	// holds; the pool keeps serving status.cidr.
	ReasonClaimsOutside = "ClaimsOutside"

	// ReasonNoFreeBlock: Exhausted is True.
	ReasonNoFreeBlock = "NoFreeBlock"
	// ReasonFreeBlocksLeft: Exhausted is False.
	ReasonFreeBlocksLeft = "FreeBlocksLeft"
	// ReasonNoDefaultLength: Exhausted is Unknown, the pool has no
	// defaultPrefixLength to measure against.
	ReasonNoDefaultLength = "NoDefaultPrefixLength"
	// ReasonClaimsOverlap: Overlapping is True.
	ReasonClaimsOverlap = "ClaimsOverlap"
	// ReasonNoOverlap: Overlapping is False.
	ReasonNoOverlap = "NoOverlap"
	// ReasonAllAllowed: ClaimsNotAllowed is False.
	ReasonAllAllowed = "AllAllowed"
	// ReasonAddressSpaceNotFound: a root pool names an AddressSpace that
	// does not exist; it waits for it.
	ReasonAddressSpaceNotFound = "AddressSpaceNotFound"
	// ReasonRootPoolsOverlap: AddressSpaceOverlap is True.
	ReasonRootPoolsOverlap = "RootPoolsOverlap"
	// ReasonNoRootOverlap: AddressSpaceOverlap is False.
	ReasonNoRootOverlap = "NoRootOverlap"
)

const (
	// FinalizerPoolProtection keeps a pool while Subnets or child pools still
	// use it, even when the admission webhook was bypassed.
	FinalizerPoolProtection = "ipam.subnet-operator.io/pool-protection"
	// FinalizerAddressProtection keeps a Subnet while Cluster API
	// IPAddresses of it are in use (docs/cluster-api.md); the manager adds
	// it with the Subnet's first address.
	FinalizerAddressProtection = "ipam.subnet-operator.io/address-protection"

	// AnnotationRecompute on a pool: changing its value forces the controller
	// to recompute the pool's status (for example after restoring a backup).
	AnnotationRecompute = "ipam.subnet-operator.io/recompute"

	// LabelRootPools on a namespace, set to "true", lets it create root
	// pools in the default address space where the install restricts it
	// (the shipped manifests and chart do: --root-pool-namespace-selector).
	LabelRootPools = "ipam.subnet-operator.io/root-pools"
	// LabelAddressSpace on a namespace names the address space of the
	// root pools created in it without spec.addressSpace (the defaulting
	// webhook writes it into their spec): a lab or a tenant's private
	// plan whose manifests need not say so. The space's
	// rootPoolNamespaces still decide whether it takes them.
	LabelAddressSpace = "ipam.subnet-operator.io/address-space"
)
