package strategytest

import (
	"fmt"
	"math/bits"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
	clustersync "github.com/limiterd/limiterd/sync"
)

// The bucket kind. Three slots hold a token, leaky or fixed bucket each,
// whose parameters change now and then (another bucket of the same key);
// two keys; callers, each an incarnation with its lives, totals and last
// calls, take from some slots of one key at once. Every reply is compared
// with clustersync.ApplyBuckets run on rows kept here.

const bucketSlots = 3

var bucketKeys = [...]string{"b", "b|:é\x00 x"}

// Bucket op codes, each followed by its fields.
const (
	bTick    = iota // time step
	bTake           // caller, key, slots, take, strict
	bLocal          // caller, key, slot, amount: consumption the node admitted alone
	bRetry          // caller: its last call again, same versions
	bLate           // caller: its call before the last, older versions
	bNewLife        // caller, key, slot: the node holds the bucket anew
	bRestart        // caller: a new incarnation in its place
	bRespec         // slot, kind, parameters
	bOps
)

type bucketCall struct {
	at, take int64
	calls    []clustersync.BucketCall
}

// bucketCaller is one incarnation as a node keeps its buckets: life,
// consumption and the time of its last part, per bucket.
type fuzzCaller struct {
	inc               string
	life, total, last map[string]int64
	calls             [2]*bucketCall // the last call and the one before
}

type bucketFuzz struct {
	*fuzzer
	bs      clustersync.BucketStore
	rows    map[string]*clustersync.BucketRow
	seq     map[string]int64 // the store's last Seq per bucket
	specs   [bucketSlots]ratelimit.BucketSpec
	callers [3]*fuzzCaller
	now     int64
	// answers are the calls' answers, for the seeds' test: admitted, and
	// the first bucket's level after the call.
	answers []bucketAnswer
}

type bucketAnswer struct {
	allowed bool
	after   int64
}

func fuzzBuckets(s clustersync.Store) func(*fuzzer) func() bool {
	return func(f *fuzzer) func() bool {
		bs, ok := s.(clustersync.BucketStore)
		if !ok {
			return nil
		}
		return newBucketFuzz(f, bs).step
	}
}

func newBucketFuzz(f *fuzzer, bs clustersync.BucketStore) *bucketFuzz {
	x := &bucketFuzz{fuzzer: f, bs: bs, rows: map[string]*clustersync.BucketRow{}, seq: map[string]int64{}}
	x.now = f.base + f.src.in(0, int64(time.Minute))
	for i := range x.specs {
		x.specs[i] = x.spec(ratelimit.TokenLimit + ratelimit.LimitKind(i))
	}
	for i := range x.callers {
		x.callers[i] = x.newCaller()
	}
	return x
}

func (x *bucketFuzz) newCaller() *fuzzCaller {
	return &fuzzCaller{inc: clustersync.NewIncarnation("fz"), life: map[string]int64{}, total: map[string]int64{}, last: map[string]int64{}}
}

func (x *bucketFuzz) step() bool {
	switch x.src.pick(bOps) {
	case bTick:
		x.tick()
	case bTake:
		x.take()
	case bLocal:
		c, b := x.caller(), x.bucket(x.src.pick(len(bucketKeys)), x.src.pick(bucketSlots))
		n := x.amount()
		c.total[b.StoreKey()] += n
		c.last[b.StoreKey()] = x.now
		x.log("caller %s counts %d of %q alone", c.inc, n, b.StoreKey())
	case bRetry, bLate:
		c := x.caller()
		if bc := c.calls[x.src.pick(2)]; bc != nil {
			x.log("caller %s sends a call again", c.inc)
			x.send(c, bc)
		}
	case bNewLife:
		c, b := x.caller(), x.bucket(x.src.pick(len(bucketKeys)), x.src.pick(bucketSlots))
		k := b.StoreKey()
		c.life[k], c.total[k], c.last[k] = x.version(), 0, 0
		x.log("caller %s holds %q anew", c.inc, k)
	case bRestart:
		i := x.src.pick(len(x.callers))
		x.callers[i] = x.newCaller()
		x.log("caller %d restarts as %s", i, x.callers[i].inc)
	case bRespec:
		i := x.src.pick(bucketSlots)
		x.specs[i] = x.spec(ratelimit.TokenLimit + ratelimit.LimitKind(x.src.pick(3)))
		x.log("slot %d: %+v", i, x.specs[i])
	}
	return !x.t.Failed()
}

