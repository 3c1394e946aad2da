package monitoring

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	capiipam "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// Workload does in namespace what a platform team does on a normal day, so
// that the manager exports every series the dashboard and the alerts name:
// a pool with a child pool carved from it, dynamic and explicit Subnets, a
// small pool filled past its last block (two Subnets wait, PoolExhausted),
// an IPv6 pool, a Subnet whose poolRef has a typo (it waits PoolNotFound),
// requests the webhooks deny (an overlap, a range outside the pool), an
// update and some deletes. It returns once the controllers have decided
// every Subnet. The Subnets it leaves behind keep the pool gauges alive.
func Workload(ctx context.Context, c client.Client, namespace string) error {
	pool := func(name, cidr, parent string, defaultLength int32) *ipamv1.SubnetPool {
		p := &ipamv1.SubnetPool{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Spec:       ipamv1.SubnetPoolSpec{CIDR: cidr, DefaultPrefixLength: ptr.To(defaultLength)},
		}
		if parent != "" {
			p.Spec.ParentRef = &ipamv1.PoolReference{Name: parent}
		}
		return p
	}
	subnet := func(name, poolRef, cidr string) *ipamv1.Subnet {
		return &ipamv1.Subnet{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Spec:       ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: poolRef}, CIDR: cidr},
		}
	}
	var objects []client.Object
	objects = append(objects,
		pool("datacenter", "10.40.0.0/16", "", 24),
		pool("team-a", "10.40.0.0/20", "datacenter", 26),
		pool("tiny", "10.50.0.0/28", "", 30))
	for i := range 12 {
		objects = append(objects, subnet(fmt.Sprintf("team-a-%02d", i), "team-a", ""))
	}
	for i := range 3 {
		objects = append(objects, subnet(fmt.Sprintf("rack-%d", i), "datacenter", fmt.Sprintf("10.40.%d.0/24", 32+i)))
	}
	// Four /30 blocks in a /28: the fifth and sixth claim wait.
	for i := range 6 {
		objects = append(objects, subnet(fmt.Sprintf("tiny-%d", i), "tiny", ""))
	}
	// An IPv6 pool: the dashboard charts the families' address counts apart.
	objects = append(objects, pool("datacenter-v6", "2001:db8:40::/48", "", 64), subnet("v6-rack-0", "datacenter-v6", ""))
	// A Subnet whose poolRef names no pool (a typo): it waits PoolNotFound.
	typo := subnet("typo", "datacentre", "")
	typo.Spec.PrefixLength = ptr.To[int32](24)
	objects = append(objects, typo)
	// As full, but opted out of the pool alerts by its label.
	quiet := pool("quiet", "10.60.0.0/30", "", 30)
	quiet.Labels = map[string]string{"ipam.subnet-operator.io/alerts": "off"}
	objects = append(objects, quiet, subnet("quiet-0", "quiet", ""), subnet("quiet-1", "quiet", ""))
	for _, o := range objects {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}

	if err := Denied(ctx, c, namespace); err != nil {
		return err
	}

	if err := waitDecided(ctx, c, namespace, map[string]int{ipamv1.ReasonAllocated: 21, ipamv1.ReasonPoolExhausted: 3, ipamv1.ReasonPoolNotFound: 1}); err != nil {
		return err
	}

	// An update and three deletes: the parent pools requeue for each.
	var s ipamv1.Subnet
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "team-a-00"}, &s); err != nil {
		return err
	}
	patch := client.MergeFrom(s.DeepCopy())
	s.Labels = map[string]string{"tier": "frontend"}
	if err := c.Patch(ctx, &s, patch); err != nil {
		return err
	}
	for i := 9; i < 12; i++ {
		if err := c.Delete(ctx, subnet(fmt.Sprintf("team-a-%02d", i), "team-a", "")); err != nil {
			return err
		}
	}
	return waitDecided(ctx, c, namespace, map[string]int{ipamv1.ReasonAllocated: 18, ipamv1.ReasonPoolExhausted: 3, ipamv1.ReasonPoolNotFound: 1})
}

// Denied sends the workload's requests that the webhooks deny: an overlap
// with rack-0 and a range outside the pool. Sent again once Prometheus has
// scraped the workload, they make the series that first appeared during it
// (denials by reason, the webhooks' latency buckets) increase within a
// rate() window: a series that appears with its final count has no earlier
// sample to increase from, and a quick workload leaves no time for one.
func Denied(ctx context.Context, c client.Client, namespace string) error {
	for _, bad := range []*ipamv1.Subnet{
		{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "overlaps-rack-0"}, Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: "datacenter"}, CIDR: "10.40.32.0/25"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "outside"}, Spec: ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: "team-a"}, CIDR: "10.41.0.0/24"}},
	} {
		if err := c.Create(ctx, bad); !apierrors.IsInvalid(err) {
			return fmt.Errorf("creating Subnet %s: want the webhook to deny it as invalid, got %w", bad.Name, err)
		}
	}
	return nil
}

// waitDecided waits until the namespace's Subnets count want by the reason
// of their Ready condition.
func waitDecided(ctx context.Context, c client.Client, namespace string, want map[string]int) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var got map[string]int
	for {
		var list ipamv1.SubnetList
		if err := c.List(ctx, &list, client.InNamespace(namespace)); err != nil {
			return err
		}
		got = map[string]int{}
		for _, s := range list.Items {
			reason := ipamv1.ReasonPending
			if cond := meta.FindStatusCondition(s.Status.Conditions, ipamv1.ConditionReady); cond != nil {
				reason = cond.Reason
			}
			got[reason]++
		}
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("subnets of %s by Ready reason: got %v, want %v", namespace, got, want)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// MachineAddresses makes a Subnet of namespace's datacenter pool (from
// Workload) serve a Cluster API IPAddressClaim and waits until the claim
// is bound, so that the Subnet's address series exist. It needs the
// Cluster API CRDs and the manager's provider on.
func MachineAddresses(ctx context.Context, c client.Client, namespace string) error {
	s := &ipamv1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "machines"},
		Spec:       ipamv1.SubnetSpec{PoolRef: ipamv1.PoolReference{Name: "datacenter"}, CIDR: "10.40.64.0/29"},
	}
	claim := &capiipam.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "machine-0"},
		Spec: capiipam.IPAddressClaimSpec{PoolRef: capiipam.IPPoolReference{
			APIGroup: ipamv1.GroupVersion.Group, Kind: "Subnet", Name: s.Name}},
	}
	for _, o := range []client.Object{s, claim} {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		if err := c.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
			return err
		}
		if claim.Status.AddressRef.Name != "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("IPAddressClaim %s not bound: %+v", claim.Name, claim.Status)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
