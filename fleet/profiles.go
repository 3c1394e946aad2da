package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// ClusterProfileGVK is SIG Multicluster's ClusterProfile (KEP-4322, cluster
// inventory): in a hub, one namespaced object per member cluster, named
// after it. The operator reads only its namespace and name, as metadata:
// its Go module is not a dependency of ours (docs/architecture.md).
var ClusterProfileGVK = schema.GroupVersionKind{Group: "multicluster.x-k8s.io", Version: "v1alpha1", Kind: "ClusterProfile"}

// MemberAccessName names what a member's hub namespace holds for its
// credential: the ServiceAccount, and the Role and RoleBinding of
// config/fleet-hub.
const MemberAccessName = "subnet-operator-fleet-member"

// MemberRules are the rules of config/fleet-hub's Role (role.yaml; a test
// keeps the two equal): a member's claims are Subnets in its own hub
// namespace, made, read, adopted (a patch) and released; nothing else.
func MemberRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{{
		APIGroups: []string{ipamv1.GroupVersion.Group},
		Resources: []string{"subnets"},
		Verbs:     []string{"get", "list", "watch", "create", "patch", "delete"},
	}}
}

// ErrClusterProfilesNotServed: the manager was asked to onboard members from
// ClusterProfiles in a cluster that does not serve them.
var ErrClusterProfilesNotServed = errors.New("the API server does not serve multicluster.x-k8s.io/v1alpha1 ClusterProfiles: install SIG Multicluster's ClusterProfile CRD (sigs.k8s.io/cluster-inventory-api) first, or drop --fleet-cluster-profile-namespace")

// ProfileReconciler runs in a hub: for each ClusterProfile in Namespace it
// makes the member's hub namespace (named after the profile, the member
// cluster's name) and, in it, the ServiceAccount a member's hub kubeconfig
// can use, config/fleet-hub's Role and a RoleBinding of that Role to the
// ServiceAccount. It adopts no namespace that is not already marked as that
// member's, and deletes nothing, ever: a member's hub namespace holds its
// claims, ranges the member may still serve (docs/fleet.md says how to
// remove a member).
type ProfileReconciler struct {
	// Namespace is where the ClusterProfiles are (the clusterset's
	// namespace); profiles elsewhere are not watched.
	Namespace string
	// Recorder reports, on a profile, what was made for it and why nothing
	// was.
	Recorder recorder.EventRecorder

	// client reads and writes without a cache: the reads must see objects
	// that are not ours (a pre-existing namespace), which the label-selected
	// watches do not hold. A profile's reconcile is rare (its create, and a
	// change to what was made for it), so four uncached reads cost nothing.
	client client.Client
}

// SetupWithManager watches, in a cache of its own, the ClusterProfiles of
// r.Namespace (metadata only) and the objects made for them (selected by
// LabelClusterProfile: they are spread over namespaces, and an owner
// reference cannot cross namespaces). It fails with
// ErrClusterProfilesNotServed when the API server does not serve
// ClusterProfiles: the flag asks for them, and nothing watches for the CRD
// to appear later.
func (r *ProfileReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if errs := validation.IsDNS1123Label(r.Namespace); len(errs) > 0 {
		return fmt.Errorf("the ClusterProfiles' namespace %q: %s", r.Namespace, strings.Join(errs, "; "))
	}
	if r.Recorder == nil {
		return errors.New("the ClusterProfile controller needs an event recorder")
	}
	if _, err := mgr.GetRESTMapper().RESTMapping(ClusterProfileGVK.GroupKind(), ClusterProfileGVK.Version); err != nil {
		if meta.IsNoMatchError(err) {
			return ErrClusterProfilesNotServed
		}
		return fmt.Errorf("looking up ClusterProfiles: %w", err)
	}
	var err error
	if r.client, err = client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()}); err != nil {
		return err
	}
	ours := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{ipamv1.LabelClusterProfile: r.Namespace})}
	watched, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(),
		Mapper: mgr.GetRESTMapper(),
		ByObject: map[client.Object]cache.ByObject{
			newProfile():             {Namespaces: map[string]cache.Config{r.Namespace: {}}},
			&corev1.Namespace{}:      ours,
			&corev1.ServiceAccount{}: ours,
			&rbacv1.Role{}:           ours,
			&rbacv1.RoleBinding{}:    ours,
		},
		ReaderFailOnMissingInformer: true,
	})
	if err != nil {
		return err
	}
	// Added as a leader-election runnable (a cache does not say otherwise):
	// only the leader, which runs the controller, watches.
	if err := mgr.Add(watched); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("fleet-cluster-profile").
		WatchesRawSource(source.Kind(watched, newProfile(), &handler.TypedEnqueueRequestForObject[*metav1.PartialObjectMetadata]{}, profileCreatedOrDeleted)).
		WatchesRawSource(source.Kind(watched, &corev1.Namespace{}, madeFor[*corev1.Namespace](r.Namespace))).
		WatchesRawSource(source.Kind(watched, &corev1.ServiceAccount{}, madeFor[*corev1.ServiceAccount](r.Namespace))).
		WatchesRawSource(source.Kind(watched, &rbacv1.Role{}, madeFor[*rbacv1.Role](r.Namespace))).
		WatchesRawSource(source.Kind(watched, &rbacv1.RoleBinding{}, madeFor[*rbacv1.RoleBinding](r.Namespace))).
		Complete(r)
}

