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

// newer returns a copy of our last write of cached's object when that write
// is newer than cached, and forgets the write once the cache has it (or the
// object was deleted and created again under the same name).
func (w *lastWrites[T]) newer(cached T) (T, bool) {
	var none T
	w.mu.Lock()
	defer w.mu.Unlock()
	key := client.ObjectKeyFromObject(cached)
	own, ok := w.objects[key]
	if !ok {
		return none, false
	}
	if own.GetUID() == cached.GetUID() {
		if cmp, err := resourceversion.CompareResourceVersion(own.GetResourceVersion(), cached.GetResourceVersion()); err == nil && cmp > 0 {
			return own.DeepCopyObject().(T), true
		}
	}
	delete(w.objects, key)
	return none, false
}

// seen forgets our write of obj's object once the informer has delivered
// it (or anything newer), so copies do not wait in the map behind a long
// work queue.
func (w *lastWrites[T]) seen(obj T) {
	w.mu.Lock()
	defer w.mu.Unlock()
	key := client.ObjectKeyFromObject(obj)
	own, ok := w.objects[key]
	if !ok {
		return
	}
	if cmp, err := resourceversion.CompareResourceVersion(own.GetResourceVersion(), obj.GetResourceVersion()); err != nil || cmp <= 0 || own.GetUID() != obj.GetUID() {
		delete(w.objects, key)
	}
}

func (w *lastWrites[T]) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.objects, key)
}
