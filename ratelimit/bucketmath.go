package ratelimit

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"time"
)

// MaxBucketDuration is the longest refill time, leak interval, drip or
// fixed period a bucket may have, as long as the longest window.
const MaxBucketDuration = 366 * 24 * time.Hour

// BucketStatus is the answer of a bucket call: what a LimitStatus needs.
// Amounts are in hits (tokens, drops or counts); durations are measured
// from the call's time.
type BucketStatus struct {
	// Allowed reports whether the take was admitted (always true for a
	// read or a take of 0).
	Allowed bool
	// Never is set when the take exceeds the bucket's capacity (max, size
	// or limit): waiting cannot help, and RetryAfter is 0.
	Never bool
	// Limit is the bucket's capacity: max tokens, size in drops, or limit
	// per period.
	Limit float64
	// Before is the level before the take: tokens in a token bucket (what
	// Smyte's RL.REDUCE replies), drops in a leaky bucket, the period's
	// count in a fixed bucket.
	Before float64
	// Remaining is what is left to take after the call: tokens, free
	// drops (size − drops), or limit − count.
	Remaining float64
	// ResetAfter is the time until the bucket's next change by time alone:
	// the next refill (0 when full), the next drip (0 when empty), or the
	// end of the period.
	ResetAfter time.Duration
	// RetryAfter, when refused and not Never, is the least wait after
	// which the same take is admitted if nothing else is taken.
	RetryAfter time.Duration

	Used int64 // the take's consumption, in micro-hits (what a node counts as its own)
}

// Wait reports whether a refused take may be retried after waiting at most
// maxWait (Sidekiq's wait_timeout), and how long to wait. It never says so
// for an admitted take or a Never.
func (s BucketStatus) Wait(maxWait time.Duration) (time.Duration, bool) {
	if s.Allowed || s.Never || s.RetryAfter > maxWait {
		return 0, false
	}
	return s.RetryAfter, true
}

// BucketSpec is one bucket as a store sees it: kind, validated parameters
// and key. Stores decide with its methods (the reference and Cassandra
// stores) or with the same integer arithmetic in their own language
// (Redis's Lua, PostgreSQL's PL/pgSQL), which the conformance suite
// compares.
type BucketSpec struct {
	Kind LimitKind // TokenLimit, LeakyLimit or FixedLimit
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
//
// Waste is a token bucket's part of the refill at Mark that its capacity
// cut off (0 for the other kinds): consumption made before that refill
// but reaching the bucket after it gets that part back (Force), as it
// would have, applied in time.
type BucketState struct {
	Level, Mark, Waste int64
}

// StoreKey returns the bucket's name in a store: kind and parameters,
// then the key, so two buckets never share one.
func (b *BucketSpec) StoreKey() string {
	buf := make([]byte, 0, 48+len(b.Key))
	buf = append(buf, "tlf"[b.Kind-TokenLimit])
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
	case TokenLimit:
		_, err = tokenParamsOf(TokenBucket{Max: fromMicro(b.A), RefillTime: time.Duration(b.B), RefillAmount: fromMicro(b.C)})
	case LeakyLimit:
		var q leakyParams
		q, err = leakyParamsOf(LeakyBucket{Size: fromMicro(b.A), Interval: time.Duration(b.B)})
		if err == nil && q.drip != b.C {
			err = fmt.Errorf("leaky bucket: drip %d, want %d", b.C, q.drip)
		}
	case FixedLimit:
		_, err = fixedParamsOf(FixedBucket{Period: time.Duration(b.A), Limit: fromMicro(b.B)})
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
	case TokenLimit:
		d = bucketMulSat(bucketCeilDiv(b.A, b.C), b.B)
	case LeakyLimit:
		d = b.B + b.C
	default:
		d = b.A
	}
	return time.Duration(bucketMulSat(d, 2))
}

// Init returns a new bucket's state at t.
func (b *BucketSpec) Init(t int64) BucketState {
	var s BucketState
	b.Take(&s, false, t, 0, false)
	return s
}

// Force brings s to t and applies n micro-hits of consumption decided
// elsewhere (another node's admitted takes, or this node's while the
// store was away): n tokens taken, n drops added, n counted, even past
// the capacity. A t before the state's mark counts as the mark; but
// tokens taken before a token bucket's last refill get back what the
// capacity cut off of it (Waste), since with them gone that part would
// have fitted. (Takes older still may have lost more to earlier refills;
// only the last one's is known, so they may get back less than the
// exact bucket would give them, never more.)
func (b *BucketSpec) Force(s *BucketState, t, n int64) {
	switch b.Kind {
	case TokenLimit:
		late := t < s.Mark
		tokenParams{max: b.A, refill: b.B, amount: b.C}.advance(s, t)
		if late && n > 0 {
			back := min(n, s.Waste)
			s.Waste -= back
			n -= back
		}
		s.Level -= n
	case LeakyLimit:
		leakyParams{size: b.A, interval: b.B, drip: b.C}.advance(s, t)
		s.Level += n
	default:
		fixedParams{period: b.A, limit: b.B}.advance(s, t)
		s.Level += n
	}
}

