package node_test

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

func allow(t testing.TB, ns *node.Namespace, at time.Time, req ratelimit.AllowRequest) ratelimit.Decision {
	t.Helper()
	d, err := ns.AllowAt(at, req, nil)
	if err != nil {
		t.Fatalf("AllowAt(%v, %+v): %v", at, req, err)
	}
	return d
}

func TestAllowBasics(t *testing.T) {
	const size = time.Second
	ns := newNS(t, localConfig(size, time.Minute), nil)
	req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{{Size: size, Limit: 10}}}
	for i := range 10 {
		d := allow(t, ns, epoch, req)
		if !d.Allowed || d.Never || d.RetryAfter != 0 {
			t.Fatalf("Allow #%d = %+v, want allowed", i+1, d)
		}
		st := d.Limits[0]
		if st.Rate != float64(i+1) || st.Remaining != float64(9-i) || st.ResetAfter != size || st.Size != size || st.Limit != 10 {
			t.Errorf("Allow #%d status = %+v, want rate %d, remaining %d, reset_after 1s", i+1, st, i+1, 9-i)
		}
	}
	// Full: the 11th is denied. At position 0 with 10 in the current
	// window, cost 1 fits once 10·w + 1 <= 10 in the next window, i.e. at
	// position 0.1 s: 1 s + 100 ms from now.
	d := allow(t, ns, epoch, req)
	if d.Allowed || d.Never || d.RetryAfter != size+size/10 {
		t.Errorf("Allow #11 = %+v, want denied with retry_after 1.1s", d)
	}
	if st := d.Limits[0]; st.Rate != 10 || st.Remaining != 0 {
		t.Errorf("Allow #11 status = %+v, want rate 10 (not counted), remaining 0", st)
	}
	// Every size counted the admitted hits, not just the limited one.
	if got := rateOf(t, ns, epoch, "k", time.Minute); got != 10 {
		t.Errorf("1m rate = %v, want 10 (Allow counts in every size)", got)
	}
	// At retry_after it is admitted.
	if d2 := allow(t, ns, epoch.Add(d.RetryAfter), req); !d2.Allowed {
		t.Errorf("Allow at retry_after = %+v, want allowed", d2)
	}
}

func TestAllowNeverAndCost(t *testing.T) {
	ns := newNS(t, localConfig(time.Second, time.Minute), nil)
	tests := []struct {
		name      string
		cost      float64
		limits    []ratelimit.Limit
		allowed   bool
		never     bool
		reasonHas string
	}{
		{"cost above the only limit", 11, []ratelimit.Limit{{Size: time.Second, Limit: 10}}, false, true, "per 1s"},
		{"cost above the second limit", 11, []ratelimit.Limit{{Size: time.Minute, Limit: 100}, {Size: time.Second, Limit: 10}}, false, true, "limit 10 per 1s"},
		{"cost equal to the limit", 10, []ratelimit.Limit{{Size: time.Second, Limit: 10}}, true, false, ""},
		{"cost 0 fits a full limit of 0", 0, []ratelimit.Limit{{Size: time.Second, Limit: 0}}, true, false, ""},
		{"cost 1e-6 above a limit of 0", 1e-6, []ratelimit.Limit{{Size: time.Second, Limit: 0}}, false, true, "per 1s"},
		{"fractional", 0.25, []ratelimit.Limit{{Size: time.Second, Limit: 0.5}}, true, false, ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := allow(t, ns, epoch, ratelimit.AllowRequest{Key: fmt.Sprint("never-", i), Cost: tt.cost, Limits: tt.limits})
			if d.Allowed != tt.allowed || d.Never != tt.never {
				t.Errorf("Allow = %+v, want allowed %v never %v", d, tt.allowed, tt.never)
			}
			if tt.never && (d.RetryAfter != 0 || !strings.Contains(d.Reason, tt.reasonHas)) {
				t.Errorf("Never decision = %+v, want retry_after 0 and a reason naming %q", d, tt.reasonHas)
			}
			if len(d.Limits) != len(tt.limits) {
				t.Fatalf("%d statuses, want %d", len(d.Limits), len(tt.limits))
			}
			for j, st := range d.Limits {
				if st.Size != tt.limits[j].Size || st.Limit != tt.limits[j].Limit {
					t.Errorf("status %d = %+v, want size %v limit %v (request order)", j, st, tt.limits[j].Size, tt.limits[j].Limit)
				}
			}
		})
	}
}

