//go:build integration

package campaign

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
)

// The load's limits, which the model's bounds are stated in.
const (
	windowSize   = 2 * time.Second
	windowLimit  = 20
	tokenMax     = 10
	tokenRefill  = 5
	tokenEvery   = time.Second
	leakySize    = 10
	leakyEvery   = 2 * time.Second
	fixedPeriod  = 2 * time.Second
	fixedLimit   = 10
	leaseLimit   = 2
	leaseTTL     = time.Second
	callDeadline = 2 * time.Second
	// countKeyEvery: an Increment client moves to a new key this often, so
	// that a key's hits stop and a push lost after them is never made up
	// by a later one.
	countKeyEvery = 500 * time.Millisecond
)

func model(st *store, start time.Time) Model {
	return Model{
		Nodes: 3, Start: start, SyncRate: syncRate, TickTimeout: tickTimeout, CallTimeout: callTimeout, Retry: retryPeriod,
		Atomic: st.atomic, Namespaces: namespaces, DecideAlone: map[string]bool{"synchronous-alone": true},
		Window: windowSize, Limit: windowLimit,
		TokenMax: tokenMax, TokenRefill: tokenRefill, TokenRefillTime: tokenEvery,
		LeakySize: leakySize, LeakyInterval: leakyEvery,
		FixedLimit: fixedLimit, FixedPeriod: fixedPeriod,
		LeaseLimit: leaseLimit,
	}
}

// outcome sorts a call's error: a status the service answers before it
// counts anything changed nothing; a time-out or a broken connection may
// have been applied.
func outcome(err error) (Outcome, string) {
	if err == nil {
		return OK, ""
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.NotFound, codes.ResourceExhausted,
		codes.PermissionDenied, codes.Unauthenticated:
		return Failed, err.Error()
	}
	return Unknown, err.Error()
}

// load is the clients of one run.
type load struct {
	c      *cluster
	h      *History
	prefix string // keys of this run
	at     time.Time
	stop   chan struct{}
	wg     sync.WaitGroup
	// countKeys are the Increment keys used, per namespace.
	mu        sync.Mutex
	countKeys map[string][]string
}

func (l *load) client(seed uint64, pace time.Duration, body func(rnd *rand.Rand, node int, client limiterv1.RateLimiterClient, ctx context.Context) Op) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		rnd := rand.New(rand.NewPCG(seed, 7))
		next := rnd.IntN(len(l.c.nodes))
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			node := next
			next = (next + 1) % len(l.c.nodes)
			ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
			start := time.Now()
			op := body(rnd, node, l.c.nodes[node].Client, ctx)
			cancel()
			if op.Kind != "" {
				op.Node, op.Start, op.End = node, l.h.Since(start), l.h.Since(time.Now())
				l.h.Add(op)
			}
			// Jittered pacing, so that clients do not march in step.
			time.Sleep(pace/2 + time.Duration(rnd.Int64N(int64(pace))))
		}
	}()
}

func record(kind, ns, key string, err error) Op {
	o, e := outcome(err)
	return Op{Kind: kind, Namespace: ns, Key: key, Outcome: o, Err: e}
}