// profileCreatedOrDeleted drops a profile's updates: what is made for it
// depends on its name only, and a cluster manager updates its profiles'
// status often (conditions, properties), which would cost four reads each.
var profileCreatedOrDeleted = predicate.TypedFuncs[*metav1.PartialObjectMetadata]{
	UpdateFunc: func(event.TypedUpdateEvent[*metav1.PartialObjectMetadata]) bool { return false },
}

// newProfile is an empty ClusterProfile, read as metadata only.
func newProfile() *metav1.PartialObjectMetadata {
	p := &metav1.PartialObjectMetadata{}
	p.SetGroupVersionKind(ClusterProfileGVK)
	return p
}

// madeFor maps an object made for a profile back to it: the profile's
// namespace is the one watched, its name the member-cluster label.
func madeFor[T client.Object](profileNamespace string) handler.TypedEventHandler[T, reconcile.Request] {
	return handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, o T) []reconcile.Request {
		name := o.GetLabels()[ipamv1.LabelMemberCluster]
		if name == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: profileNamespace, Name: name}}}
	})
}

// Reconcile makes sure the profile's member namespace and its credential's
// RBAC exist and are as they should be. A profile that is gone, or going,
// has nothing made and nothing deleted.
func (r *ProfileReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	profile := newProfile()
	if err := r.client.Get(ctx, req.NamespacedName, profile); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	profile.SetGroupVersionKind(ClusterProfileGVK) // the event's reference needs it
	if profile.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	cluster := profile.Name
	if why := invalidClusterName(cluster); why != "" {
		r.Recorder.Eventf(profile, nil, corev1.EventTypeWarning, ipamv1.ReasonInvalidClusterName, "Onboard",
			"nothing made for cluster %q: %s", cluster, why)
		return reconcile.Result{}, nil
	}

	ns, created, conflict, err := r.memberNamespace(ctx, cluster)
	if err != nil {
		return reconcile.Result{}, err
	}
	if conflict != "" {
		r.Recorder.Eventf(profile, nil, corev1.EventTypeWarning, ipamv1.ReasonNamespaceConflict, "Onboard",
			"nothing made for cluster %q: %s", cluster, conflict)
		return reconcile.Result{}, nil
	}
	if ns.DeletionTimestamp != nil {
		// Nothing can be made in it; its deletion's end is an event of the
		// namespace watch, which brings the profile back here.
		ctrl.LoggerFrom(ctx).Info("Member namespace is being deleted; waiting for it to go", "namespace", ns.Name)
		return reconcile.Result{}, nil
	}

	changed := created
	for _, obj := range r.memberAccess(cluster) {
		result, err := controllerutil.CreateOrPatch(ctx, r.client, obj.object, obj.mutate)
		if err != nil {
			// On the profile too: the admin who made it looks there. A
			// Forbidden here is most likely config/fleet-hub-profiles'
			// RBAC missing.
			err = fmt.Errorf("%s %s/%s: %w", obj.kind, cluster, MemberAccessName, err)
			r.Recorder.Eventf(profile, nil, corev1.EventTypeWarning, ipamv1.ReasonOnboardingFailed, "Onboard", "%s (retried)", err)
			return reconcile.Result{}, err
		}
		changed = changed || result != controllerutil.OperationResultNone
	}
	if changed {
		r.Recorder.Eventf(profile, nil, corev1.EventTypeNormal, ipamv1.ReasonMemberOnboarded, "Onboard",
			"namespace %s: ServiceAccount, Role and RoleBinding %s made or restored", cluster, MemberAccessName)
	}
	return reconcile.Result{}, nil
}

