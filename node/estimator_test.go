package node_test

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// estimatorFull runs the estimator's long measurements: memory up to 10^7
// keys and the error table at full size. CI runs their smoke versions.
var estimatorFull = flag.Bool("estimator.full", false, "run the estimator's full memory and accuracy measurements")

func estimatorConfig(hashes, slots int, sizes ...time.Duration) node.Config {
	c := localConfig(sizes...)
	c.Name = "sketch"
	c.Estimator = &node.EstimatorConfig{Hashes: hashes, Slots: slots}
	return c
}

// TestEstimatorNeverBelowTruth: with a sketch far too small for its keys
// (many collisions), every rate, through rotations, gaps and late hits, is
// at least the exact rate of the reference model.
func TestEstimatorNeverBelowTruth(t *testing.T) {
	sizes := []time.Duration{time.Second, 10 * time.Second}
	ns := newNS(t, estimatorConfig(2, 16, sizes...), nil)
	ref := newRefModel(sizes)
	r := rand.New(rand.NewPCG(1, 2))
	now := epoch.UnixNano()
	var below, over int
	for i := range 20_000 {
		tn := now
		switch r.IntN(100) {
		case 0:
			now += int64(25 * time.Second) // a gap: both windows end
			tn = now
		case 1, 2, 3:
			tn -= int64(time.Duration(r.IntN(1000)) * time.Millisecond) // a late hit
		default:
			now += int64(time.Duration(r.IntN(5)) * time.Millisecond)
			tn = now
		}
		key := "k" + strconv.Itoa(r.IntN(200))
		micro := int64(r.IntN(3_000_000))
		rates, err := ns.IncrementAt(time.Unix(0, tn), key, 0, float64(micro)/ratelimit.Micro, nil)
		if err != nil {
			t.Fatal(err)
		}
		for j, size := range sizes {
			ref.add(key, int64(size), tn, micro)
			if rates[j].Size != size {
				t.Fatalf("rates = %+v", rates)
			}
			// The rate now, and the one the increment answered when it
			// was not late (a late hit's own time may see a window that
			// no longer counts now, dropped as by exact counting).
			want := ref.rateFloat(key, int64(size), now) / ratelimit.Micro
			got := rateOf(t, ns, time.Unix(0, now), key, size)
			if tn == now && rates[j].Rate < want-1e-6 {
				got = rates[j].Rate
			}
			if got < want-1e-6 {
				below++
				if below < 5 {
					t.Errorf("step %d key %s size %v: rate %v, exact %v", i, key, size, got, want)
				}
			}
			if got > want+1e-6 {
				over++
			}
		}
	}
	if below > 0 {
		t.Errorf("%d rates below the truth", below)
	}
	if over == 0 {
		t.Error("no rate above the truth: the sketch was meant to collide")
	}
}

// TestEstimatorExactAlone: one key in a large sketch counts exactly, with
// the sliding formula, across a rotation and a gap.
func TestEstimatorExactAlone(t *testing.T) {
	ns := newNS(t, estimatorConfig(4, 1024, time.Second), nil)
	incr(t, ns, epoch.Add(100*time.Millisecond), "k", 0, 4)
	incr(t, ns, epoch.Add(900*time.Millisecond), "k", 0, 0.5)
	if got := rateOf(t, ns, epoch.Add(950*time.Millisecond), "k", time.Second); got != 4.5 {
		t.Errorf("rate in the window = %v, want 4.5", got)
	}
	at := epoch.Add(1250 * time.Millisecond)
	if got := incr(t, ns, at, "k", 0, 1)[0].Rate; !near(got, 1+4.5*0.75) {
		t.Errorf("rate after the rotation = %v, want %v", got, 1+4.5*0.75)
	}
	if got := rateOf(t, ns, epoch.Add(1100*time.Millisecond), "k", time.Second); !near(got, 1+4.5*0.9) {
		t.Errorf("rate earlier in the window = %v, want %v", got, 1+4.5*0.9)
	}
	// A late hit in the previous window counts there.
	incr(t, ns, epoch.Add(999*time.Millisecond), "k", 0, 1)
	if got := rateOf(t, ns, at, "k", time.Second); !near(got, 1+5.5*0.75) {
		t.Errorf("rate after a late hit = %v, want %v", got, 1+5.5*0.75)
	}
	// Too late: the window no longer counts; nothing changes.
	incr(t, ns, epoch.Add(-time.Millisecond), "k", 0, 100)
	if got := rateOf(t, ns, at, "k", time.Second); !near(got, 1+5.5*0.75) {
		t.Errorf("rate after a hit too late = %v, want %v", got, 1+5.5*0.75)
	}
	// A gap: both windows end; the next window starts empty.
	at = epoch.Add(5500 * time.Millisecond)
	if got := incr(t, ns, at, "k", 0, 2)[0].Rate; got != 2 {
		t.Errorf("rate after a gap = %v, want 2", got)
	}
	if got := rateOf(t, ns, at, "other", time.Second); got != 0 {
		t.Errorf("another key's rate = %v, want 0", got)
	}
	if got := ns.ActiveKeys(); got != 0 {
		t.Errorf("ActiveKeys = %d, want 0 (a sketch holds no keys)", got)
	}
}

