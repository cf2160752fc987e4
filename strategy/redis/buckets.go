package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
	clustersync "github.com/limiterd/limiterd/sync"
)

// Buckets applies calls, the token, leaky and fixed buckets of one
// (namespace, key), in one script call, as clustersync.BucketStore
// specifies: the script is a port of clustersync.ApplyBuckets, exact to
// the micro-hit and the nanosecond (see buckets.lua). Each bucket is one
// Redis hash; all of a key's share its windows' hash tag, so on a cluster
// the call touches one slot.
func (s *Store) Buckets(ctx context.Context, inc string, at, take int64, calls []clustersync.BucketCall, replies []clustersync.BucketReply) (bool, error) {
	if s.closed.Load() {
		return false, fmt.Errorf("redis: buckets: %w", clustersync.ErrClosed)
	}
	if len(replies) != len(calls) {
		return false, fmt.Errorf("redis: buckets: len(replies) = %d, want len(calls) = %d", len(replies), len(calls))
	}
	if len(calls) == 0 {
		return true, nil // what the reference answers: nothing refuses
	}
	if err := checkBucketCalls(calls); err != nil {
		return false, fmt.Errorf("redis: buckets: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return false, s.fail("buckets", err)
	}
	call := encodeBuckets(s.prefix, s.rowPrefix(inc), at, take, calls)
	reply, err := bucketsScript.Run(ctx, scripter{s.c}, call.keys, call.args...).Int64Slice()
	if err != nil {
		return false, s.fail("buckets", err)
	}
	allowed, err := decodeBuckets(reply, replies)
	if err != nil {
		return false, fmt.Errorf("redis: buckets: %w", err)
	}
	return allowed, nil
}

// checkBucketCalls rejects what the script could not decide: a bucket
// node could not have built (a zero refill time would divide by zero),
// and calls of another namespace or key than the first (on a cluster,
// another slot).
func checkBucketCalls(calls []clustersync.BucketCall) error {
	first := &calls[0]
	for i := range calls {
		c := &calls[i]
		if err := c.Bucket.Validate(); err != nil {
			return fmt.Errorf("call %d: %w", i, err)
		}
		if c.Namespace != first.Namespace || c.Bucket.Key != first.Bucket.Key {
			return errors.New("calls of more than one namespace and key")
		}
	}
	return nil
}

// kindArg is a bucket kind as the script takes it.
func kindArg(k ratelimit.LimitKind) string {
	switch k {
	case ratelimit.TokenLimit:
		return "t"
	case ratelimit.LeakyLimit:
		return "l"
	}
	return "f"
}

// appendBucketsKey appends the Redis key of bucket b's hash in namespace
// ns, with the hash tag tag of (ns, b.Key):
//
//	<prefix>:{<tag>}:b:<len(ns)>:<ns>:<b.StoreKey()>
//
// A window's hash has a number where this one has "b"; the namespace is
// length-prefixed and StoreKey injective, so no two hashes share a key.
func appendBucketsKey(buf []byte, prefix string, tag [tagLen]byte, ns string, b *ratelimit.BucketSpec) []byte {
	buf = append(buf, prefix...)
	buf = append(buf, ":{"...)
	buf = append(buf, tag[:]...)
	buf = append(buf, "}:b:"...)
	buf = strconv.AppendInt(buf, int64(len(ns)), 10)
	buf = append(buf, ':')
	buf = append(buf, ns...)
	buf = append(buf, ':')
	return append(buf, b.StoreKey()...)
}

// bucketsKey returns the Redis key of bucket b's hash in namespace ns.
func bucketsKey(prefix, ns string, b *ratelimit.BucketSpec) string {
	return string(appendBucketsKey(nil, prefix, bucketTag(ns, bucketOf(ns, b.Key)), ns, b))
}

// encodeBuckets encodes the buckets script's call for calls, checked by
// checkBucketCalls, under key prefix and row prefix rp. What Lua cannot
// compute cheaply and exactly comes ready: a new row's state and a
// reset's (BucketSpec.Init), and a fixed bucket's period starts, a floored
// division of a signed instant.
func encodeBuckets(prefix, rp string, at, take int64, calls []clustersync.BucketCall) scriptCall {
	n := len(calls)
	first := &calls[0]
	keys := make([]string, n)
	a := newArgv(bucketsCall(0).at(n))
	s := newStrs(n*(hashKeyLen(prefix, first.Namespace)+len(first.Bucket.Key)+64), n)
	tag := bucketTag(first.Namespace, bucketOf(first.Namespace, first.Bucket.Key))
	for i := range calls {
		s.b = appendBucketsKey(s.b, prefix, tag, calls[i].Namespace, &calls[i].Bucket)
		s.cut(&keys[i])
	}
	s.done()
	a.args[bucketsHeadIncField] = &rp
	a.int(int(bucketsHeadAt), at)
	a.int(int(bucketsHeadTake), take)
	for i := range calls {
		c := &calls[i]
		b := &c.Bucket
		a.args[bucketsCallKind.at(i)] = kindArg(b.Kind)
		a.int(bucketsCallA.at(i), b.A)
		a.int(bucketsCallB.at(i), b.B)
		a.int(bucketsCallC.at(i), b.C)
		a.args[bucketsCallStrict.at(i)] = "0"
		if b.Strict {
			a.args[bucketsCallStrict.at(i)] = "1"
		}
		// A new row starts at the call's time, or at its consumption's
		// when that is earlier (as ApplyBuckets does).
		start := at
		if c.ApplyAt != 0 && c.Total > 0 {
			start = min(start, c.ApplyAt)
		}
		init := b.Init(start)
		a.int(bucketsCallInitLevel.at(i), init.Level)
		a.int(bucketsCallInitMark.at(i), init.Mark)
		forceAt := max(c.ApplyAt, 0)
		a.int(bucketsCallForceAt.at(i), forceAt)
		var forceStart, atStart int64
		if b.Kind == ratelimit.FixedLimit {
			forceStart = ratelimit.WindowStart(forceAt, time.Duration(b.A))
			atStart = ratelimit.WindowStart(at, time.Duration(b.A))
		}
		a.int(bucketsCallForceStart.at(i), forceStart)
		a.int(bucketsCallAtStart.at(i), atStart)
		a.int(bucketsCallLife.at(i), c.Life)
		a.int(bucketsCallTotal.at(i), c.Total)
		a.int(bucketsCallVersion.at(i), c.Version)
		a.int(bucketsCallExpire.at(i), unixMilliCeil(c.ExpireAt))
		a.args[bucketsCallReset.at(i)] = "0"
		var reset ratelimit.BucketState
		if c.Reset {
			a.args[bucketsCallReset.at(i)] = "1"
			reset = b.Init(at)
		}
		a.int(bucketsCallResetLevel.at(i), reset.Level)
		a.int(bucketsCallResetMark.at(i), reset.Mark)
	}
	return scriptCall{keys: keys, args: a.args}
}

// unixMilliCeil is t in Unix ms, rounded up, as the scripts take an
// expiry: 0 for none (the zero time).
func unixMilliCeil(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	ms := t.UnixMilli()
	if t.Nanosecond()%1_000_000 != 0 {
		ms++
	}
	return ms
}

// decodeBuckets writes the buckets script's reply into replies and
// returns whether the take was admitted.
func decodeBuckets(reply []int64, replies []clustersync.BucketReply) (bool, error) {
	n := len(replies)
	if len(reply) != bucketsReply(0).at(n) {
		return false, fmt.Errorf("unexpected reply %v for %d buckets", reply, n)
	}
	for i := range replies {
		replies[i] = clustersync.BucketReply{
			Before: ratelimit.BucketState{Level: reply[bucketsReplyBeforeLevel.at(i)], Mark: reply[bucketsReplyBeforeMark.at(i)],
				Waste: reply[bucketsReplyBeforeWaste.at(i)]},
			After: ratelimit.BucketState{Level: reply[bucketsReplyAfterLevel.at(i)], Mark: reply[bucketsReplyAfterMark.at(i)],
				Waste: reply[bucketsReplyAfterWaste.at(i)]},
			Applied: reply[bucketsReplyApplied.at(i)],
			Seq:     reply[bucketsReplySeq.at(i)],
		}
	}
	return reply[bucketsReplyHeadAllowed] == 1, nil
}