func TestAllowCountRejected(t *testing.T) {
	ns := newNS(t, localConfig(time.Second), nil)
	req := ratelimit.AllowRequest{Key: "k", Cost: 2, Limits: []ratelimit.Limit{{Size: time.Second, Limit: 3}}, CountRejected: true}
	tests := []struct {
		allowed bool
		rate    float64
	}{
		{true, 2},
		{false, 4}, // denied, counted anyway
		{false, 6},
	}
	for i, tt := range tests {
		d := allow(t, ns, epoch, req)
		if d.Allowed != tt.allowed || d.Limits[0].Rate != tt.rate {
			t.Errorf("Allow #%d = allowed %v rate %v, want %v %v", i+1, d.Allowed, d.Limits[0].Rate, tt.allowed, tt.rate)
		}
	}
	// Without CountRejected a denial counts nothing.
	req.CountRejected = false
	if d := allow(t, ns, epoch, req); d.Allowed || d.Limits[0].Rate != 6 {
		t.Errorf("Allow without count_rejected = %+v, want denied at rate 6", d)
	}
	if got := rateOf(t, ns, epoch, "k", time.Second); got != 6 {
		t.Errorf("rate = %v, want 6", got)
	}
}

// TestAllowAtWindowEndCountsInNextWindow pins that a hit at the instant a
// window ends (its start + size) belongs to the next window, in every size
// of the namespace, for the sizes the Allow limits and for those it does
// not.
func TestAllowAtWindowEndCountsInNextWindow(t *testing.T) {
	const size = time.Second
	ns := newNS(t, localConfig(size, time.Minute), nil)
	req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{{Size: size, Limit: 10}}}
	for range 3 {
		allow(t, ns, epoch, req)
	}
	end := epoch.Add(size) // the first window's end, the second's start
	if d := allow(t, ns, end, req); !d.Allowed || d.Limits[0].Rate != 4 {
		t.Fatalf("Allow at the window's end = %+v, want allowed at rate 4 (3 previous + 1)", d)
	}
	tests := []struct {
		at   time.Time
		size time.Duration
		want float64
	}{
		// Half-way through the second window: its own hit plus half of
		// the first window's 3 (2 if the hit had gone to the first).
		{end.Add(size / 2), size, 1 + 1.5},
		// At the third window's start the second is the previous window,
		// counted whole, and the first no longer counts (0 if the hit
		// had gone to the first).
		{end.Add(size), size, 1},
		// The minute window holds all 4 either way.
		{end.Add(size), time.Minute, 4},
	}
	for _, tt := range tests {
		if got := rateOf(t, ns, tt.at, "k", tt.size); got != tt.want {
			t.Errorf("%v rate at epoch+%v = %v, want %v", tt.size, tt.at.Sub(epoch), got, tt.want)
		}
	}
	// The limited size counts the same with an Allow on a limit of the
	// minute only: the second-size window is rolled by the count itself.
	req.Key = "m"
	req.Limits = []ratelimit.Limit{{Size: time.Minute, Limit: 10}}
	for range 3 {
		allow(t, ns, epoch, req)
	}
	allow(t, ns, end, req)
	if got := rateOf(t, ns, end.Add(size), "m", size); got != 1 {
		t.Errorf("%v rate of m at epoch+2s = %v, want 1 (the hit at epoch+1s in the second window)", size, got)
	}
}