// TestEstimatorRefusals: negative values, bucket limits and invalid keys
// are refused with the field at fault.
func TestEstimatorRefusals(t *testing.T) {
	ns := newNS(t, estimatorConfig(4, 1024, time.Second), nil)
	_, err := ns.IncrementAt(epoch, "k", 0, -1, nil)
	wantFieldError(t, err, "value", ratelimit.ErrInvalidValue)
	_, err = ns.IncrementAt(epoch, "\xff", 0, 1, nil)
	wantFieldError(t, err, "key", ratelimit.ErrInvalidKey)
	_, err = ns.RateAt(epoch, "\xff", 0, 0, nil)
	wantFieldError(t, err, "key", ratelimit.ErrInvalidKey)
	if r, err := ns.RateAt(epoch, "k", 0, -1, nil); err != nil || r[0].Rate != -1 {
		t.Errorf("RateAt with cur_diff -1 = %v, %v; want -1 (a what-if counts nothing)", r, err)
	}
	req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{
		{Size: time.Second, Limit: 5},
		{Kind: ratelimit.TokenLimit, Token: ratelimit.TokenBucket{Max: 5, RefillAmount: 1, RefillTime: time.Second}},
	}}
	_, err = ns.AllowAt(epoch, req, nil)
	wantFieldError(t, err, "limits[1].token", node.ErrNotLocal)
	if !errors.Is(err, node.ErrEstimatorKind) {
		t.Errorf("err = %v, want ErrEstimatorKind", err)
	}
	_, err = ns.CheckAllow(req)
	wantFieldError(t, err, "limits[1].token", node.ErrEstimatorKind)
}

// TestEstimatorAllow: Allow decides on the estimates, counts in every
// size, and answers a retry-after when refused (its race: TestAllowRace).
func TestEstimatorAllow(t *testing.T) {
	ns := newNS(t, estimatorConfig(4, 1024, time.Second, time.Minute), nil)
	at := epoch.Add(time.Second / 2)
	req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{{Size: time.Minute, Limit: 3}}}
	for i, want := range []bool{true, true, true, false} {
		d, err := ns.AllowAt(at, req, nil)
		if err != nil || d.Allowed != want {
			t.Fatalf("Allow %d = %+v, %v; want allowed %v", i, d, err, want)
		}
		if !want && d.RetryAfter <= 0 {
			t.Errorf("refused Allow: RetryAfter %v, want > 0", d.RetryAfter)
		}
	}
	if got := rateOf(t, ns, at, "k", time.Second); got != 3 {
		t.Errorf("1 s rate = %v, want 3 (counted in every size)", got)
	}
}

func TestEstimatorConfig(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   node.Config
		field string
	}{
		{"no hashes", estimatorConfig(0, 1024, time.Second), "estimator.hashes"},
		{"17 hashes", estimatorConfig(17, 1024, time.Second), "estimator.hashes"},
		{"too few slots", estimatorConfig(4, 15, time.Second), "estimator.slots"},
		{"too many slots", estimatorConfig(4, 1<<24+1, time.Second), "estimator.slots"},
		{"shared", func() node.Config { c := estimatorConfig(4, 1024, time.Second); c.Shared = true; return c }(), "estimator"},
		{"evict", func() node.Config { c := estimatorConfig(4, 1024, time.Second); c.OnFull = node.OnFullEvict; return c }(), "on_full"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantFieldError(t, tc.cfg.Validate(), tc.field, node.ErrInvalidConfig) })
	}
}

