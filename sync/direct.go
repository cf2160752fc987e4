package sync

import (
	"context"
	"errors"
	gosync "sync"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// The write-through calls of a synchronous namespace (sync_rate = 0). Each
// store call, bounded by CallTimeout, holds the key's lock, so this node's
// totals and versions reach the store in order; the calls of one key that
// queue meanwhile share the next store call (group.go). When the store fails
// or times out the call answers from local counts (this node's exact total
// plus the others' last known totals) and the key stays dirty for the
// background tick: never an unlimited answer because the store failed.
//
// After a failed call the store is presumed down for CallTimeout: the
// calls of that time answer from local counts without calling it, and then
// one call probes it (its success ends the presumption, its failure
// renews it). Without that, during an outage every synchronous call — and
// every item of a batch, one after the other — would wait CallTimeout.

// errPresumedDown is the fallback reason of calls not sent to the store.
var errPresumedDown = errors.New("store presumed down after a failed call")

// storeUp reports whether a synchronous call should go to the store: no
// failure recently, or this caller is the one probe after CallTimeout.
func (s *Syncer) storeUp() bool {
	until := s.downUntil.Load()
	if until == 0 {
		return true
	}
	now := s.ns.Now().UnixNano()
	return now >= until && s.downUntil.CompareAndSwap(until, now+int64(s.cfg.CallTimeout))
}

// observe records a synchronous call's outcome. A call its own caller
// cancelled says nothing about the store.
func (s *Syncer) observe(caller context.Context, err error) {
	switch {
	case err == nil:
		if s.downUntil.Load() != 0 {
			s.downUntil.Store(0)
		}
	case caller.Err() == nil:
		s.downUntil.Store(s.ns.Now().Add(s.cfg.CallTimeout).UnixNano())
	}
}

// IncrementAt counts value for key at t like node.Namespace.IncrementAt,
// writes this node's new totals through and answers with the store's merged
// rates.
func (wt *synchronous) IncrementAt(ctx context.Context, t time.Time, key string, size time.Duration, value float64, dst []ratelimit.Rate) ([]ratelimit.Rate, error) {
	m, err := ratelimit.ToMicro(value)
	if err != nil {
		return dst, err
	}
	sizes, err := wt.sizes(size)
	if err != nil {
		return dst, err
	}
	if err := ratelimit.ValidateKey(key); err != nil {
		return dst, err
	}
	c := newCall(kindExchange, t)
	defer freeCall(c)
	c.sizes, c.m, c.rates = sizes, m, dst
	if err := wt.run(ctx, key, c); err != nil {
		return dst, err
	}
	return c.rates, c.err
}

// RateAt answers like node.Namespace.RateAt with the store's current
// totals for key (falling back to local counts), counting nothing.
func (wt *synchronous) RateAt(ctx context.Context, t time.Time, key string, size time.Duration, curDiff float64, dst []ratelimit.Rate) ([]ratelimit.Rate, error) {
	m, err := ratelimit.ToMicroField("cur_diff", curDiff)
	if err != nil {
		return dst, err
	}
	sizes, err := wt.sizes(size)
	if err != nil {
		return dst, err
	}
	if err := ratelimit.ValidateKey(key); err != nil {
		return dst, err
	}
	c := newCall(kindExchange, t)
	defer freeCall(c)
	c.sizes, c.rate, c.extra, c.rates = sizes, true, m, dst
	if err := wt.run(ctx, key, c); err != nil {
		return dst, err
	}
	return c.rates, c.err
}

// sizes returns the window sizes a call with size addresses (0: every
// size).
func (wt *synchronous) sizes(size time.Duration) ([]time.Duration, error) {
	s := wt.s
	lo, hi, err := s.ns.SizeRange(size)
	if err != nil {
		return nil, err
	}
	return s.ns.Sizes()[lo:hi], nil
}

// exchange pushes this node's current and previous totals of sizes and
// stores the others' totals it reads back, all in one round trip when the
// store is a PushFetcher. A window the store already holds goes with the
// version it was stored with, so the store rewrites only what changed.
//
// The previous windows are closed, so a call that addresses every size
// sends them only when prevReads.fresh says they need reading again; the
// other calls in the same windows send only the current windows (and a
// previous one the store does not hold yet): half the store's work.
func (wt *synchronous) exchange(caller context.Context, k *node.KeyLock, sizes []time.Duration) {
	s := wt.s
	if !s.storeUp() {
		s.fallback(errPresumedDown)
		return
	}
	ctx, cancel := context.WithTimeout(caller, s.cfg.CallTimeout)
	defer cancel()
	version := s.versions.Next()
	every := len(sizes) == len(s.ns.Sizes())
	prevFresh := every && wt.prevReads.fresh(k.Key, k.At, sizes, s.cfg.CallTimeout)
	var buf [2 * node.MaxWindowSizes]node.Pending
	pend := buf[:0]
	rows := make([]Row, 0, 2*len(sizes))
	for _, size := range sizes {
		cur, prev := k.Window(size)
		pend = append(pend, cur)
		rows = append(rows, s.callRow(k, cur, version))
		if _, stored := k.Stored(prev); prevFresh && stored {
			continue
		}
		pend = append(pend, prev)
		rows = append(rows, s.callRow(k, prev, version))
	}
	readPrev := every && !prevFresh && !k.At.After(s.ns.Now())
	others := make([]int64, len(rows))
	var err error
	if pf := s.can.pf; pf != nil {
		tctx, end := s.trace(ctx, "PushFetch", len(rows))
		err = pf.PushFetch(tctx, s.inc, rows, others)
		end(err)
	} else {
		tctx, end := s.trace(ctx, "Push", len(rows))
		err = s.store.Push(tctx, s.inc, rows)
		end(err)
		if err == nil {
			keys := make([]WindowKey, len(rows))
			for i := range rows {
				keys[i] = rows[i].WindowKey
			}
			tctx, end := s.trace(ctx, "Fetch", len(keys))
			err = s.store.Fetch(tctx, s.inc, keys, others)
			end(err)
		}
	}
	s.observe(caller, err)
	if err != nil {
		for j, p := range pend {
			if rows[j].Version == version {
				k.Pushed(p, node.Uncertain)
			}
		}
		s.fallback(err)
		return
	}
	for j, p := range pend {
		k.Pushed(p, rows[j].Version)
		k.SetOthers(p, others[j])
	}
	if readPrev {
		wt.prevReads.mark(k.Key, k.At)
	}
}

// fallback counts a call answered from local counts and logs the store's
// error. The calls of a presumed outage are counted only: a line each
// would bury the failure that began it.
func (s *Syncer) fallback(err error) {
	s.m.Fallback(s.name)
	if err != errPresumedDown {
		s.log.Debug("synchronous store call failed; answered from local counts", "err", err)
	}
}

// AllowAt decides like node.Namespace.AllowAt. An Allow with bucket
// limits goes as bucketsync.go says, in a periodic namespace too. For
// sliding windows the store decides across the cluster in one atomic step
// (exact), together with the Allows of the key that queued meanwhile (a
// synchronous namespace's store decides: NewSyncer). A ctx that ends
// while the call queues returns its error, nothing counted (group.go).
func (wt *synchronous) AllowAt(ctx context.Context, t time.Time, req ratelimit.AllowRequest, dst []ratelimit.LimitStatus) (ratelimit.Decision, error) {
	s := wt.s
	chk, err := s.ns.CheckAllow(req)
	if err != nil {
		return ratelimit.Decision{Limits: dst}, err
	}
	if chk.Buckets > 0 {
		return bucketSync{s}.allow(ctx, t, req, &chk, dst)
	}
	if err := ratelimit.ValidateKey(req.Key); err != nil {
		return ratelimit.Decision{Limits: dst}, err
	}
	c := newCall(kindAllowGroup, t)
	defer freeCall(c)
	c.req, c.chk, c.dec.Limits = req, chk, dst
	if err := wt.run(ctx, req.Key, c); err != nil {
		return ratelimit.Decision{Limits: dst}, err
	}
	return c.dec, c.err
}

// oneAllow is the store call of one Allow: a group of one entry, its
// windows those of the entry's limits in order. They are pooled, as the
// store keeps nothing of a call.
type oneAllow struct {
	req     GroupAllowRequest
	entry   [1]GroupEntry
	windows [node.MaxLimits]GroupWindow
	limits  [node.MaxLimits]GroupLimit
	allowed [1]bool
	others  [node.MaxLimits][2]int64
}

var oneAllowPool = gosync.Pool{New: func() any { return new(oneAllow) }}

// decideInStore has the store decide req atomically for the key k holds,
// as a group of one, sending this node's own rows of every limit, and
// completes the decision with the store's verdict and the others' totals
// it read. When the call fails the decision is taken from local counts
// and the rows sent stay dirty. The caller has checked storeUp.
func (s *Syncer) decideInStore(ctx context.Context, k *node.KeyLock, req ratelimit.AllowRequest, chk *node.AllowCheck, dst []ratelimit.LimitStatus) ratelimit.Decision {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	version := s.versions.Next()
	lims := chk.Limits()
	one := oneAllowPool.Get().(*oneAllow)
	defer func() {
		clear(one.windows[:len(lims)]) // drops the rows' strings
		oneAllowPool.Put(one)
	}()
	one.req = GroupAllowRequest{Inc: s.inc, At: k.At.UnixNano(), Windows: one.windows[:len(lims)], Entries: one.entry[:]}
	for i, l := range lims {
		cur, prev := k.Window(l.Size)
		one.windows[i] = GroupWindow{Size: l.Size, Cur: s.row(cur, version), Prev: s.callRow(k, prev, version)}
		one.limits[i] = GroupLimit{Window: i, Limit: l.Limit}
	}
	one.entry[0] = GroupEntry{Cost: chk.Cost, CountRejected: req.CountRejected, Limits: one.limits[:len(lims)]}
	wins, others := one.req.Windows, one.others[:len(lims)]
	tctx, end := s.trace(cctx, "AllowGroup", 1)
	err := s.can.ga.AllowGroup(tctx, &one.req, one.allowed[:], others)
	end(err)
	s.observe(ctx, err)
	if err != nil {
		// The store may have written the rows sent with a new version.
		for i := range wins {
			cur, prev := k.Window(wins[i].Size)
			k.Pushed(cur, node.Uncertain)
			if wins[i].Prev.Version == version {
				k.Pushed(prev, node.Uncertain)
			}
		}
		s.fallback(err)
		return k.Decide(req, chk, node.NoVerdict, dst)
	}
	for i := range wins {
		cur, prev := k.Window(wins[i].Size)
		k.SetOthers(cur, others[i][0])
		k.SetOthers(prev, others[i][1])
	}
	d := k.Decide(req, chk, verdict(one.allowed[0]), dst)
	// The store wrote prev as sent and cur with the cost when it was
	// counted, which is exactly this node's total now.
	for i := range wins {
		cur, prev := k.Window(wins[i].Size)
		k.Pushed(cur, version)
		k.Pushed(prev, wins[i].Prev.Version)
	}
	return d
}

// callRow is p's row for a synchronous call: sent with the version its
// total was stored with when the store already holds it (the store need
// not rewrite it), else with version.
func (s *Syncer) callRow(k *node.KeyLock, p node.Pending, version int64) Row {
	if v, ok := k.Stored(p); ok {
		return s.row(p, v)
	}
	return s.row(p, version)
}

// verdict is a store's decision as the node takes it.
func verdict(allowed bool) node.Verdict {
	if allowed {
		return node.StoreAllowed
	}
	return node.StoreDenied
}
