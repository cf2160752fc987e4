package node_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// The bucket fuzz test decodes operations from bytes, runs them on a
// node.Buckets and on refBuckets, a plain model that applies the formulas
// one refill, drip or period at a time, and requires identical answers.

const (
	refToken = iota
	refLeaky
	refFixed
)

// refBucketID is a bucket's identity in the model: kind, key and the
// parameters in micro-hits and ns.
type refBucketID struct {
	kind    int
	key     string
	a, b, c int64 // token: max, refill, amount; leaky: size, drip, interval; fixed: period, limit
}

// refBucket is a bucket's state in the model: level, mark and, for a
// token bucket, what the cap cut off of the refill at the mark.
type refBucket struct{ v, last, w int64 }

type refBuckets map[refBucketID]*refBucket

// take runs a take of n at t and returns the answer; a take of 0 is a read,
// which changes nothing (not even the mark that calls back in time are
// held to).
func (m refBuckets) take(id refBucketID, t, n int64, strict bool) node.BucketStatus {
	s, found := m[id]
	switch {
	case !found:
		s = &refBucket{}
		if n > 0 {
			m[id] = s
		}
	case n == 0:
		c := *s
		s = &c
	}
	var st refStatus
	switch id.kind {
	case refToken:
		st = refTokenTake(s, found, id.a, id.b, id.c, t, n, strict)
	case refLeaky:
		st = refLeakyTake(s, found, id.a, id.b, t, n)
	case refFixed:
		st = refFixedTake(s, found, id.a, id.b, t, n)
	}
	return node.BucketStatus{
		Allowed: st.allowed, Never: st.never, Limit: float64(st.limit) / ratelimit.Micro,
		Before: float64(st.before) / ratelimit.Micro, Remaining: float64(st.remaining) / ratelimit.Micro,
		ResetAfter: time.Duration(st.reset), RetryAfter: time.Duration(st.retry),
	}
}

type refStatus struct {
	allowed, never                         bool
	limit, before, remaining, reset, retry int64
}

func refTokenTake(s *refBucket, found bool, max, refill, amount, t, n int64, strict bool) refStatus {
	// grid is the refill grid: whole refill times since the epoch.
	grid := func(t int64) int64 {
		if t > 0 {
			return t - t%refill
		}
		return t
	}
	if !found {
		// Full for ever: the cap cut off all of its last refill.
		s.v, s.last, s.w = max, grid(t), amount
	}
	late := t < s.last
	if late {
		t = s.last
	} else {
		full := s.v >= max
		for s.last+refill <= t {
			s.last += refill
			v := min(max, s.v+amount)
			s.v, s.w = v, amount-(v-s.v)
		}
		if g := grid(t); s.v >= max && g != s.last {
			s.w = 0
			if full && g > s.last {
				s.w = amount
			}
			s.last = g
		}
	}
	if late && n > 0 {
		// Made before the last refill: taken first, it would have left
		// room for what the cap cut off of it.
		if back := min(n, s.w); s.v+back >= n {
			s.v, s.w = s.v+back, s.w-back
		}
	}
	st := refStatus{limit: max, before: s.v, allowed: s.v >= n, never: n > max}
	if n > 0 {
		s.v = s.v - n
		if s.v < 0 {
			s.v = 0
		}
		if strict && s.v == 0 {
			s.last, s.w = t, 0
		}
	}
	st.remaining = s.v
	if s.v < max {
		st.reset = s.last + refill - t
	}
	if !st.allowed && !st.never {
		k := int64(1)
		for min(max, s.v+k*amount) < n {
			k++
		}
		st.retry = s.last + k*refill - t
	}
	return st
}

func refLeakyTake(s *refBucket, found bool, size, drip, t, n int64) refStatus {
	if !found {
		s.v, s.last = 0, t
	}
	if t < s.last {
		t = s.last
	}
	for s.v > 0 && s.last+drip <= t {
		s.last += drip
		s.v = max(0, s.v-ratelimit.Micro)
	}
	if s.v == 0 {
		s.last = t - max(t, 0)%drip // the drip grid: whole drips since the epoch
	}
	st := refStatus{limit: size, before: s.v, allowed: s.v+n <= size, never: n > size}
	if st.allowed {
		s.v += n
	}
	st.remaining = size - s.v
	if s.v > 0 {
		st.reset = s.last + drip - t
	}
	if !st.allowed && !st.never {
		k, w := int64(0), s.v
		for w+n > size {
			w = max(0, w-ratelimit.Micro)
			k++
		}
		st.retry = s.last + k*drip - t
	}
	return st
}