// TestEstimatorNoAllocs: counting, reading and deciding in a live window
// allocate nothing.
func TestEstimatorNoAllocs(t *testing.T) {
	ns := newNS(t, estimatorConfig(4, 1024, time.Second, time.Minute), nil)
	at := epoch.Add(time.Second / 2)
	incr(t, ns, at, "key", 0, 1)
	rates := make([]ratelimit.Rate, 0, 2)
	statuses := make([]ratelimit.LimitStatus, 0, 2)
	req := ratelimit.AllowRequest{Key: "key", Cost: 1, Limits: []ratelimit.Limit{{Size: time.Second, Limit: 1e9}}}
	for name, call := range map[string]func() error{
		"IncrementAt": func() error { _, err := ns.IncrementAt(at, "key", 0, 1, rates); return err },
		"RateAt":      func() error { _, err := ns.RateAt(at, "key", 0, 1, rates); return err },
		"AllowAt":     func() error { _, err := ns.AllowAt(at, req, statuses); return err },
	} {
		if got := testing.AllocsPerRun(100, func() {
			if err := call(); err != nil {
				t.Fatal(err)
			}
		}); got != 0 {
			t.Errorf("%s: %v allocations per call, want 0", name, got)
		}
	}
}

// estimatorHeap returns the heap held by an estimator namespace of
// 4 × 65,536 slots and two window sizes after counting n distinct keys.
func estimatorHeap(t testing.TB, n int) int64 {
	before := heapAlloc()
	ns := newNS(t, estimatorConfig(4, 65536, time.Second, time.Minute), nil)
	at := epoch.Add(time.Second / 2)
	buf := make([]byte, 0, 32)
	dst := make([]ratelimit.Rate, 0, 2)
	for i := range n {
		buf = strconv.AppendInt(append(buf[:0], "key-"...), int64(i), 10)
		if _, err := ns.IncrementAt(at, string(buf), 0, 1, dst); err != nil {
			t.Fatal(err)
		}
	}
	after := heapAlloc()
	runtime.KeepAlive(ns)
	return after - before
}

// TestEstimatorMemoryFlat: the heap an estimator namespace holds stays
// within 5 % from 10^4 to 10^6 distinct keys (10^7 with -estimator.full).
func TestEstimatorMemoryFlat(t *testing.T) {
	counts := []int{10_000, 100_000, 1_000_000}
	if *estimatorFull {
		counts = append(counts, 10_000_000)
	}
	want := node.EstimatorBytes(node.EstimatorConfig{Hashes: 4, Slots: 65536}, 2)
	base := estimatorHeap(t, counts[0])
	t.Logf("sketches: %d B", want)
	for _, n := range counts {
		got := base
		if n != counts[0] {
			got = estimatorHeap(t, n)
		}
		t.Logf("%10d keys: heap %d B (%+.2f%% of the 10^4 case)", n, got, 100*float64(got-base)/float64(base))
		if math.Abs(float64(got-base)) > 0.05*float64(base) {
			t.Errorf("%d keys: heap %d B, want within 5%% of %d B", n, got, base)
		}
		if float64(got) < 0.95*float64(want) || float64(got) > 1.05*float64(want) {
			t.Errorf("%d keys: heap %d B, want about the sketches' %d B", n, got, want)
		}
	}
}