func (x *bucketFuzz) caller() *fuzzCaller { return x.callers[x.src.pick(len(x.callers))] }

// bucket is slot i's bucket of key k.
func (x *bucketFuzz) bucket(k, i int) ratelimit.BucketSpec {
	b := x.specs[i]
	b.Key = bucketKeys[k]
	return b
}

// tick moves the clock forward by up to two minutes or, seldom, a year;
// back by up to a second; or to a multiple of a slot's period or drip.
func (x *bucketFuzz) tick() {
	switch x.src.pick(5) {
	case 4:
		x.now += x.src.in(0, int64(ratelimit.MaxBucketDuration/time.Second)) * int64(time.Second)
	case 0:
		x.now += x.src.in(0, int64(300*time.Millisecond))
	case 1:
		x.now += x.src.in(0, 120_000) * int64(time.Millisecond)
	case 2:
		x.now -= x.src.in(0, int64(time.Second))
	case 3:
		b := x.specs[x.src.pick(bucketSlots)]
		d := b.B
		switch b.Kind {
		case ratelimit.LeakyLimit:
			d = b.C
		case ratelimit.FixedLimit:
			d = b.A
		}
		x.now = ratelimit.WindowStart(x.now, time.Duration(d)) + d*x.src.in(1, 3) + x.src.in(-1, 1)
	}
	x.log("tick to %d", x.now-x.base)
}

// amount reads a take or a consumption: 0, whole, fractional, larger
// than the capacity, or up to ratelimit.MaxValue.
func (x *bucketFuzz) amount() int64 {
	switch x.src.pick(8) {
	case 0:
		return 0
	case 1:
		if x.src.chance(192) {
			return x.src.in(1, 40*hit)
		}
		return x.src.in(1, ratelimit.MaxValue) * hit
	case 2, 3:
		return x.src.in(1, 3) * hit
	default:
		return x.src.in(1, 2*hit)
	}
}

// spec reads a bucket of kind: capacities of up to 20 hits, whole or
// fractional, or up to ratelimit.MaxValue; durations from a microsecond to two
// minutes, or up to the longest, a year. Parameters
// node would refuse (a leaky drip over the longest duration) give way to
// a bucket of 5 hits a second.
func (x *bucketFuzz) spec(kind ratelimit.LimitKind) ratelimit.BucketSpec {
	capacity := x.src.in(1, 20) * hit
	switch x.src.pick(8) {
	case 0, 1:
		capacity = x.src.in(1, 20*hit)
	case 2:
		capacity = x.src.in(1, ratelimit.MaxValue) * hit
	}
	b := ratelimit.BucketSpec{Kind: kind}
	switch kind {
	case ratelimit.TokenLimit:
		b.A, b.B, b.C = capacity, x.src.dur(int64(time.Microsecond)), capacity
		if x.src.chance(128) {
			b.C = x.src.in(1, capacity)
		}
		b.Strict = x.src.chance(64)
	case ratelimit.LeakyLimit:
		b.A, b.B = capacity, x.src.dur(int64(10*time.Millisecond))
		b.C = leakyDrip(b.A, b.B)
	default:
		b.A, b.B = x.src.dur(int64(time.Millisecond)), capacity
	}
	if b.Validate() != nil {
		b = ratelimit.BucketSpec{Kind: kind, A: 5 * hit, B: int64(time.Second), C: 5 * hit}
		switch kind {
		case ratelimit.LeakyLimit:
			b.C = leakyDrip(b.A, b.B)
		case ratelimit.FixedLimit:
			b.A, b.B, b.C = int64(time.Second), 5*hit, 0
		}
	}
	return b
}

