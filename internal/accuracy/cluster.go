package accuracy

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	gosync "sync"
	"sync/atomic"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
	"github.com/limiterd/limiterd/service"
	clustersync "github.com/limiterd/limiterd/sync"
)

// Run describes one measured run.
type Run struct {
	Nodes int
	// SyncRate is the nodes' sync period in seconds; 0 is the synchronous
	// mode (every call decided by the store).
	SyncRate float64
	Escalate bool
	// Sync tunes every node's Syncer (NoEscalate is set from Escalate).
	Sync   clustersync.Config
	Window time.Duration
	Limit  float64
	// Kind is the limit's kind; each holds Limit per Window (see
	// EngineLimit).
	Kind ratelimit.LimitKind
	// Rate is the offered Allow calls per second over all keys, sent
	// round-robin over the nodes.
	Rate float64
	// Keys is the number of keys: one, or a Zipf law of exponent ZipfS
	// (> 1) over Keys keys (key i drawn with weight (1+i)^-ZipfS).
	Keys  int
	ZipfS float64
	// Duration of the load judged, after Warmup of the same load (fed to
	// the oracle, not judged); Workers the goroutines sending it.
	Duration, Warmup time.Duration
	Workers          int
	// Namespace names the namespace in the store, unique per run.
	Namespace string
	// NewStore opens one node's store client.
	NewStore func() (clustersync.Store, error)
}

// Result is a run's outcome.
type Result struct {
	Verdict
	// Escalated is the number of Allow calls decided by the store after
	// the warm-up; WarmupCalls and WarmupEscalated count the warm-up's.
	Escalated                    int64
	WarmupCalls, WarmupEscalated int64
	// TickMean and TickMax describe the nodes' sync ticks.
	TickMean, TickMax time.Duration
	// FirstCalls counts the calls after the warm-up that were their
	// node's first on their key since it started: keys no node can know
	// by itself (they go to the store by default).
	FirstCalls int64
	// Errors counts calls that returned an error; Sent the calls sent,
	// warm-up included, and Recorded those answered, which the oracle
	// was fed.
	Errors, Sent, Recorded int64
	// Fallbacks counts the calls, warm-up included, decided in their node
	// after their store call failed or timed out (the nodes' Fallback
	// metric). Escalations skipped while the store is then presumed down
	// are not in it.
	Fallbacks int64
	// Start is when the judged load started (after the warm-up), Elapsed
	// the whole load's wall time; Offered the calls sent per second.
	Start   time.Time
	Elapsed time.Duration
	Offered float64
}

// Local returns the share of calls decided without a store round trip.
func (r Result) Local() float64 {
	if r.Calls == 0 {
		return 0
	}
	return 1 - float64(r.Escalated)/float64(r.Calls)
}

// EngineLimit returns the limit of r's kind that holds Limit hits per
// Window: a sliding window of Window; a token bucket of Limit tokens
// refilled one at a time, every Window/Limit; a leaky bucket of Limit
// drops drained in Window (one every Window/Limit); a fixed bucket of
// Limit per period of Window.
func (r Run) EngineLimit() ratelimit.Limit {
	l := ratelimit.Limit{Kind: r.Kind}
	switch r.Kind {
	case ratelimit.TokenLimit:
		l.Token = ratelimit.TokenBucket{Max: r.Limit, RefillTime: time.Duration(float64(r.Window) / r.Limit), RefillAmount: 1}
	case ratelimit.LeakyLimit:
		l.Leaky = ratelimit.LeakyBucket{Size: r.Limit, Interval: r.Window}
	case ratelimit.FixedLimit:
		l.Fixed = ratelimit.FixedBucket{Period: r.Window, Limit: r.Limit}
	default:
		l.Size, l.Limit = r.Window, r.Limit
	}
	return l
}

// serviceLimit is l as the service takes it.
func serviceLimit(l ratelimit.Limit) service.Limit {
	return service.Limit{
		Size: l.Size, Limit: l.Limit, Kind: service.Kind(l.Kind),
		Token:  service.TokenBucket{Max: l.Token.Max, RefillTime: l.Token.RefillTime, RefillAmount: l.Token.RefillAmount},
		Leaky:  service.LeakyBucket{Size: l.Leaky.Size, Interval: l.Leaky.Interval},
		Fixed:  service.FixedBucket{Period: l.Fixed.Period, Limit: l.Fixed.Limit},
		Strict: l.Strict, WaitTimeout: l.WaitTimeout,
	}
}

// zipfShare returns the share of calls a Zipf run sends to the key of
// the given rank (from 1).
func (r Run) zipfShare(rank int) float64 {
	if r.Keys <= 1 {
		return 1
	}
	var h float64
	for i := range r.Keys {
		h += math.Pow(float64(1+i), -r.ZipfS)
	}
	return math.Pow(float64(rank), -r.ZipfS) / h
}

