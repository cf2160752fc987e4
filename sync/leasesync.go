package sync

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// Leases through a Syncer.
//
// Synchronous namespaces: Acquire, Release and Renew go to the store,
// which decides (exact across nodes). A call the store does not answer
// may still have been applied: an Acquire that fails leaves a release of
// its id for the tick to send, so a lease no caller holds cannot stay
// behind; a Release that fails is sent by the tick until the lease would
// have expired. While the store is down an Acquire fails with
// ErrUnavailable, or with OnStoreDown "local" is decided from this
// node's own leases, which the tick then writes to the store.
//
// Periodic namespaces: Acquire is decided in the node from its own
// leases and the others' count of the last tick (of a key new to the
// node: read from the store first); the tick writes every
// lease of the node to the store (learning which were released
// elsewhere) and reads every held key's count. A lease of this node is
// released and renewed in the node; another node's goes to the store at
// once (its release, when the store fails, with the tick).

// ErrNoLeaseStore is wrapped by the error of a lease call in a namespace
// whose store cannot hold leases.
var ErrNoLeaseStore = fmt.Errorf("%w: the store cannot hold leases", node.ErrNotLocal)

func (lz leaseSync) leaseStore() (LeaseStore, error) {
	s := lz.s
	ls, ok := s.can.ls, s.can.ls != nil
	if !ok {
		return nil, fmt.Errorf("%w (namespace %q)", ErrNoLeaseStore, s.name)
	}
	return ls, nil
}

// leaseCall sends ops to the store within CallTimeout and records the
// outcome as the other synchronous calls do.
func (lz leaseSync) leaseCall(ctx context.Context, ls LeaseStore, now time.Time, ops ...LeaseOp) ([]LeaseReply, error) {
	s := lz.s
	replies := make([]LeaseReply, len(ops))
	cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	tctx, end := s.trace(cctx, "Leases", len(ops))
	err := ls.Leases(tctx, now.UnixNano(), ops, replies)
	end(err)
	s.observe(ctx, err)
	if err != nil {
		s.fallback(err)
		return nil, fmt.Errorf("sync: leases of namespace %q: %w", s.name, errors.Join(ErrUnavailable, err))
	}
	return replies, nil
}

// releaseUntil is until when a release must be remembered: the longest a
// lease of the namespace can live from now.
func (lz leaseSync) releaseUntil(now time.Time) int64 {
	s := lz.s
	return now.Add(s.ns.Config().MaxLeaseTTL).UnixNano()
}

// AcquireLease takes a lease of key at now: in the store (synchronous) or
// in the node (periodic), as the comment above says. ttl and limit are
// valid (the service checked them).
func (lz leaseSync) acquire(ctx context.Context, now time.Time, key string, limit int64, ttl time.Duration) (ratelimit.LeaseGrant, error) {
	s := lz.s
	ls, err := lz.leaseStore()
	if err != nil {
		return ratelimit.LeaseGrant{}, err
	}
	leases := s.ns.Leases()
	if !s.sync {
		// A key new to the node: the others may hold it at its limit, so
		// their count is read first (a failure leaves it to the tick).
		if !leases.Read(now, key) && s.storeUp() {
			r, err := lz.leaseCall(ctx, ls, now, LeaseOp{Kind: LeaseCount, Namespace: s.name, Key: key})
			if err == nil {
				read := node.LeaseTick{Key: key, Counted: true, KeyHeld: r[0].Held, KeyNext: r[0].Next}
				if err := leases.ApplyTick(now, &read); err != nil {
					return ratelimit.LeaseGrant{}, err
				}
			}
		}
		return leases.Acquire(now, key, limit, ttl)
	}
	var cerr error
	if s.storeUp() {
		t := node.LeaseTick{Key: key} // a new lease
		leases.TakeTick(now, &t)
		exp := now.Add(ttl).UnixNano()
		r, err := lz.leaseCall(ctx, ls, now, LeaseOp{Kind: LeaseAcquire, Namespace: s.name, Key: key,
			ID: t.StoreID, Limit: limit, Expiry: exp})
		if err == nil {
			g := ratelimit.LeaseGrant{OK: r[0].OK, Held: r[0].Held, Next: r[0].Next}
			if g.OK {
				g.ID, g.Expiry = t.ID, exp
			}
			return g, nil
		}
		// The store may have granted it (also when the caller gave up
		// first): the tick releases it.
		t.Unsent, t.Until = true, exp
		if rerr := leases.ApplyTick(now, &t); rerr != nil {
			return ratelimit.LeaseGrant{}, rerr
		}
		if ctx.Err() != nil {
			return ratelimit.LeaseGrant{}, ctx.Err()
		}
		cerr = err
	} else {
		cerr = fmt.Errorf("sync: leases of namespace %q: %w: %w", s.name, ErrUnavailable, errPresumedDown)
	}
	if s.cfg.OnStoreDown == StoreDownLocal {
		return leases.Acquire(now, key, limit, ttl)
	}
	return ratelimit.LeaseGrant{}, cerr
}