// Take applies a take of n micro-hits at t to s (found: s is stored; else
// a new bucket's) and returns the answer. A token take with strict (the
// call's, not b's: b may be a bucket's identity) that leaves the bucket
// empty restarts its refill clock.
func (b *BucketSpec) Take(s *BucketState, found bool, t, n int64, strict bool) BucketStatus {
	switch b.Kind {
	case TokenLimit:
		return tokenParams{max: b.A, refill: b.B, amount: b.C}.take(s, found, t, n, strict)
	case LeakyLimit:
		return leakyParams{size: b.A, interval: b.B, drip: b.C}.take(s, found, t, n)
	default:
		return fixedParams{period: b.A, limit: b.B}.take(s, found, t, n)
	}
}

// Idle reports whether s at t is a new bucket's state (full, empty or in
// a new period), so the bucket may be forgotten.
func (b *BucketSpec) Idle(s BucketState, t int64) bool {
	switch b.Kind {
	case TokenLimit:
		return tokenParams{max: b.A, refill: b.B, amount: b.C}.idle(s, t)
	case LeakyLimit:
		return leakyParams{size: b.A, interval: b.B, drip: b.C}.idle(s, t)
	case FixedLimit:
		return fixedParams{period: b.A, limit: b.B}.idle(s, t)
	}
	return false
}

// TakeBuckets decides a take of n micro-hits at t from every bucket of bs,
// whose states are ss (ss[i] of bs[i]), as one Allow does: admitted by
// all or by none. A bucket that refuses keeps the state its refusal gives
// it (a token bucket is emptied); one that would admit while another
// refuses is left unchanged. used[i] is set to what the take consumed of
// bucket i. It reports whether the take was admitted.
func TakeBuckets(bs []BucketSpec, ss []BucketState, used []int64, t, n int64) bool {
	ok := true
	next := make([]BucketState, len(bs))
	sts := make([]BucketStatus, len(bs))
	for i := range bs {
		next[i] = ss[i]
		sts[i] = bs[i].Take(&next[i], true, t, n, bs[i].Strict)
		ok = ok && sts[i].Allowed
	}
	for i := range bs {
		used[i] = 0
		if ok || !sts[i].Allowed {
			ss[i] = next[i]
			used[i] = sts[i].Used
		}
	}
	return ok
}

// SpecOf returns the spec of bucket limit l, without its key and Strict
// (which are no part of its parameters), or its first bad parameter as a
// *FieldError wrapping ErrInvalidLimit.
func SpecOf(l *Limit) (BucketSpec, error) {
	switch l.Kind {
	case TokenLimit:
		q, err := tokenParamsOf(l.Token)
		return BucketSpec{Kind: TokenLimit, A: q.max, B: q.refill, C: q.amount}, err
	case LeakyLimit:
		q, err := leakyParamsOf(l.Leaky)
		return BucketSpec{Kind: LeakyLimit, A: q.size, B: q.interval, C: q.drip}, err
	default:
		q, err := fixedParamsOf(l.Fixed)
		return BucketSpec{Kind: FixedLimit, A: q.period, B: q.limit}, err
	}
}

// tokenParams is a validated TokenBucket in micro-hits and ns.
type tokenParams struct {
	max, refill, amount int64
}

// tokenParamsOf validates p, reporting the first bad parameter as a *FieldError
// ("max", "refill_time" or "refill_amount") wrapping ErrInvalidLimit.
func tokenParamsOf(p TokenBucket) (tokenParams, error) {
	var q tokenParams
	var err error
	if q.max, err = bucketAmount("max", p.Max); err != nil {
		return q, err
	}
	if q.refill, err = bucketDuration("refill_time", p.RefillTime); err != nil {
		return q, err
	}
	q.amount = q.max
	if p.RefillAmount != 0 {
		if q.amount, err = bucketAmount("refill_amount", p.RefillAmount); err != nil {
			return q, err
		}
	}
	return q, nil
}

