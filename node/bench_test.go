package node_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
	"golang.org/x/time/rate"
)

// Benchmarks of the counting engine beside two floors doing strictly less
// work (a mutex-guarded map and a sync.Map of atomic counters: one counter per
// key, no windows, no rate, no validation).
//
// Every variant walks the same precomputed key strings in the same shuffled
// order: a hot set of 1,024 keys and a large set of 1,000,000 keys, 16 bytes
// each. Parallel variants start each goroutine at a different offset of that
// order, the same offsets for every variant. Keys exist before the timer
// starts, so the benchmarks measure counting, not inserting.

const (
	hotKeys   = 1 << 10
	largeKeys = 1_000_000
)

var benchSets = []struct {
	name string
	n    int
}{
	{"hot-1k", hotKeys},
	{"large-1M", largeKeys},
}

var (
	keysMu    gosync.Mutex
	keysCache = map[int][]string{}
)

// benchKeys returns n distinct 16-byte keys in a fixed shuffled order.
func benchKeys(n int) []string {
	keysMu.Lock()
	defer keysMu.Unlock()
	if k, ok := keysCache[n]; ok {
		return k
	}
	k := make([]string, n)
	for i := range k {
		k[i] = fmt.Sprintf("key:%012d", i)
	}
	rng := rand.New(rand.NewPCG(7, uint64(n)))
	rng.Shuffle(n, func(i, j int) { k[i], k[j] = k[j], k[i] })
	keysCache[n] = k
	return k
}

// cached keeps the state of the benchmark being run across the calls the
// testing package makes to it (RunParallel ramps b.N by calling again), so
// a million keys are inserted once per benchmark, not once per call.
var cached struct {
	name  string
	state any
}

func cachedState[T any](b *testing.B, build func() T) T {
	if cached.name == b.Name() {
		return cached.state.(T)
	}
	cached.name, cached.state = "", nil
	runtime.GC()
	s := build()
	cached.name, cached.state = b.Name(), s
	runtime.GC()
	return s
}

// benchConfig is the namespace benchmarked: two window sizes, local only;
// Increment and Rate address the 1 s size, Allow counts in both.
func benchConfig() node.Config {
	return node.Config{
		Name:        "bench",
		WindowSizes: []time.Duration{time.Second, time.Minute},
		MaxKeys:     2 * largeKeys,
	}
}

// benchTime is a fixed instant in the middle of every window, so no window
// rolls over during an explicit-time benchmark.
var benchTime = epoch.Add(500 * time.Millisecond)

func populated(b *testing.B, n int, clock node.Clock) (*node.Namespace, []string) {
	keys := benchKeys(n)
	ns := cachedState(b, func() *node.Namespace {
		ns, err := node.NewNamespace(benchConfig(), clock)
		if err != nil {
			b.Fatal(err)
		}
		var dst [2]ratelimit.Rate
		t := benchTime
		if clock != nil {
			t = clock.Now()
		}
		for _, k := range keys {
			if _, err := ns.IncrementAt(t, k, 0, 1, dst[:0]); err != nil {
				b.Fatal(err)
			}
		}
		return ns
	})
	return ns, keys
}

// walk runs op over keys: in order in one goroutine, or from per-goroutine
// offsets under RunParallel.
func walk(b *testing.B, parallel bool, n int, op func(i int)) {
	b.ReportAllocs()
	if !parallel {
		i := 0
		for b.Loop() {
			op(i)
			if i++; i == n {
				i = 0
			}
		}
		return
	}
	var g atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(g.Add(1)*7919) % n
		for pb.Next() {
			op(i)
			if i++; i == n {
				i = 0
			}
		}
	})
}

func forEachVariant(b *testing.B, fn func(b *testing.B, n int, parallel bool)) {
	for _, set := range benchSets {
		for _, par := range []bool{false, true} {
			mode := "serial"
			if par {
				mode = "parallel"
			}
			b.Run(set.name+"/"+mode, func(b *testing.B) { fn(b, set.n, par) })
		}
	}
}

// BenchmarkIncrementAt counts 1 hit in the 1 s window at a given time.
func BenchmarkIncrementAt(b *testing.B) {
	forEachVariant(b, func(b *testing.B, n int, parallel bool) {
		ns, keys := populated(b, n, nil)
		if !parallel {
			var dst [2]ratelimit.Rate
			walk(b, false, n, func(i int) {
				if _, err := ns.IncrementAt(benchTime, keys[i], time.Second, 1, dst[:0]); err != nil {
					b.Fatal(err)
				}
			})
			return
		}
		walk(b, true, n, func(i int) {
			var dst [2]ratelimit.Rate
			if _, err := ns.IncrementAt(benchTime, keys[i], time.Second, 1, dst[:0]); err != nil {
				b.Fatal(err)
			}
		})
	})
}

