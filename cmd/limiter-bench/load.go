package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
)

// result is what one run measured.
type result struct {
	// Start and End bound the measurement (after the warm-up).
	Start, End time.Time
	// Calls counts the calls scheduled in [Start, End), failed or not;
	// Items the batch items (decisions) of the calls that succeeded, one
	// per unary call.
	Calls, Items uint64
	// Errors counts failed calls by gRPC code, ItemErrors failed batch
	// items by code.
	Errors, ItemErrors map[string]uint64
	// Latency of the calls that succeeded.
	Latency histogram
	// Allowed and Denied count Allow decisions (items of a batch each).
	Allowed, Denied uint64
	// Admitted counts admitted hits per key and window, warm-up included
	// (those hits count against the limit too).
	Admitted *admitted
	// ServerCPU is the CPU time the -pids used during the measurement,
	// ClientCPU this process's; negative when unknown.
	ServerCPU, ClientCPU time.Duration
}

// clients are one connection's stubs; the batch calls go through conn
// directly, to read their responses into a batchReply.
type clients struct {
	conn    grpc.ClientConnInterface
	limiter limiterv1.RateLimiterClient
	health  healthpb.HealthClient
}

// runner drives one run; its fields are read-only once the load starts,
// apart from the atomics.
type runner struct {
	cfg     config
	conns   []clients // target-major round-robin: conns[i] is on targets[i % len(targets)]
	keys    []string
	limits  []*limiterv1.Limit
	allows  []*limiterv1.AllowRequest     // one per key, when -at is off
	incs    []*limiterv1.IncrementRequest // one per key, when -at is off
	items   [][]byte                      // one batch item per key (encodeItem), for batch calls when -at is off
	seq     atomic.Uint64                 // picks the connection of each call
	measure time.Time                     // calls scheduled from then on are measured

	// For progress lines: measured calls and errors so far.
	done, failed atomic.Uint64
}

// worker is one caller's private tallies, merged at the end, and what its
// calls reuse call after call: for batches the keys drawn, the request
// (from the runner's prebuilt items, or with -at messages built per call)
// and the reply; for Allow the reply.
type worker struct {
	res  result
	rnd  *rand.Rand
	zipf *rand.Zipf

	batchKeys  []int
	encBatch   batchRequest
	allowBatch limiterv1.AllowBatchRequest
	incBatch   limiterv1.IncrementBatchRequest
	reply      batchReply
	allowReply allowReply
}

func (r *runner) newWorker(id int) *worker {
	w := &worker{rnd: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(id)))}
	w.res.Errors, w.res.ItemErrors = map[string]uint64{}, map[string]uint64{}
	w.res.Admitted = newAdmitted(r.cfg.window)
	if r.cfg.dist == "zipf" {
		w.zipf = rand.NewZipf(w.rnd, r.cfg.zipfS, 1, uint64(r.cfg.keys-1))
	}
	return w
}

// key draws a key index from the distribution.
func (w *worker) key(n int) int {
	if w.zipf != nil {
		return int(w.zipf.Uint64())
	}
	return w.rnd.IntN(n)
}

