package node

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// The cluster form of buckets (periodic and synchronous namespaces).
//
// A store keeps one shared state per bucket, and per incarnation the
// consumption it has applied (package sync has the protocol). A node
// keeps, per bucket, its own consumption (own: what its takes used, in
// micro-hits) and the part of it the store confirmed (acked). A node's
// view of a bucket is the store's last state plus its own consumption
// since, which it applies at once: its own takes are exact, the others'
// arrive with the next read of the store.

// BucketSpec is one bucket as a store sees it: kind, validated parameters
// and key. Stores decide with its methods (the reference and Cassandra
// stores) or with the same integer arithmetic in their own language
// (Redis's Lua, PostgreSQL's PL/pgSQL), which the conformance suite
// compares.
type BucketSpec struct {
	Kind ratelimit.LimitKind // TokenLimit, LeakyLimit or FixedLimit
	// The parameters, in micro-hits and ns:
	//   token: A = max, B = refill time, C = refill amount;
	//   leaky: A = size, B = interval, C = drip interval;
	//   fixed: A = period, B = limit (C = 0).
	A, B, C int64
	Key     string
	// Strict is Smyte's STRICT for a token take. It is not part of the
	// bucket's identity.
	Strict bool
}

// BucketState is a bucket's state: a level in micro-hits (tokens, drops
// or count) and an instant in Unix ns (refill mark, drip mark or period
// start). A level may pass the bucket's capacity, below 0 tokens or above
// the size or limit, when the cluster's nodes admitted more between two
// syncs than it held (see Force).
type BucketState struct {
	Level, Mark int64
}

// spec returns the spec of bucket id (not Strict, which is no part of it).
func (id *bucketID) spec() BucketSpec {
	return BucketSpec{Kind: ratelimit.LimitKind(id.kind), A: id.a, B: id.b, C: id.c, Key: id.key}
}

func (b *BucketSpec) id() bucketID {
	return bucketID{key: b.Key, kind: bucketKind(b.Kind), a: b.A, b: b.B, c: b.C}
}

// StoreKey returns the bucket's name in a store: kind and parameters,
// then the key, so two buckets never share one.
func (b *BucketSpec) StoreKey() string {
	buf := make([]byte, 0, 48+len(b.Key))
	buf = append(buf, "tlf"[b.Kind-ratelimit.TokenLimit])
	for _, v := range [...]int64{b.A, b.B, b.C} {
		buf = append(buf, '/')
		buf = strconv.AppendInt(buf, v, 10)
	}
	buf = append(buf, '/')
	return string(append(buf, b.Key...))
}

// Validate reports whether b is a bucket limitd could have built.
func (b *BucketSpec) Validate() error {
	var err error
	switch b.Kind {
	case ratelimit.TokenLimit:
		_, err = tokenParamsOf(ratelimit.TokenBucket{Max: fromMicro(b.A), RefillTime: time.Duration(b.B), RefillAmount: fromMicro(b.C)})
	case ratelimit.LeakyLimit:
		var q leakyParams
		q, err = leakyParamsOf(ratelimit.LeakyBucket{Size: fromMicro(b.A), Interval: time.Duration(b.B)})
		if err == nil && q.drip != b.C {
			err = fmt.Errorf("leaky bucket: drip %d, want %d", b.C, q.drip)
		}
	case ratelimit.FixedLimit:
		_, err = fixedParamsOf(ratelimit.FixedBucket{Period: time.Duration(b.A), Limit: fromMicro(b.B)})
	default:
		err = fmt.Errorf("bucket kind %s", b.Kind)
	}
	return err
}

// Hold is how long after its last call a bucket's state can still differ
// from a new one's: twice its time from empty to idle (a full refill, a
// whole drain, a period), leaving room for the cluster's excess.
func (b *BucketSpec) Hold() time.Duration {
	var d int64
	switch b.Kind {
	case ratelimit.TokenLimit:
		d = bucketMulSat(bucketCeilDiv(b.A, b.C), b.B)
	case ratelimit.LeakyLimit:
		d = b.B + b.C
	default:
		d = b.A
	}
	return time.Duration(bucketMulSat(d, 2))
}

