package sync

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// Resets across the cluster.
//
// A reset forgets a key's sliding-window counts in every window size:
// the windows that still count (the current and the previous one of
// each size) read 0 after it, on every node. It needs no operation of
// its own from a store: it is written as rows of an incarnation of its
// own, one per reset, whose totals cancel what the store holds. The
// syncer that takes it:
//
//  1. cancels the key's counts on its node (node.ResetKeyAt), reading
//     its own totals o;
//  2. reads, per window, the sum S of every incarnation's total but its
//     own (Fetch; earlier resets' rows included);
//  3. pushes, as a new incarnation, the row −S − o of each window.
//
// The store's sum of a window is then what was counted since (its own
// pushes carry on from o). Every reader gets it as it gets any push: a
// periodic node's next fetch (a change read reports the reset's rows as
// it reports any write), a synchronous call's exchange (its previous
// windows within sync.retry_period, as any late write). A node that
// missed the reset thus forgets the key at its next fetch, without
// knowing of it: what it counted and pushed before is cancelled in the
// sum it reads. What the other nodes counted but had not pushed when the
// reset read S (at most their last sync period's hits) survives it.
//
// Retries are harmless: pushing the reset's rows again changes nothing
// (same incarnation and version), and a reset taken again, after a
// failure or not, reads the first one's rows in S and cancels the
// whole sum once more. The rows expire as the windows' rows do.

// ResetAt forgets key's sliding-window counts at t, on this node and in
// the store (within TickTimeout). On a store error the node has
// forgotten them, until its next fetch reads them back, and the store
// has not, or not wholly: the error wraps ErrUnavailable, and taking
// the reset again completes it.
func (rz resets) key(ctx context.Context, t time.Time, key string) error {
	s := rz.s
	// Under the tick's lock: a tick that read the store before the reset
	// must not set the others it read after the node forgot them.
	s.tickMu.Lock()
	defer s.tickMu.Unlock()
	var buf [2 * node.MaxWindowSizes]node.ResetWindow
	ws, err := s.ns.ResetKeyAt(t, key, buf[:0])
	if err != nil {
		return err
	}
	s.calls.forget(key)
	ctx, cancel := context.WithTimeout(ctx, s.cfg.TickTimeout)
	defer cancel()
	keys := make([]WindowKey, len(ws))
	for i, w := range ws {
		keys[i] = WindowKey{Namespace: s.name, Size: w.Size, Start: w.Start, Key: key}
	}
	others := make([]int64, len(ws))
	if err := s.store.Fetch(ctx, s.inc, keys, others); err != nil {
		return fmt.Errorf("sync: reset of a key in namespace %q: %w", s.name, errors.Join(ErrUnavailable, err))
	}
	version := s.versions.Next()
	rows := make([]Row, 0, len(ws))
	for i, w := range ws {
		if total := -others[i] - w.Own; total != 0 {
			rows = append(rows, Row{WindowKey: keys[i], Total: total, Version: version,
				ExpireAt: time.Unix(0, w.Start).Add(2*w.Size + s.ttlPad)})
		}
	}
	if len(rows) > 0 {
		if err := s.store.Push(ctx, NewIncarnation(s.inc+"/reset"), rows); err != nil {
			return fmt.Errorf("sync: reset of a key in namespace %q: %w", s.name, errors.Join(ErrUnavailable, err))
		}
	}
	s.ns.SetResetOthers(key, ws)
	return nil
}

// ResetBucketsAt starts key's buckets named by limits (checked by
// node.CheckResetBuckets) again as new buckets at t: on this node at once
// and, with one store call of them all (BucketCall.Reset, within
// CallTimeout), in the store, whose new state every node takes with its
// next sync of the bucket. What another node consumed but had not sent
// when the store took the reset arrives later, on top of the new state.
// On a store error the node has reset the buckets, until its next sync
// takes the store's state back, and the store may not have: the error
// wraps ErrUnavailable, and taking the reset again completes it.
func (rz resets) buckets(ctx context.Context, t time.Time, key string, limits []ratelimit.Limit) error {
	s := rz.s
	bs, ok := s.can.bs, s.can.bs != nil
	if !ok {
		return &ratelimit.FieldError{Field: "buckets", Err: node.ErrNotLocal,
			Reason: fmt.Sprintf("the store of namespace %q cannot hold buckets", s.name)}
	}
	if len(limits) == 0 {
		return nil
	}
	// Under the tick's lock, as ResetAt: a tick's answer read before the
	// reset is not taken after it.
	s.tickMu.Lock()
	defer s.tickMu.Unlock()
	req := ratelimit.AllowRequest{Key: key, Limits: limits}
	_, err := s.ns.ExchangeBuckets(t, req, &node.AllowCheck{Buckets: len(limits)}, nil, func(tx *node.BucketTx) error {
		tx.Reset = true
		if _, err := (bucketSync{s}).callLocked(ctx, bs, tx.Buckets, t, 0, true); err != nil {
			return fmt.Errorf("sync: reset of buckets in namespace %q: %w", s.name, errors.Join(ErrUnavailable, err))
		}
		return nil
	})
	return err
}

// ClearLeasesAt frees every lease of key at now: this node's at once
// (their releases kept for the tick, as any release), and every lease
// the store holds with one LeaseClear (within CallTimeout). A periodic
// node that granted one of them learns it at its next tick (its Put
// answers OK = false) and drops it; a lease a node granted but had not
// written to the store yet survives. It returns how many leases were
// live in the store or on this node (at least one: ok). On a store error
// the node has freed its own and the store may not have freed the
// others': the error wraps ErrUnavailable, and taking the reset again
// completes it.
func (rz resets) leases(ctx context.Context, now time.Time, key string) (ok bool, err error) {
	s := rz.s
	ls, err := leaseSync{s}.leaseStore()
	if err != nil {
		return false, err
	}
	s.tickMu.Lock()
	defer s.tickMu.Unlock()
	mine := s.ns.Leases().Clear(now, key, true)
	r, err := leaseSync{s}.leaseCall(ctx, ls, now, LeaseOp{Kind: LeaseClear, Namespace: s.name, Key: key, Expiry: leaseSync{s}.releaseUntil(now)})
	if err != nil {
		return mine > 0, err
	}
	return mine > 0 || r[0].OK, nil
}

// resets takes a namespace's resets across the cluster, as the comment
// above says.
type resets struct{ s *Syncer }