// TestEstimatorAccuracy measures the estimator's error against exact
// counts on a Zipf stream (s = 1.1) and a uniform one, next to the
// count-min bound: an estimate exceeds the truth by more than ε·N (N the
// stream's total, ε = e/slots) for at most a fraction δ = e^-hashes of
// the keys. It fails if a key is underestimated or if that fraction
// exceeds 2δ. The smoke run is small; -estimator.full runs 10^7 events
// on 4 × 65,536 slots (print the table with -v). "heavy" are the keys
// counted at least ε·N times, the ones a limit is about.
func TestEstimatorAccuracy(t *testing.T) {
	hashes, slots, events, keySpaces := 4, 4096, 200_000, []int{50_000}
	if *estimatorFull {
		slots, events, keySpaces = 65536, 10_000_000, []int{10_000, 1_000_000}
	}
	eps, delta := math.E/float64(slots), math.Exp(-float64(hashes))
	t.Logf("%d hashes × %d slots, %d events; ε = e/slots = %.3g, δ = e^-hashes = %.3g, ε·N = %.1f",
		hashes, slots, events, eps, delta, eps*float64(events))
	t.Logf("%-8s %8s %9s %8s %9s %8s %9s %7s %13s %9s %7s", "stream", "keys", "distinct", "exact", "mean err", "max err", "mean rel", "heavy", "heavy rel", "over ε·N", "δ")
	for _, keys := range keySpaces {
		for _, stream := range []string{"zipf", "uniform"} {
			accuracyRow(t, stream, keys, hashes, slots, events)
		}
	}
}

// accuracyRow counts events hits of a stream over keys keys in an
// estimator and in exact counters, and logs one row of the error table.
func accuracyRow(t *testing.T, stream string, keys, hashes, slots, events int) {
	eps, delta := math.E/float64(slots), math.Exp(-float64(hashes))
	r := rand.New(rand.NewPCG(7, 11))
	var next func() uint64
	if stream == "zipf" {
		z := rand.NewZipf(r, 1.1, 1, uint64(keys-1))
		next = z.Uint64
	} else {
		next = func() uint64 { return r.Uint64N(uint64(keys)) }
	}
	ns := newNS(t, estimatorConfig(hashes, slots, time.Hour), nil)
	exact := make([]int64, keys)
	at := epoch.Add(time.Minute)
	dst := make([]ratelimit.Rate, 0, 1)
	for range events {
		k := next()
		exact[k]++
		if _, err := ns.IncrementAt(at, "key-"+strconv.FormatUint(k, 10), 0, 1, dst); err != nil {
			t.Fatal(err)
		}
	}
	var distinct, exactN, overBound, heavy int
	var sumErr, sumRel, heavyRel, maxErr float64
	bound := eps * float64(events)
	for k, truth := range exact {
		if truth == 0 {
			continue
		}
		distinct++
		got := rateOf(t, ns, at, "key-"+strconv.Itoa(k), time.Hour)
		e := got - float64(truth)
		if e < 0 {
			t.Fatalf("%s: key %d estimated %v below its count %d", stream, k, got, truth)
		}
		if e == 0 {
			exactN++
		}
		if e > bound {
			overBound++
		}
		sumErr += e
		sumRel += e / float64(truth)
		if float64(truth) >= bound { // a heavy hitter: count at least ε·N
			heavy++
			heavyRel += e / float64(truth)
		}
		maxErr = math.Max(maxErr, e)
	}
	frac := float64(overBound) / float64(distinct)
	t.Logf("%-8s %8d %9d %7.2f%% %9.2f %8.0f %8.1f%% %7d %12.3f%% %8.4f%% %6.2f%%", stream, keys, distinct, 100*float64(exactN)/float64(distinct),
		sumErr/float64(distinct), maxErr, 100*sumRel/float64(distinct), heavy, 100*heavyRel/math.Max(1, float64(heavy)), 100*frac, 100*delta)
	if frac > 2*delta {
		t.Errorf("%s: %.4f of keys over ε·N, want at most 2δ = %.4f", stream, frac, 2*delta)
	}
}

