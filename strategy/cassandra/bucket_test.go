package cassandra_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/limiterd/limiterd/integration/harness"
	"github.com/limiterd/limiterd/ratelimit"
	cassandrastore "github.com/limiterd/limiterd/strategy/cassandra"
	clustersync "github.com/limiterd/limiterd/sync"
)

var _ clustersync.BucketStore = (*cassandrastore.Store)(nil)

// bucketSpecs are one bucket of each kind on key, large enough to admit
// every take of a test or benchmark.
func bucketSpecs(key string) map[string]ratelimit.BucketSpec {
	const hit = ratelimit.Micro
	return map[string]ratelimit.BucketSpec{
		"token": {Kind: ratelimit.TokenLimit, A: 1e9 * hit, B: int64(time.Second), C: hit, Key: key},
		"leaky": {Kind: ratelimit.LeakyLimit, A: 1e9 * hit, B: int64(time.Hour), C: int64(time.Hour) / 1e9, Key: key},
		"fixed": {Kind: ratelimit.FixedLimit, A: int64(time.Hour), B: 1e9 * hit, Key: key},
	}
}

// bucketCall is inc's call for b: its consumption so far is applied.
func bucketCall(ns string, b ratelimit.BucketSpec, applied, version int64) clustersync.BucketCall {
	return clustersync.BucketCall{Namespace: ns, Bucket: b, Life: 1, Total: applied, Version: version, ExpireAt: time.Now().Add(time.Hour)}
}

// TestBuckets checks what the conformance suite does not: the argument
// checks, a done context, Close, the row's TTL, and the requests a call
// sends.
func TestBuckets(t *testing.T) {
	c := harness.SharedCassandra(t)
	e := newEnv(t, c)
	s := open(t, e.config())
	const hit = ratelimit.Micro
	tok := bucketSpecs("k")["token"]
	fix := bucketSpecs("k")["fixed"]
	at := time.Now().UnixNano()
	replies := make([]clustersync.BucketReply, 2)

	first := []clustersync.BucketCall{bucketCall("b", tok, 0, 1), bucketCall("b", fix, 0, 1)}
	before := cassandrastore.BucketTrips(s)
	ok, err := s.Buckets(ctx(t), "inc", at, hit, first, replies)
	if err != nil || !ok {
		t.Fatalf("Buckets = %v, %v; want true, nil", ok, err)
	}
	// Without contention: one read, one batch.
	if got := cassandrastore.BucketTrips(s) - before; got != 2 {
		t.Errorf("requests of one uncontended call = %d, want 2", got)
	}
	if replies[0].Applied != hit || replies[1].After.Level != hit || replies[0].Seq != 1 {
		t.Errorf("replies = %+v; want Applied %d, fixed level %d, seq 1", replies, hit, hit)
	}
	// A replay (the same call again) changes nothing: the read alone.
	before = cassandrastore.BucketTrips(s)
	ok, err = s.Buckets(ctx(t), "inc", at, hit, first, replies)
	if err != nil || !ok || replies[0].Seq != 1 {
		t.Errorf("replayed Buckets = %v, %v, seq %d; want true, nil, 1", ok, err, replies[0].Seq)
	}
	if got := cassandrastore.BucketTrips(s) - before; got != 1 {
		t.Errorf("requests of a replay = %d, want 1", got)
	}

	for _, tc := range []struct {
		name    string
		calls   []clustersync.BucketCall
		replies int
	}{
		{"len(replies) != len(calls)", []clustersync.BucketCall{bucketCall("b", tok, 0, 2)}, 2},
		{"two keys", []clustersync.BucketCall{bucketCall("b", tok, 0, 2), bucketCall("b", bucketSpecs("other")["token"], 0, 2)}, 2},
		{"two namespaces", []clustersync.BucketCall{bucketCall("b", tok, 0, 2), bucketCall("c", fix, 0, 2)}, 2},
		{"one bucket twice", []clustersync.BucketCall{bucketCall("b", tok, 0, 2), bucketCall("b", tok, 0, 2)}, 2},
		{"namespace not UTF-8", []clustersync.BucketCall{bucketCall("\xff", tok, 0, 2)}, 1},
	} {
		if _, err := s.Buckets(ctx(t), "inc", at, hit, tc.calls, make([]clustersync.BucketReply, tc.replies)); err == nil || errors.Is(err, clustersync.ErrUnavailable) {
			t.Errorf("Buckets with %s = %v, want an error that is not ErrUnavailable", tc.name, err)
		}
	}
	if _, err := s.Buckets(ctx(t), "", at, hit, []clustersync.BucketCall{bucketCall("b", tok, 0, 2)}, replies[:1]); err == nil {
		t.Error("Buckets with an empty incarnation succeeded")
	}

	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = s.Buckets(canceled, "inc", at, hit, []clustersync.BucketCall{bucketCall("b", tok, hit, 3)}, replies[:1])
	if !errors.Is(err, clustersync.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Errorf("Buckets with a done context = %v; want ErrUnavailable and context.Canceled", err)
	}

	// The row's TTL is its latest ExpireAt, kept when a later call sends
	// an earlier one.
	call := bucketCall("ttl", tok, 0, 1)
	call.ExpireAt = time.Now().Add(time.Hour)
	if _, err := s.Buckets(ctx(t), "inc", at, hit, []clustersync.BucketCall{call}, replies[:1]); err != nil {
		t.Fatal(err)
	}
	call = bucketCall("ttl", tok, hit, 2)
	call.ExpireAt = time.Now().Add(time.Minute)
	if _, err := s.Buckets(ctx(t), "inc", at, hit, []clustersync.BucketCall{call}, replies[:1]); err != nil {
		t.Fatal(err)
	}
	ttl, err := cassandrastore.BucketTTL(ctx(t), s, "ttl", tok)
	if err != nil {
		t.Fatal(err)
	}
	if ttl < 3590 || ttl > 3602 {
		t.Errorf("TTL of a row whose latest ExpireAt is in an hour = %d s, want about 3600", ttl)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = s.Buckets(ctx(t), "inc", at, hit, []clustersync.BucketCall{bucketCall("b", tok, hit, 4)}, replies[:1])
	if !errors.Is(err, clustersync.ErrClosed) {
		t.Errorf("Buckets after Close = %v, want ErrClosed", err)
	}
}
