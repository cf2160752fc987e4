package node

import (
	"fmt"
	"hash/maphash"
	gosync "sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/limiterd/limiterd/ratelimit"
)

// An estimator namespace (Config.Estimator) counts its sliding windows in
// count-min sketches, as pingora-limits' Estimator and Rate do, instead of
// one exact entry per key.
//
// Layout. A sketch is Hashes rows of Slots int64 counters of micro-hits,
// row-major. Every window size has three sketches, allocated when the
// namespace is built and interleaved counter by counter in one slice (the
// counters a key reads in the current and previous windows share a cache
// line): the current window's, the previous window's, and a cleared spare
// that becomes the next current one at the window boundary. Memory is therefore fixed at
// 3 × sizes × Hashes × Slots × 8 bytes (4 × 65,536 with two sizes: 12 MiB)
// whatever the number of keys.
//
// Hashing. One 64-bit maphash of the key (seeded per namespace) is mixed
// once per row by splitmix64, so rows collide independently: two keys
// collide in every row with probability about Slots^-Hashes (double
// hashing over two 32-bit halves would bound it by 2^-32). Each mix is
// mapped onto its row by a multiply-shift, so Slots need not be a power
// of two.
//
// Counting. An add is one atomic add per row, lock-free; the estimate of
// a window is the least of the key's counters in its sketch, never below
// the truth since values are never negative. The sliding rate combines the
// current and previous estimates with the sliding formula, whose weights
// are not negative, so it is never below the exact rate either.
//
// Rotation. A window size's (start, current, previous) triple is one
// immutable generation behind an atomic pointer. A call whose time lies in
// the current window adds lock-free; the first call past the boundary (by
// the namespace clock: a call dated ahead of the clock counts in the
// clock's window, so no caller can end everyone's windows early) takes the window size's mutex, publishes the next generation (the spare
// as current, the old current as previous) and then clears the sketch
// that stopped counting, which becomes the spare. A reader that loaded
// the old generation reads again if it changed under it; a call that
// straddles a rotation may have read a window that, by the clock, no
// longer counted.

// ErrEstimatorKind is wrapped by the *FieldError of a bucket limit in an
// estimator namespace. It wraps ErrNotLocal, so callers mapping that to a
// failed precondition map both alike.
var ErrEstimatorKind = fmt.Errorf("node: estimator namespaces serve sliding windows only: %w", ErrNotLocal)

// sketch is one window's count-min sketch. The three sketches of a window
// size are interleaved in one slice: counter i of sketch k is c[3i+k], so
// a call that adds to the current sketch and reads the previous one
// touches one cache line per row, not two.
type sketch struct {
	c   []atomic.Int64 // shared by the window size's three sketches
	off int            // 0, 1 or 2
}

// at returns counter i of s.
func (s *sketch) at(i uint32) *atomic.Int64 { return &s.c[3*int(i)+s.off] }

// sketchGen is one generation of a window size's sketches: cur counts the
// window starting at start, prev the one before (nil: nothing counted).
type sketchGen struct {
	start     int64
	cur, prev *sketch
}

// sketchWindow is one window size of an estimator.
type sketchWindow struct {
	est  *estimator
	size int64
	gen  atomic.Pointer[sketchGen]
	mu   gosync.Mutex
	// spare holds the cleared sketches not in gen; guarded by mu.
	spare []*sketch
}

// stripeCount is the number of Allow locks of an estimator.
const stripeCount = 256

// stripe is one Allow lock, alone on its cache line.
type stripe struct {
	mu gosync.Mutex
	_  [64 - unsafe.Sizeof(gosync.Mutex{})]byte
}

// estimator is the counting of an estimator namespace.
type estimator struct {
	clock  Clock
	hashes int
	slots  uint64
	seed   maphash.Seed
	wins   []sketchWindow
	// stripes serialise the Allows of keys hashing to the same stripe, so
	// that Allow on one key is exact with respect to the sketch: no two
	// racing Allows both take the last unit.
	stripes [stripeCount]stripe
}

