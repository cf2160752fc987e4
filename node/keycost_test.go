package node_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// heapPerKey is the heap a key of keyLen bytes takes in a namespace of
// the window sizes sizes, counted in each, measured over n keys.
func heapPerKey(t *testing.T, keyLen int, sizes []time.Duration, n int) float64 {
	t.Helper()
	clock := fakeclock.New(time.Unix(1_700_000_000, 0))
	ns, err := node.NewNamespace(node.Config{Name: "m", WindowSizes: sizes, MaxKeys: 10 * n, MaxBytes: 1 << 40}, clock)
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("k", max(keyLen-8, 0))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var dst []ratelimit.Rate
	for i := range n {
		if dst, err = ns.Increment(fmt.Sprintf("%s%08d", pad, i)[:max(keyLen, 8)], 0, 1, dst[:0]); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(ns)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}

// TestKeyCost: KeyCost, what a key costs under max_bytes, is at least the
// heap it takes, and not far above it, for short keys and for keys of
// 1 KiB, in namespaces of 1, 2 and 4 window sizes.
func TestKeyCost(t *testing.T) {
	all := []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour}
	for _, sizes := range [][]time.Duration{all[:1], all[:2], all} {
		for _, keyLen := range []int{10, 100, ratelimit.MaxKeyLen} {
			got := heapPerKey(t, keyLen, sizes, 20_000)
			cost := float64(node.KeyCost(keyLen, len(sizes)))
			t.Logf("a key of %d bytes, %d sizes: %.0f bytes of heap, KeyCost %.0f", keyLen, len(sizes), got, cost)
			if cost < got || cost > 1.5*got {
				t.Errorf("a key of %d bytes in %d sizes takes %.0f bytes of heap; KeyCost says %.0f", keyLen, len(sizes), got, cost)
			}
		}
	}
}

