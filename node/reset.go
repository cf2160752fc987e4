package node

import (
	"time"
)

// A reset forgets a key's sliding-window counts: every window that still
// counts, in every window size. On one node it sets each window's others
// to minus its own total, so that the key's rate reads 0 while the node's
// own total, which its store rows hold and its later pushes carry on
// from, is left as it is. What a store needs to forget the same counts
// is the package sync's (Syncer.ResetAt): a row of its own that cancels
// the other rows' sum.

// ResetWindow is one window of a key as a reset found it: the node's own
// total at that moment, which the reset cancels.
type ResetWindow struct {
	Size  time.Duration
	Start int64 // Unix ns
	Own   int64 // micro-hits
}

// ResetKeyAt forgets key's sliding-window counts at t: for each window
// size, the window holding t and the one before it, the rate reads 0
// after it (hits counted while it runs may count or not). It appends to
// dst every such window with the node's own total as it cancelled it (0
// for a window or a key the node does not hold): two per window size,
// ascending. An estimator namespace cannot forget one key
// (ErrEstimatorKind); a key that is not valid is an ErrInvalidKey.
func (ns *Namespace) ResetKeyAt(t time.Time, key string, dst []ResetWindow) ([]ResetWindow, error) {
	if err := ValidateKey(key); err != nil {
		return dst, err
	}
	if ns.est != nil {
		return dst, fieldErr("key", ErrEstimatorKind,
			"namespace %q is an estimator namespace: its sketches cannot forget one key", ns.cfg.Name)
	}
	tn := t.UnixNano()
	n := len(dst)
	for _, size := range ns.sizes {
		ws := WindowStart(tn, time.Duration(size))
		dst = append(dst, ResetWindow{Size: time.Duration(size), Start: ws - size}, ResetWindow{Size: time.Duration(size), Start: ws})
	}
	e := ns.shards.find(ns.shards.hash(key), key)
	if e == nil {
		return dst, nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead.Load() {
		return dst, nil
	}
	for i, size := range ns.sizes {
		ws := WindowStart(tn, time.Duration(size))
		cur, prev := e.slot(i).buckets(ws, size)
		w := dst[n+2*i:]
		for j, b := range [2]*bucket{prev, cur} {
			if b == nil {
				continue
			}
			own := b.own.Load()
			b.others.Store(-own)
			w[j].Own = own
		}
	}
	e.setOver(false)
	return dst, nil
}

// SetResetOthers sets the others of key's windows ws, as ResetKeyAt
// returned them, to minus the own totals it cancelled: what a store that
// took the reset answers for them (the syncer sets them again once the
// store holds the reset, so that a fetch that read the store before it
// does not bring the forgotten counts back).
func (ns *Namespace) SetResetOthers(key string, ws []ResetWindow) {
	e := ns.shards.find(ns.shards.hash(key), key)
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead.Load() {
		return
	}
	for _, w := range ws {
		i := ns.sizeIndex(w.Size)
		if i < 0 {
			continue
		}
		if b, _ := e.slot(i).buckets(w.Start, int64(w.Size)); b != nil {
			b.others.Store(-w.Own)
		}
	}
}