// RateForTop returns the Rate at which the most called key is offered
// load times its limit per window.
func (r Run) RateForTop(load float64) float64 {
	return load * r.Limit / r.Window.Seconds() / r.zipfShare(1)
}

// KeysOver returns how many keys are offered at least load times their
// limit per window.
func (r Run) KeysOver(load float64) int {
	if r.Keys <= 1 {
		if r.Rate*r.Window.Seconds() >= load*r.Limit {
			return 1
		}
		return 0
	}
	p1 := r.zipfShare(1)
	n := 0
	for rank := 1; rank <= r.Keys && r.Rate*r.Window.Seconds()*p1*math.Pow(float64(rank), -r.ZipfS) >= load*r.Limit; rank++ {
		n++
	}
	return n
}

// TopShareOffered returns, for a Zipf run, the calls per window offered to
// the least-called key of the top 1 % of keys, divided by the limit.
func (r Run) TopShareOffered() float64 {
	last := max(r.Keys/100, 1) // rank of the top 1 %'s last key, from 1
	return r.Rate * r.Window.Seconds() * r.zipfShare(last) / r.Limit
}

// escalations counts Escalated and Fallback over the nodes, and their
// ticks.
type escalations struct {
	clustersync.NopMetrics
	n              atomic.Int64
	ticks, tickSum atomic.Int64 // count, ns
	tickMax        atomic.Int64 // ns
	fallbacks      atomic.Int64
}

func (e *escalations) Escalated(string) { e.n.Add(1) }

func (e *escalations) Fallback(string) { e.fallbacks.Add(1) }

func (e *escalations) Tick(_ string, d time.Duration, _, _ bool) {
	e.ticks.Add(1)
	e.tickSum.Add(int64(d))
	for m := e.tickMax.Load(); int64(d) > m && !e.tickMax.CompareAndSwap(m, int64(d)); m = e.tickMax.Load() {
	}
}

// Measure runs r and judges every decision against the oracle.
func Measure(ctx context.Context, r Run) (Result, error) {
	esc := new(escalations)
	cfg := r.Sync
	cfg.NoEscalate = !r.Escalate
	var svcs []*service.Service
	var syncers []*clustersync.Syncer
	var nodes []*node.Node
	var stores []clustersync.Store
	defer func() {
		for _, st := range stores {
			_ = st.Close()
		}
	}()
	var mode clustersync.Mode = clustersync.Synchronous{}
	if r.SyncRate > 0 {
		mode = clustersync.Periodic{Period: time.Duration(r.SyncRate * float64(time.Second))}
	}
	for i := range r.Nodes {
		n, err := node.New([]node.Config{{Name: r.Namespace, WindowSizes: []time.Duration{r.Window}, Shared: true}}, node.SystemClock{})
		if err != nil {
			return Result{}, err
		}
		ns, _ := n.Namespace(r.Namespace)
		st, err := r.NewStore()
		if err != nil {
			return Result{}, err
		}
		stores = append(stores, st)
		sy, err := clustersync.NewSyncer(ns, mode, st, clustersync.NewIncarnation(fmt.Sprintf("acc-%d", i)), clustersync.NewVersions(time.Now), cfg, nil, esc)
		if err != nil {
			return Result{}, err
		}
		s, err := service.New(n, sy)
		if err != nil {
			return Result{}, err
		}
		svcs, syncers, nodes = append(svcs, s), append(syncers, sy), append(nodes, n)
	}
	sctx, stop := context.WithCancel(ctx)
	var wg gosync.WaitGroup
	for i, sy := range syncers {
		wg.Go(func() { _ = sy.Run(sctx) })
		wg.Go(func() { nodes[i].Run(sctx) }) // reclaims idle keys, as limiterd does
	}
	defer func() { stop(); wg.Wait() }()

	type job struct {
		seq  int64
		node int
		key  int32
	}
	jobs := make(chan job, 1<<16)
	var zipf *rand.Zipf
	rng := rand.New(rand.NewPCG(1, 2))
	if r.Keys > 1 {
		zipf = rand.NewZipf(rng, r.ZipfS, 1, uint64(r.Keys-1))
	}
	workers := max(r.Workers, 1)
	calls := make([][]Call, workers)
	var errs atomic.Int64
	var werr atomic.Value
	var lw gosync.WaitGroup
	limit := r.EngineLimit()
	limits := []service.Limit{serviceLimit(limit)}
	names := make([]string, max(r.Keys, 1))
	for i := range names {
		names[i] = fmt.Sprintf("key-%d", i)
	}
	for w := range workers {
		lw.Go(func() {
			var dst []service.LimitStatus
			for j := range jobs {
				// A live call, as a client without a clock of its own
				// sends it; the answer says when it was decided.
				d, err := svcs[j.node].Allow(ctx, service.AllowRequest{Namespace: r.Namespace, Key: names[j.key], Limits: limits}, dst[:0])
				if err != nil {
					errs.Add(1)
					werr.Store(err)
					continue
				}
				dst = d.Limits
				calls[w] = append(calls[w], Call{At: d.At.UnixNano(), Seq: j.seq, Key: j.key, Allowed: d.Allowed})
			}
		})
	}
	start := time.Now()
	warm := int64(r.Rate * r.Warmup.Seconds())
	total := warm + int64(r.Rate*r.Duration.Seconds())
	var warmEsc, sent int64
	for i := int64(0); i < total && ctx.Err() == nil; i++ {
		if i == warm && warm > 0 {
			warmEsc = esc.n.Load()
		}
		due := start.Add(time.Duration(float64(i) / r.Rate * float64(time.Second)))
		if d := time.Until(due); d > time.Millisecond {
			time.Sleep(d)
		}
		var key int32
		if zipf != nil {
			key = int32(zipf.Uint64())
		}
		jobs <- job{seq: i, node: int(i % int64(r.Nodes)), key: key}
		sent++
	}
	close(jobs)
	lw.Wait()
	elapsed := time.Since(start)
	var all []Call
	for _, c := range calls {
		all = append(all, c...)
	}
	from := start.Add(r.Warmup)
	res := Result{Start: from, Escalated: esc.n.Load() - warmEsc, WarmupCalls: warm, WarmupEscalated: warmEsc,
		Errors: errs.Load(), Sent: sent, Recorded: int64(len(all)), Fallbacks: esc.fallbacks.Load(), Elapsed: elapsed, Offered: float64(sent) / elapsed.Seconds()}
	res.FirstCalls = firstCalls(all, r.Nodes, warm, r.Window)
	var err error
	if res.Verdict, err = JudgeLimit(all, limit, r.Window, from, start.Add(elapsed)); err != nil {
		return res, err
	}
	if r.SyncRate == 0 {
		// Every call is the store's (Escalated counts periodic calls).
		res.Escalated = int64(res.Calls)
	}
	if n := esc.ticks.Load(); n > 0 {
		res.TickMean, res.TickMax = time.Duration(esc.tickSum.Load()/n), time.Duration(esc.tickMax.Load())
	}
	if e, ok := werr.Load().(error); ok {
		return res, fmt.Errorf("%d calls failed, the last: %w", res.Errors, e)
	}
	return res, ctx.Err()
}

