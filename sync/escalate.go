package sync

import (
	"context"
	"slices"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// Escalation: a periodic namespace's Allow at synchronous quality where it
// matters. A periodic node sees the other nodes' hits only as of its last
// fetch, up to Blind = 2 × sync_rate + d (d the last tick's duration)
// late. Far below a limit that cannot change an answer; near it, it is
// all that matters. So allowNear decides in the node while the key's
// rate, plus the cost, plus the others' recent rate × Blind ×
// EscalateSafety (at least one more call; see node.Namespace.AllowMarginAt)
// stays under every limit, and otherwise asks the store to
// decide atomically, exactly as a synchronous namespace's AllowAt does
// (one round trip, decideInStore). A request that does not fit even by
// the node's own view is refused in the node: that view never exceeds the
// cluster's count.
//
// A key whose others' totals this node never fetched goes to the store
// too, whatever its margin: the node cannot tell whether other nodes hold
// it at its limit (after a restart every key is such a key). That costs
// one round trip per key new to the node, which a long tail of keys pays
// often; Config.EscalateNewKeys limits it to the node's first moments,
// and on a ChangeReader store learning ends it once the node's change
// reads cover every window that counts (learn.go).
//
// Buckets escalate the same way (allowBucketsNear): a periodic node takes
// from a bucket alone while the state its take leaves keeps room for the
// others' expected consumption over Blind × EscalateSafety (their rate,
// learned from the store's answers, or this node's own if higher; at
// least one more call; see node/bucketmargin.go), and otherwise the
// store decides the take atomically, as a synchronous namespace's bucket
// Allow does (bucketSync.decide: the buckets locked here, one call, the
// node's state taken from the answer). An Allow with windows too has its
// windows decided here, the key held until the store answers for the
// buckets (node.Namespace.AllowKindsAt): the store decides the two kinds
// apart, and the windows keep the node's view, with no margin, as
// without escalation. A bucket never read is read first, as without
// escalation, so a restarted node starts from the cluster's state.

// Only a store that decides atomically (Decide) escalates; on one that
// cannot (Cassandra) a periodic namespace decides in the node, and a
// config refuses escalate: auto there. While the store is presumed down
// after a failed call (see direct.go) nothing escalates: the node decides
// as without escalation, and one call after CallTimeout probes the store
// again.
//
// A key new to the node is queued for a fetch at once, in the background
// (fetchFresh, one goroutine started by Run), so it is not blind until the
// next tick; a full queue drops it, and the next tick fetches it anyway.

// freshQueue is how many new keys may wait for their background fetch.
const freshQueue = 4096

// freshBatch is the most new keys one background fetch reads.
const freshBatch = 256

// Escalates reports whether the namespace is periodic with escalation on
// (Config.NoEscalate unset, and a store that decides): its Allow calls may
// escalate.
func (s *Syncer) Escalates() bool { return s.escalate }

// blind is how long the other nodes' newest hits may stay unseen here:
// a period for them to push and one for this node to fetch, plus a tick;
// longer when this node's last successful tick started longer ago than a
// period (a tick still running, or failing, under load).
func (pd *periodic) blind() time.Duration {
	s := pd.s
	tick := time.Duration(s.lastTick.Load())
	d := 2*s.period + tick
	if at := s.fetchedAt.Load(); at != 0 {
		d = max(d, time.Since(time.Unix(0, at))+s.period+tick)
	}
	return d
}

// presumedDown reports whether a failed store call makes the store
// presumed down at now (without claiming the probe, which storeUp does).
func (s *Syncer) presumedDown() bool {
	until := s.downUntil.Load()
	return until != 0 && s.ns.Now().UnixNano() < until
}

// allowNear decides a periodic namespace's Allow at t: in the node while
// it is clear of every limit, in the store (when it is a GroupAllower)
// near one; see the comment above. Its answers and errors are those of
// node.Namespace.AllowAt.
func (pd *periodic) allowNear(ctx context.Context, t time.Time, req ratelimit.AllowRequest, dst []ratelimit.LimitStatus) (ratelimit.Decision, error) {
	s := pd.s
	if !s.escalate || s.presumedDown() {
		return s.ns.AllowAt(t, req, dst)
	}
	m := node.Margin{Blind: pd.blind(), Safety: s.cfg.EscalateSafety,
		Unfetched: t.UnixNano() < pd.newKeysUntil, Known: ticker{s}.knownSizes(t)}
	d, near, err := s.ns.AllowMarginAt(t, req, m, dst)
	if err != nil || !near {
		return d, err
	}
	return pd.allowInStore(ctx, t, req, dst)
}

// allowInStore is allowNear's call near a limit. It is a function of its
// own so that its large frame is not on the stack of every call: a deeper
// stack than a goroutine starts with costs a copy of it on every call.
func (pd *periodic) allowInStore(ctx context.Context, t time.Time, req ratelimit.AllowRequest, dst []ratelimit.LimitStatus) (ratelimit.Decision, error) {
	s := pd.s
	if !s.storeUp() {
		return s.ns.AllowAt(t, req, dst)
	}
	chk, err := s.ns.CheckAllow(req)
	if err != nil {
		return ratelimit.Decision{Limits: dst}, err
	}
	k, err := s.ns.LockKey(t, req.Key)
	if err != nil {
		return ratelimit.Decision{Limits: dst}, err
	}
	defer k.Unlock()
	s.m.Escalated(s.name)
	return s.decideInStore(ctx, k, req, &chk, dst), nil
}

// allowBucketsNear is allowNear for an Allow with bucket limits
// (checked: c): a bucket never read from the store is read first, as
// without escalation; then the node decides while every bucket keeps
// room for the others' expected consumption (node.Namespace.AllowMarginAt),
// and otherwise the store decides (bucketsInStore).
func (pd *periodic) allowBucketsNear(ctx context.Context, t time.Time, req ratelimit.AllowRequest, c *node.AllowCheck, dst []ratelimit.LimitStatus) (ratelimit.Decision, error) {
	s := pd.s
	bs, err := bucketSync{s}.readFirst(ctx, t, req, c)
	if err != nil || bs == nil {
		return ratelimit.Decision{Limits: dst}, err
	}
	if s.presumedDown() {
		return s.ns.AllowAt(t, req, dst)
	}
	m := node.Margin{Blind: pd.blind(), Safety: s.cfg.EscalateSafety}
	d, near, err := s.ns.AllowMarginAt(t, req, m, dst)
	if err != nil || !near {
		return d, err
	}
	return pd.bucketsInStore(ctx, bs, t, req, c, dst)
}

// bucketsInStore is allowBucketsNear's call near a capacity: the store
// decides the buckets atomically while they stay locked here, as a
// synchronous namespace's Allow (bucketSync.decide). The store decides
// buckets and windows apart, so an Allow with window limits too has its
// windows decided here, the key held from their answer to the store's
// (node.Namespace.AllowKindsAt), and the store asked only when they
// admit.
func (pd *periodic) bucketsInStore(ctx context.Context, bs BucketStore, t time.Time, req ratelimit.AllowRequest, c *node.AllowCheck, dst []ratelimit.LimitStatus) (ratelimit.Decision, error) {
	s := pd.s
	bk := bucketSync{s}
	if !s.storeUp() {
		return s.ns.AllowAt(t, req, dst)
	}
	s.m.Escalated(s.name)
	if c.Buckets != len(req.Limits) {
		return s.ns.AllowKindsAt(t, req, dst, bk.decideTx(ctx, bs, c.Cost, true))
	}
	return bk.decide(ctx, bs, t, req, c, dst, true)
}

// enqueueFresh queues a key new to the node for its background fetch,
// dropping it when the queue is full. It is the namespace's OnNewKey
// hook: it must not block.
func enqueueFresh(fresh chan<- string, key string) {
	select {
	case fresh <- key:
	default:
	}
}

// fetchFresh fetches the others' totals of the keys new to the node as
// they come, a batch at a time, until ctx ends.
func (pd *periodic) fetchFresh(ctx context.Context) {
	s := pd.s
	var windows []node.Window
	var keys []WindowKey
	var others []int64
	for {
		var key string
		select {
		case <-ctx.Done():
			return
		case key = <-s.fresh:
		}
		now := s.ns.Now()
		windows = s.ns.UnfetchedWindows(now, key, windows[:0])
	more:
		for n := 1; n < freshBatch; n++ {
			select {
			case key = <-s.fresh:
				windows = s.ns.UnfetchedWindows(now, key, windows)
			default:
				break more
			}
		}
		if len(windows) == 0 {
			continue
		}
		keys = keys[:0]
		for _, w := range windows {
			keys = append(keys, WindowKey{Namespace: s.name, Size: w.Size, Start: w.Start, Key: w.Key})
		}
		others = slices.Grow(others[:0], len(keys))[:len(keys)]
		clear(others)
		pd.fetchWindows(ctx, windows, keys, others)
		clear(windows) // drop references to entries
	}
}

// fetchWindows reads and stores the others' totals of windows (keys names
// them for the store), within TickTimeout, between ticks.
func (pd *periodic) fetchWindows(ctx context.Context, windows []node.Window, keys []WindowKey, others []int64) {
	s := pd.s
	s.tickMu.Lock()
	defer s.tickMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.TickTimeout)
	defer cancel()
	if err := s.store.Fetch(ctx, s.inc, keys, others); err != nil {
		s.log.Debug("fetch of new keys failed; the next tick fetches them", "keys", len(keys), "err", err)
		return
	}
	t := &s.tick
	s.ns.TakeTick(s.ns.Now(), t, 0)
	t.Read, t.Others = append(t.Read, windows...), append(t.Others, others...)
	for range windows {
		t.Got = append(t.Got, true)
	}
	s.ns.ApplyTick(t)
	s.m.Fetched(s.name, len(keys))
}
