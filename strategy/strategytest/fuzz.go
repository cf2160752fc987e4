package strategytest

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
	clustersync "github.com/limiterd/limiterd/sync"
)

// Fuzzing every store's arithmetic against the Go engine.
//
// Fuzz decodes its input into a sequence of calls of one kind, sends each
// call to the store and to the reference, and fails at the first answer
// or state read back that differs. The references are the Go engine:
// clustersync.ApplyBuckets (node's advance, take and Force) for buckets,
// clustersync.ApplyLease for leases; for windows the memory store, which
// keeps rows by Push's rules and decides AllowGroup as
// clustersync.DecideGroup does, and ratelimit.SlidingRate, the node's own
// sliding formula, for every decision.
//
// The input is read byte by byte: an op code, then the op's fields. When
// it runs out, a generator seeded by a hash of the whole input goes on for
// steps more ops (at most 100 under go test -fuzz, for more runs), so
// every input, a seed of a few bytes included, is a long sequence. A
// store's package has one thin target per kind:
//
//	func FuzzBuckets(f *testing.F) {
//		strategytest.AddFuzzSeeds(f, strategytest.FuzzBuckets)
//		s := newStore(f)
//		f.Fuzz(func(t *testing.T, data []byte) {
//			strategytest.Fuzz(t, s, strategytest.FuzzBuckets, data, 150)
//		})
//	}
//
// Plain go test runs the seeds and testdata/fuzz/FuzzXxx/* (the CI
// smoke); a longer search runs one target at a time with one worker:
//
//	go test -run '^$' -fuzz '^FuzzBuckets$' -fuzztime 10m -fuzzminimizetime 20x -parallel 1 ./strategy/redis
//
// and every input that ever found a difference is committed under the
// store's testdata/fuzz/, where plain go test runs it again.

// FuzzKind is the kind of calls a fuzz sequence makes.
type FuzzKind int

// The kinds: sliding-window Increment (Push, PushFetch, Fetch, Window),
// sliding-window Allow (AllowGroup, single Allows and groups, with
// pushes of other incarnations), token, leaky and fixed buckets, and leases.
const (
	FuzzIncrement FuzzKind = iota + 1
	FuzzAllow
	FuzzBuckets
	FuzzLeases
)

func (k FuzzKind) String() string {
	switch k {
	case FuzzIncrement:
		return "increment"
	case FuzzAllow:
		return "allow"
	case FuzzBuckets:
		return "buckets"
	case FuzzLeases:
		return "leases"
	}
	return "unknown"
}

// Fuzz runs the sequence data decodes to against s and the reference,
// steps ops past the end of data, failing t at the first difference. s
// must implement the kind's interfaces (Windower for the window kinds,
// GroupAllower for FuzzAllow, BucketStore, LeaseStore);
// Fuzz fails t otherwise. Every run writes under a namespace of its own.
func Fuzz(t *testing.T, s clustersync.Store, kind FuzzKind, data []byte, steps int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	f := newFuzzer(t, ctx, data)
	var run func(*fuzzer) func() bool
	switch kind {
	case FuzzIncrement:
		run = fuzzWindows(s, false)
	case FuzzAllow:
		run = fuzzWindows(s, true)
	case FuzzBuckets:
		run = fuzzBuckets(s)
	case FuzzLeases:
		run = fuzzLeases(s)
	default:
		t.Fatalf("Fuzz: kind %d", kind)
	}
	step := run(f)
	if step == nil {
		t.Fatalf("%T does not serve %s: fuzz only the kinds a store declares", s, kind)
	}
	if fuzzing() {
		// Shorter runs, more of them: a difference found reproduces
		// under plain go test, whose longer run has the same first ops.
		steps = min(steps, fuzzingSteps)
	}
	defer func() { t.Logf("%d ops", f.n) }()
	for i := 0; f.src.more() || i < steps; i++ {
		if f.src.more() {
			i = 0 // steps count from the end of data
		}
		f.n++
		f.trail[f.n%len(f.trail)] = ""
		if !step() {
			return
		}
	}
}

func newFuzzer(t *testing.T, ctx context.Context, data []byte) *fuzzer {
	return &fuzzer{t: t, ctx: ctx, src: newSource(data), ns: fuzzNamespace(),
		base: fuzzBase, expire: time.Now().Add(48 * time.Hour)}
}

// fuzzingSteps bounds the generated ops of a run under go test -fuzz.
const fuzzingSteps = 100

// fuzzing reports whether the process is a go test -fuzz worker.
func fuzzing() bool {
	f := flag.Lookup("test.fuzzworker")
	return f != nil && f.Value.String() == "true"
}

// fuzzer is what every kind's sequence shares: input, clock, versions
// and a trail of the last ops for failure messages.
type fuzzer struct {
	t   *testing.T
	ctx context.Context
	src *source
	ns  string
	// base is the sequence's time origin, fuzzBase; expire the ExpireAt
	// of every row, two days after the run's start by the wall clock.
	base   int64
	expire time.Time
	ver    int64
	n      int // ops run
	// trail holds the last ops, shown when a difference is found.
	trail [16]string
}