func refFixedTake(s *refBucket, found bool, period, limit, t, n int64) refStatus {
	if !found {
		s.v, s.last = 0, t-t%period // t > 0 in the tests
	}
	if t < s.last {
		t = s.last
	}
	for s.last+period <= t {
		s.last += period
		s.v = 0
	}
	st := refStatus{limit: limit, before: s.v, allowed: s.v+n <= limit, never: n > limit}
	if st.allowed {
		s.v += n
	}
	st.remaining = limit - s.v
	st.reset = s.last + period - t
	if !st.allowed && !st.never {
		st.retry = st.reset
	}
	return st
}

// reclaim removes the buckets idle at t and returns how many.
func (m refBuckets) reclaim(t int64) int {
	n := 0
	for id, s := range m {
		c := *s
		var idle bool
		switch id.kind {
		case refToken:
			refTokenTake(&c, true, id.a, id.b, id.c, t, 0, false)
			idle = c.v == id.a
		case refLeaky:
			refLeakyTake(&c, true, id.a, id.b, t, 0)
			idle = c.v == 0
		case refFixed:
			refFixedTake(&c, true, id.a, id.b, t, 0)
			idle = c.v == 0
		}
		if idle {
			delete(m, id)
			n++
		}
	}
	return n
}

// bucketBytes reads numbers from fuzz bytes, zeros once they run out.
type bucketBytes []byte

func (b *bucketBytes) u8() int64 {
	if len(*b) == 0 {
		return 0
	}
	v := (*b)[0]
	*b = (*b)[1:]
	return int64(v)
}

var (
	fuzzBucketKeys  = []string{"a", "b|\x00é"}
	fuzzBucketTimes = []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, time.Second, 7 * time.Second}
	// fuzzBucketUnits scale takes: milli-hits, quarter hits, whole hits.
	fuzzBucketUnits = []int64{1_000, 250_000, ratelimit.Micro, ratelimit.Micro}
)

// Op codes, an op byte modulo 8.
const (
	bopTakeToken = iota // + kind: take; flags: strict, back in time, key
	bopTakeLeaky
	bopTakeFixed
	bopReadToken // + kind: read
	bopReadLeaky
	bopReadFixed
	bopAdvance
	bopReclaim
)

// FuzzBuckets runs sequences of takes, reads (both at the current time or
// back in time), time steps and reclaims on token, leaky and fixed
// buckets with parameters decoded from the bytes, and compares every
// answer, Reclaim's count and Len with the model's.
func FuzzBuckets(f *testing.F) {
	for _, s := range [][]byte{
		{},
		// Smyte-like: max 2, take until refused, a minute passes.
		{bopTakeToken, 0x21, 0x41, bopTakeToken, 0x21, 0x41, bopTakeToken, 0x21, 0x41, bopAdvance, 0xff, bopTakeToken, 0x21, 0x41},
		// strict token takes, back in time, a reclaim.
		{bopTakeToken | 8, 0x91, 0x42, bopTakeToken | 8 | 16, 0x91, 0x43, 9, bopAdvance, 30, bopTakeToken | 16, 0x91, 0x41, 200, bopReclaim, bopReadToken, 0x91},
		// leaky: fill, overflow, drip, fractional drops.
		{bopTakeLeaky, 0x13, 0x43, bopTakeLeaky, 0x13, 0x41, bopAdvance, 2, bopTakeLeaky, 0x13, 0x25, bopReadLeaky, 0x13, bopAdvance, 40, bopReclaim, bopTakeLeaky | 32, 0x13, 0x5f},
		// fixed: two keys, periods, an old period, reclaims.
		{bopTakeFixed, 0x27, 0x44, bopTakeFixed | 32, 0x27, 0x48, bopAdvance, 21, bopTakeFixed | 16, 0x27, 0x41, 50, bopReclaim, bopAdvance, 200, bopReclaim, bopReadFixed, 0x27},
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) { runBucketOps(t, data) })
}

// TestBucketOpsRandom runs random byte strings through the fuzz body, so
// plain `go test` covers more than the seeds.
func TestBucketOpsRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(20, 1))
	runs := 300
	if testing.Short() {
		runs = 50
	}
	for i := range runs {
		data := make([]byte, 50+rng.IntN(300))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			defer func() {
				if t.Failed() {
					t.Logf("input %q", data)
				}
			}()
			runBucketOps(t, data)
		})
	}
}