// startLoad starts every client; end stops them and waits.
func startLoad(c *cluster, h *History, prefix string, seed uint64) *load {
	l := &load{c: c, h: h, prefix: prefix, at: time.Now(), stop: make(chan struct{}), countKeys: map[string][]string{}}
	id := seed * 1000
	next := func() uint64 { id++; return id }
	key := func(s string) string { return prefix + "-" + s }
	// Sliding windows in the three modes: three clients each, about 60
	// calls/s offered against 20 per 2 s.
	for _, ns := range c.st.served("local", "periodic", "synchronous") {
		for range 3 {
			l.client(next(), 50*time.Millisecond, func(_ *rand.Rand, _ int, cl limiterv1.RateLimiterClient, ctx context.Context) Op {
				r, err := cl.Allow(ctx, &limiterv1.AllowRequest{Namespace: ns, Key: key("window"),
					Limits: []*limiterv1.Limit{{WindowSize: durationpb.New(windowSize), Limit: windowLimit}}})
				op := record(OpAllow, ns, key("window"), err)
				op.Allowed = err == nil && r.GetAllowed()
				return op
			})
		}
	}
	// Buckets, periodic and synchronous: two clients each.
	buckets := []struct {
		kind  string
		limit *limiterv1.Limit
	}{
		{OpToken, &limiterv1.Limit{Kind: &limiterv1.Limit_Token{Token: &limiterv1.TokenBucket{
			Max: tokenMax, RefillTime: durationpb.New(tokenEvery), RefillAmount: ptr(float64(tokenRefill))}}}},
		{OpLeaky, &limiterv1.Limit{Kind: &limiterv1.Limit_Leaky{Leaky: &limiterv1.LeakyBucket{
			Size: leakySize, Interval: durationpb.New(leakyEvery)}}}},
		{OpFixed, &limiterv1.Limit{Kind: &limiterv1.Limit_Fixed{Fixed: &limiterv1.FixedBucket{
			Period: durationpb.New(fixedPeriod), Limit: fixedLimit}}}},
	}
	for _, ns := range c.st.served("periodic", "synchronous") {
		for _, b := range buckets {
			for range 2 {
				l.client(next(), 100*time.Millisecond, func(_ *rand.Rand, _ int, cl limiterv1.RateLimiterClient, ctx context.Context) Op {
					r, err := cl.Allow(ctx, &limiterv1.AllowRequest{Namespace: ns, Key: key(b.kind), Limits: []*limiterv1.Limit{b.limit}})
					op := record(b.kind, ns, key(b.kind), err)
					op.Allowed = err == nil && r.GetAllowed()
					return op
				})
			}
		}
	}
	// Increments whose hits are counted after the run, a new key every
	// countKeyEvery.
	for _, ns := range c.st.served("count-periodic", "count-synchronous") {
		for range 2 {
			l.client(next(), 40*time.Millisecond, func(_ *rand.Rand, _ int, cl limiterv1.RateLimiterClient, ctx context.Context) Op {
				k := key(fmt.Sprintf("count-%d", time.Since(l.at)/countKeyEvery))
				l.noteCountKey(ns, k)
				_, err := cl.Increment(ctx, &limiterv1.IncrementRequest{Namespace: ns, Key: k,
					WindowSize: durationpb.New(time.Hour), At: timestamppb.New(l.at)})
				return record(OpIncrement, ns, k, err)
			})
		}
	}
	// Leases, periodic and synchronous (with on_store_down refuse and
	// local): four holders of a key spread over the nodes, and in the periodic namespace two holders of a key
	// of node 0's alone, whose bound is exact.
	for _, ns := range c.st.served("periodic", "synchronous", "synchronous-alone") {
		for range 4 {
			l.holder(next(), ns, key("lease"), -1)
		}
	}
	for range 2 {
		l.holder(next(), "periodic", key("lease-node-0"), 0)
	}
	return l
}

func ptr[T any](v T) *T { return &v }

func (l *load) noteCountKey(ns, k string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	keys := l.countKeys[ns]
	if len(keys) == 0 || keys[len(keys)-1] != k {
		l.countKeys[ns] = append(keys, k)
	}
}

// holder acquires a lease of key (at node only, when node ≥ 0), holds it
// for up to 1.2 ttl (renewing it at times, letting it expire at others),
// releases it if it still holds it, and starts over.
func (l *load) holder(seed uint64, ns, key string, node int) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		rnd := rand.New(rand.NewPCG(seed, 11))
		pick := func() int {
			if node >= 0 {
				return node
			}
			return rnd.IntN(len(l.c.nodes))
		}
		call := func(kind string, n int, f func(ctx context.Context, cl limiterv1.RateLimiterClient) (Op, error)) Op {
			ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
			defer cancel()
			start := time.Now()
			op, err := f(ctx, l.c.nodes[n].Client)
			o, e := outcome(err)
			op.Kind, op.Namespace, op.Key, op.Node, op.Outcome, op.Err = kind, ns, key, n, o, e
			op.Start, op.End = l.h.Since(start), l.h.Since(time.Now())
			l.h.Add(op)
			return op
		}
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			acq := call(OpAcquire, pick(), func(ctx context.Context, cl limiterv1.RateLimiterClient) (Op, error) {
				r, err := cl.Acquire(ctx, &limiterv1.AcquireRequest{Namespace: ns, Key: key, Limit: leaseLimit, Ttl: durationpb.New(leaseTTL)})
				return Op{Allowed: err == nil && r.GetAcquired(), Lease: r.GetLease(), TTL: leaseTTL}, err
			})
			if !acq.Allowed {
				time.Sleep(time.Duration(10+rnd.IntN(20)) * time.Millisecond)
				continue
			}
			hold := time.Duration(rnd.Int64N(int64(leaseTTL) * 6 / 5))
			held := time.Now()
			if rnd.IntN(4) == 0 && hold > leaseTTL/2 {
				time.Sleep(leaseTTL / 2)
				call(OpRenew, pick(), func(ctx context.Context, cl limiterv1.RateLimiterClient) (Op, error) {
					r, err := cl.Renew(ctx, &limiterv1.RenewRequest{Lease: acq.Lease, Ttl: durationpb.New(leaseTTL)})
					return Op{Allowed: err == nil && r.GetRenewed(), Lease: acq.Lease, TTL: leaseTTL}, err
				})
			}
			time.Sleep(time.Until(held.Add(hold)))
			if hold < leaseTTL {
				call(OpRelease, pick(), func(ctx context.Context, cl limiterv1.RateLimiterClient) (Op, error) {
					r, err := cl.Release(ctx, &limiterv1.ReleaseRequest{Lease: acq.Lease})
					return Op{Allowed: err == nil && r.GetReleased(), Lease: acq.Lease}, err
				})
			}
		}
	}()
}