// invalidClusterName says why name cannot name a member's hub namespace, or
// "". kube-* and default are Kubernetes' own namespaces: a profile named
// like one is refused outright rather than relying on the conflict check.
func invalidClusterName(name string) string {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return "not a DNS label: " + strings.Join(errs, "; ")
	}
	if name == metav1.NamespaceDefault || strings.HasPrefix(name, "kube-") {
		return "a namespace reserved by Kubernetes"
	}
	return ""
}

// memberNamespace returns the member's hub namespace, created (and says so)
// if it did not exist, or why
// the one that exists is not the member's: it lacks LabelMemberCluster with
// the member's name, so it is someone else's and is left as it is. A
// namespace that is the member's but lacks LabelClusterProfile (made by hand
// the way config/fleet-hub's overlays are, and labelled) gets it, so that
// the watch sees it.
func (r *ProfileReconciler) memberNamespace(ctx context.Context, cluster string) (ns *corev1.Namespace, created bool, conflict string, err error) {
	ns = &corev1.Namespace{}
	err = r.client.Get(ctx, client.ObjectKey{Name: cluster}, ns)
	switch {
	case apierrors.IsNotFound(err):
		ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cluster, Labels: r.labels(cluster)}}
		if err := r.client.Create(ctx, ns); err != nil {
			// AlreadyExists included: made meanwhile by someone else, it is
			// judged on the next reconcile, not adopted here.
			return nil, false, "", fmt.Errorf("creating namespace %s: %w", cluster, err)
		}
		return ns, true, "", nil
	case err != nil:
		return nil, false, "", err
	}
	if owner, ok := ns.Labels[ipamv1.LabelMemberCluster]; !ok || owner != cluster {
		return nil, false, fmt.Sprintf("namespace %s already exists and is not marked as this member's (label %s=%s): it is left untouched; rename the cluster, or, if the namespace is meant for it, label it %s=%s and %s=%s",
			cluster, ipamv1.LabelMemberCluster, cluster, ipamv1.LabelMemberCluster, cluster, ipamv1.LabelClusterProfile, r.Namespace), nil
	}
	if ns.Labels[ipamv1.LabelClusterProfile] != r.Namespace {
		patch := client.MergeFromWithOptions(ns.DeepCopy(), client.MergeFromWithOptimisticLock{})
		ns.Labels[ipamv1.LabelClusterProfile] = r.Namespace
		if err := r.client.Patch(ctx, ns, patch); err != nil {
			return nil, false, "", fmt.Errorf("labelling namespace %s: %w", cluster, err)
		}
	}
	return ns, false, "", nil
}

// labels are those of everything made for cluster's profile.
func (r *ProfileReconciler) labels(cluster string) map[string]string {
	return map[string]string{
		ipamv1.LabelMemberCluster:  cluster,
		ipamv1.LabelClusterProfile: r.Namespace,
		"app.kubernetes.io/name":   "subnet-operator",
	}
}

// desired is one object of a member's access and how to make it what it
// should be (CreateOrPatch's mutate: called on the object as it is, or on
// the bare name when it does not exist).
type desired struct {
	kind   string
	object client.Object
	mutate controllerutil.MutateFn
}

// memberAccess is what cluster's namespace holds for its credential: the
// ServiceAccount, config/fleet-hub's Role with exactly its rules (a rule
// added by hand is taken away), and the RoleBinding of that Role to that
// ServiceAccount only. Creating the Role and the RoleBinding needs the
// manager to hold their rules itself (RBAC's escalation check):
// config/fleet-hub-profiles grants them.
func (r *ProfileReconciler) memberAccess(cluster string) []desired {
	key := metav1.ObjectMeta{Namespace: cluster, Name: MemberAccessName}
	sa := &corev1.ServiceAccount{ObjectMeta: key}
	role := &rbacv1.Role{ObjectMeta: key}
	binding := &rbacv1.RoleBinding{ObjectMeta: key}
	label := func(o client.Object) {
		l := o.GetLabels()
		if l == nil {
			l = map[string]string{}
		}
		for k, v := range r.labels(cluster) {
			l[k] = v
		}
		o.SetLabels(l)
	}
	return []desired{
		{"ServiceAccount", sa, func() error { label(sa); return nil }},
		{"Role", role, func() error { label(role); role.Rules = MemberRules(); return nil }},
		{"RoleBinding", binding, func() error {
			label(binding)
			// roleRef cannot change: a binding made by hand to another role
			// fails the patch, and the error says so.
			binding.RoleRef = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: MemberAccessName}
			binding.Subjects = []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: MemberAccessName, Namespace: cluster}}
			return nil
		}},
	}
}