func TestAllowInvalid(t *testing.T) {
	ns := newNS(t, localConfig(time.Second, time.Minute), nil)
	many := make([]ratelimit.Limit, node.MaxLimits+1)
	for i := range many {
		many[i] = ratelimit.Limit{Size: time.Second, Limit: 1}
	}
	tests := []struct {
		name     string
		req      ratelimit.AllowRequest
		field    string
		sentinel error
	}{
		{"negative cost", ratelimit.AllowRequest{Key: "k", Cost: -1, Limits: []ratelimit.Limit{{Size: time.Second, Limit: 1}}}, "cost", ratelimit.ErrInvalidValue},
		{"NaN cost", ratelimit.AllowRequest{Key: "k", Cost: math.NaN(), Limits: []ratelimit.Limit{{Size: time.Second, Limit: 1}}}, "cost", ratelimit.ErrInvalidValue},
		{"huge cost", ratelimit.AllowRequest{Key: "k", Cost: 2e9, Limits: []ratelimit.Limit{{Size: time.Second, Limit: 1}}}, "cost", ratelimit.ErrInvalidValue},
		{"no limits", ratelimit.AllowRequest{Key: "k", Cost: 1}, "limits", ratelimit.ErrInvalidLimit},
		{"17 limits", ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: many}, "limits", ratelimit.ErrInvalidLimit},
		{"duplicate size", ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{{Size: time.Second, Limit: 1}, {Size: time.Minute, Limit: 1}, {Size: time.Second, Limit: 2}}}, "limits[2].window_size", ratelimit.ErrInvalidLimit},
		{"negative limit", ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{{Size: time.Second, Limit: -1}}}, "limits[0].limit", ratelimit.ErrInvalidLimit},
		{"NaN limit", ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{{Size: time.Minute, Limit: 1}, {Size: time.Second, Limit: math.NaN()}}}, "limits[1].limit", ratelimit.ErrInvalidLimit},
		{"Inf limit", ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{{Size: time.Second, Limit: math.Inf(1)}}}, "limits[0].limit", ratelimit.ErrInvalidLimit},
		{"unknown size", ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{{Size: 2 * time.Second, Limit: 1}}}, "limits[0].window_size", node.ErrUnknownWindow},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d ratelimit.Decision
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("AllowAt panicked: %v", r)
					}
				}()
				d, err = ns.AllowAt(epoch, tt.req, nil)
			}()
			wantFieldError(t, err, tt.field, tt.sentinel)
			if d.Allowed {
				t.Errorf("Decision.Allowed = true with an error")
			}
		})
	}
	if n := ns.ActiveKeys(); n != 0 {
		t.Errorf("ActiveKeys = %d after invalid requests, want 0", n)
	}
	// The most limits allowed are accepted.
	all := make([]ratelimit.Limit, 0, node.MaxLimits)
	sizes := nSizes(node.MaxLimits)
	ns16 := newNS(t, localConfig(sizes...), nil)
	for _, s := range sizes {
		all = append(all, ratelimit.Limit{Size: s, Limit: 5})
	}
	if d := allow(t, ns16, epoch, ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: all}); !d.Allowed || len(d.Limits) != node.MaxLimits {
		t.Errorf("Allow with %d limits = %+v, want allowed with %d statuses", node.MaxLimits, d, node.MaxLimits)
	}
}

// TestAllowRace: 8 goroutines race 1000 Allows each of cost 1 on one key
// under a limit of 100: exactly 100 are admitted, in an exact namespace
// and in an estimator one. Run with -race.
func TestAllowRace(t *testing.T) {
	for _, cfg := range []node.Config{localConfig(time.Second, time.Minute), estimatorConfig(4, 1024, time.Second, time.Minute)} {
		t.Run(cfg.Name, func(t *testing.T) { testAllowRace(t, cfg) })
	}
}

