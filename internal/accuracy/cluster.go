package accuracy

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	gosync "sync"
	"sync/atomic"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/service"
	clustersync "github.com/limiterd/limiterd/sync"
)

// Run describes one measured run.
type Run struct {
	Nodes    int
	SyncRate float64 // seconds, > 0
	Escalate bool
	// Sync tunes every node's Syncer (NoEscalate is set from Escalate).
	Sync   clustersync.Config
	Window time.Duration
	Limit  float64
	// Rate is the offered Allow calls per second over all keys, sent
	// round-robin over the nodes.
	Rate float64
	// Keys is the number of keys: one, or a Zipf law of exponent ZipfS
	// (> 1) over Keys keys (key i drawn with weight (1+i)^-ZipfS).
	Keys  int
	ZipfS float64
	// Duration of the load; Workers the goroutines sending it.
	Duration time.Duration
	Workers  int
	// Namespace names the namespace in the store, unique per run.
	Namespace string
	// NewStore opens one node's store client.
	NewStore func() (clustersync.Store, error)
}

// Result is a run's outcome.
type Result struct {
	Verdict
	// Escalated is the number of Allow calls decided by the store.
	Escalated int64
	// Errors counts calls that returned an error.
	Errors int64
	// Start is when the load started, Elapsed its wall time; Offered the
	// calls sent per second.
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

// TopShareOffered returns, for a Zipf run, the calls per window offered to
// the least-called key of the top 1 % of keys, divided by the limit.
func (r Run) TopShareOffered() float64 {
	if r.Keys <= 1 {
		return r.Rate * r.Window.Seconds() / r.Limit
	}
	var h float64
	for i := range r.Keys {
		h += math.Pow(float64(1+i), -r.ZipfS)
	}
	last := max(r.Keys/100, 1) // rank of the top 1 %'s last key, from 1
	p := math.Pow(float64(last), -r.ZipfS) / h
	return r.Rate * r.Window.Seconds() * p / r.Limit
}

// escalations counts Escalated over the nodes.
type escalations struct {
	clustersync.NopMetrics
	n atomic.Int64
}

func (e *escalations) Escalated(string) { e.n.Add(1) }

// Measure runs r and judges every decision against the oracle.
func Measure(ctx context.Context, r Run) (Result, error) {
	esc := new(escalations)
	cfg := r.Sync
	cfg.NoEscalate = !r.Escalate
	var svcs []*service.Service
	var syncers []*clustersync.Syncer
	var stores []clustersync.Store
	defer func() {
		for _, st := range stores {
			_ = st.Close()
		}
	}()
	for i := range r.Nodes {
		n, err := node.New([]node.Config{{Name: r.Namespace, WindowSizes: []time.Duration{r.Window}, SyncRate: r.SyncRate, Store: "main"}}, node.SystemClock{})
		if err != nil {
			return Result{}, err
		}
		ns, _ := n.Namespace(r.Namespace)
		st, err := r.NewStore()
		if err != nil {
			return Result{}, err
		}
		stores = append(stores, st)
		sy, err := clustersync.NewSyncer(ns, st, clustersync.NewIncarnation(fmt.Sprintf("acc-%d", i)), clustersync.NewVersions(time.Now), cfg, nil, esc)
		if err != nil {
			return Result{}, err
		}
		s, err := service.New(n, sy)
		if err != nil {
			return Result{}, err
		}
		svcs, syncers = append(svcs, s), append(syncers, sy)
	}
	sctx, stop := context.WithCancel(ctx)
	var wg gosync.WaitGroup
	for _, sy := range syncers {
		wg.Go(func() { _ = sy.Run(sctx) })
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
	limits := []node.Limit{{Size: r.Window, Limit: r.Limit}}
	names := make([]string, max(r.Keys, 1))
	for i := range names {
		names[i] = fmt.Sprintf("key-%d", i)
	}
	for w := range workers {
		lw.Go(func() {
			var dst []node.LimitStatus
			for j := range jobs {
				at := time.Now()
				d, err := svcs[j.node].Allow(ctx, service.AllowRequest{Namespace: r.Namespace, At: at, Key: names[j.key], Limits: limits}, dst[:0])
				if err != nil {
					errs.Add(1)
					werr.Store(err)
					continue
				}
				dst = d.Limits
				calls[w] = append(calls[w], Call{At: at.UnixNano(), Seq: j.seq, Key: j.key, Allowed: d.Allowed})
			}
		})
	}
	start := time.Now()
	total := int64(r.Rate * r.Duration.Seconds())
	for i := int64(0); i < total && ctx.Err() == nil; i++ {
		due := start.Add(time.Duration(float64(i) / r.Rate * float64(time.Second)))
		if d := time.Until(due); d > time.Millisecond {
			time.Sleep(d)
		}
		var key int32
		if zipf != nil {
			key = int32(zipf.Uint64())
		}
		jobs <- job{seq: i, node: int(i % int64(r.Nodes)), key: key}
	}
	close(jobs)
	lw.Wait()
	elapsed := time.Since(start)
	var all []Call
	for _, c := range calls {
		all = append(all, c...)
	}
	res := Result{Start: start, Escalated: esc.n.Load(), Errors: errs.Load(), Elapsed: elapsed, Offered: float64(total) / elapsed.Seconds()}
	res.Verdict = Judge(all, r.Window, r.Limit, start, start.Add(elapsed))
	if e, ok := werr.Load().(error); ok {
		return res, fmt.Errorf("%d calls failed, the last: %w", res.Errors, e)
	}
	return res, ctx.Err()
}

// Summary describes the result of r in one line.
func (res Result) Summary(r Run) string {
	return fmt.Sprintf("%d calls (%.0f/s), mean %.3f L, worst %.2f L; wrongly admitted %d (%.4f %%), wrongly refused %d (%.4f %%); escalated %.2f %%",
		res.Calls, res.Offered, res.Mean/r.Limit, res.Worst/r.Limit,
		res.WronglyAdmitted, 100*share(res.WronglyAdmitted, res.Calls), res.WronglyRefused, 100*share(res.WronglyRefused, res.Calls),
		100*(1-res.Local()))
}

func share(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}