// end stops the clients and waits for their last calls.
func (l *load) end() {
	close(l.stop)
	l.wg.Wait()
}

// finals reads every Increment key's count from the nodes once they
// agree, every fault undone, within timeout. A node's first read of a key
// it does not hold answers from what it knows, nothing, until a fetch
// brings the others' totals: so every key is read once on every node,
// then read in rounds until the nodes agree on a count that held for
// settle (a sync period's D). A key the nodes still disagree on is
// reported, with the least count they give (the hits every node sees).
func (l *load) finals(settle, timeout time.Duration) ([]Final, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	type key struct{ ns, k string }
	type reading struct {
		counts []float64
		errs   []error
	}
	var keys []key
	for ns, ks := range l.countKeys {
		for _, k := range ks {
			keys = append(keys, key{ns, k})
		}
	}
	// readAll reads keys on every node, 16 calls at once.
	readAll := func(keys []key) []reading {
		out := make([]reading, len(keys))
		sem := make(chan struct{}, 16)
		var wg sync.WaitGroup
		for i, k := range keys {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				for _, n := range l.c.nodes {
					ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
					r, err := n.Client.SlidingWindow(ctx, &limiterv1.SlidingWindowRequest{Namespace: k.ns, Key: k.k,
						WindowSize: durationpb.New(time.Hour), At: timestamppb.New(l.at)})
					cancel()
					if err != nil {
						out[i].errs = append(out[i].errs, fmt.Errorf("%s: %w", n.Name, err))
						continue
					}
					out[i].counts = append(out[i].counts, r.GetRates()[0].GetRate())
				}
			})
		}
		wg.Wait()
		return out
	}
	deadline := time.Now().Add(timeout)
	readAll(keys)
	time.Sleep(settle)
	type seen struct {
		count float64
		since time.Time
	}
	agreed := map[key]seen{}
	done := map[key]Final{}
	last := map[key]reading{}
	for {
		var open []key
		for _, k := range keys {
			if _, ok := done[k]; !ok {
				open = append(open, k)
			}
		}
		if len(open) == 0 {
			break
		}
		late := time.Now().After(deadline)
		for i, r := range readAll(open) {
			k := open[i]
			last[k] = r
			agree := len(r.errs) == 0 && len(r.counts) > 0
			for _, c := range r.counts {
				agree = agree && c == r.counts[0]
			}
			if !agree {
				delete(agreed, k)
				continue
			}
			a, ok := agreed[k]
			switch {
			case !ok || a.count != r.counts[0]:
				agreed[k] = seen{r.counts[0], time.Now()}
			case time.Since(a.since) >= settle:
				done[k] = Final{Namespace: k.ns, Key: k.k, Count: r.counts[0]}
			}
		}
		if late {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	var out []Final
	var disagree []string
	for _, k := range keys {
		if f, ok := done[k]; ok {
			out = append(out, f)
			continue
		}
		r := last[k]
		disagree = append(disagree, fmt.Sprintf("%s %s: counts %v %v", k.ns, k.k, r.counts, errors.Join(r.errs...)))
		if len(r.counts) > 0 {
			out = append(out, Final{Namespace: k.ns, Key: k.k, Count: slices.Min(r.counts)})
		}
	}
	return out, disagree
}