func testAllowRace(t *testing.T, cfg node.Config) {
	clock := newFakeClock(epoch.Add(123 * time.Millisecond))
	ns := newNS(t, cfg, clock)
	req := ratelimit.AllowRequest{Key: "hot", Cost: 1, Limits: []ratelimit.Limit{{Size: time.Minute, Limit: 100}}}
	var admitted, denied atomic.Int64
	var wg gosync.WaitGroup
	start := make(chan struct{})
	for g := range 8 {
		wg.Go(func() {
			<-start
			var buf [1]ratelimit.LimitStatus
			for i := range 1000 {
				d, err := ns.Allow(req, buf[:0])
				if err != nil {
					t.Errorf("goroutine %d, Allow %d: %v", g, i, err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				} else {
					denied.Add(1)
				}
				// Plain increments of other keys race alongside.
				if _, err := ns.Increment(fmt.Sprint("other-", i%7), 0, 1, nil); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if got := admitted.Load(); got != 100 {
		t.Errorf("admitted %d of 8000, want exactly 100", got)
	}
	if got := denied.Load(); got != 7900 {
		t.Errorf("denied %d, want 7900", got)
	}
	if got := rateOf(t, ns, clock.Now(), "hot", time.Minute); got != 100 {
		t.Errorf("rate = %v, want 100", got)
	}
	if got := rateOf(t, ns, clock.Now(), "other-0", time.Second); got != 8*143 {
		t.Errorf("rate of other-0 = %v, want %d", got, 8*143)
	}
}

// TestAllowAgainstReference checks Allow over many random histories against
// a brute-force reference: the reference keeps its own record of hits per
// window, computes rates exactly, and finds retry_after by scanning a fine
// grid of delays.
func TestAllowAgainstReference(t *testing.T) {
	sizes := []time.Duration{100 * time.Millisecond, time.Second, 7 * time.Second}
	histories, steps := 300, 40
	if testing.Short() {
		histories = 50
	}
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"a", "b", "c"}
	var decisions, denials, nevers, retriesChecked int
	for h := range histories {
		ns := newNS(t, localConfig(sizes...), nil)
		ref := newRefModel(sizes)
		now := epoch.Add(time.Duration(rng.Int64N(int64(7 * time.Second))))
		for step := range steps {
			// Time moves forward by a random amount at a random scale.
			scales := []time.Duration{time.Microsecond, time.Millisecond, time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond, time.Second}
			scale := scales[rng.IntN(len(scales))]
			now = now.Add(time.Duration(rng.Int64N(20)) * scale)
			key := keys[rng.IntN(len(keys))]
			tn := now.UnixNano()
			where := fmt.Sprintf("history %d step %d (t=%v, key %s)", h, step, now.Sub(epoch), key)

			if rng.IntN(3) == 0 { // a plain increment
				micro := randMicro(rng, -3, 12)
				idx := rng.IntN(len(sizes) + 1) // len = every size
				size := time.Duration(0)
				if idx < len(sizes) {
					size = sizes[idx]
				}
				if _, err := ns.IncrementAt(now, key, size, node.FromMicro(micro), nil); err != nil {
					t.Fatalf("%s: IncrementAt: %v", where, err)
				}
				for _, s := range sizes {
					if size == 0 || size == s {
						ref.add(key, int64(s), tn, micro)
					}
				}
				continue
			}

			// An Allow with 1–3 random limits in random order.
			var lims []ratelimit.Limit
			var rlims []refLimit
			for _, i := range rng.Perm(len(sizes))[:1+rng.IntN(len(sizes))] {
				l := randMicro(rng, 3, 15)
				if rng.IntN(30) == 0 {
					l = randMicro(rng, 0, 2) // sometimes below the cost
				}
				lims = append(lims, ratelimit.Limit{Size: sizes[i], Limit: node.FromMicro(l)})
				rlims = append(rlims, refLimit{int64(sizes[i]), l})
			}
			cost := randMicro(rng, 0, 3)
			if rng.IntN(30) == 0 {
				cost = randMicro(rng, 0, 20) // sometimes beyond a limit
			}
			req := ratelimit.AllowRequest{Key: key, Cost: node.FromMicro(cost), Limits: lims, CountRejected: rng.IntN(4) == 0}
			d, err := ns.AllowAt(now, req, nil)
			if err != nil {
				t.Fatalf("%s: AllowAt(%+v): %v", where, req, err)
			}
			decisions++
			checkDecision(t, where, ref, key, tn, cost, rlims, req, d)
			if d.Never {
				nevers++
			} else if !d.Allowed {
				denials++
				retriesChecked++
				checkRetryAfter(t, where, ns, ref, key, tn, cost, rlims, req, d)
			}
			if t.Failed() {
				t.FailNow()
			}
		}
	}
	t.Logf("%d decisions: %d denied with retry_after checked, %d never", decisions, denials, nevers)
	if denials < decisions/6 || nevers == 0 {
		t.Errorf("the random histories exercised too few denials (%d) or nevers (%d) of %d decisions", denials, nevers, decisions)
	}
}

// randMicro returns a random micro-hit count between lo and hi hits: whole
// hits most of the time, otherwise any fraction.
func randMicro(rng *rand.Rand, lo, hi int64) int64 {
	if rng.IntN(4) == 0 {
		return lo*ratelimit.Micro + rng.Int64N((hi-lo)*ratelimit.Micro+1)
	}
	return (lo + rng.Int64N(hi-lo+1)) * ratelimit.Micro
}

// checkDecision checks one Allow decision at tn against the reference, then
// applies it to the reference (counting the cost if the engine did).
func checkDecision(t *testing.T, where string, ref *refModel, key string, tn, cost int64, rlims []refLimit, req ratelimit.AllowRequest, d ratelimit.Decision) {
	t.Helper()
	// Never iff the cost exceeds some limit.
	wantNever := false
	for _, l := range rlims {
		if cost > l.limit {
			wantNever = true
		}
	}
	if d.Never != wantNever {
		t.Errorf("%s: Never = %v, want %v (cost %d µhits, limits %+v)", where, d.Never, wantNever, cost, rlims)
	}
	if d.Never && d.Reason == "" {
		t.Errorf("%s: Never without a Reason", where)
	}
	// Allowed iff the cost fits under every limit now, up to float64
	// rounding when the margin is within tolerance of 0.
	m := ref.margin(key, rlims, cost, tn)
	tol := ref.decisionTol(key, rlims, cost, tn) // float64 rounding
	switch {
	case m.Cmp(tol) > 0 && !d.Allowed:
		t.Errorf("%s: denied with an exact margin of %v µhits; want allowed", where, ratFloat(m))
	case m.Cmp(new(big.Rat).Neg(tol)) < 0 && d.Allowed:
		t.Errorf("%s: allowed with an exact margin of %v µhits; want denied", where, ratFloat(m))
	}
	if d.Allowed && d.RetryAfter != 0 {
		t.Errorf("%s: allowed with RetryAfter %v, want 0", where, d.RetryAfter)
	}
	counted := d.Allowed || req.CountRejected
	if counted {
		for _, s := range ref.sizes {
			ref.add(key, s, tn, cost)
		}
	}
	if len(d.Limits) != len(rlims) {
		t.Fatalf("%s: %d statuses, want %d", where, len(d.Limits), len(rlims))
	}
	for i, l := range rlims {
		st := d.Limits[i]
		want := ratFloat(ref.rate(key, l.size, tn, 0)) / ratelimit.Micro
		ws := floorDiv(tn, l.size)
		if st.Size != time.Duration(l.size) || st.Limit != node.FromMicro(l.limit) {
			t.Errorf("%s: status %d names %v/%v, want %v/%v", where, i, st.Size, st.Limit, time.Duration(l.size), node.FromMicro(l.limit))
		}
		if !near(st.Rate, want) {
			t.Errorf("%s: status %d rate = %v, want %v", where, i, st.Rate, want)
		}
		if wantRem := math.Max(0, node.FromMicro(l.limit)-want); !near(st.Remaining, wantRem) {
			t.Errorf("%s: status %d remaining = %v, want %v", where, i, st.Remaining, wantRem)
		}
		if wantReset := time.Duration(ws + l.size - tn); st.ResetAfter != wantReset {
			t.Errorf("%s: status %d reset_after = %v, want %v", where, i, st.ResetAfter, wantReset)
		}
	}
}

// checkRetryAfter checks a denial's RetryAfter d: the reference admits the
// cost at t+d, does not at t+d−1µs, and d is no later than the first grid
// point at which the reference admits it.
func checkRetryAfter(t *testing.T, where string, ns *node.Namespace, ref *refModel, key string, tn, cost int64, rlims []refLimit, req ratelimit.AllowRequest, d ratelimit.Decision) {
	t.Helper()
	ra := int64(d.RetryAfter)
	tol := ref.decisionTol(key, rlims, cost, tn)
	if t2 := ref.decisionTol(key, rlims, cost, tn+ra); t2.Cmp(tol) > 0 {
		tol = t2
	}
	negTol := new(big.Rat).Neg(tol)
	if ra <= 0 {
		t.Errorf("%s: denied with RetryAfter %v, want > 0", where, d.RetryAfter)
		return
	}
	if m := ref.margin(key, rlims, cost, tn+ra); m.Cmp(negTol) < 0 {
		t.Errorf("%s: RetryAfter %v: the reference does not admit the cost then (margin %v µhits)", where, d.RetryAfter, ratFloat(m))
	}
	if m := ref.margin(key, rlims, cost, tn+ra-int64(time.Microsecond)); ra >= int64(time.Microsecond) && m.Cmp(tol) > 0 {
		t.Errorf("%s: RetryAfter %v is not the least: the reference admits the cost 1µs earlier (margin %v µhits)", where, d.RetryAfter, ratFloat(m))
	}
	// Brute force: scan delays on a 1 ms grid (every window size is a whole
	// number of ms, so the grid holds every window edge) up to two of the
	// largest windows, where every rate is 0 and the cost must fit.
	var maxSize int64
	for _, l := range rlims {
		maxSize = max(maxSize, l.size)
	}
	const step = int64(time.Millisecond)
	grid := int64(-1)
	for delta := int64(0); delta <= 2*maxSize+step; delta += step {
		// Cheap float test first, exact confirmation after.
		ok := true
		for _, l := range rlims {
			if ref.rateFloat(key, l.size, tn+delta)+float64(cost) > float64(l.limit)+1e-3 {
				ok = false
				break
			}
		}
		if ok && ref.margin(key, rlims, cost, tn+delta).Sign() >= 0 {
			grid = delta
			break
		}
	}
	if grid < 0 {
		t.Errorf("%s: the grid found no delay admitting cost %d under %+v", where, cost, rlims)
		return
	}
	if ra > grid {
		// Allowed only when the grid point is an exact tie (margin 0 up to
		// float64 rounding) that the engine's float64 may see either way.
		if m := ref.margin(key, rlims, cost, tn+grid); m.Cmp(tol) > 0 || ra > grid+step {
			t.Errorf("%s: RetryAfter = %v, but the reference admits the cost after %v (margin %v µhits)", where, d.RetryAfter, time.Duration(grid), ratFloat(m))
		}
	}
	// And the engine agrees when asked then (without counting: a what-if
	// through RateAt).
	for _, l := range rlims {
		r, err := ns.RateAt(time.Unix(0, tn+ra), key, time.Duration(l.size), node.FromMicro(cost), nil)
		if err != nil {
			t.Fatal(err)
		}
		if r[0].Rate > node.FromMicro(l.limit)+1e-9 {
			t.Errorf("%s: at t+RetryAfter the engine's own rate with the cost is %v > limit %v", where, r[0].Rate, node.FromMicro(l.limit))
		}
	}
}

// TestNeverNamesTheFirstLimit: a cost above several limits is refused
// for ever naming the first of them in the request.
func TestNeverNamesTheFirstLimit(t *testing.T) {
	ns := newNS(t, localConfig(time.Second, time.Minute), nil)
	d := allow(t, ns, epoch, ratelimit.AllowRequest{Key: "k", Cost: 10, Limits: []ratelimit.Limit{{Size: time.Second, Limit: 3}, {Size: time.Minute, Limit: 5}}})
	if !d.Never || !strings.Contains(d.Reason, "limit 3 per 1s") {
		t.Errorf("Allow = %+v, want never, naming the limit of 3 per 1s", d)
	}
}