// TestMaxBytes: a million keys of 1 KiB stop at the namespace's byte
// budget, refused with ErrKeyLimit naming max_bytes, and the heap they
// take stays within it; reclaimed keys give their bytes back.
func TestMaxBytes(t *testing.T) {
	const budget = 32 << 20
	clock := fakeclock.New(time.Unix(1_700_000_000, 0))
	sizes := []time.Duration{time.Second, time.Minute}
	ns, err := node.NewNamespace(node.Config{Name: "big", WindowSizes: sizes, MaxBytes: budget}, clock)
	if err != nil {
		t.Fatal(err)
	}
	if ns.Config().MaxKeys != node.DefaultMaxKeys {
		t.Fatalf("max_keys %d; the test wants the default", ns.Config().MaxKeys)
	}
	cost := node.KeyCost(ratelimit.MaxKeyLen, len(sizes))
	buf := []byte(strings.Repeat("k", ratelimit.MaxKeyLen))
	key := func(i int) string {
		copy(buf[len(buf)-8:], fmt.Sprintf("%08d", i))
		return string(buf)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var dst []ratelimit.Rate
	admitted, refused := 0, 0
	for i := range 1_000_000 {
		_, err := ns.Increment(key(i), 0, 1, dst[:0])
		switch {
		case err == nil:
			admitted++
		case errors.Is(err, node.ErrKeyLimit) && strings.Contains(err.Error(), "max_bytes"):
			refused++
		default:
			t.Fatalf("key %d: %v; want ErrKeyLimit naming max_bytes", i, err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if want := int(budget / cost); admitted != want {
		t.Errorf("%d keys of 1 KiB admitted; want %d (max_bytes %d / KeyCost %d)", admitted, want, budget, cost)
	}
	if refused != 1_000_000-admitted || ns.RefusedKeys() != int64(refused) {
		t.Errorf("%d refused, RefusedKeys %d; want %d", refused, ns.RefusedKeys(), 1_000_000-admitted)
	}
	if got := ns.KeyBytes(); got > budget || got != int64(admitted)*cost {
		t.Errorf("KeyBytes %d; want %d, within %d", got, int64(admitted)*cost, budget)
	}
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > budget+budget/10 {
		t.Errorf("the heap grew by %d bytes; want at most the budget %d (+10%%)", grown, budget)
	}
	runtime.KeepAlive(ns)
	// Past two windows of the largest size every key is reclaimed, and its
	// bytes with it: a new key fits again.
	clock.Add(3 * time.Minute)
	if n := ns.Reclaim(clock.Now()); n != admitted || ns.KeyBytes() != 0 || ns.ActiveKeys() != 0 {
		t.Errorf("Reclaim removed %d keys, leaving %d bytes and %d keys; want %d, 0, 0", n, ns.KeyBytes(), ns.ActiveKeys(), admitted)
	}
	if _, err := ns.Increment(key(0), 0, 1, nil); err != nil {
		t.Errorf("a key after the reclaim: %v", err)
	}
}

// TestMaxBytesEvict: at its byte budget, a namespace that evicts gives a
// new key an idle key's place, and its bytes stay within the budget but
// for the difference of two keys' costs.
func TestMaxBytesEvict(t *testing.T) {
	const budget = node.MinMaxBytes
	clock := fakeclock.New(time.Unix(1_700_000_000, 0))
	sizes := []time.Duration{time.Second, time.Minute}
	ns, err := node.NewNamespace(node.Config{Name: "evict", WindowSizes: sizes, MaxBytes: budget, OnFull: node.OnFullEvict}, clock)
	if err != nil {
		t.Fatal(err)
	}
	cost := node.KeyCost(ratelimit.MaxKeyLen, len(sizes))
	n := int(budget / cost)
	for i := range 3 * n {
		if i == n {
			clock.Add(2 * time.Minute) // the first keys idle
		}
		k := fmt.Sprintf("%0*d", ratelimit.MaxKeyLen, i)
		if _, err := ns.Increment(k, 0, 1, nil); err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
		if ns.KeyBytes() > budget {
			t.Fatalf("key %d: %d bytes held, over the budget %d", i, ns.KeyBytes(), budget)
		}
	}
	if ns.EvictedKeys() == 0 || ns.ActiveKeys() > int64(n) {
		t.Errorf("%d evicted, %d held; want evictions and at most %d held", ns.EvictedKeys(), ns.ActiveKeys(), n)
	}
}

// TestBucketCost: BucketCost, what a bucket costs under max_bytes, is at
// least the heap it takes and not far above it; buckets stop at the byte
// budget, and reclaimed ones give their bytes back.
func TestBucketCost(t *testing.T) {
	for _, keyLen := range []int{10, 100, ratelimit.MaxKeyLen} {
		clock := fakeclock.New(time.Unix(1_700_000_000, 0))
		b := node.NewBuckets(node.BucketsConfig{Name: "b", MaxBytes: 1 << 40}, clock)
		p := ratelimit.FixedBucket{Limit: 10, Period: time.Minute}
		const n = 20_000
		pad := strings.Repeat("k", keyLen-8)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range n {
			if _, err := b.TakeFixed(fmt.Sprintf("%s%08d", pad, i), p, 1); err != nil {
				t.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(b)
		got := float64(after.HeapAlloc-before.HeapAlloc) / n
		cost := float64(node.BucketCost(keyLen))
		t.Logf("a bucket of a key of %d bytes: %.0f bytes of heap, BucketCost %.0f", keyLen, got, cost)
		if cost < got || cost > 1.5*got {
			t.Errorf("a bucket of a key of %d bytes takes %.0f bytes of heap; BucketCost says %.0f", keyLen, got, cost)
		}
	}

	clock := fakeclock.New(time.Unix(1_700_000_000, 0))
	b := node.NewBuckets(node.BucketsConfig{Name: "b", MaxBytes: node.MinMaxBytes}, clock)
	p := ratelimit.FixedBucket{Limit: 10, Period: time.Minute}
	want := int(node.MinMaxBytes / node.BucketCost(ratelimit.MaxKeyLen))
	admitted := 0
	for i := range 2 * want {
		_, err := b.TakeFixed(fmt.Sprintf("%0*d", ratelimit.MaxKeyLen, i), p, 1)
		switch {
		case err == nil:
			admitted++
		case !errors.Is(err, node.ErrKeyLimit) || !strings.Contains(err.Error(), "max_bytes"):
			t.Fatalf("bucket %d: %v; want ErrKeyLimit naming max_bytes", i, err)
		}
	}
	if admitted != want || b.Bytes() > node.MinMaxBytes {
		t.Errorf("%d buckets of 1 KiB keys admitted, %d bytes; want %d, within %d", admitted, b.Bytes(), want, node.MinMaxBytes)
	}
	clock.Add(2 * time.Minute)
	if n := b.Reclaim(clock.Now()); n != admitted || b.Bytes() != 0 {
		t.Errorf("Reclaim removed %d, leaving %d bytes; want %d, 0", n, b.Bytes(), admitted)
	}
}