func runBucketOps(t *testing.T, data []byte) {
	in := bucketBytes(data)
	b := node.NewBuckets(node.BucketsConfig{Name: "fuzz"}, nil)
	ref := refBuckets{}
	now := bucketEpoch.Add(time.Duration(in.u8()) * 37 * time.Millisecond).UnixNano()
	for ops := 0; len(in) > 0 && ops < 256; ops++ {
		op := in.u8()
		switch code := op % 8; code {
		case bopAdvance:
			now += in.u8() * int64(50*time.Millisecond)
		case bopReclaim:
			// Every bucket the model holds reads the same first.
			for id := range ref {
				got, want := readBucket(t, b, id, now), ref.take(id, now, 0, false)
				if got != want {
					t.Fatalf("op %d: read of %+v before Reclaim:\n got %+v\nwant %+v", ops, id, got, want)
				}
			}
			got, want := b.Reclaim(time.Unix(0, now)), ref.reclaim(now)
			if got != want || b.Len() != int64(len(ref)) {
				for id, s := range ref {
					t.Logf("kept %+v %+v now %d", id, *s, now)
				}
				t.Fatalf("op %d: Reclaim = %d, Len = %d; want %d, %d", ops, got, b.Len(), want, len(ref))
			}
		default:
			strict, back, key := op&8 != 0, op&16 != 0, fuzzBucketKeys[op>>5&1]
			id, tok, leaky, fixed := bucketParams(int(code%3), in.u8())
			var n int64
			if code < bopReadToken {
				tb := in.u8()
				n = (tb & 31) * fuzzBucketUnits[tb>>5&3]
				if tb>>7 == 1 && n == 0 {
					n = 1 // a micro-hit
				}
			}
			at := now
			if back {
				at -= in.u8() * int64(10*time.Millisecond)
			}
			id.key = key
			take := float64(n) / ratelimit.Micro
			tt := time.Unix(0, at)
			var got node.BucketStatus
			var err error
			switch code % 3 {
			case refToken:
				got, err = b.TakeTokenAt(tt, key, tok, take, strict)
			case refLeaky:
				got, err = b.TakeLeakyAt(tt, key, leaky, take)
			case refFixed:
				got, err = b.TakeFixedAt(tt, key, fixed, take)
			}
			if err != nil {
				t.Fatalf("op %d (%d, %+v %+v %+v, take %g): %v", ops, code, tok, leaky, fixed, take, err)
			}
			want := ref.take(id, at, n, strict && code == bopTakeToken)
			if got != want {
				t.Fatalf("op %d: code %d key %q at %+dns params %+v take %d micro strict %v:\n got %+v\nwant %+v",
					ops, code, key, at-now, id, n, strict, got, want)
			}
		}
	}
	if b.Len() != int64(len(ref)) {
		t.Fatalf("Len = %d, want %d", b.Len(), len(ref))
	}
}

// bucketParams decodes one parameter byte p for kind into the model's
// identity and the API's parameters: a capacity of 1–8 quarters or whole
// hits, one of four durations, and (token) a refill amount of Max or 1–3
// quarters or whole hits.
func bucketParams(kind int, p int64) (refBucketID, ratelimit.TokenBucket, ratelimit.LeakyBucket, ratelimit.FixedBucket) {
	unit := int64(250_000)
	if p&8 != 0 {
		unit = ratelimit.Micro
	}
	capacity := (1 + p&7) * unit
	d := fuzzBucketTimes[p>>4&3]
	id := refBucketID{kind: kind}
	var (
		tok   ratelimit.TokenBucket
		leaky ratelimit.LeakyBucket
		fixed ratelimit.FixedBucket
	)
	switch kind {
	case refToken:
		amount := capacity
		tok = ratelimit.TokenBucket{Max: float64(capacity) / ratelimit.Micro, RefillTime: d}
		if a := p >> 6; a != 0 {
			amount = a * unit
			tok.RefillAmount = float64(amount) / ratelimit.Micro
		}
		id.a, id.b, id.c = capacity, int64(d), amount
	case refLeaky:
		leaky = ratelimit.LeakyBucket{Size: float64(capacity) / ratelimit.Micro, Interval: d}
		id.a, id.b, id.c = capacity, int64(d)*ratelimit.Micro/capacity, int64(d)
	case refFixed:
		fixed = ratelimit.FixedBucket{Period: d, Limit: float64(capacity) / ratelimit.Micro}
		id.a, id.b = int64(d), capacity
	}
	return id, tok, leaky, fixed
}

// readBucket reads the bucket id names at t.
func readBucket(t *testing.T, b *node.Buckets, id refBucketID, at int64) node.BucketStatus {
	t.Helper()
	var st node.BucketStatus
	var err error
	tt := time.Unix(0, at)
	switch id.kind {
	case refToken:
		p := ratelimit.TokenBucket{Max: float64(id.a) / ratelimit.Micro, RefillTime: time.Duration(id.b), RefillAmount: float64(id.c) / ratelimit.Micro}
		st, err = b.TokenAt(tt, id.key, p)
	case refLeaky:
		p := ratelimit.LeakyBucket{Size: float64(id.a) / ratelimit.Micro, Interval: time.Duration(id.c)}
		st, err = b.LeakyAt(tt, id.key, p)
	case refFixed:
		p := ratelimit.FixedBucket{Period: time.Duration(id.a), Limit: float64(id.b) / ratelimit.Micro}
		st, err = b.FixedAt(tt, id.key, p)
	}
	if err != nil {
		t.Fatalf("read %+v: %v", id, err)
	}
	return st
}