// ReleaseLease frees id at now and reports whether it was live; pending
// when the store could not be told yet (the tick tells it).
func (lz leaseSync) release(ctx context.Context, now time.Time, id ratelimit.LeaseID) (ok, pending bool, err error) {
	s := lz.s
	ls, err := lz.leaseStore()
	if err != nil {
		return false, false, err
	}
	leases := s.ns.Leases()
	sync := s.sync
	t := node.LeaseTick{Key: id.Key, ID: id}
	leases.TakeTick(now, &t)
	if t.Mine {
		// A lease this node granted (in a synchronous namespace: while the
		// store was down) is released here, and in the store by the tick.
		live, err := leases.Release(now, id, true)
		if err != nil || live || !sync {
			return live, false, err
		}
	}
	until := lz.releaseUntil(now)
	if s.storeUp() {
		r, err := lz.leaseCall(ctx, ls, now, LeaseOp{Kind: LeaseRelease, Namespace: s.name, Key: id.Key,
			ID: t.StoreID, Expiry: until})
		if err == nil {
			return r[0].OK, false, nil
		}
	}
	// Also when the caller gave up: the release is the tick's now.
	t.Unsent, t.Until = true, until
	if err := leases.ApplyTick(now, &t); err != nil {
		return false, false, err
	}
	return false, true, nil
}

// RenewLease sets id to expire ttl after now, if it is live.
func (lz leaseSync) renew(ctx context.Context, now time.Time, id ratelimit.LeaseID, ttl time.Duration) (bool, int64, error) {
	s := lz.s
	ls, err := lz.leaseStore()
	if err != nil {
		return false, 0, err
	}
	t := node.LeaseTick{Key: id.Key, ID: id}
	s.ns.Leases().TakeTick(now, &t)
	if t.Mine {
		ok, exp, err := s.ns.Leases().Renew(now, id, ttl)
		if err != nil || ok || !s.sync {
			return ok, exp, err
		}
	}
	if !s.storeUp() {
		return false, 0, fmt.Errorf("sync: leases of namespace %q: %w: %w", s.name, ErrUnavailable, errPresumedDown)
	}
	exp := now.Add(ttl).UnixNano()
	r, err := lz.leaseCall(ctx, ls, now, LeaseOp{Kind: LeaseRenew, Namespace: s.name, Key: id.Key, ID: t.StoreID, Expiry: exp})
	if err != nil {
		return false, 0, err
	}
	if !r[0].OK {
		return false, 0, nil
	}
	return true, exp, nil
}

// sync is a tick's part for leases: it sends the releases not sent yet
// and writes this node's leases; with all (periodic) it also reads the
// count of every key held. A synchronous namespace drops the leases the
// store now holds (its calls go to the store). Each batch, a key's ops
// whole, is applied as it is answered.
func (lz leaseSync) sync(ctx context.Context, now time.Time, all bool) error {
	s := lz.s
	ls, ok := s.can.ls, s.can.ls != nil
	if !ok {
		return nil
	}
	leases := s.ns.Leases()
	t := &s.ltick
	t.All, t.Keep = all, !s.sync
	leases.TakeTick(now, t)
	defer func() { clear(t.OpKey); clear(t.OpID) }() // the keys are not kept until the next tick
	var ops []LeaseOp
	var errs []error
	flush := func(start int) {
		if len(ops) == 0 {
			return
		}
		replies := make([]LeaseReply, len(ops))
		err := ls.Leases(ctx, now.UnixNano(), ops, replies)
		if err != nil {
			errs = append(errs, fmt.Errorf("sync: leases of namespace %q: %w", s.name, err))
		} else {
			for i, r := range replies {
				j := start + i
				t.Got[j], t.OK[j], t.Held[j], t.Next[j] = true, r.OK, r.Held, r.Next
			}
			errs = append(errs, leases.ApplyTick(now, t))
		}
		ops = ops[:0]
	}
	start := 0
	for i, key := range t.OpKey {
		if i > 0 && key != t.OpKey[i-1] && len(ops) >= s.cfg.BatchSize {
			flush(start)
			start = i
		}
		op := LeaseOp{Kind: LeasePut, Namespace: s.name, Key: key, ID: t.OpID[i], Expiry: t.OpUntil[i]}
		switch {
		case t.OpID[i] == "":
			op.Kind = LeaseCount
		case t.OpRelease[i]:
			op.Kind = LeaseRelease
		}
		ops = append(ops, op)
	}
	flush(start)
	return errors.Join(errs...)
}

// leaseSync is a namespace's leases across the cluster, as the comment
// above says.
type leaseSync struct{ s *Syncer }