func newEstimator(cfg EstimatorConfig, sizes []int64, clock Clock) *estimator {
	est := &estimator{clock: clock, hashes: cfg.Hashes, slots: uint64(cfg.Slots), seed: maphash.MakeSeed(), wins: make([]sketchWindow, len(sizes))}
	for i, size := range sizes {
		w := &est.wins[i]
		w.est, w.size = est, size
		c := make([]atomic.Int64, 3*cfg.Hashes*cfg.Slots)
		for k := range 3 {
			w.spare = append(w.spare, &sketch{c: c, off: k})
		}
	}
	return est
}

// cells is the counters of one key, one per row.
type cells struct {
	n   int
	idx [MaxEstimatorHashes]uint32
}

func (est *estimator) cells(key string) cells {
	h := maphash.String(est.seed, key)
	c := cells{n: est.hashes}
	for i := range est.hashes {
		// splitmix64: each row's index from its own 64-bit mix of h.
		h += 0x9e3779b97f4a7c15
		z := (h ^ h>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		z ^= z >> 31
		c.idx[i] = uint32(uint64(i)*est.slots + (z>>32*est.slots)>>32)
	}
	return c
}

// add adds m to the key's counters in s and returns the new estimate.
func (s *sketch) add(c *cells, m int64) int64 {
	least := int64(1<<63 - 1)
	for _, i := range c.idx[:c.n] {
		least = min(least, s.at(i).Add(m))
	}
	return least
}

// estimate returns the key's estimate in s; 0 for a nil s.
func (s *sketch) estimate(c *cells) int64 {
	if s == nil {
		return 0
	}
	least := int64(1<<63 - 1)
	for _, i := range c.idx[:c.n] {
		least = min(least, s.at(i).Load())
	}
	return least
}

// counts returns the estimates of the window holding t (start ws) and of
// the one before, as g knows them.
func (g *sketchGen) counts(c *cells, ws, size int64) (cur, prev int64) {
	if g == nil {
		return 0, 0
	}
	switch g.start {
	case ws:
		return g.cur.estimate(c), g.prev.estimate(c)
	case ws - size:
		return 0, g.cur.estimate(c)
	case ws + size:
		return g.prev.estimate(c), 0
	}
	return 0, 0
}

// counts returns the key's estimates for the window holding t and the
// one before, read from one generation.
func (w *sketchWindow) counts(c *cells, t int64) (cur, prev int64) {
	ws := ratelimit.WindowStart(t, time.Duration(w.size))
	for {
		g := w.gen.Load()
		cur, prev = g.counts(c, ws, w.size)
		if w.gen.Load() == g {
			return cur, prev
		}
	}
}

// add counts m for the key at t and returns the window's sliding rate at
// t in micro-hits.
func (w *sketchWindow) add(c *cells, t, m int64) float64 {
	if g := w.gen.Load(); g != nil && uint64(t-g.start) < uint64(w.size) {
		own := g.cur.add(c, m)
		return ratelimit.SlidingRate(own, g.prev.estimate(c), time.Duration(w.size), t-g.start)
	}
	// A hit dated in a window the clock has not reached (a call's time may
	// run ahead of it, by MaxFuture in the service) counts in the clock's
	// window: only the clock rotates the sketches, so no call can end
	// the windows every other key still counts in.
	ws := min(ratelimit.WindowStart(t, time.Duration(w.size)), ratelimit.WindowStart(w.est.clock.Now().UnixNano(), time.Duration(w.size)))
	if s := w.sketchFor(ws); s != nil {
		s.add(c, m)
	}
	return w.rate(c, t, 0)
}

// rate returns the key's sliding rate at t in micro-hits, plus extra
// counted in the current window.
func (w *sketchWindow) rate(c *cells, t, extra int64) float64 {
	cur, prev := w.counts(c, t)
	return ratelimit.SlidingRate(cur+extra, prev, time.Duration(w.size), t-ratelimit.WindowStart(t, time.Duration(w.size)))
}

// sketchFor returns the sketch of the window starting at ws, rotating
// when ws is past the current window, or nil when ws no longer counts.
func (w *sketchWindow) sketchFor(ws int64) *sketch {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := w.gen.Load()
	switch {
	case g != nil && g.start == ws:
		return g.cur
	case g != nil && g.start == ws+w.size:
		if g.prev == nil { // the previous window counted late
			w.gen.Store(&sketchGen{start: g.start, cur: g.cur, prev: w.take()})
			g = w.gen.Load()
		}
		return g.prev
	case g != nil && g.start > ws:
		return nil
	}
	ng := &sketchGen{start: ws, cur: w.take()}
	var freed [2]*sketch
	if g != nil {
		if g.start == ws-w.size {
			ng.prev, freed[0] = g.cur, g.prev
		} else {
			freed[0], freed[1] = g.cur, g.prev
		}
	}
	w.gen.Store(ng)
	for _, s := range freed {
		if s != nil {
			for i := s.off; i < len(s.c); i += 3 {
				s.c[i].Store(0)
			}
			w.spare = append(w.spare, s)
		}
	}
	return ng.cur
}

// take removes a cleared sketch from w.spare; there is always one (three
// sketches; a generation holds at most two). The caller holds w.mu.
func (w *sketchWindow) take() *sketch {
	s := w.spare[len(w.spare)-1]
	w.spare = w.spare[:len(w.spare)-1]
	return s
}

// errEstimatorNegative is the error of a negative value in an estimator
// namespace.
func (ns *Namespace) errEstimatorNegative(value float64) error {
	return fieldErr("value", ratelimit.ErrInvalidValue, "must not be negative in estimator namespace %q (a sketch cannot subtract), got %g", ns.cfg.Name, value)
}

// rates appends the key's sliding rates at t for the sizes [lo, hi): after
// counting m micro-hits in each (count), or as if m more were counted in
// the current window (a what-if, for RateAt).
func (est *estimator) rates(t int64, key string, lo, hi int, m int64, count bool, dst []ratelimit.Rate) ([]ratelimit.Rate, error) {
	if !utf8.ValidString(key) {
		return dst, ratelimit.ValidateKey(key)
	}
	c := est.cells(key)
	for i := lo; i < hi; i++ {
		w := &est.wins[i]
		var r float64
		if count {
			r = w.add(&c, t, m)
		} else {
			r = w.rate(&c, t, m)
		}
		dst = append(dst, ratelimit.Rate{Size: time.Duration(w.size), Rate: r / ratelimit.Micro})
	}
	return dst, nil
}

// allow is AllowAt of an estimator namespace, for window limits only.
func (est *estimator) allow(t int64, req *ratelimit.AllowRequest, lims []microLimit, cost int64, dst []ratelimit.LimitStatus) (ratelimit.Decision, error) {
	if !utf8.ValidString(req.Key) {
		return ratelimit.Decision{Limits: dst}, ratelimit.ValidateKey(req.Key)
	}
	c := est.cells(req.Key)
	st := &est.stripes[c.idx[0]%stripeCount]
	st.mu.Lock()
	defer st.mu.Unlock()
	var cur, prev [MaxLimits]int64
	for i, l := range lims {
		lims[i].ws = ratelimit.WindowStart(t, time.Duration(l.size))
		cur[i], prev[i] = est.wins[l.idx].counts(&c, t)
	}
	var d decision
	decide(&d, t, cost, lims, cur[:len(lims)], prev[:len(lims)], req.CountRejected)
	if d.counted && cost > 0 {
		for i := range est.wins {
			est.wins[i].add(&c, t, cost)
		}
	}
	return d.finish(dst, lims, req.Limits), nil
}

// errEstimatorKinds refuses the first bucket limit of limits in an
// estimator namespace.
func (ns *Namespace) errEstimatorKinds(limits []ratelimit.Limit) error {
	for i, l := range limits {
		if l.Kind != ratelimit.WindowLimit {
			return fieldErr(fmt.Sprintf("limits[%d].%s", i, kindField(l.Kind)), ErrEstimatorKind,
				"namespace %q is an estimator namespace, which serves sliding-window limits only", ns.cfg.Name)
		}
	}
	return nil
}
