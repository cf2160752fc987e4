package node_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	gosync "sync"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// fakeClock is a Clock and a node.Sleeper that moves only when told to
// or slept on, recording what it slept. Safe for concurrent use.
type fakeClock struct {
	mu    gosync.Mutex
	t     time.Time
	slept []time.Duration
}

func newFakeClock(t time.Time) *fakeClock { return &fakeClock{t: t} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.slept = append(c.slept, d)
	c.mu.Unlock()
	return nil
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// epoch is an arbitrary instant aligned to every window size used in the
// tests (a whole hour), far from the Unix epoch.
var epoch = time.Unix(1_700_000_000-1_700_000_000%3600, 0)

func localConfig(sizes ...time.Duration) node.Config {
	return node.Config{Name: "test", WindowSizes: sizes}
}

func syncedConfig(sizes ...time.Duration) node.Config {
	return node.Config{Name: "synced", WindowSizes: sizes, Shared: true}
}

func newNS(t testing.TB, cfg node.Config, clock node.Clock) *node.Namespace {
	t.Helper()
	ns, err := node.NewNamespace(cfg, clock)
	if err != nil {
		t.Fatalf("NewNamespace(%+v): %v", cfg, err)
	}
	return ns
}

func incr(t testing.TB, ns *node.Namespace, at time.Time, key string, size time.Duration, v float64) []ratelimit.Rate {
	t.Helper()
	r, err := ns.IncrementAt(at, key, size, v, nil)
	if err != nil {
		t.Fatalf("IncrementAt(%v, %q, %v, %v): %v", at, key, size, v, err)
	}
	return r
}

// rateOf returns the single rate of key for size at 'at'.
func rateOf(t testing.TB, ns *node.Namespace, at time.Time, key string, size time.Duration) float64 {
	t.Helper()
	r, err := ns.RateAt(at, key, size, 0, nil)
	if err != nil {
		t.Fatalf("RateAt(%v, %q, %v): %v", at, key, size, err)
	}
	if len(r) != 1 || r[0].Size != size {
		t.Fatalf("RateAt(%v, %q, %v) = %+v, want one rate of size %v", at, key, size, r, size)
	}
	return r[0].Rate
}

// wantFieldError checks that err is a *ratelimit.FieldError for field wrapping
// sentinel.
func wantFieldError(t testing.TB, err error, field string, sentinel error) {
	t.Helper()
	if err == nil {
		t.Fatalf("err = nil, want a *ratelimit.FieldError for %q wrapping %v", field, sentinel)
	}
	var fe *ratelimit.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("err = %T %v, want a *ratelimit.FieldError", err, err)
	}
	if fe.Field != field {
		t.Errorf("FieldError.Field = %q, want %q (err: %v)", fe.Field, field, err)
	}
	if !errors.Is(err, sentinel) {
		t.Errorf("errors.Is(%v, %v) = false, want true", err, sentinel)
	}
}

// near reports whether got is within a float64 rounding tolerance of want.
func near(got, want float64) bool {
	return math.Abs(got-want) <= 1e-9*math.Max(1, math.Abs(want))
}

// ---- an exact reference model of the counting engine -------------------

// refWin names one window of one key.
type refWin struct {
	key         string
	size, start int64
}

type refSlot struct {
	key  string
	size int64
}

// refModel is the engine as a plain map of window → micro-hit sums, with
// exact rational arithmetic. It assumes time never goes backwards.
type refModel struct {
	sizes  []int64
	own    map[refWin]int64
	others map[refWin]int64
	pushed map[refWin]int64
	// latest is the newest window of a (key, size) the engine holds a
	// bucket for: one counted in, touched, or given others' counts.
	latest map[refSlot]int64
}

func newRefModel(sizes []time.Duration) *refModel {
	m := &refModel{
		own:    make(map[refWin]int64),
		others: make(map[refWin]int64),
		pushed: make(map[refWin]int64),
		latest: make(map[refSlot]int64),
	}
	for _, s := range sizes {
		m.sizes = append(m.sizes, int64(s))
	}
	return m
}

func floorDiv(t, size int64) int64 {
	q := t / size
	if t%size < 0 {
		q--
	}
	return q * size
}

func (m *refModel) hold(key string, size, start int64) {
	s := refSlot{key, size}
	if l, ok := m.latest[s]; !ok || start > l {
		m.latest[s] = start
	}
}

// add counts micro hits of key at t (Unix ns) in the window of size.
func (m *refModel) add(key string, size, t, micro int64) {
	ws := floorDiv(t, size)
	m.own[refWin{key, size, ws}] += micro
	m.hold(key, size, ws)
}

func (m *refModel) count(key string, size, start int64) int64 {
	w := refWin{key, size, start}
	return m.own[w] + m.others[w]
}

// rate returns the exact sliding rate of key at t in micro-hits, with extra
// micro-hits added to the current window.
func (m *refModel) rate(key string, size, t, extra int64) *big.Rat {
	ws := floorDiv(t, size)
	c := m.count(key, size, ws) + extra
	p := m.count(key, size, ws-size)
	r := new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(p), big.NewInt(size-(t-ws))), big.NewInt(size))
	return r.Add(r, new(big.Rat).SetInt64(c))
}

// rateFloat is rate with float64 arithmetic, for scanning many instants.
func (m *refModel) rateFloat(key string, size, t int64) float64 {
	ws := floorDiv(t, size)
	c := m.count(key, size, ws)
	p := m.count(key, size, ws-size)
	return float64(c) + float64(p)*(float64(size-(t-ws))/float64(size))
}

// refLimit is a limit in micro-hits.
type refLimit struct {
	size, limit int64
}

// margin returns min over limits of limit − (rate(t) + cost), exactly, in
// micro-hits: >= 0 means the cost is admitted at t.
func (m *refModel) margin(key string, lims []refLimit, cost, t int64) *big.Rat {
	var low *big.Rat
	for _, l := range lims {
		r := m.rate(key, l.size, t, cost)
		r.Sub(new(big.Rat).SetInt64(l.limit), r)
		if low == nil || r.Cmp(low) < 0 {
			low = r
		}
	}
	return low
}

// tolerance is how far (in micro-hits) a float64 evaluation of the sliding
// formula may stray from the exact value for these magnitudes: a few
// float64 roundings (2^-53 each) of the largest term, with a wide margin.
func tolerance(vals ...int64) float64 {
	s := 0.0
	for _, v := range vals {
		s += math.Abs(float64(v))
	}
	return 1e-6 + s*1e-13
}

// decisionTol is the tolerance, as a rational, for comparing an Allow
// decision on key at t with the exact margin.
func (m *refModel) decisionTol(key string, lims []refLimit, cost, t int64) *big.Rat {
	tol := 1e-3
	for _, l := range lims {
		ws := floorDiv(t, l.size)
		tol = max(tol, tolerance(m.count(key, l.size, ws), m.count(key, l.size, ws-l.size), cost, l.limit))
	}
	r, _ := new(big.Rat).SetString(fmt.Sprintf("%g", tol))
	return r
}

func ratFloat(r *big.Rat) float64 {
	f, _ := r.Float64()
	return f
}
