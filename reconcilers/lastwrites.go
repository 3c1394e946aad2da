package reconcilers

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// lastWrites keeps, per object, what our last successful write of it
// returned, until the cache shows that write. The informer delivers a write
// a moment after the reconcile that made it; a reconcile in between would
// compare against a copy one write behind and write again (for a pool, its
// optimistically locked patch would conflict and cost a read around the
// cache: a quarter of pool reconciles did at one client). Starting from our
// own write instead, while it is newer than the cached copy, avoids both.
// The copy is forgotten when the informer delivers our write (or when a
// reconcile finds the cache caught up), so the map holds only writes in
// flight. Only the leader writes, so a new leader starts empty.
type lastWrites[T client.Object] struct {
	mu      sync.Mutex
	objects map[types.NamespacedName]T
}

// record remembers the object a write returned.
func (w *lastWrites[T]) record(obj T) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.objects == nil {
		w.objects = map[types.NamespacedName]T{}
	}
	w.objects[client.ObjectKeyFromObject(obj)] = obj.DeepCopyObject().(T)
}

// newer returns a copy of our last write of cached's object while that
// write is ahead of cached, and forgets it once it is not.
func (w *lastWrites[T]) newer(cached T) (T, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	own, ok := w.pending(cached)
	if !ok {
		var none T
		return none, false
	}
	return own.DeepCopyObject().(T), true
}

// seen forgets our write of obj's object once the informer has delivered
// it (or anything newer), so copies do not wait in the map behind a long
// work queue.
func (w *lastWrites[T]) seen(obj T) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending(obj)
}

// pending returns our last write of obj's object if it is still ahead of
// obj: the same object (UID; a pool deleted and created again under the
// same name is another) at a later resourceVersion. Otherwise it forgets
// the write. The caller holds mu.
func (w *lastWrites[T]) pending(obj T) (T, bool) {
	key := client.ObjectKeyFromObject(obj)
	own, ok := w.objects[key]
	if !ok {
		return own, false
	}
	if own.GetUID() == obj.GetUID() {
		if cmp, err := resourceversion.CompareResourceVersion(own.GetResourceVersion(), obj.GetResourceVersion()); err == nil && cmp > 0 {
			return own, true
		}
	}
	delete(w.objects, key)
	return own, false
}

func (w *lastWrites[T]) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.objects, key)
}