// BenchmarkIncrementAtEverySize counts in both window sizes (size 0).
func BenchmarkIncrementAtEverySize(b *testing.B) {
	b.Run("hot-1k/serial", func(b *testing.B) {
		ns, keys := populated(b, hotKeys, nil)
		var dst [2]ratelimit.Rate
		walk(b, false, hotKeys, func(i int) {
			if _, err := ns.IncrementAt(benchTime, keys[i], 0, 1, dst[:0]); err != nil {
				b.Fatal(err)
			}
		})
	})
}

// BenchmarkIncrement is IncrementAt reading the system clock. Its windows
// roll over as real time passes: each key's first hit in a new second
// allocates that window's pair (amortised over the hits in the second).
func BenchmarkIncrement(b *testing.B) {
	forEachVariant(b, func(b *testing.B, n int, parallel bool) {
		ns, keys := populated(b, n, node.SystemClock{})
		walk(b, parallel, n, func(i int) {
			var dst [2]ratelimit.Rate
			if _, err := ns.Increment(keys[i], time.Second, 1, dst[:0]); err != nil {
				b.Fatal(err)
			}
		})
	})
}

// BenchmarkAllowAt admits 1 hit under a 1 s and a 1 min limit high enough
// never to deny, counting it in both sizes.
func BenchmarkAllowAt(b *testing.B) {
	limits := []ratelimit.Limit{{Size: time.Second, Limit: 1e9}, {Size: time.Minute, Limit: 1e9}}
	forEachVariant(b, func(b *testing.B, n int, parallel bool) {
		ns, keys := populated(b, n, nil)
		walk(b, parallel, n, func(i int) {
			var dst [2]ratelimit.LimitStatus
			d, err := ns.AllowAt(benchTime, ratelimit.AllowRequest{Key: keys[i], Cost: 1, Limits: limits}, dst[:0])
			if err != nil || !d.Allowed {
				b.Fatalf("AllowAt: allowed=%v err=%v", d.Allowed, err)
			}
		})
	})
}

// BenchmarkFloorRateMutexMap is the floor of AllowAt: what a Go user
// would otherwise write, one golang.org/x/time/rate Limiter per key in a
// map under one sync.Mutex, AllowN(t, 1) at a finite rate that never
// denies (rate.Inf would take a shortcut), over the same keys.
func BenchmarkFloorRateMutexMap(b *testing.B) {
	type state struct {
		mu gosync.Mutex
		m  map[string]*rate.Limiter
	}
	forEachVariant(b, func(b *testing.B, n int, parallel bool) {
		keys := benchKeys(n)
		s := cachedState(b, func() *state {
			s := &state{m: make(map[string]*rate.Limiter, n)}
			for _, k := range keys {
				s.m[k] = rate.NewLimiter(1e9, 1e9)
			}
			return s
		})
		walk(b, parallel, n, func(i int) {
			s.mu.Lock()
			l := s.m[keys[i]]
			s.mu.Unlock()
			if !l.AllowN(benchTime, 1) {
				b.Fatal("AllowN refused")
			}
		})
	})
}

// BenchmarkFloorMutexMap is a floor: one sync.Mutex around a
// map[string]int64, one increment per op.
func BenchmarkFloorMutexMap(b *testing.B) {
	type state struct {
		mu gosync.Mutex
		m  map[string]int64
	}
	forEachVariant(b, func(b *testing.B, n int, parallel bool) {
		keys := benchKeys(n)
		s := cachedState(b, func() *state {
			s := &state{m: make(map[string]int64, n)}
			for _, k := range keys {
				s.m[k] = 1
			}
			return s
		})
		walk(b, parallel, n, func(i int) {
			s.mu.Lock()
			s.m[keys[i]]++
			s.mu.Unlock()
		})
	})
}

// BenchmarkFloorSyncMap is a floor: a sync.Map of *atomic.Int64, one Load
// and one atomic add per op. Keys are boxed in advance, so the floor does
// not pay the string-to-interface conversion.
func BenchmarkFloorSyncMap(b *testing.B) {
	type state struct {
		m    gosync.Map
		keys []any
	}
	forEachVariant(b, func(b *testing.B, n int, parallel bool) {
		s := cachedState(b, func() *state {
			s := &state{keys: make([]any, n)}
			for i, k := range benchKeys(n) {
				s.keys[i] = k
				s.m.Store(k, new(atomic.Int64))
			}
			return s
		})
		walk(b, parallel, n, func(i int) {
			v, _ := s.m.Load(s.keys[i])
			v.(*atomic.Int64).Add(1)
		})
	})
}

