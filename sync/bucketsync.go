package sync

import (
	"context"
	"fmt"
	gosync "sync"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// A node's side of the buckets across the cluster (see bucket.go for the
// store's). Every take is decided with the node's own consumption exact
// and at once:
//
//   - synchronous namespaces ask the store, which decides atomically (one
//     BucketStore call, all the Allow's buckets or none) while the buckets
//     stay locked here, so this node's totals reach the store in order.
//     When the store fails or is presumed down, the node decides from its
//     own state and counts the take; the tick brings it to the store later;
//   - periodic namespaces decide locally; a bucket this node never read
//     from the store is read first (one call, while the store is up), so a
//     restarted node starts from the cluster's state, not a full bucket.
//     Every tick syncs every bucket held: it sends this node's consumption
//     and takes the store's state, on which the node applies what it took
//     since. Near a bucket's capacity, when the namespace escalates, the
//     store decides the take as for a synchronous namespace, the buckets
//     locked here (escalate.go); the store's answers, ticks' and takes',
//     teach the node the others' rate of consumption (node/bucketmargin.go).

// maxBucketCalls bounds the store calls one tick has in flight: a call
// holds the buckets of one key.
const maxBucketCalls = 16

// errNoBuckets is the reason of a bucket limit in a namespace whose store
// cannot hold buckets.
func (bk bucketSync) errNoBuckets(req *ratelimit.AllowRequest) error {
	s := bk.s
	for i, l := range req.Limits {
		if l.Kind != ratelimit.WindowLimit {
			return &ratelimit.FieldError{Field: fmt.Sprintf("limits[%d]", i), Err: node.ErrNotLocal,
				Reason: fmt.Sprintf("the store of namespace %q cannot hold %ss; use a local-only namespace or another store", s.name, l.Kind)}
		}
	}
	return nil
}

// allowBuckets serves an Allow with bucket limits (checked: c).
func (bk bucketSync) allow(ctx context.Context, t time.Time, req ratelimit.AllowRequest, c *node.AllowCheck, dst []ratelimit.LimitStatus) (ratelimit.Decision, error) {
	s := bk.s
	if !s.sync {
		if bs, err := bk.readFirst(ctx, t, req, c); err != nil || bs == nil {
			return ratelimit.Decision{Limits: dst}, err
		}
		return s.ns.AllowAt(t, req, dst)
	}
	bs := s.can.bs
	if bs == nil {
		return ratelimit.Decision{Limits: dst}, bk.errNoBuckets(&req)
	}
	if c.Buckets != len(req.Limits) {
		return ratelimit.Decision{Limits: dst}, &ratelimit.FieldError{Field: "limits", Err: node.ErrNotLocal,
			Reason: fmt.Sprintf("namespace %q is synchronous: its store decides buckets and sliding windows apart, so one Allow cannot hold both; send them in two calls", s.name)}
	}
	return bk.decide(ctx, bs, t, req, c, dst, false)
}

// decide has the store decide req, an Allow of buckets alone (checked:
// c), atomically while its buckets stay locked here, and takes its
// answer: a synchronous namespace's Allow, and a periodic one's near a
// capacity (escalate.go). With probed the caller has just had storeUp
// say yes; otherwise a store presumed down is not asked. When the store
// is not asked or fails, the node decides from its own state.
func (bk bucketSync) decide(ctx context.Context, bs BucketStore, t time.Time, req ratelimit.AllowRequest, c *node.AllowCheck, dst []ratelimit.LimitStatus, probed bool) (ratelimit.Decision, error) {
	return bk.s.ns.ExchangeBuckets(t, req, c, dst, bk.decideTx(ctx, bs, c.Cost, probed))
}

// decideTx is decide's exchange: the store decides a take of cost from
// the buckets of a BucketTx (a Decide), at the exchange's time.
func (bk bucketSync) decideTx(ctx context.Context, bs BucketStore, cost int64, probed bool) func(*node.BucketTx) error {
	s := bk.s
	return func(tx *node.BucketTx) error {
		tx.Decide = true
		if !probed && !s.storeUp() {
			s.fallback(errPresumedDown)
			return nil
		}
		// On an error the store may have applied the take; if so, the
		// next call of this node holds it (BucketReply.Applied) and counts
		// it once. Meanwhile the node decides.
		if allowed, err := bk.callLocked(ctx, bs, tx.Buckets, tx.At, cost, false); err == nil {
			tx.Verdict = verdict(allowed)
		}
		return nil
	}
}

// readFirst is a periodic namespace's start of an Allow with bucket
// limits (checked: c): a store that cannot hold buckets refuses it
// (errNoBuckets, and a nil store); a bucket never read from the store is
// read first, while the store is up. It returns the store.
func (bk bucketSync) readFirst(ctx context.Context, t time.Time, req ratelimit.AllowRequest, c *node.AllowCheck) (BucketStore, error) {
	s := bk.s
	bs := s.can.bs
	if bs == nil {
		return nil, bk.errNoBuckets(&req)
	}
	if !s.ns.BucketsSynced(&req) && s.storeUp() {
		if err := bk.readBuckets(ctx, bs, t, req, c); err != nil {
			return nil, err
		}
	}
	return bs, nil
}

// readBuckets reads the store's state of req's buckets into the node (a
// periodic namespace's first call on them). A store that fails leaves
// them as they are: the call is decided locally and the tick tries again.
func (bk bucketSync) readBuckets(ctx context.Context, bs BucketStore, t time.Time, req ratelimit.AllowRequest, c *node.AllowCheck) error {
	_, err := bk.s.ns.ExchangeBuckets(t, req, c, nil, func(tx *node.BucketTx) error {
		bk.callLocked(ctx, bs, tx.Buckets, t, 0, false)
		return nil
	})
	return err
}

// callLocked sends the store one call of buckets, locked, at t taking
// take (with reset, a reset of them: BucketCall.Reset), within
// CallTimeout, and records the store's answers in buckets (a failure is
// logged and presumes the store down).
func (bk bucketSync) callLocked(ctx context.Context, bs BucketStore, buckets []node.BucketSync, t time.Time, take int64, reset bool) (bool, error) {
	s := bk.s
	version := s.versions.Next()
	calls := make([]BucketCall, len(buckets))
	for i := range calls {
		calls[i] = bk.bucketCall(&buckets[i], version, t)
		calls[i].Reset = reset
	}
	replies := make([]BucketReply, len(calls))
	cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	tctx, end := s.trace(cctx, "Buckets", len(calls))
	allowed, err := bs.Buckets(tctx, s.inc, t.UnixNano(), take, calls, replies)
	end(err)
	s.observe(ctx, err)
	if err != nil {
		s.fallback(err)
		return allowed, err
	}
	answered(buckets, replies)
	return allowed, nil
}

// answered records the store's replies in the buckets of its call.
func answered(buckets []node.BucketSync, replies []BucketReply) {
	for i := range buckets {
		b, r := &buckets[i], &replies[i]
		b.Got, b.Before, b.After, b.Applied, b.Seq = true, r.Before, r.After, r.Applied, r.Seq
	}
}

func (bk bucketSync) bucketCall(b *node.BucketSync, version int64, t time.Time) BucketCall {
	s := bk.s
	return BucketCall{Namespace: s.name, Bucket: b.Spec, Life: b.Life, Total: b.Own, ApplyAt: b.ApplyAt,
		Version: version, ExpireAt: t.Add(b.Spec.Hold() + s.ttlPad)}
}

// sync is a tick's part for buckets: with all every bucket held, else
// those whose consumption has not all reached the store; one store call
// per key, at most maxBucketCalls at once. The answers are taken when all
// calls are done.
func (bk bucketSync) sync(ctx context.Context, now time.Time, all bool) error {
	s := bk.s
	bs, ok := s.can.bs, s.can.bs != nil
	if !ok {
		return nil
	}
	tick := &s.btick
	parts := node.DirtyBuckets
	if all {
		parts = node.AllBuckets
	}
	// The version is taken before the totals: a call of this node that
	// takes its totals after them (an escalated take) then has a newer
	// version, so the store never takes it for older than this tick's
	// and refuses it as a replay while it carries more.
	version := s.versions.Next()
	s.ns.TakeTick(now, tick, parts)
	defer clear(tick.Buckets)
	if len(tick.Buckets) == 0 {
		return nil
	}
	var (
		wg    gosync.WaitGroup
		sem   = make(chan struct{}, maxBucketCalls)
		errMu gosync.Mutex
		first error
		fails int
	)
	for lo := 0; lo < len(tick.Buckets); {
		hi := lo + 1
		for hi < len(tick.Buckets) && tick.Buckets[hi].Spec.Key == tick.Buckets[lo].Spec.Key {
			hi++
		}
		group := tick.Buckets[lo:hi]
		lo = hi
		sem <- struct{}{}
		if ctx.Err() != nil {
			<-sem
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			calls := make([]BucketCall, len(group))
			for i := range group {
				calls[i] = bk.bucketCall(&group[i], version, now)
			}
			replies := make([]BucketReply, len(calls))
			if _, err := bs.Buckets(ctx, s.inc, now.UnixNano(), 0, calls, replies); err != nil {
				errMu.Lock()
				if first == nil {
					first = err
				}
				fails += len(group)
				errMu.Unlock()
				return
			}
			answered(group, replies)
		})
	}
	wg.Wait()
	s.ns.ApplyTick(tick)
	if first != nil {
		return fmt.Errorf("sync: sync %d of %d buckets of namespace %q: %w", fails, len(tick.Buckets), s.name, first)
	}
	return ctx.Err()
}

// bucketSync is a namespace's buckets across the cluster, as the comment
// above says.
type bucketSync struct{ s *Syncer }
