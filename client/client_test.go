package client_test

import (
	"context"
	"errors"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/durationpb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/client"
)

// fakeLimiter is a limiterd stand-in: Allow admits the first limit's
// Limit (or leaky size) calls per key and refuses the rest with a 1 s
// retry_after. block, when set, makes every call wait for it or the
// call's end.
type fakeLimiter struct {
	limiterv1.UnimplementedRateLimiterServer
	mu           sync.Mutex
	counts       map[string]float64
	calls        atomic.Int64
	batches      atomic.Int64
	slidingFails atomic.Int64 // SlidingWindow calls left to fail with UNAVAILABLE
	block        chan struct{}
	fakeLeases
}

func (f *fakeLimiter) wait(ctx context.Context) error {
	if f.block == nil {
		return nil
	}
	select {
	case <-f.block:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fakeLimiter) Allow(ctx context.Context, req *limiterv1.AllowRequest) (*limiterv1.AllowResponse, error) {
	f.calls.Add(1)
	if err := f.wait(ctx); err != nil {
		return nil, err
	}
	if req.GetKey() == "" {
		return nil, status.Error(codes.InvalidArgument, "key: must not be empty")
	}
	var limit float64
	if l := req.GetLimits(); len(l) > 0 {
		limit = max(l[0].GetLimit(), l[0].GetLeaky().GetSize())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.counts == nil {
		f.counts = map[string]float64{}
	}
	before := f.counts[req.GetKey()]
	st := &limiterv1.LimitStatus{Limit: limit, Before: before, Rate: before, ResetAfter: durationpb.New(time.Second)}
	if before+1 > limit {
		return &limiterv1.AllowResponse{Limits: []*limiterv1.LimitStatus{st}, RetryAfter: durationpb.New(time.Second)}, nil
	}
	f.counts[req.GetKey()] = before + 1
	st.Rate, st.Remaining = before+1, limit-before-1
	return &limiterv1.AllowResponse{Allowed: true, Limits: []*limiterv1.LimitStatus{st}}, nil
}

func (f *fakeLimiter) AllowBatch(ctx context.Context, req *limiterv1.AllowBatchRequest) (*limiterv1.AllowBatchResponse, error) {
	f.batches.Add(1)
	out := &limiterv1.AllowBatchResponse{}
	for _, it := range req.GetItems() {
		resp, err := f.Allow(ctx, it)
		res := &limiterv1.AllowResult{Response: resp}
		if err != nil {
			res = &limiterv1.AllowResult{Error: status.Convert(err).Proto()}
		}
		out.Results = append(out.Results, res)
	}
	return out, nil
}

func (f *fakeLimiter) SlidingWindow(ctx context.Context, req *limiterv1.SlidingWindowRequest) (*limiterv1.SlidingWindowResponse, error) {
	f.calls.Add(1)
	if f.slidingFails.Add(-1) >= 0 {
		return nil, status.Error(codes.Unavailable, "try again")
	}
	return &limiterv1.SlidingWindowResponse{Rates: []*limiterv1.WindowRate{{WindowSize: durationpb.New(time.Second), Rate: 1}}}, nil
}

// startFake serves f over bufconn; dial reaches it from the target
// "passthrough:///bufconn".
func startFake(f *fakeLimiter) (dial client.Option, stop func()) {
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	limiterv1.RegisterRateLimiterServer(gs, f)
	go gs.Serve(lis)
	dial = client.WithDialOptions(grpc.WithContextDialer(
		func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	return dial, gs.Stop
}

// serve serves f over bufconn and returns a Client of it.
func serve(tb testing.TB, f *fakeLimiter, opts ...client.Option) *client.Client {
	tb.Helper()
	dial, stop := startFake(f)
	// A deadline far above any call's time on a loaded machine: a test of
	// the deadline sets its own, which comes later and wins.
	c, err := client.New("passthrough:///bufconn", append([]client.Option{dial, client.WithTimeout(10 * time.Second)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		c.Close()
		if f.block != nil {
			close(f.block)
		}
		stop()
	})
	return c
}

func allowReq(key string, limit float64) *limiterv1.AllowRequest {
	return &limiterv1.AllowRequest{Key: key, Limits: []*limiterv1.Limit{client.Window(limit, time.Minute)}}
}

func TestAllow(t *testing.T) {
	c := serve(t, &fakeLimiter{})
	for i := range 3 {
		d := c.Allow(context.Background(), allowReq("k", 2))
		if d.Err != nil || d.Allowed != (i < 2) {
			t.Fatalf("call %d: %+v", i, d)
		}
		if !d.Allowed && d.RetryAfter != time.Second {
			t.Errorf("RetryAfter = %v, want 1s", d.RetryAfter)
		}
	}
}

// goroutines waits for the goroutine count to settle at or below want.
func checkGoroutines(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	n := runtime.NumGoroutine()
	for n > want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		n = runtime.NumGoroutine()
	}
	if n > want {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines left, want at most %d:\n%s", n, want, buf[:runtime.Stack(buf, true)])
	}
}

// hangingListener accepts connections and never answers on them.
func hangingListener(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return lis.Addr().String()
}

// stoppedAddr is a loopback address nothing listens on.
func stoppedAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// dial returns a Client of target, closed at the test's end.
func dial(t *testing.T, target string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestFailurePolicy(t *testing.T) {
	const timeout = 100 * time.Millisecond
	targets := map[string]func(t *testing.T, opts ...client.Option) *client.Client{
		"stopped": func(t *testing.T, opts ...client.Option) *client.Client {
			return dial(t, stoppedAddr(t), opts...)
		},
		"hanging listener": func(t *testing.T, opts ...client.Option) *client.Client {
			return dial(t, hangingListener(t), opts...)
		},
		"blocking handler": func(t *testing.T, opts ...client.Option) *client.Client {
			return serve(t, &fakeLimiter{block: make(chan struct{})}, opts...)
		},
	}
	for name, newClient := range targets {
		for _, closed := range []bool{false, true} {
			for _, batching := range []bool{false, true} {
				t.Run(name+policyName(closed)+batchName(batching), func(t *testing.T) {
					base := runtime.NumGoroutine()
					t.Run("calls", func(t *testing.T) {
						var hooked atomic.Int64
						opts := []client.Option{client.WithTimeout(timeout),
							client.WithErrorHook(func(string, error) { hooked.Add(1) })}
						if closed {
							opts = append(opts, client.WithFailClosed())
						}
						if batching {
							opts = append(opts, client.WithBatching(time.Millisecond, 8))
						}
						c := newClient(t, opts...)
						for range 2 {
							start := time.Now()
							d := c.Allow(context.Background(), allowReq("k", 5))
							took := time.Since(start)
							if d.Err == nil || d.Allowed == closed {
								t.Errorf("Decision %+v, want an error and Allowed %v", d, !closed)
							}
							if took > timeout+500*time.Millisecond {
								t.Errorf("Allow took %v, deadline %v", took, timeout)
							}
						}
						if hooked.Load() != 2 {
							t.Errorf("error hook called %d times, want 2", hooked.Load())
						}
					})
					checkGoroutines(t, base)
				})
			}
		}
	}
}

func policyName(closed bool) string {
	if closed {
		return "/fail-closed"
	}
	return "/fail-open"
}

func batchName(b bool) string {
	if b {
		return "/batched"
	}
	return ""
}

func TestAllowDeadlineCoversWaitTimeout(t *testing.T) {
	f := &fakeLimiter{block: make(chan struct{})}
	c := serve(t, f, client.WithTimeout(20*time.Millisecond))
	go func() { time.Sleep(100 * time.Millisecond); f.block <- struct{}{} }()
	req := &limiterv1.AllowRequest{Key: "k", Limits: []*limiterv1.Limit{client.Leaky(10, 10*time.Second, 5*time.Second)}}
	if d := c.Allow(context.Background(), req); d.Err != nil || !d.Allowed {
		t.Fatalf("Allow with wait_timeout 5s: %+v", d)
	}
}

func TestSlidingWindowRetries(t *testing.T) {
	f := &fakeLimiter{}
	c := serve(t, f, client.WithRetries(2))
	f.slidingFails.Store(2)
	if _, err := c.SlidingWindow(context.Background(), &limiterv1.SlidingWindowRequest{Key: "k"}); err != nil {
		t.Fatalf("read after 2 UNAVAILABLE: %v", err)
	}
	f.calls.Store(0)
	f.slidingFails.Store(1)
	one := 1.0
	_, err := c.SlidingWindow(context.Background(), &limiterv1.SlidingWindowRequest{Key: "k", CurDiff: &one})
	if status.Code(err) != codes.Unavailable || f.calls.Load() != 1 {
		t.Fatalf("counting SlidingWindow: err %v after %d calls, want UNAVAILABLE after 1", err, f.calls.Load())
	}
}

func TestAllowNotRetried(t *testing.T) {
	f := &fakeLimiter{}
	var got error
	c := serve(t, f, client.WithErrorHook(func(m string, err error) { got = err }))
	d := c.Allow(context.Background(), &limiterv1.AllowRequest{})
	if status.Code(d.Err) != codes.InvalidArgument || !d.Allowed || !errors.Is(got, d.Err) || f.calls.Load() != 1 {
		t.Fatalf("Decision %+v, hook %v, %d calls", d, got, f.calls.Load())
	}
}

func TestBatching(t *testing.T) {
	f := &fakeLimiter{}
	c := serve(t, f, client.WithBatching(20*time.Millisecond, 4))
	var wg sync.WaitGroup
	var allowed atomic.Int64
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := "k"
			if i%2 == 1 {
				key = ""
			}
			d := c.Allow(context.Background(), allowReq(key, 3))
			if key == "" && status.Code(d.Err) != codes.InvalidArgument {
				t.Errorf("empty key: %+v", d)
			}
			if key != "" && d.Err == nil && d.Allowed {
				allowed.Add(1)
			}
		}()
	}
	wg.Wait()
	if allowed.Load() != 3 {
		t.Errorf("%d admitted, want 3", allowed.Load())
	}
	if b := f.batches.Load(); b < 2 || b > 3 {
		t.Errorf("%d AllowBatch calls for 8 Allows in batches of 4, want 2 (3 at most)", b)
	}
}