// Init returns a new bucket's state at t.
func (b *BucketSpec) Init(t int64) BucketState {
	var s bucketVal
	id := b.id()
	bucketStep(&id, &s, false, t, 0, false)
	return stateOf(s)
}

func (s BucketState) val() bucketVal { return bucketVal{v: s.Level, last: s.Mark} }

func stateOf(v bucketVal) BucketState { return BucketState{Level: v.v, Mark: v.last} }

// Force brings s to t and applies n micro-hits of consumption decided
// elsewhere (another node's admitted takes, or this node's while the
// store was away): n tokens taken, n drops added, n counted, even past
// the capacity. A t before the state's mark counts as the mark.
func (b *BucketSpec) Force(s *BucketState, t, n int64) {
	val := s.val()
	v := &val
	defer func() { *s = stateOf(val) }()
	switch b.Kind {
	case ratelimit.TokenLimit:
		tokenParams{max: b.A, refill: b.B, amount: b.C}.advance(v, t)
		v.v -= n
	case ratelimit.LeakyLimit:
		leakyParams{size: b.A, interval: b.B, drip: b.C}.advance(v, t)
		v.v += n
	default:
		fixedParams{period: b.A, limit: b.B}.advance(v, t)
		v.v += n
	}
}

// TakeBuckets decides a take of n micro-hits at t from every bucket of bs,
// whose states are ss (ss[i] of bs[i]), as one Allow does: admitted by
// all or by none. A bucket that refuses keeps the state its refusal gives
// it (a token bucket is emptied); one that would admit while another
// refuses is left unchanged. used[i] is set to what the take consumed of
// bucket i. It reports whether the take was admitted.
func TakeBuckets(bs []BucketSpec, ss []BucketState, used []int64, t, n int64) bool {
	ok := true
	next := make([]bucketVal, len(bs))
	sts := make([]bucketStatus, len(bs))
	for i := range bs {
		id := bs[i].id()
		next[i] = ss[i].val()
		sts[i] = bucketStep(&id, &next[i], true, t, n, bs[i].Strict)
		ok = ok && sts[i].Allowed
	}
	for i := range bs {
		used[i] = 0
		if ok || !sts[i].Allowed {
			ss[i] = stateOf(next[i])
			used[i] = sts[i].used
		}
	}
	return ok
}

// ---- a node's side ------------------------------------------------------

// BucketSync is one bucket in an exchange with a store, a Tick's or a
// BucketTx's: what the store needs to apply this incarnation's
// consumption and answer, set by the node, and the store's answer, set by
// the caller in place.
type BucketSync struct {
	// Spec is the bucket (in a BucketTx, Strict as the Allow asks).
	Spec BucketSpec
	// Life is the node's life of the bucket, Own this incarnation's
	// consumption in that life and LastAt the time of its last part (Unix
	// ns, 0: none).
	Life, Own, LastAt int64

	// Got reports that the store answered. Before is the state it decided
	// the take from (only a BucketTx's Decide uses it), After the state
	// the call left, Applied this incarnation's consumption it holds in
	// Life, Seq the row's write count.
	Got           bool
	Before, After BucketState
	Applied, Seq  int64
}

// A BucketTx is one exchange of an Allow's buckets with a store while
// they stay locked (a synchronous take, a first read, a reset), in the
// style of a Tick but in one call: ExchangeBuckets locks the buckets and
// lists them; fn asks the store and records in the BucketTx its answers
// and what to do; ExchangeBuckets applies them, the one step that changes
// the buckets, and unlocks them.
type BucketTx struct {
	// Buckets lists the Allow's buckets, in their lock order; fn records
	// the store's answers in place, and neither adds nor removes any.
	Buckets []BucketSync
	// Reset starts every bucket again as a new one at the exchange's time,
	// whether the store answered or not (a reset of them).
	Reset bool
	// Decide decides the Allow, whose limits must all be buckets, and
	// counts what it consumes: from the store's Before states where it
	// answered, the store's Verdict overruling the node's own (NoVerdict:
	// the node decides, as when the store is away).
	Decide  bool
	Verdict Verdict

	buf [MaxLimits]BucketSync
}

