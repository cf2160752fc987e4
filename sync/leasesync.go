package sync

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/limiterd/limiterd/node"
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
	ls, ok := s.store.(LeaseStore)
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
func (lz leaseSync) acquire(ctx context.Context, now time.Time, key string, limit int64, ttl time.Duration) (node.LeaseGrant, error) {
	s := lz.s
	ls, err := lz.leaseStore()
	if err != nil {
		return node.LeaseGrant{}, err
	}
	leases := s.ns.Leases()
	if !s.sync {
		// A key new to the node: the others may hold it at its limit, so
		// their count is read first (a failure leaves it to the tick).
		if !leases.Read(now, key) && s.storeUp() {
			r, err := lz.leaseCall(ctx, ls, now, LeaseOp{Kind: LeaseCount, Namespace: s.name, Key: key})
			if err == nil {
				if err := leases.SetRead(now, key, r[0].Held, r[0].Next); err != nil {
					return node.LeaseGrant{}, err
				}
			}
		}
		return leases.Acquire(now, key, limit, ttl)
	}
	var cerr error
	if s.storeUp() {
		id := leases.NewID(key)
		exp := now.Add(ttl).UnixNano()
		r, err := lz.leaseCall(ctx, ls, now, LeaseOp{Kind: LeaseAcquire, Namespace: s.name, Key: key,
			ID: id.StoreID(), Limit: limit, Expiry: exp})
		if err == nil {
			g := node.LeaseGrant{OK: r[0].OK, Held: r[0].Held, Next: r[0].Next}
			if g.OK {
				g.ID, g.Expiry = id, exp
			}
			return g, nil
		}
		// The store may have granted it (also when the caller gave up
		// first): the tick releases it.
		if rerr := leases.ReleaseElsewhere(now, id, exp); rerr != nil {
			return node.LeaseGrant{}, rerr
		}
		if ctx.Err() != nil {
			return node.LeaseGrant{}, ctx.Err()
		}
		cerr = err
	} else {
		cerr = fmt.Errorf("sync: leases of namespace %q: %w: %w", s.name, ErrUnavailable, errPresumedDown)
	}
	if s.cfg.OnStoreDown == StoreDownLocal {
		return leases.Acquire(now, key, limit, ttl)
	}
	return node.LeaseGrant{}, cerr
}

// ReleaseLease frees id at now and reports whether it was live; pending
// when the store could not be told yet (the tick tells it).
func (lz leaseSync) release(ctx context.Context, now time.Time, id node.LeaseID) (ok, pending bool, err error) {
	s := lz.s
	ls, err := lz.leaseStore()
	if err != nil {
		return false, false, err
	}
	leases := s.ns.Leases()
	sync := s.sync
	if id.Holder == leases.Holder() {
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
			ID: id.StoreID(), Expiry: until})
		if err == nil {
			return r[0].OK, false, nil
		}
	}
	// Also when the caller gave up: the release is the tick's now.
	if err := leases.ReleaseElsewhere(now, id, until); err != nil {
		return false, false, err
	}
	return false, true, nil
}

// RenewLease sets id to expire ttl after now, if it is live.
func (lz leaseSync) renew(ctx context.Context, now time.Time, id node.LeaseID, ttl time.Duration) (bool, int64, error) {
	s := lz.s
	ls, err := lz.leaseStore()
	if err != nil {
		return false, 0, err
	}
	if id.Holder == s.ns.Leases().Holder() {
		ok, exp, err := s.ns.Leases().Renew(now, id, ttl)
		if err != nil || ok || !s.sync {
			return ok, exp, err
		}
	}
	if !s.storeUp() {
		return false, 0, fmt.Errorf("sync: leases of namespace %q: %w: %w", s.name, ErrUnavailable, errPresumedDown)
	}
	exp := now.Add(ttl).UnixNano()
	r, err := lz.leaseCall(ctx, ls, now, LeaseOp{Kind: LeaseRenew, Namespace: s.name, Key: id.Key, ID: id.StoreID(), Expiry: exp})
	if err != nil {
		return false, 0, err
	}
	if !r[0].OK {
		return false, 0, nil
	}
	return true, exp, nil
}

// syncLeases is a tick's part for leases: it sends the releases not sent
// yet and writes this node's leases; with all (periodic) it also reads
// the count of every key held. A synchronous namespace drops the leases
// the store now holds (its calls go to the store).
func (lz leaseSync) sync(ctx context.Context, now time.Time, all bool) error {
	s := lz.s
	ls, ok := s.store.(LeaseStore)
	if !ok {
		return nil
	}
	leases := s.ns.Leases()
	sync := s.sync
	s.lsync = leases.Collect(now, all, s.lsync[:0])
	defer clear(s.lsync)
	var ops []LeaseOp
	var firstOp []int
	var errs []error
	flush := func(part []node.LeaseSync) {
		if len(ops) == 0 {
			return
		}
		replies := make([]LeaseReply, len(ops))
		err := ls.Leases(ctx, now.UnixNano(), ops, replies)
		if err != nil {
			errs = append(errs, fmt.Errorf("sync: leases of namespace %q: %w", s.name, err))
		} else {
			for i, ks := range part {
				r := replies[firstOp[i]:]
				r = r[len(ks.Releases):]
				stored := make([]bool, len(ks.Serials))
				for j := range stored {
					stored[j] = r[j].OK
				}
				var count LeaseReply
				if all {
					count = r[len(ks.Serials)]
				}
				leases.Synced(now, ks, stored, !sync, all, count.Held, count.Next)
			}
		}
		ops, firstOp = ops[:0], firstOp[:0]
	}
	start := 0
	for i, ks := range s.lsync {
		if len(ops) >= s.cfg.BatchSize {
			flush(s.lsync[start:i])
			start = i
		}
		firstOp = append(firstOp, len(ops))
		for id, until := range ks.Releases {
			ops = append(ops, LeaseOp{Kind: LeaseRelease, Namespace: s.name, Key: ks.Key, ID: id, Expiry: until})
		}
		for j := range ks.Serials {
			id := ks.ID(s.name, leases.Holder(), j)
			ops = append(ops, LeaseOp{Kind: LeasePut, Namespace: s.name, Key: ks.Key, ID: id.StoreID(), Expiry: ks.Expiries[j]})
		}
		if all {
			ops = append(ops, LeaseOp{Kind: LeaseCount, Namespace: s.name, Key: ks.Key})
		}
	}
	flush(s.lsync[start:])
	return errors.Join(errs...)
}

// leaseSync is a namespace's leases across the cluster, as the comment
// above says.
type leaseSync struct{ s *Syncer }