// advance brings s up to t: whole refills since the last mark, capped at
// max, the mark moved by as many refill times; a full bucket's mark
// follows the time down to a whole refill time since the epoch. Waste
// becomes what the cap cut off of the refill at the new mark. A t before
// the mark counts as the mark: time never moves backwards. It returns
// the time used.
func (p tokenParams) advance(s *BucketState, t int64) int64 {
	if t < s.Mark {
		return s.Mark
	}
	full := s.Level >= p.max
	if n := (t - s.Mark) / p.refill; n > 0 {
		s.Waste = p.amount
		if !full {
			if k := bucketCeilDiv(p.max-s.Level, p.amount); n > k {
				s.Level = p.max
			} else if n == k {
				// Full with the last refill: the cap cut off its excess.
				s.Waste = k*p.amount - (p.max - s.Level)
				s.Level = p.max
			} else {
				s.Level += n * p.amount
				s.Waste = 0
			}
		}
		s.Mark += n * p.refill
	}
	if s.Level >= p.max {
		// On the refill grid (whole refill times since the epoch), so
		// that a bucket's refills fall at the same times whoever takes
		// from it first: nodes whose calls reach the store out of order,
		// or after it expired, agree on them.
		if g := t - max(t, 0)%p.refill; g != s.Mark {
			// A grid point after a mark the bucket was full at had all of
			// its refill cut off; of any other, nothing is known.
			s.Waste = 0
			if full && g > s.Mark {
				s.Waste = p.amount
			}
			s.Mark = g
		}
	}
	return t
}

// idle reports whether s is full at t, so a new bucket would be the same.
func (p tokenParams) idle(s BucketState, t int64) bool {
	p.advance(&s, t)
	return s.Level >= p.max
}

// take applies a take of n at t to s (found: s is stored; else a new
// bucket) and returns the answer. strict restarts the refill clock when a
// take leaves the bucket empty.
func (p tokenParams) take(s *BucketState, found bool, t, n int64, strict bool) BucketStatus {
	if !found {
		// A new bucket has been full for ever: the cap cut off all of
		// its last refill.
		s.Level, s.Mark, s.Waste = p.max, t-max(t, 0)%p.refill, p.amount
	}
	late := t < s.Mark
	t = p.advance(s, t)
	if late && n > 0 {
		// Made before the last refill and admitted: taken first, it
		// leaves room for what the cap cut off of that refill (as Force).
		if back := min(n, s.Waste); s.Level+back >= n {
			s.Level += back
			s.Waste -= back
		}
	}
	before := s.Level
	st := BucketStatus{Allowed: before >= n, Never: n > p.max, Limit: fromMicro(p.max), Before: fromMicro(max(before, 0))}
	if n > 0 {
		// A refused take empties the bucket; one in debt (the cluster's
		// consumption beyond its tokens, see Force) stays in debt.
		s.Level = max(before-n, min(before, 0))
		if strict && s.Level <= 0 {
			s.Mark, s.Waste = t, 0
		}
	}
	st.Used = before - s.Level
	st.Remaining = fromMicro(max(s.Level, 0))
	if s.Level < p.max {
		st.ResetAfter = time.Duration(s.Mark + p.refill - t)
	}
	if !st.Allowed && !st.Never {
		// Refused: the bucket is now empty; wait for enough refills.
		k := bucketCeilDiv(n-s.Level, p.amount)
		st.RetryAfter = time.Duration(bucketAddSat(s.Mark-t, bucketMulSat(k, p.refill)))
	}
	return st
}

// leakyParams is a validated LeakyBucket: size in micro-hits, interval and
// drip in ns.
type leakyParams struct {
	size, interval, drip int64
}

// leakyParamsOf validates p, reporting the first bad parameter as a *FieldError
// ("size" or "interval") wrapping ErrInvalidLimit.
func leakyParamsOf(p LeakyBucket) (leakyParams, error) {
	var q leakyParams
	var err error
	if q.size, err = bucketAmount("size", p.Size); err != nil {
		return q, err
	}
	if q.interval, err = bucketDuration("interval", p.Interval); err != nil {
		return q, err
	}
	// drip = interval / size drops = interval × Micro / size, truncated
	// to whole ns.
	hi, lo := bits.Mul64(uint64(q.interval), Micro)
	if hi < uint64(q.size) {
		d, _ := bits.Div64(hi, lo, uint64(q.size))
		q.drip = int64(d)
	}
	if q.drip < 1 || q.drip > int64(MaxBucketDuration) {
		return q, fieldErr("size", ErrInvalidLimit, "the drip interval (interval/size) must be between 1ns and %s, got %s / %g", MaxBucketDuration, p.Interval, p.Size)
	}
	return q, nil
}

// advance drains s up to t and returns the time used: a t before the drip
// mark counts as the mark, since time never moves backwards. An empty
// bucket's mark follows the time down to a whole drip since the epoch.
func (p leakyParams) advance(s *BucketState, t int64) int64 {
	if t < s.Mark {
		t = s.Mark
	}
	if s.Level > 0 {
		n := (t - s.Mark) / p.drip
		if n >= bucketCeilDiv(s.Level, Micro) {
			s.Level = 0
		} else {
			s.Level -= n * Micro
			s.Mark += n * p.drip
		}
	}
	if s.Level == 0 {
		// On the drip grid (whole drips since the epoch), so that a
		// bucket's drips fall at the same times whoever fills it first:
		// nodes that learn of each other's drops late agree on them.
		s.Mark = t - max(t, 0)%p.drip
	}
	return t
}