// fuzzBase is the time origin of every sequence: a fixed instant, so
// that an input gives the same times on every run, whatever the periods,
// and far ahead of the wall clock, so that a store dropping a lease set
// by the wall clock after its latest expiry drops nothing still live.
var fuzzBase = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

var fuzzRuns atomic.Int64

// fuzzNamespace is a valid namespace unique to the run.
func fuzzNamespace() string {
	return fmt.Sprintf("fz.%d.%s", fuzzRuns.Add(1), randomHex(6))
}

// version returns a version greater than every one issued in the run.
func (f *fuzzer) version() int64 {
	f.ver++
	return f.ver
}

// log records op n in the trail.
func (f *fuzzer) log(format string, args ...any) {
	f.trail[f.n%len(f.trail)] = fmt.Sprintf("op %d: ", f.n) + fmt.Sprintf(format, args...)
}

// fail reports a difference with the ops that led to it and stops the run.
func (f *fuzzer) fail(format string, args ...any) {
	f.t.Helper()
	var b strings.Builder
	for i := range len(f.trail) {
		if s := f.trail[(f.n+1+i)%len(f.trail)]; s != "" {
			b.WriteString("\n\t" + s)
		}
	}
	f.t.Fatalf("op %d: %s\nlast ops (times from the sequence's base %d):%s", f.n, fmt.Sprintf(format, args...), f.base, b.String())
}

// must stops the run on a store's error: the sequences only send calls
// the stores accept.
func (f *fuzzer) must(what string, err error) {
	f.t.Helper()
	if err != nil {
		f.fail("%s: %v", what, err)
	}
}

// source yields the input's bytes, then the generator's.
type source struct {
	data []byte
	rnd  *rand.Rand
}

func newSource(data []byte) *source {
	h := fnv.New64a()
	h.Write(data)
	return &source{data: data, rnd: rand.New(rand.NewPCG(h.Sum64(), uint64(len(data))))}
}

// more reports whether input bytes are left.
func (s *source) more() bool { return len(s.data) > 0 }

func (s *source) u8() uint8 {
	if len(s.data) > 0 {
		b := s.data[0]
		s.data = s.data[1:]
		return b
	}
	return uint8(s.rnd.Uint32())
}

func (s *source) u32() uint32 {
	if len(s.data) >= 4 {
		v := binary.BigEndian.Uint32(s.data)
		s.data = s.data[4:]
		return v
	}
	var b [4]byte
	for i := range b {
		b[i] = s.u8()
	}
	return binary.BigEndian.Uint32(b[:])
}

// pick returns a number in [0, n), n ≤ 256.
func (s *source) pick(n int) int { return int(s.u8()) % n }

// in returns a number in [lo, hi], hi − lo < 2^32.
func (s *source) in(lo, hi int64) int64 { return lo + int64(uint64(s.u32())%uint64(hi-lo+1)) }

// dur reads a duration from lo: any ns up to lo + 2^32, whole
// milliseconds up to two minutes or, seldom, whole seconds up to a year
// (ratelimit.MaxBucketDuration).
func (s *source) dur(lo int64) int64 {
	switch s.pick(8) {
	case 0, 1, 2, 3:
		return s.in(lo, lo+1<<32-1)
	case 7:
		return s.in(1, int64(ratelimit.MaxBucketDuration/time.Second)) * int64(time.Second)
	}
	ms := int64(time.Millisecond)
	return s.in(max(lo/ms, 1), 120_000) * ms
}

// chance is true with probability n/256.
func (s *source) chance(n int) bool { return int(s.u8()) < n }

// encoder writes the bytes source reads back as the given values: how
// the seeds spell their sequences.
type encoder []byte

func (e *encoder) u8(v int) { *e = append(*e, byte(v)) }

func (e *encoder) u32(v uint32) { *e = binary.BigEndian.AppendUint32(*e, v) }

// in writes what source.in(lo, hi) reads back as v.
func (e *encoder) in(v, lo int64) { e.u32(uint32(v - lo)) }

// dur writes what source.dur reads back as d, whole milliseconds.
// (lo as given to source.dur).
func (e *encoder) dur(d, lo int64) {
	ms := int64(time.Millisecond)
	e.u8(4)
	e.in(d/ms, max(lo/ms, 1))
}

// bool writes what source.chance(128) reads back as b.
func (e *encoder) bool(b bool) {
	if b {
		e.u8(0)
	} else {
		e.u8(255)
	}
}

// AddFuzzSeeds adds kind's seed corpus to f: the published examples
// (Smyte's RL.REDUCE transcript for token buckets, Sidekiq's leaky
// bucket) spelt as ops, then a few inputs the generator continues.
func AddFuzzSeeds(f *testing.F, kind FuzzKind) {
	var seeds [][]byte
	switch kind {
	case FuzzIncrement, FuzzAllow:
		seeds = windowSeeds()
	case FuzzBuckets:
		seeds = bucketSeeds()
	case FuzzLeases:
		seeds = leaseSeeds()
	}
	for i := range 4 {
		seeds = append(seeds, []byte{byte(i), byte(kind)})
	}
	for _, s := range seeds {
		f.Add(s)
	}
}