// BenchmarkEstimatorIncrementAt counts 1 hit for one of 10^6 uniform keys
// (pingora's benchmark; its published single-thread incr is 10 ns/op) in
// an estimator of one window size: 4 × 65,536 slots (6 MiB with its three
// sketches: each add misses the cache) and 4 × 1,024 (fits in L2). The
// keys, 16 bytes walked in order, are those of scripts/pingorabench, which
// times pingora-limits' sketch beside it.
func BenchmarkEstimatorIncrementAt(b *testing.B) {
	const n = 1_000_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("key:%012d", i)
	}
	at := epoch.Add(time.Second / 2)
	for _, slots := range []int{65536, 1024} {
		for _, par := range []bool{false, true} {
			name := fmt.Sprintf("4x%d/serial", slots)
			if par {
				name = fmt.Sprintf("4x%d/parallel", slots)
			}
			b.Run(name, func(b *testing.B) {
				ns := newNS(b, estimatorConfig(4, slots, time.Second), nil)
				walk(b, par, n, func(i int) {
					var dst [1]ratelimit.Rate
					if _, err := ns.IncrementAt(at, keys[i], 0, 1, dst[:0]); err != nil {
						b.Fatal(err)
					}
				})
			})
		}
	}
}

// TestEstimatorFutureCall: a call dated ahead of the namespace clock, in a
// window the clock has not reached, counts in the clock's window and
// ends no window the other keys count in.
func TestEstimatorFutureCall(t *testing.T) {
	clock := newFakeClock(epoch.Add(900 * time.Millisecond))
	ns := newNS(t, estimatorConfig(4, 1024, time.Second), clock)
	now := clock.Now()
	incr(t, ns, now, "victim", 0, 7)
	incr(t, ns, now.Add(time.Second), "caller", 0, 1)
	if got := rateOf(t, ns, now, "victim", time.Second); got != 7 {
		t.Errorf("victim's rate after a call 1 s ahead = %v, want 7", got)
	}
	if got := rateOf(t, ns, now, "caller", time.Second); got != 1 {
		t.Errorf("caller's rate at the clock's time = %v, want 1", got)
	}
	clock.Advance(200 * time.Millisecond)
	if got := rateOf(t, ns, clock.Now(), "victim", time.Second); !near(got, 7*0.9) {
		t.Errorf("victim's rate in the next window = %v, want %v", got, 7*0.9)
	}
}

// TestEstimatorConfigBounds: an estimator's hashes and slots may be
// anywhere in their ranges, both ends included; outside, the error names
// the field.
func TestEstimatorConfigBounds(t *testing.T) {
	for _, tc := range []struct {
		hashes, slots int
		field         string // "": valid
	}{
		{1, node.MinEstimatorSlots, ""},
		{node.MaxEstimatorHashes, node.MinEstimatorSlots, ""},
		{0, node.MinEstimatorSlots, "estimator.hashes"},
		{node.MaxEstimatorHashes + 1, node.MinEstimatorSlots, "estimator.hashes"},
		{1, node.MinEstimatorSlots - 1, "estimator.slots"},
		{1, node.MaxEstimatorSlots, ""},
		{1, node.MaxEstimatorSlots + 1, "estimator.slots"},
	} {
		err := estimatorConfig(tc.hashes, tc.slots, time.Second).Validate()
		if tc.field == "" && err != nil || tc.field != "" && (err == nil || !strings.Contains(err.Error(), tc.field)) {
			t.Errorf("hashes %d, slots %d: %v, want %q", tc.hashes, tc.slots, err, tc.field)
		}
	}
}

// TestIsEstimator: only a namespace with an estimator section counts in
// sketches.
func TestIsEstimator(t *testing.T) {
	if !newNS(t, estimatorConfig(2, 1024, time.Second), nil).IsEstimator() || newNS(t, localConfig(time.Second), nil).IsEstimator() {
		t.Error("IsEstimator: want true for the estimator namespace only")
	}
}

// TestEstimatorReadReturns: a read of a sketch's rate returns (a 10 s
// bound on a reader that would retry for ever).
func TestEstimatorReadReturns(t *testing.T) {
	ns := newNS(t, estimatorConfig(2, 1024, time.Second), newFakeClock(epoch))
	done := make(chan float64, 1)
	go func() {
		if _, err := ns.Increment("k", 0, 2, nil); err != nil {
			done <- -1
			return
		}
		rs, err := ns.RateAt(epoch, "k", 0, 0, nil)
		if err != nil {
			done <- -1
			return
		}
		done <- rs[0].Rate
	}()
	select {
	case r := <-done:
		if r < 2 {
			t.Errorf("rate after 2 hits: %v, want at least 2", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an estimator's read did not return in 10 s")
	}
}