// BenchmarkMemory measures the heap held per active (key, window size),
// beyond the key's own bytes, with 1,000,000 keys counted in 1 or 2 window
// sizes. It reports B/key-size (and B/key); its ns/op is not a measurement.
func BenchmarkMemory(b *testing.B) {
	for _, sizes := range [][]time.Duration{{time.Second, time.Minute}, {time.Second}} {
		b.Run(fmt.Sprintf("sizes-%d", len(sizes)), func(b *testing.B) {
			cached.name, cached.state = "", nil
			keys := benchKeys(largeKeys)
			keyBytes := 0
			for _, k := range keys {
				keyBytes += len(k)
			}
			before := heapAlloc()
			ns, err := node.NewNamespace(node.Config{Name: "mem", WindowSizes: sizes, MaxKeys: largeKeys}, nil)
			if err != nil {
				b.Fatal(err)
			}
			var dst [2]ratelimit.Rate
			for _, k := range keys {
				if _, err := ns.IncrementAt(benchTime, k, 0, 1, dst[:0]); err != nil {
					b.Fatal(err)
				}
			}
			after := heapAlloc()
			runtime.KeepAlive(ns)
			perKey := float64(after-before-int64(keyBytes)) / largeKeys
			for b.Loop() {
			}
			b.ReportMetric(perKey/float64(len(sizes)), "B/key-size")
			b.ReportMetric(perKey, "B/key")
			b.ReportMetric(0, "ns/op")
		})
	}
}

func heapAlloc() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// BenchmarkAllowMarginAt is BenchmarkAllowAt through the periodic
// escalation's check (decided here: far from the limits).
func BenchmarkAllowMarginAt(b *testing.B) {
	limits := []ratelimit.Limit{{Size: time.Second, Limit: 1e9}, {Size: time.Minute, Limit: 1e9}}
	m := node.Margin{Blind: 200 * time.Millisecond, Safety: 2}
	forEachVariant(b, func(b *testing.B, n int, parallel bool) {
		ns, keys := populated(b, n, nil)
		walk(b, parallel, n, func(i int) {
			var dst [2]ratelimit.LimitStatus
			d, near, err := ns.AllowMarginAt(benchTime, ratelimit.AllowRequest{Key: keys[i], Cost: 1, Limits: limits}, m, dst[:0])
			if err != nil || near || !d.Allowed {
				b.Fatalf("AllowMarginAt: allowed=%v near=%v err=%v", d.Allowed, near, err)
			}
		})
	})
}

// BenchmarkAllowMarginAtPeriodic is BenchmarkAllowMarginAt as a Syncer
// calls it: a periodic namespace, keys whose others' totals were
// fetched, and keys never fetched sent to the store (Unfetched).
func BenchmarkAllowMarginAtPeriodic(b *testing.B) {
	limits := []ratelimit.Limit{{Size: time.Second, Limit: 1e9}, {Size: time.Minute, Limit: 1e9}}
	m := node.Margin{Blind: 200 * time.Millisecond, Safety: 2, Unfetched: true}
	cfg := benchConfig()
	cfg.Shared = true
	ns, err := node.NewNamespace(cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	keys := benchKeys(hotKeys)
	for _, k := range keys {
		if _, err := ns.IncrementAt(benchTime, k, 0, 1, nil); err != nil {
			b.Fatal(err)
		}
	}
	for _, w := range ns.CollectInterest(benchTime, nil) {
		ns.SetOthers(w, ratelimit.Micro)
	}
	for _, parallel := range []bool{false, true} {
		mode := "serial"
		if parallel {
			mode = "parallel"
		}
		b.Run("hot-1k/"+mode, func(b *testing.B) {
			walk(b, parallel, hotKeys, func(i int) {
				var dst [2]ratelimit.LimitStatus
				d, near, err := ns.AllowMarginAt(benchTime, ratelimit.AllowRequest{Key: keys[i], Cost: 1, Limits: limits}, m, dst[:0])
				if err != nil || near || !d.Allowed {
					b.Fatalf("AllowMarginAt: allowed=%v near=%v err=%v", d.Allowed, near, err)
				}
			})
		})
	}
}
