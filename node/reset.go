package node

import (
	"fmt"
	"strings"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// A reset forgets a key's sliding-window counts: every window that still
// counts, in every window size. On one node it sets each window's others
// to minus its own total, so that the key's rate reads 0 while the node's
// own total, which its store rows hold and its later pushes carry on
// from, is left as it is. What a store needs to forget the same counts
// is the package sync's (Calls.ResetAt): a row of its own that cancels
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
	if err := ratelimit.ValidateKey(key); err != nil {
		return dst, err
	}
	if ns.est != nil {
		return dst, fieldErr("key", ErrEstimatorKind,
			"namespace %q is an estimator namespace: its sketches cannot forget one key", ns.cfg.Name)
	}
	tn := t.UnixNano()
	n := len(dst)
	for _, size := range ns.sizes {
		ws := ratelimit.WindowStart(tn, time.Duration(size))
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
		ws := ratelimit.WindowStart(tn, time.Duration(size))
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

// A reset of buckets starts each bucket it names again as a new one at
// the reset's time: a token bucket full, a leaky bucket empty, a fixed
// bucket with nothing counted in its period. The node's own consumption
// of the bucket (what a store holds of it) is left as it is: a store
// replaces the shared state on its side (package sync, BucketCall.Reset).

// CheckResetBuckets validates limits, the buckets a reset names: each a
// token, leaky or fixed limit as an Allow takes it (its WaitTimeout and
// Strict are ignored), at most MaxLimits, no bucket twice. Errors name
// the field as buckets[i]...; a sliding-window limit is an
// ErrInvalidLimit on buckets[i], and an estimator namespace, which holds
// no buckets, refuses them (ErrEstimatorKind).
func (ns *Namespace) CheckResetBuckets(limits []ratelimit.Limit) error {
	if len(limits) > MaxLimits {
		return fieldErr("buckets", ratelimit.ErrInvalidLimit, "at most %d buckets, got %d", MaxLimits, len(limits))
	}
	var buf [MaxLimits]ratelimit.Limit
	ls := buf[:len(limits)]
	for i := range limits {
		if limits[i].Kind == ratelimit.WindowLimit {
			return fieldErr(fmt.Sprintf("buckets[%d]", i), ratelimit.ErrInvalidLimit,
				"is a sliding window: buckets names token, leaky or fixed buckets (a reset that names no bucket and no lease forgets the sliding windows)")
		}
		ls[i] = limits[i]
		ls[i].WaitTimeout, ls[i].Strict = 0, false
		if err := checkBucketLimit(ls, i); err != nil {
			if fe, ok := err.(*ratelimit.FieldError); ok {
				fe.Field = "buckets" + strings.TrimPrefix(fe.Field, "limits")
				fe.Reason = strings.ReplaceAll(fe.Reason, "limits[", "buckets[")
			}
			return err
		}
	}
	if ns.est != nil && len(limits) > 0 {
		return fieldErr("buckets[0]."+kindField(limits[0].Kind), ErrEstimatorKind,
			"namespace %q is an estimator namespace, which holds no buckets", ns.cfg.Name)
	}
	return nil
}

// ResetBucketsAt starts key's buckets named by limits (checked by
// CheckResetBuckets) again as new buckets at t, on this node only (a
// local-only namespace's reset; a syncing one's goes through
// BucketTx.Reset). A bucket the node does not hold is left alone: it
// is new when it is next used.
func (ns *Namespace) ResetBucketsAt(t time.Time, key string, limits []ratelimit.Limit) error {
	if err := ratelimit.ValidateKey(key); err != nil {
		return err
	}
	var buf [MaxLimits]heldBucket
	req := ratelimit.AllowRequest{Key: key, Limits: limits}
	hs := appendHeld(buf[:0], &req)
	tn := t.UnixNano()
	if err := ns.buckets.lockAll(hs, key, tn, false); err != nil {
		return err
	}
	defer unlockAll(hs)
	for i := range hs {
		if hs[i].e != nil {
			hs[i].e.resetAt(&hs[i].id, tn)
		}
	}
	return nil
}

// resetAt sets e to a new bucket's state at t. The caller holds e.mu.
func (e *bucketEntry) resetAt(id *bucketID, t int64) {
	e.val = id.Init(t)
}

// Clear frees every lease of key this table granted, and counts none of
// the others' leases of key until the next sync reads their count (a
// reset of the key's leases). With record, each release is kept for the
// next sync to send, as Release keeps it. It returns how many leases of
// this table were live.
func (l *Leases) Clear(now time.Time, key string, record bool) int {
	sh, k, _ := l.lockKey(key, now.UnixNano(), false)
	defer sh.mu.Unlock()
	if k == nil {
		return 0
	}
	n := len(k.own)
	for serial, o := range k.own {
		if record {
			id := ratelimit.LeaseID{Namespace: l.name, Key: key, Holder: l.holder, Serial: serial, Secret: o.secret}
			k.note(storeID(id), o.exp)
		}
		delete(k.own, serial)
	}
	k.others, k.nextOther = 0, 0
	return n
}
