package node

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// Namespaces change at run time in two steps: Prepare validates a whole
// new set of configs and builds the namespaces it adds or changes, Commit
// makes them the node's. Counts move in a third step, once no call counts
// in a replaced namespace any more (the service layer knows when):
// Replacement.CopyWindows.

// A Change is a set of namespace configs prepared for a node: every
// namespace it keeps, adds or replaces, built and validated, not yet
// serving.
type Change struct {
	// Added are the new namespaces; Removed the node's namespaces the
	// change drops; Replaced the namespaces whose config changes, each
	// with its successor; Kept the namespaces whose config is the same,
	// which serve on untouched.
	Added    []*Namespace
	Removed  []*Namespace
	Replaced []Replacement
	Kept     []*Namespace

	from *nsTable
	to   *nsTable
}

// A Replacement is a namespace whose config changes, and its successor.
// The successor shares the old namespace's buckets, leases and (when its
// window sizes and options are the same) estimator, which thus carry on
// without a pause; its sliding windows start empty and are filled by
// CopyWindows.
type Replacement struct {
	Old, New *Namespace
}

// ErrConcurrentChange is returned by Commit when the node's namespaces
// changed since the Change was prepared.
var ErrConcurrentChange = errors.New("node: namespaces changed since the change was prepared")

// Prepare validates cfgs, the whole set of namespaces the node is to
// serve, and builds the namespaces to add and the successors of those
// whose config differs. Every invalid config is reported (errors.Join of
// FieldErrors naming namespaces[i]), not only the first. Nothing changes
// until Commit. The namespaces named in renew are replaced even when their
// config is the same (their sync settings changed outside this package).
func (n *Node) Prepare(cfgs []Config, renew ...string) (*Change, error) {
	from := n.tab.Load()
	c := &Change{from: from}
	var errs []error
	seen := make(map[string]bool, len(cfgs))
	to := &nsTable{byName: make(map[string]*Namespace, len(cfgs))}
	for i, cfg := range cfgs {
		field := fmt.Sprintf("namespaces[%d]", i)
		if seen[cfg.Name] {
			errs = append(errs, fieldErr(field+".name", ErrInvalidConfig, "namespace %q is defined twice", cfg.Name))
			continue
		}
		seen[cfg.Name] = true
		old := from.byName[cfg.Name]
		ns, err := n.build(old, cfg, slices.Contains(renew, cfg.Name))
		if err != nil {
			if fe, ok := err.(*ratelimit.FieldError); ok {
				fe.Field = field + "." + fe.Field
			}
			errs = append(errs, err)
			continue
		}
		switch {
		case old == nil:
			c.Added = append(c.Added, ns)
		case ns == old:
			c.Kept = append(c.Kept, ns)
		default:
			c.Replaced = append(c.Replaced, Replacement{Old: old, New: ns})
		}
		to.byName[cfg.Name] = ns
		to.names = append(to.names, cfg.Name)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for _, name := range from.names {
		if to.byName[name] == nil {
			c.Removed = append(c.Removed, from.byName[name])
		}
	}
	slices.Sort(to.names)
	c.to = to
	return c, nil
}

// build returns old itself when cfg is its config (unless renew), else a
// new namespace for cfg: a successor of old when there is one.
func (n *Node) build(old *Namespace, cfg Config, renew bool) (*Namespace, error) {
	ns, err := NewNamespace(cfg, n.clock)
	if err != nil || old == nil {
		return ns, err
	}
	if !renew && reflect.DeepEqual(ns.cfg, old.cfg) {
		return old, nil
	}
	if (ns.est != nil || old.est != nil) && !sameEstimator(ns, old) {
		return nil, fieldErr("estimator", ErrInvalidConfig,
			"an estimator namespace's window sizes and estimator options are fixed while it runs (its sketches are sized by them); restart to change them")
	}
	ns.est = old.est
	ns.buckets = old.buckets
	ns.leases = old.leases
	return ns, nil
}

func sameEstimator(a, b *Namespace) bool {
	return a.est != nil && b.est != nil && slices.Equal(a.sizes, b.sizes) &&
		*a.cfg.Estimator == *b.cfg.Estimator
}

// Commit makes c's namespaces the node's. It fails with
// ErrConcurrentChange, changing nothing, when another change was
// committed since c was prepared.
func (n *Node) Commit(c *Change) error {
	if !n.tab.CompareAndSwap(c.from, c.to) {
		return ErrConcurrentChange
	}
	// A namespace keeps its buckets and leases through a change of its
	// config: they follow whether it is shared and its caps.
	for _, ns := range c.to.byName {
		ns.buckets.unsynced.Store(!ns.cfg.Shared)
		ns.buckets.setCaps(ns.cfg.MaxKeys, ns.cfg.MaxBytes)
		ns.leases.setMaxKeys(ns.cfg.MaxKeys)
	}
	return nil
}

// CopyWindows adds the old namespace's sliding-window counts, of the
// window sizes both namespaces have, to the new one's: this node's own
// totals, and the other nodes' last fetched totals when withOthers (same
// store). The new namespace's copies count as not yet pushed, so its
// syncer pushes them: the new namespace's rows then hold the old one's
// totals plus what was counted since. No call may count in the old
// namespace any more; calls may count in the new one meanwhile. A key
// refused at the new namespace's key cap is skipped and counted in the
// result.
func (r Replacement) CopyWindows(now time.Time, withOthers bool) (refused int) {
	if r.Old.est != nil {
		return 0 // the estimator is shared, or the change was refused
	}
	idx := make([]int, len(r.Old.sizes)) // old size index -> new, or -1
	for i, s := range r.Old.sizes {
		idx[i] = r.New.sizeIndex(time.Duration(s))
	}
	tn := now.UnixNano()
	r.Old.each(func(key string, old *entry) {
		var e *entry
		for i, j := range idx {
			if j < 0 {
				continue
			}
			size := r.Old.sizes[i]
			p := old.slot(i).p.Load()
			if p == nil || p.start < ratelimit.WindowStart(tn, time.Duration(size))-size {
				continue // no window that still counts
			}
			if e == nil {
				var err error
				if e, err = r.New.acquireLocked(key); err != nil {
					refused++
					return
				}
				defer e.mu.Unlock()
			}
			s := e.slot(j)
			copyBucket(s.bucketFor(p.start, size), &p.cur, withOthers)
			if b := p.prev.Load(); b != nil {
				copyBucket(s.bucketFor(p.start-size, size), b, withOthers)
			}
			if withOthers && old.fetched() {
				e.markFetched()
			}
			r.New.dirtied(e) // the copies are the successor's to push
		}
	})
	return refused
}

// copyBucket adds from's counts to to (nil: a window too old to count).
func copyBucket(to, from *bucket, withOthers bool) {
	if to == nil {
		return
	}
	to.own.Add(from.own.Load())
	if withOthers {
		to.others.Store(from.others.Load())
	}
}
