package cassandra_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limiterd/limiterd/integration/harness"
	"github.com/limiterd/limiterd/node"
	cassandrastore "github.com/limiterd/limiterd/strategy/cassandra"
	clustersync "github.com/limiterd/limiterd/sync"
)

var _ clustersync.BucketStore = (*cassandrastore.Store)(nil)

// bucketSpecs are one bucket of each kind on key, large enough to admit
// every take of a test or benchmark.
func bucketSpecs(key string) map[string]node.BucketSpec {
	const hit = node.Micro
	return map[string]node.BucketSpec{
		"token": {Kind: node.TokenLimit, A: 1e9 * hit, B: int64(time.Second), C: hit, Key: key},
		"leaky": {Kind: node.LeakyLimit, A: 1e9 * hit, B: int64(time.Hour), C: int64(time.Hour) / 1e9, Key: key},
		"fixed": {Kind: node.FixedLimit, A: int64(time.Hour), B: 1e9 * hit, Key: key},
	}
}

// bucketCall is inc's call for b: its consumption so far is applied.
func bucketCall(ns string, b node.BucketSpec, applied, version int64) clustersync.BucketCall {
	return clustersync.BucketCall{Namespace: ns, Bucket: b, Life: 1, Total: applied, Version: version, ExpireAt: time.Now().Add(time.Hour)}
}

// TestBuckets checks what the conformance suite does not: the argument
// checks, a done context, Close, the row's TTL, and the requests a call
// sends.
func TestBuckets(t *testing.T) {
	c := harness.SharedCassandra(t)
	e := newEnv(t, c)
	s := open(t, e.config())
	const hit = node.Micro
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

// BenchmarkBuckets measures one synchronous bucket call from one
// goroutine, next to BenchmarkSyncCall's sliding window: take 1 of one
// bucket of each kind (large enough to admit every take), one
// incarnation, 1000 keys in turn, with the Syncer's 250 ms timeout.
// Reports p50 and p99 in µs and the requests per call.
func BenchmarkBuckets(b *testing.B) {
	c := harness.SharedCassandra(b)
	e := newEnv(b, c)
	s := open(b, e.config())
	// Create the session and the schema before timing.
	warm := []clustersync.BucketCall{bucketCall("warmup", bucketSpecs("k")["token"], 0, 1)}
	if _, err := s.Buckets(context.Background(), "me", time.Now().UnixNano(), 0, warm, make([]clustersync.BucketReply, 1)); err != nil {
		b.Fatal(err)
	}
	const nkeys = 1000
	for _, kind := range []string{"token", "leaky", "fixed"} {
		b.Run("kind="+kind, func(b *testing.B) {
			specs := make([]node.BucketSpec, nkeys)
			for i := range specs {
				specs[i] = bucketSpecs(fmt.Sprintf("user-%04d", i))[kind]
			}
			applied := make([]int64, nkeys)
			version := time.Now().UnixMicro()
			calls := make([]clustersync.BucketCall, 1)
			replies := make([]clustersync.BucketReply, 1)
			lat := make([]time.Duration, 0, b.N)
			trips0 := cassandrastore.BucketTrips(s)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				k := i % nkeys
				i++
				version++
				calls[0] = bucketCall("bench", specs[k], applied[k], version)
				began := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
				ok, err := s.Buckets(ctx, "me", began.UnixNano(), node.Micro, calls, replies)
				cancel()
				lat = append(lat, time.Since(began))
				if err != nil || !ok {
					b.Fatalf("Buckets = %v, %v", ok, err)
				}
				applied[k] = replies[0].Applied
			}
			slices.Sort(lat)
			q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
			b.ReportMetric(q(0.5), "p50-µs")
			b.ReportMetric(q(0.99), "p99-µs")
			b.ReportMetric(float64(cassandrastore.BucketTrips(s)-trips0)/float64(len(lat)), "requests/call")
		})
	}
}

// BenchmarkBucketsContended is the conformance suite's concurrency test
// as a measure: callers in 4 incarnations, each incarnation's calls in
// order (one at a time), take 1 at a time from one token bucket of 100
// until it refuses, as the suite does with 8 callers per incarnation (so
// 4 calls at once). Reports the calls' p50 and p99 latency, the attempts
// started again after a failed condition and the requests per call, and
// the share of calls over the Syncer's 250 ms. It fails unless
// exactly 100 takes were admitted.
func BenchmarkBucketsContended(b *testing.B) {
	c := harness.SharedCassandra(b)
	e := newEnv(b, c)
	s := open(b, e.config())
	const incs, capacity = 4, 100
	for _, per := range []int{8} {
		b.Run(fmt.Sprintf("incs=%d/callers=%d", incs, per), func(b *testing.B) {
			var lats []time.Duration
			var calls, retries, trips int64
			run := 0
			for b.Loop() {
				run++
				spec := node.BucketSpec{Kind: node.TokenLimit, A: capacity * node.Micro, B: int64(time.Hour), C: capacity * node.Micro,
					Key: fmt.Sprintf("%s-%d-%d", strings.ReplaceAll(b.Name(), "/", "-"), run, time.Now().UnixNano())}
				r0, t0 := cassandrastore.BucketRetries(s), cassandrastore.BucketTrips(s)
				var admitted atomic.Int64
				var mu gosync.Mutex
				var wg gosync.WaitGroup
				at := time.Now().UnixNano()
				version := time.Now().UnixMicro()
				for n := range incs {
					inc := fmt.Sprint("inc-", n)
					var incMu gosync.Mutex // one incarnation's calls in order
					var applied int64
					for range per {
						wg.Go(func() {
							replies := make([]clustersync.BucketReply, 1)
							for {
								incMu.Lock()
								v := atomic.AddInt64(&version, 1)
								call := []clustersync.BucketCall{bucketCall("contended", spec, applied, v)}
								began := time.Now()
								ok, err := s.Buckets(context.Background(), inc, at, node.Micro, call, replies)
								took := time.Since(began)
								if err == nil {
									applied = max(applied, replies[0].Applied)
								}
								incMu.Unlock()
								mu.Lock()
								lats = append(lats, took)
								mu.Unlock()
								if err != nil {
									b.Error(err)
									return
								}
								if !ok {
									return
								}
								admitted.Add(1)
							}
						})
					}
				}
				wg.Wait()
				if admitted.Load() != capacity {
					b.Fatalf("admitted %d, want %d", admitted.Load(), capacity)
				}
				retries += cassandrastore.BucketRetries(s) - r0
				trips += cassandrastore.BucketTrips(s) - t0
			}
			calls = int64(len(lats))
			slices.Sort(lats)
			q := func(p float64) float64 { return float64(lats[int(p*float64(len(lats)-1))].Microseconds()) }
			b.ReportMetric(q(0.5), "p50-µs")
			b.ReportMetric(q(0.99), "p99-µs")
			b.ReportMetric(float64(retries)/float64(calls), "retries/call")
			b.ReportMetric(float64(trips)/float64(calls), "requests/call")
			b.ReportMetric(float64(calls)/float64(b.N), "calls/op")
			// The share of calls a synchronous namespace (250 ms) would
			// have timed out.
			slow := len(lats) - sort.Search(len(lats), func(i int) bool { return lats[i] > 250*time.Millisecond })
			b.ReportMetric(100*float64(slow)/float64(calls), "over-250ms-%")
		})
	}
}