// idle reports whether s is empty at t, so a new bucket would be the same.
func (p leakyParams) idle(s BucketState, t int64) bool {
	p.advance(&s, t)
	return s.Level == 0
}

// take applies a take of n drops at t to s (found: s is stored; else a new
// bucket) and returns the answer.
func (p leakyParams) take(s *BucketState, found bool, t, n int64) BucketStatus {
	if !found {
		s.Level, s.Mark = 0, t
	}
	t = p.advance(s, t)
	before := s.Level
	st := BucketStatus{Allowed: before+n <= p.size, Never: n > p.size, Limit: fromMicro(p.size), Before: fromMicro(before)}
	if st.Allowed {
		s.Level += n
		st.Used = n
	}
	st.Remaining = fromMicro(max(p.size-s.Level, 0)) // drops above size: the cluster's (see Force)
	if s.Level > 0 {
		st.ResetAfter = time.Duration(s.Mark + p.drip - t) // next drip, in (0, drip]
	}
	if !st.Allowed && !st.Never {
		k := bucketCeilDiv(s.Level+n-p.size, Micro) // drips until n fits
		st.RetryAfter = time.Duration(bucketAddSat(s.Mark-t, bucketMulSat(k, p.drip)))
	}
	return st
}

// fixedParams is a validated FixedBucket: period in ns, limit in
// micro-hits.
type fixedParams struct {
	period, limit int64
}

// fixedParamsOf validates p, reporting the first bad parameter as a *FieldError
// ("period" or "limit") wrapping ErrInvalidLimit.
func fixedParamsOf(p FixedBucket) (fixedParams, error) {
	var q fixedParams
	var err error
	if q.period, err = bucketDuration("period", p.Period); err != nil {
		return q, err
	}
	if q.limit, err = bucketAmount("limit", p.Limit); err != nil {
		return q, err
	}
	return q, nil
}

// advance moves s to the period holding t and returns the time used: a t
// before the bucket's period counts as that period's start.
func (p fixedParams) advance(s *BucketState, t int64) int64 {
	if t < s.Mark {
		return s.Mark
	}
	if t-s.Mark >= p.period {
		s.Level, s.Mark = 0, WindowStart(t, time.Duration(p.period))
	}
	return t
}

// idle reports whether s counts nothing at t (its period ended, or
// nothing was counted in it), so a new bucket would be the same.
func (p fixedParams) idle(s BucketState, t int64) bool {
	p.advance(&s, t)
	return s.Level == 0
}

// take applies a take of n at t to s (found: s is stored; else a new
// bucket) and returns the answer.
func (p fixedParams) take(s *BucketState, found bool, t, n int64) BucketStatus {
	if !found {
		s.Level, s.Mark = 0, WindowStart(t, time.Duration(p.period))
	}
	t = p.advance(s, t)
	before := s.Level
	st := BucketStatus{Allowed: before+n <= p.limit, Never: n > p.limit, Limit: fromMicro(p.limit), Before: fromMicro(before)}
	if st.Allowed {
		s.Level += n
		st.Used = n
	}
	st.Remaining = fromMicro(max(p.limit-s.Level, 0)) // a count above the limit: the cluster's (see Force)
	st.ResetAfter = time.Duration(s.Mark + p.period - t)
	if !st.Allowed && !st.Never {
		st.RetryAfter = st.ResetAfter
	}
	return st
}

// bucketAmount converts a capacity or refill amount to micro-hits: a
// finite number in [0.000001, MaxValue] after rounding.
func bucketAmount(field string, v float64) (int64, error) {
	m, err := ToMicro(v)
	if err != nil || m < 1 {
		return 0, fieldErr(field, ErrInvalidLimit, "must be a number between 0.000001 and %g, got %g", float64(MaxValue), v)
	}
	return m, nil
}

// bucketDuration checks a refill time, interval or period.
func bucketDuration(field string, d time.Duration) (int64, error) {
	if d <= 0 || d > MaxBucketDuration {
		return 0, fieldErr(field, ErrInvalidLimit, "must be between 1ns and %s, got %s", MaxBucketDuration, d)
	}
	return int64(d), nil
}

// bucketCeilDiv is ⌈a/b⌉ for a >= 0, b > 0.
func bucketCeilDiv(a, b int64) int64 { return (a + b - 1) / b }

// bucketMulSat is a×b for a, b >= 0, saturated at math.MaxInt64.
func bucketMulSat(a, b int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}

// bucketAddSat is a+b for a, b >= 0, saturated at math.MaxInt64.
func bucketAddSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