// leakyDrip is node's drip of a leaky bucket of size (micro-hits) and
// interval: interval / size drops, truncated to whole ns (0 when too
// large: Validate refuses it).
func leakyDrip(size, interval int64) int64 {
	hi, lo := bits.Mul64(uint64(interval), ratelimit.Micro)
	if hi >= uint64(size) {
		return 0
	}
	d, _ := bits.Div64(hi, lo, uint64(size))
	return int64(d)
}

// take sends a take of caller c from some slots of one key.
func (x *bucketFuzz) take() {
	c, k := x.caller(), x.src.pick(len(bucketKeys))
	take := x.amount()
	bc := &bucketCall{at: x.now, take: take}
	used := map[string]bool{}
	first := x.src.pick(bucketSlots)
	for j := range bucketSlots {
		i := (first + j) % bucketSlots
		if j > 0 && !x.src.chance(96) {
			continue
		}
		b := x.bucket(k, i)
		if used[b.StoreKey()] {
			continue // two slots of the same bucket
		}
		used[b.StoreKey()] = true
		key := b.StoreKey()
		if _, ok := c.life[key]; !ok {
			c.life[key] = x.version()
		}
		bc.calls = append(bc.calls, clustersync.BucketCall{Namespace: x.ns, Bucket: b, Life: c.life[key],
			Total: c.total[key], ApplyAt: c.last[key], Version: x.version(), ExpireAt: x.expire})
	}
	// A sync (take 0) from the last slot first is a reset of its
	// buckets: inputs of before the resets keep their meaning but for
	// those.
	if take == 0 && first == bucketSlots-1 {
		for i := range bc.calls {
			bc.calls[i].Reset = true
		}
	}
	c.calls[0], c.calls[1] = bc, c.calls[0]
	x.send(c, bc)
}

// send sends call bc of c to both and compares the replies; c then counts
// what the store holds of its consumption, as a node does.
func (x *bucketFuzz) send(c *fuzzCaller, bc *bucketCall) {
	x.log("caller %s takes %d at %d: %s", c.inc, bc.take, bc.at-x.base, showCalls(x.base, bc.calls))
	got := make([]clustersync.BucketReply, len(bc.calls))
	allowed, err := x.bs.Buckets(x.ctx, c.inc, bc.at, bc.take, bc.calls, got)
	x.must("Buckets", err)
	rows := make([]*clustersync.BucketRow, len(bc.calls))
	seqs := make([]int64, len(bc.calls)) // the reference's, before
	for i := range bc.calls {
		if rows[i] = x.rows[bc.calls[i].Bucket.StoreKey()]; rows[i] != nil {
			seqs[i] = rows[i].Seq
		}
	}
	want := make([]clustersync.BucketReply, len(bc.calls))
	wantAllowed := clustersync.ApplyBuckets(c.inc, bc.at, bc.take, bc.calls, rows, want, make([]bool, len(bc.calls)))
	if allowed != wantAllowed {
		x.fail("Buckets allowed = %v, want %v", allowed, wantAllowed)
	}
	x.answers = append(x.answers, bucketAnswer{allowed, got[0].After.Level})
	for i := range bc.calls {
		key := bc.calls[i].Bucket.StoreKey()
		x.rows[key] = rows[i]
		g, w := got[i], want[i]
		// Write counts may differ in steps, but grow exactly when the
		// reference's do: with every write of the row, and only then.
		if g.Seq < x.seq[key] || (g.Seq > x.seq[key]) != (w.Seq > seqs[i]) {
			x.fail("bucket %q: Seq %d after %d; the reference's %d after %d", key, g.Seq, x.seq[key], w.Seq, seqs[i])
		}
		x.seq[key] = g.Seq
		g.Seq, w.Seq = 0, 0
		if g != w {
			x.fail("bucket %q:\n got %+v\nwant %+v", key, g, w)
		}
		if bc.calls[i].Life == c.life[key] && w.Applied > c.total[key] {
			c.total[key] = w.Applied
			c.last[key] = bc.at
		}
	}
}