// firstCalls counts the calls from seq warm on that were the first on
// their key of their node (seq modulo nodes), and marks Back the calls on
// a key their node called before whose last call in the cluster was in a
// window before the previous one (of size). It sorts calls by seq.
func firstCalls(calls []Call, nodes int, warm int64, size time.Duration) int64 {
	slices.SortFunc(calls, func(a, b Call) int { return cmp.Compare(a.Seq, b.Seq) })
	type nodeKey struct {
		node int64
		key  int32
	}
	seen := make(map[nodeKey]bool)
	last := make(map[int32]int64) // a key's last call in the cluster
	var n int64
	for i := range calls {
		c := &calls[i]
		k := nodeKey{c.Seq % int64(max(nodes, 1)), c.Key}
		if !seen[k] {
			seen[k] = true
			if c.Seq >= warm {
				n++
			}
		} else if at, ok := last[c.Key]; ok && ratelimit.WindowStart(at, size) < ratelimit.WindowStart(c.At, size)-int64(size) {
			c.Back = true
		}
		last[c.Key] = c.At
	}
	return n
}

// Summary describes the result of r in one line.
func (res Result) Summary(r Run) string {
	return fmt.Sprintf("%d calls (%.0f/s), %d admitted, mean %.3f L, worst %.2f L (its window from %s after the judged start); wrongly admitted %d (%.4f %%), wrongly refused %d (%.4f %%); escalated %.2f %% (oracle's admissions into the last call of room: %.2f %%; first calls of a node on a key: %.2f %%; back after a window alone: %d, wrongly admitted %d); decided in the node after a failed store call: %d; ticks mean %s, longest %s",
		res.Calls, res.Offered, res.Admitted, res.Mean/r.Limit, res.Worst/r.Limit, res.WorstAt.Sub(res.Start).Round(time.Millisecond),
		res.WronglyAdmitted, 100*share(res.WronglyAdmitted, res.Calls), res.WronglyRefused, 100*share(res.WronglyRefused, res.Calls),
		100*(1-res.Local()), 100*share(res.AtLimit, res.Calls), 100*share(int(res.FirstCalls), res.Calls), res.BackCalls, res.BackWronglyAdmitted, res.Fallbacks, res.TickMean.Round(time.Millisecond), res.TickMax.Round(time.Millisecond))
}

func share(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}
