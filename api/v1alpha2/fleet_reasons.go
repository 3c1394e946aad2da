package v1alpha2

// Names a fleet uses (docs/fleet.md): a member cluster's root pool delegated
// from a pool in a hub cluster (spec.delegation).

// ConditionDelegated on a delegated pool: True while the hub holds the
// range the pool serves for it (reason Delegated); False with why not
// (HubUnreachable, DelegationPending, DelegationLost).
const ConditionDelegated = "Delegated"

// Reasons of the Delegated condition. A delegated pool that serves no range
// yet has the same reason on its Ready condition.
const (
	// ReasonDelegated: the hub granted the range in spec.cidr to this
	// pool's claim there, and the pool serves it.
	ReasonDelegated = "Delegated"
	// ReasonHubUnreachable: the member's manager cannot reach the hub; the
	// message carries the error. A pool that serves a range keeps serving
	// it; one that serves none waits.
	ReasonHubUnreachable = "HubUnreachable"
	// ReasonDelegationPending: the claim in the hub is made and not (yet)
	// granted, or the hub's grant and spec.cidr disagree; the message
	// carries the hub Subnet's reason and message.
	ReasonDelegationPending = "DelegationPending"
	// ReasonDelegationLost: the claim in the hub was deleted there while
	// the pool serves a range. The pool keeps serving it and the manager
	// claims the same range again; the message says whether the hub
	// granted it back.
	ReasonDelegationLost = "DelegationLost"
)

// Labels and annotations on the claim (a Subnet) a member makes in the hub,
// so that the hub's objects say which cluster holds what.
const (
	// LabelMemberCluster names the member cluster that made the claim.
	LabelMemberCluster = "fleet.ipam.subnet-operator.io/member-cluster"
	// AnnotationMemberPool is the member pool, "namespace/name".
	AnnotationMemberPool = "fleet.ipam.subnet-operator.io/member-pool"
	// AnnotationMemberPoolUID is the member pool's UID when the claim was
	// made (a pool restored from a backup has another and adopts the claim).
	AnnotationMemberPoolUID = "fleet.ipam.subnet-operator.io/member-pool-uid"

	// FinalizerDelegation keeps a delegated pool until its claim in the hub
	// is released, which happens once the pool holds nothing (after the
	// pool-protection finalizer is gone).
	FinalizerDelegation = "fleet.ipam.subnet-operator.io/delegation"
)

// Onboarding members from SIG Multicluster's ClusterProfiles
// (multicluster.x-k8s.io), in the hub (docs/fleet.md): the manager started
// with --fleet-cluster-profile-namespace makes each profile's member
// namespace and its credential's RBAC there.
const (
	// LabelClusterProfile, on the objects made for a ClusterProfile (the
	// member's hub Namespace, its ServiceAccount, Role and RoleBinding),
	// names the namespace of the ClusterProfiles they were made for; with
	// LabelMemberCluster (the profile's name, the member cluster's) it
	// leads back to the profile. A pre-existing Namespace without
	// LabelMemberCluster naming the profile is never adopted.
	LabelClusterProfile = "fleet.ipam.subnet-operator.io/cluster-profile"

	// ReasonMemberOnboarded, a Normal Event on a ClusterProfile: the
	// member's hub namespace, ServiceAccount, Role and RoleBinding were
	// created or brought back to what they should be.
	ReasonMemberOnboarded = "MemberOnboarded"
	// ReasonInvalidClusterName, a Warning Event on a ClusterProfile whose
	// name cannot name a namespace (not a DNS label) or is reserved
	// (kube-*): nothing is made for it.
	ReasonInvalidClusterName = "InvalidClusterName"
	// ReasonNamespaceConflict, a Warning Event on a ClusterProfile whose
	// namespace already exists and is not a member namespace of that
	// cluster (it lacks LabelMemberCluster with the profile's name):
	// nothing in it is touched.
	ReasonNamespaceConflict = "NamespaceConflict"
	// ReasonOnboardingFailed, a Warning Event on a ClusterProfile: making
	// or restoring the member's ServiceAccount, Role or RoleBinding failed
	// (the message has the API server's error); retried with back-off.
	ReasonOnboardingFailed = "OnboardingFailed"
)