func runLoad(ctx context.Context, cfg config, progress io.Writer) (*result, error) {
	r := &runner{cfg: cfg, keys: make([]string, cfg.keys)}
	for i := range r.keys {
		r.keys[i] = cfg.keyPrefix + strconv.Itoa(i)
	}
	r.limits = []*limiterv1.Limit{{WindowSize: durationpb.New(cfg.window), Limit: cfg.limit}}
	if !cfg.sendAt {
		r.allows = make([]*limiterv1.AllowRequest, cfg.keys)
		r.incs = make([]*limiterv1.IncrementRequest, cfg.keys)
		for i, k := range r.keys {
			r.allows[i] = &limiterv1.AllowRequest{Namespace: cfg.namespace, Key: k, Limits: r.limits}
			r.incs[i] = &limiterv1.IncrementRequest{Namespace: cfg.namespace, Key: k}
		}
		if cfg.call == callAllowBatch || cfg.call == callIncrementBatch {
			r.items = make([][]byte, cfg.keys)
			for i := range r.items {
				var m proto.Message = r.allows[i]
				if cfg.call == callIncrementBatch {
					m = r.incs[i]
				}
				b, err := encodeItem(m)
				if err != nil {
					return nil, fmt.Errorf("key %q: %w", r.keys[i], err)
				}
				r.items[i] = b
			}
		}
	}
	creds, err := transportCreds(cfg)
	if err != nil {
		return nil, err
	}
	for range cfg.conns {
		for _, t := range cfg.targets {
			conn, err := grpc.NewClient(t, grpc.WithTransportCredentials(creds),
				grpc.WithDefaultCallOptions(grpc.ForceCodecV2(codec{})))
			if err != nil {
				return nil, fmt.Errorf("target %s: %w", t, err)
			}
			defer conn.Close()
			r.conns = append(r.conns, clients{conn: conn, limiter: limiterv1.NewRateLimiterClient(conn), health: healthpb.NewHealthClient(conn)})
		}
	}
	// Connect every connection before the clock starts, and fail fast on a
	// target that does not answer.
	for i, c := range r.conns {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := c.health.Check(cctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		cancel()
		if err != nil {
			return nil, fmt.Errorf("target %s: health check: %w", cfg.targets[i%len(cfg.targets)], err)
		}
	}

	start := time.Now()
	r.measure = start.Add(cfg.warmup)
	stop := make(chan struct{})
	var stopOnce sync.Once
	stopAll := func() { stopOnce.Do(func() { close(stop) }) }
	timer := time.AfterFunc(cfg.warmup+cfg.duration, stopAll)
	defer timer.Stop()
	go func() {
		select {
		case <-ctx.Done():
			stopAll()
		case <-stop:
		}
	}()

	var cpu0 cpuSample
	var measuring sync.WaitGroup
	measuring.Go(func() {
		// The CPU counters are read when the measurement starts, not
		// when the warm-up does.
		select {
		case <-time.After(time.Until(r.measure)):
		case <-stop:
		}
		cpu0 = sampleCPU(cfg.pids)
	})

	workers := make([]*worker, cfg.callers)
	var wg sync.WaitGroup
	var sched chan time.Time
	if cfg.rate > 0 {
		// Open loop: one scheduler, the callers take scheduled times. A
		// caller that is late starts late, and the lateness counts in the
		// latency (no coordinated omission).
		sched = make(chan time.Time, cfg.callers)
		wg.Go(func() { schedule(start, cfg.rate, sched, stop); close(sched) })
	}
	var callersWG sync.WaitGroup
	for i := range workers {
		w := r.newWorker(i)
		workers[i] = w
		callersWG.Go(func() {
			if sched != nil {
				for t := range sched {
					r.do(ctx, w, t)
				}
				return
			}
			for {
				select {
				case <-stop:
					return
				default:
				}
				r.do(ctx, w, time.Now())
			}
		})
	}
	if cfg.progress > 0 {
		wg.Go(func() { r.report(progress, start, stop) })
	}
	callersWG.Wait()
	end := time.Now()
	stopAll()
	wg.Wait()
	measuring.Wait()
	cpu1 := sampleCPU(cfg.pids)

	// Calls scheduled before the stop are measured, so the measurement
	// ends at the stop (or earlier, at ^C), not when the last call returned.
	if planned := r.measure.Add(cfg.duration); end.After(planned) {
		end = planned
	}
	res := &result{Start: r.measure, End: end, Errors: map[string]uint64{}, ItemErrors: map[string]uint64{},
		Admitted: newAdmitted(cfg.window), ServerCPU: cpu1.server - cpu0.server, ClientCPU: cpu1.self - cpu0.self}
	if res.End.Before(res.Start) {
		res.End = res.Start // stopped during the warm-up
	}
	if !cpu0.ok || !cpu1.ok {
		res.ServerCPU = -1
	}
	if !cpu0.selfOK || !cpu1.selfOK {
		res.ClientCPU = -1
	}
	for _, w := range workers {
		res.merge(&w.res)
	}
	return res, nil
}

// merge adds a worker's tallies.
func (res *result) merge(o *result) {
	res.Calls += o.Calls
	res.Items += o.Items
	res.Allowed += o.Allowed
	res.Denied += o.Denied
	for k, v := range o.Errors {
		res.Errors[k] += v
	}
	for k, v := range o.ItemErrors {
		res.ItemErrors[k] += v
	}
	res.Latency.merge(&o.Latency)
	res.Admitted.merge(o.Admitted)
}

// schedule sends the scheduled time of call i, start + i/rate, as each
// comes due, until stop closes. It sleeps in between rather than ticking
// once per call, so high rates cost a wake-up per millisecond or so, and
// sends every call that came due meanwhile at its own scheduled time.
func schedule(start time.Time, rate float64, out chan<- time.Time, stop <-chan struct{}) {
	interval := float64(time.Second) / rate
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i := int64(0); ; {
		due := int64(float64(time.Since(start)) / interval)
		for ; i <= due; i++ {
			select {
			case out <- start.Add(time.Duration(float64(i) * interval)):
			case <-stop:
				return
			}
		}
		timer.Reset(time.Until(start.Add(time.Duration(float64(i) * interval))))
		select {
		case <-timer.C:
		case <-stop:
			return
		}
	}
}

// do makes one call scheduled at scheduled and tallies it in w. Latency
// counts from the scheduled time; admitted hits are counted in the window
// of the time the call was actually sent (which -at tells the server), as
// in an open loop under overload a call may start long after its
// scheduled time.
func (r *runner) do(ctx context.Context, w *worker, scheduled time.Time) {
	sent := time.Now()
	conn := r.conns[r.seq.Add(1)%uint64(len(r.conns))]
	// Calls in flight when the run ends are let finish (only ^C cuts them
	// short), so the last ones do not show up as errors.
	cctx, cancel := context.WithTimeout(ctx, r.cfg.timeout)
	defer cancel()
	measured := !scheduled.Before(r.measure)
	res := &w.res
	var err error
	items := 1
	switch r.cfg.call {
	case callHealth:
		_, err = conn.health.Check(cctx, &healthpb.HealthCheckRequest{})
	case callIncrement:
		_, err = conn.limiter.Increment(cctx, r.increment(w.key(len(r.keys)), sent))
	case callAllow:
		k := w.key(len(r.keys))
		err = conn.conn.Invoke(cctx, limiterv1.RateLimiter_Allow_FullMethodName, r.allow(k, sent), &w.allowReply, grpc.StaticMethod())
		if err == nil {
			w.tallyAllow(w.allowReply.allowed, k, sent, measured)
		}
	case callAllowBatch:
		ks := w.drawBatch(r)
		err = conn.conn.Invoke(cctx, limiterv1.RateLimiter_AllowBatch_FullMethodName, r.allowBatch(w, ks, sent), &w.reply, grpc.StaticMethod())
		if err == nil {
			items = 0
			for i, it := range w.reply.results[:min(len(w.reply.results), len(ks))] {
				if it.failed {
					if measured {
						res.ItemErrors[codeName(it.code)]++
					}
					continue
				}
				items++
				w.tallyAllow(it.allowed, ks[i], sent, measured)
			}
		}
	case callIncrementBatch:
		ks := w.drawBatch(r)
		err = conn.conn.Invoke(cctx, limiterv1.RateLimiter_IncrementBatch_FullMethodName, r.incrementBatch(w, ks, sent), &w.reply, grpc.StaticMethod())
		if err == nil {
			items = 0
			for _, it := range w.reply.results {
				if it.failed {
					if measured {
						res.ItemErrors[codeName(it.code)]++
					}
					continue
				}
				items++
			}
		}
	}
	if !measured {
		return
	}
	res.Calls++
	r.done.Add(1)
	if err != nil {
		res.Errors[status.Code(err).String()]++
		r.failed.Add(1)
		return
	}
	res.Items += uint64(items)
	res.Latency.record(time.Since(scheduled))
}

// tallyAllow counts one Allow decision; admitted hits are counted even
// during the warm-up, since they hold the limit.
func (w *worker) tallyAllow(allowed bool, key int, sent time.Time, measured bool) {
	if allowed {
		w.res.Admitted.add(key, sent, 1e6) // cost 1
		if measured {
			w.res.Allowed++
		}
	} else if measured {
		w.res.Denied++
	}
}

// allow returns the Allow request for key k: the prebuilt one, or with -at
// one carrying the time it is sent.
func (r *runner) allow(k int, sent time.Time) *limiterv1.AllowRequest {
	if !r.cfg.sendAt {
		return r.allows[k]
	}
	return &limiterv1.AllowRequest{Namespace: r.cfg.namespace, Key: r.keys[k], Limits: r.limits, At: timestamppb.New(sent)}
}

func (r *runner) increment(k int, sent time.Time) *limiterv1.IncrementRequest {
	if !r.cfg.sendAt {
		return r.incs[k]
	}
	return &limiterv1.IncrementRequest{Namespace: r.cfg.namespace, Key: r.keys[k], At: timestamppb.New(sent)}
}

// drawBatch draws the keys of one batch call into w.batchKeys.
func (w *worker) drawBatch(r *runner) []int {
	ks := w.batchKeys[:0]
	for range r.cfg.batch {
		ks = append(ks, w.key(len(r.keys)))
	}
	w.batchKeys = ks
	return ks
}

// allowBatch returns the AllowBatch request for keys ks, reusing w's: the
// prebuilt items, or with -at requests carrying the time they are sent.
func (r *runner) allowBatch(w *worker, ks []int, sent time.Time) any {
	if r.items != nil {
		return w.prebuilt(r, ks)
	}
	req := &w.allowBatch
	req.Items = req.Items[:0]
	for _, k := range ks {
		req.Items = append(req.Items, r.allow(k, sent))
	}
	return req
}

func (r *runner) incrementBatch(w *worker, ks []int, sent time.Time) any {
	if r.items != nil {
		return w.prebuilt(r, ks)
	}
	req := &w.incBatch
	req.Items = req.Items[:0]
	for _, k := range ks {
		req.Items = append(req.Items, r.increment(k, sent))
	}
	return req
}

func (w *worker) prebuilt(r *runner, ks []int) *batchRequest {
	w.encBatch.items = w.encBatch.items[:0]
	for _, k := range ks {
		w.encBatch.items = append(w.encBatch.items, r.items[k])
	}
	return &w.encBatch
}

func codeName(c int32) string { return codes.Code(c).String() }

// report prints a progress line every cfg.progress until stop closes.
func (r *runner) report(out io.Writer, start time.Time, stop <-chan struct{}) {
	t := time.NewTicker(r.cfg.progress)
	defer t.Stop()
	last, lastAt := uint64(0), start
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			if now.Before(r.measure) {
				fmt.Fprintf(out, "%6.1fs  warming up\n", now.Sub(start).Seconds())
				continue
			}
			done := r.done.Load()
			since := lastAt
			if since.Before(r.measure) {
				since = r.measure
			}
			fmt.Fprintf(out, "%6.1fs  %d calls  %.0f calls/s  %d errors\n",
				now.Sub(start).Seconds(), done, float64(done-last)/now.Sub(since).Seconds(), r.failed.Load())
			last, lastAt = done, now
		}
	}
}

// transportCreds is plaintext, or TLS when -ca-file is given (with a
// client certificate for mTLS).
func transportCreds(cfg config) (credentials.TransportCredentials, error) {
	if cfg.caFile == "" {
		return insecure.NewCredentials(), nil
	}
	pem, err := os.ReadFile(cfg.caFile)
	if err != nil {
		return nil, fmt.Errorf("-ca-file: %w", err)
	}
	tc := &tls.Config{RootCAs: x509.NewCertPool(), MinVersion: tls.VersionTLS12}
	if !tc.RootCAs.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("-ca-file: %s holds no PEM certificate", cfg.caFile)
	}
	if cfg.certFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.certFile, cfg.keyFile)
		if err != nil {
			return nil, fmt.Errorf("-cert-file, -key-file: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return credentials.NewTLS(tc), nil
}