// ExchangeBuckets locks, creating them, the bucket limits of req, an
// Allow checked by CheckAllow (c; its window limits are left alone),
// lists them at t in a BucketTx and calls fn with it. Then, whatever fn
// returns, it applies what fn recorded, in this order: the Reset; the
// Before states and the decision (Decide); the After states, on which
// it applies this incarnation's consumption the store does not hold yet.
// It returns the decision (without Decide, an empty one holding dst) and
// fn's error.
func (ns *Namespace) ExchangeBuckets(t time.Time, req ratelimit.AllowRequest, c *AllowCheck, dst []ratelimit.LimitStatus, fn func(*BucketTx) error) (ratelimit.Decision, error) {
	tn := t.UnixNano()
	var buf [MaxLimits]heldBucket
	hs := appendHeld(buf[:0], &req)
	if err := ns.buckets.lockAll(hs, req.Key, tn, true); err != nil {
		return ratelimit.Decision{Limits: dst}, err
	}
	defer unlockAll(hs)
	tx := &BucketTx{}
	tx.Buckets = tx.buf[:len(hs)]
	for i := range hs {
		h := &hs[i]
		ns.buckets.restartIfForgotten(&h.id, h.e, tn)
		spec := h.id.spec()
		spec.Strict = h.strict
		tx.Buckets[i] = BucketSync{Spec: spec, Life: h.e.life, Own: h.e.own, LastAt: h.e.lastAt}
	}
	err := fn(tx)
	if tx.Reset {
		for i := range hs {
			hs[i].e.resetAt(&hs[i].id, tn)
		}
	}
	d := ratelimit.Decision{Limits: dst}
	if tx.Decide {
		if c.Buckets != len(req.Limits) {
			panic("node: BucketTx.Decide of an Allow with window limits")
		}
		for i := range hs {
			if b := &tx.Buckets[i]; b.Got {
				hs[i].e.val = b.Before.val()
			}
		}
		ok := stepBuckets(hs, tn, c.Cost)
		if tx.Verdict != NoVerdict {
			ok = tx.Verdict == StoreAllowed
		}
		commitBuckets(hs, ok, tn)
		dd := decision{t: tn, cost: c.Cost, allowed: true, never: -1}
		d = ns.mergeKinds(dd.finish(dst, nil, nil), &req, hs, nil, dst)
	}
	for i := range hs {
		if b := &tx.Buckets[i]; b.Got {
			hs[i].e.stored(&hs[i].id, b.After, b.Applied, b.Seq, tn, tn)
		}
	}
	return d, err
}

// stored takes the store's state of the bucket (id, of this entry's life)
// at write count seq, holding applied of this incarnation's consumption,
// and applies on top this incarnation's consumption the store does not
// hold yet. An answer to a call sent (at sent) before the answer taken
// last was taken, and of a lower write count, is older and ignored; a call
// sent after it that finds a lower count found the row made anew (expired
// while the store was away, say), and is taken. The caller holds e.mu.
func (e *bucketEntry) stored(id *bucketID, after BucketState, applied, seq, sent, now int64) {
	if seq < e.seq && sent <= e.seqAt {
		return
	}
	e.seq, e.seqAt, e.synced = seq, now, true
	// The store may hold more than this node counted: a synchronous call
	// that it applied after the node stopped waiting. It counts once.
	e.own = max(e.own, applied)
	e.acked = applied
	spec := id.spec()
	spec.Force(&after, now, e.own-applied)
	e.val = after.val()
}