func showCalls(base int64, calls []clustersync.BucketCall) string {
	s := ""
	for _, c := range calls {
		last := c.ApplyAt
		if last != 0 {
			last -= base
		}
		s += fmt.Sprintf("[%q strict %v life %d total %d lastAt %d v%d", c.Bucket.StoreKey(), c.Bucket.Strict, c.Life, c.Total, last, c.Version)
		if c.Reset {
			s += " reset"
		}
		s += "]"
	}
	return s
}

// bucketSeeds spell Smyte's RL.REDUCE transcript (a token bucket of 2 a
// minute: takes of 1 answer 2, 1, 0 tokens before, then a minute refills
// it) and Sidekiq's leaky bucket (10 drops in 10 s: ten calls within a
// second pass, the eleventh waits for a drip), their takes alternating
// between two incarnations, before the generator goes on.
func bucketSeeds() [][]byte {
	specs := [bucketSlots]ratelimit.BucketSpec{
		{Kind: ratelimit.TokenLimit, A: 2 * hit, B: int64(time.Minute), C: 2 * hit},
		{Kind: ratelimit.LeakyLimit, A: 10 * hit, B: int64(10 * time.Second), C: int64(time.Second)},
		{Kind: ratelimit.FixedLimit, A: int64(time.Second), B: 5 * hit},
	}
	smyte := bucketHeader(specs)
	for i := range 4 {
		if i == 3 {
			smyte.tickBy(int64(time.Minute) - 2*int64(time.Second))
		} else if i > 0 {
			smyte.tickBy(int64(time.Second))
		}
		smyte.take(i%2, 0, hit)
	}
	sidekiq := bucketHeader(specs)
	for i := range 11 {
		sidekiq.tickBy(int64(90 * time.Millisecond))
		sidekiq.take(i%2, 1, hit)
	}
	sidekiq.tickBy(int64(100 * time.Millisecond))
	sidekiq.take(0, 1, hit)
	return [][]byte{smyte.encoder, sidekiq.encoder}
}

type bucketEncoder struct{ encoder }

// bucketHeader spells a sequence starting at the base with slots specs
// (of kinds token, leaky and fixed, whole hits and milliseconds).
func bucketHeader(specs [bucketSlots]ratelimit.BucketSpec) *bucketEncoder {
	e := &bucketEncoder{}
	e.in(0, 0) // first time
	for _, b := range specs {
		e.spec(b)
	}
	return e
}

// spec spells what bucketFuzz.spec reads back as b.
func (e *bucketEncoder) spec(b ratelimit.BucketSpec) {
	switch b.Kind {
	case ratelimit.TokenLimit:
		e.in(b.A/hit, 1)
		e.u8(7) // whole
		e.dur(b.B, int64(time.Microsecond))
		e.bool(false) // refill amount = max
		e.bool(b.Strict)
	case ratelimit.LeakyLimit:
		e.in(b.A/hit, 1)
		e.u8(7)
		e.dur(b.B, int64(10*time.Millisecond))
	default:
		e.in(b.B/hit, 1)
		e.u8(7)
		e.dur(b.A, int64(time.Millisecond))
	}
}

func (e *bucketEncoder) tickBy(d int64) {
	e.u8(bTick)
	if d <= int64(300*time.Millisecond) {
		e.u8(0)
		e.in(d, 0)
		return
	}
	e.u8(1)
	e.in(d/int64(time.Millisecond), 0)
}

// take spells a take of n (whole hits) by caller c of key 0's slot alone.
func (e *bucketEncoder) take(c, slot int, n int64) {
	e.u8(bTake)
	e.u8(c)
	e.u8(0) // key
	e.u8(2) // whole hits
	e.in(n/hit, 1)
	e.u8(slot)    // first slot
	e.bool(false) // no other slot
	e.bool(false)
}