// restartIfForgotten starts a new life of e when the store may have let
// its row expire, no answer having been taken for the row's hold time
// (Hold; a row expires a pad later): the new life carries only the
// consumption the store never confirmed, so that what the expired row
// held is not applied again to a new one, and a new row's write count,
// which starts over, is taken. Were the row still there, the new life
// applies the same consumption to it: a life can start at any time. The
// caller holds e.mu.
func (b *bucketTable) restartIfForgotten(id *bucketID, e *bucketEntry, now int64) {
	spec := id.spec()
	if !e.synced || now-e.seqAt < int64(spec.Hold()) {
		return
	}
	e.life = b.newLife()
	e.own -= e.acked
	e.acked, e.seq, e.seqAt = 0, 0, now
}

// takeBuckets lists in t the buckets to sync at t's time, in key order,
// so that a key's buckets, which one store call holds, are next to each
// other: with all, every bucket held (a periodic namespace reads them
// all); else only those whose consumption has not all reached the store.
func (ns *Namespace) takeBuckets(t *Tick, all bool) {
	b := ns.buckets
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.RLock()
		for id, e := range sh.m {
			e.mu.Lock()
			b.restartIfForgotten(&id, e, t.now)
			if all || e.dirty() {
				t.Buckets = append(t.Buckets, BucketSync{
					Spec: id.spec(),
					Life: e.life, Own: e.own, LastAt: e.lastAt,
				})
			}
			e.mu.Unlock()
		}
		sh.mu.RUnlock()
	}
	slices.SortFunc(t.Buckets, func(a, b BucketSync) int { return strings.Compare(a.Spec.Key, b.Spec.Key) })
}

// applyBuckets takes, at the namespace's time, the store's answers
// recorded in t.Buckets (Got): each bucket's state, this incarnation's
// consumption it holds and its write count. An answer to calls sent at
// t's time is older than one to calls taken later. It skips a bucket no
// longer held in the life t lists.
func (ns *Namespace) applyBuckets(t *Tick) {
	if len(t.Buckets) == 0 {
		return
	}
	now := ns.clock.Now().UnixNano()
	for i := range t.Buckets {
		b := &t.Buckets[i]
		if !b.Got {
			continue
		}
		id := b.Spec.id()
		e := ns.buckets.lookup(&id)
		if e == nil {
			continue
		}
		e.mu.Lock()
		if !e.gone && e.life == b.Life {
			e.stored(&id, b.After, b.Applied, b.Seq, t.now, now)
		}
		e.mu.Unlock()
	}
}

// BucketsSynced reports whether the store's state of every bucket of req
// (bucket limits, checked) was read since the node holds it: a call that
// finds one never read can ask the store first.
func (ns *Namespace) BucketsSynced(req *ratelimit.AllowRequest) bool {
	var buf [MaxLimits]heldBucket
	for _, h := range appendHeld(buf[:0], req) {
		e := ns.buckets.lookup(&h.id)
		if e == nil {
			return false
		}
		e.mu.Lock()
		ok := e.synced && !e.gone
		e.mu.Unlock()
		if !ok {
			return false
		}
	}
	return true
}

// appendHeld appends to hs the bucket limits of req (checked), unlocked.
func appendHeld(hs []heldBucket, req *ratelimit.AllowRequest) []heldBucket {
	for i := range req.Limits {
		rl := &req.Limits[i]
		if rl.Kind == ratelimit.WindowLimit {
			continue
		}
		id, _ := bucketIdentity(rl)
		id.key = req.Key
		hs = append(hs, heldBucket{i: i, id: id, strict: rl.Strict, wait: rl.WaitTimeout})
	}
	return hs
}

// lookup returns the entry of id, or nil, unlocked.
func (b *bucketTable) lookup(id *bucketID) *bucketEntry {
	sh := b.shard(id.key)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return sh.m[*id]
}
