package resp

import (
	"context"
	"fmt"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	grpcfront "github.com/limiterd/limiterd/front/grpc"
)

// grpcClient serves a gRPC front over a service of its own on clock.
func grpcClient(t *testing.T, svcClock interface{ Now() time.Time }) limiterv1.RateLimiterClient {
	t.Helper()
	svc := newService(t, svcClock)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpcfront.NewServer(svc)
	go gs.Serve(ln)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		gs.Stop()
	})
	return limiterv1.NewRateLimiterClient(conn)
}

// decision is what both fronts answer of an Allow, in the RESP map's
// terms.
type decision struct {
	Allowed, Never   bool
	Limit, Remaining float64
	RetryMS, ResetMS int64
}

func (d decision) fromRESP(t *testing.T, v any) decision {
	m := respMap(t, v)
	return decision{Allowed: respBool(m["allowed"]), Never: respBool(m["never"]),
		Limit: respFloat(t, m["limit"]), Remaining: respFloat(t, m["remaining"]),
		RetryMS: m["retry_after_ms"].(int64), ResetMS: m["reset_after_ms"].(int64)}
}

// fromGRPC is the RESP map's reduction of r: the binding limit is the one
// with the least remaining.
func (d decision) fromGRPC(r *limiterv1.AllowResponse) decision {
	b := 0
	for i, l := range r.GetLimits() {
		if l.GetRemaining() < r.GetLimits()[b].GetRemaining() {
			b = i
		}
	}
	l := r.GetLimits()[b]
	return decision{Allowed: r.GetAllowed(), Never: r.GetNever(), Limit: l.GetLimit(), Remaining: l.GetRemaining(),
		RetryMS: ms(r.GetRetryAfter().AsDuration()), ResetMS: ms(l.GetResetAfter().AsDuration())}
}

// respMap reads a map reply: a RESP3 map or a RESP2 flat array.
func respMap(t *testing.T, v any) map[string]any {
	t.Helper()
	out := map[string]any{}
	switch m := v.(type) {
	case map[any]any:
		for k, v := range m {
			out[k.(string)] = v
		}
	case []any:
		for i := 0; i+1 < len(m); i += 2 {
			out[m[i].(string)] = m[i+1]
		}
	default:
		t.Fatalf("reply %#v is no map", v)
	}
	return out
}

func respBool(v any) bool {
	switch b := v.(type) {
	case bool:
		return b
	case int64:
		return b == 1
	}
	return false
}

func respFloat(t *testing.T, v any) float64 {
	t.Helper()
	switch f := v.(type) {
	case float64:
		return f
	case string:
		var x float64
		if _, err := fmtSscan(f, &x); err != nil {
			t.Fatalf("double %q: %v", f, err)
		}
		return x
	}
	t.Fatalf("reply %#v is no double", v)
	return 0
}

// rates reads a map of window size to rate.
func rates(t *testing.T, v any) map[string]float64 {
	out := map[string]float64{}
	for k, r := range respMap(t, v) {
		out[k] = respFloat(t, r)
	}
	return out
}

func grpcRates(rs []*limiterv1.WindowRate) map[string]float64 {
	out := map[string]float64{}
	for _, r := range rs {
		out[windowLabel(r.GetWindowSize().AsDuration())] = r.GetRate()
	}
	return out
}

// TestGoRedisEqualsGRPC drives every RL.* command with go-redis, in
// pipelines, in RESP2 and RESP3, against a running front, and the same
// calls over gRPC against a second node on the same (fake) clock: the
// answers are equal.
func TestGoRedisEqualsGRPC(t *testing.T) {
	for _, proto := range []int{2, 3} {
		t.Run(map[int]string{2: "RESP2", 3: "RESP3"}[proto], func(t *testing.T) {
			clock := newClock()
			_, addr := serveFront(t, newService(t, clock), Config{})
			rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto, PoolSize: 4})
			t.Cleanup(func() { rdb.Close() })
			g := grpcClient(t, clock)
			ctx := context.Background()
			d := func(v time.Duration) *durationpb.Duration { return durationpb.New(v) }
			f := func(v float64) *float64 { return &v }
			at := timestamppb.New(minute.Add(-30 * time.Second))

			// Each step: a RESP command, its gRPC twin, and how to compare.
			type step struct {
				args  []any
				grpc  func() (any, error)
				check func(t *testing.T, resp any, grpcAns any)
			}
			sameDecision := func(t *testing.T, r, gr any) {
				if got, want := (decision{}).fromRESP(t, r), (decision{}).fromGRPC(gr.(*limiterv1.AllowResponse)); got != want {
					t.Errorf("RESP %+v; gRPC %+v", got, want)
				}
			}
			sameRates := func(t *testing.T, r, gr any) {
				var want map[string]float64
				switch g := gr.(type) {
				case *limiterv1.IncrementResponse:
					want = grpcRates(g.GetRates())
				case *limiterv1.SlidingWindowResponse:
					want = grpcRates(g.GetRates())
				}
				if got := rates(t, r); !reflect.DeepEqual(got, want) {
					t.Errorf("RESP %v; gRPC %v", got, want)
				}
			}
			sameBefore := func(t *testing.T, r, gr any) {
				if got, want := r.(int64), int64(gr.(*limiterv1.AllowResponse).GetLimits()[0].GetBefore()); got != want {
					t.Errorf("RESP %d; gRPC %d", got, want)
				}
			}
			token := func(max float64, refill time.Duration, amount float64, strict bool) []*limiterv1.Limit {
				tb := &limiterv1.TokenBucket{Max: max, RefillTime: d(refill), Strict: strict}
				if amount != 0 {
					tb.RefillAmount = f(amount)
				}
				return []*limiterv1.Limit{{Kind: &limiterv1.Limit_Token{Token: tb}}}
			}
			allow := func(req *limiterv1.AllowRequest) func() (any, error) {
				return func() (any, error) { return g.Allow(ctx, req) }
			}
			var steps []step
			for range 3 {
				steps = append(steps, step{[]any{"RL.REDUCE", "TwoPerMin", 2, 60},
					allow(&limiterv1.AllowRequest{Key: "TwoPerMin", Limits: token(2, time.Minute, 0, false)}), sameBefore})
			}
			steps = append(steps,
				step{[]any{"RL.GET", "TwoPerMin", 2, 60}, allow(&limiterv1.AllowRequest{Key: "TwoPerMin", Cost: f(0), Limits: token(2, time.Minute, 0, false)}), sameBefore},
				step{[]any{"RL.PREDUCE", "p", 10, 500, "REFILL", 3, "TAKE", 4, "STRICT", "NS", "api"},
					allow(&limiterv1.AllowRequest{Namespace: "api", Key: "p", Cost: f(4), Limits: token(10, 500*time.Millisecond, 3, true)}), sameBefore},
				step{[]any{"RL.PGET", "p", 10, 500, "REFILL", 3, "NS", "api"},
					allow(&limiterv1.AllowRequest{Namespace: "api", Key: "p", Cost: f(0), Limits: token(10, 500*time.Millisecond, 3, false)}), sameBefore},
				step{[]any{"RL.REDUCE", "at", 5, 60, "AT", at.AsTime().Unix(), "TAKE", 2},
					allow(&limiterv1.AllowRequest{Key: "at", At: at, Cost: f(2), Limits: token(5, time.Minute, 0, false)}), sameBefore},
				step{[]any{"RL.INCR", "w", "BY", 2.5},
					func() (any, error) { return g.Increment(ctx, &limiterv1.IncrementRequest{Key: "w", Value: f(2.5)}) }, sameRates},
				step{[]any{"RL.INCR", "w", "WINDOW", 100, "NS", "api", "AT", at.AsTime().UnixMilli()},
					func() (any, error) {
						return g.Increment(ctx, &limiterv1.IncrementRequest{Namespace: "api", Key: "w", WindowSize: d(100 * time.Millisecond), At: at})
					}, sameRates},
				step{[]any{"RL.RATE", "w", "DIFF", 1},
					func() (any, error) {
						return g.SlidingWindow(ctx, &limiterv1.SlidingWindowRequest{Key: "w", CurDiff: f(1)})
					}, sameRates},
				step{[]any{"RL.ALLOW", "w", 1000, 4, 60000, 10, "COST", 1},
					allow(&limiterv1.AllowRequest{Key: "w", Cost: f(1), Limits: []*limiterv1.Limit{{WindowSize: d(time.Second), Limit: 4}, {WindowSize: d(time.Minute), Limit: 10}}}), sameDecision},
				step{[]any{"RL.ALLOW", "w", 1000, 4, "PENALTY"},
					allow(&limiterv1.AllowRequest{Key: "w", CountRejected: true, Limits: []*limiterv1.Limit{{WindowSize: d(time.Second), Limit: 4}}}), sameDecision},
				step{[]any{"RL.ALLOW", "w", 1000, 4, "COST", 9},
					allow(&limiterv1.AllowRequest{Key: "w", Cost: f(9), Limits: []*limiterv1.Limit{{WindowSize: d(time.Second), Limit: 4}}}), sameDecision},
			)
			leaky := []*limiterv1.Limit{{Kind: &limiterv1.Limit_Leaky{Leaky: &limiterv1.LeakyBucket{Size: 2, Interval: d(time.Second)}}}}
			fixed := []*limiterv1.Limit{{Kind: &limiterv1.Limit_Fixed{Fixed: &limiterv1.FixedBucket{Limit: 2, Period: d(time.Minute)}}}}
			for range 3 {
				steps = append(steps,
					step{[]any{"RL.LEAKY", "l", 2, 1000}, allow(&limiterv1.AllowRequest{Key: "l", Limits: leaky}), sameDecision},
					step{[]any{"RL.FIXED", "f", 2, 60000, "TAKE", 1}, allow(&limiterv1.AllowRequest{Key: "f", Cost: f(1), Limits: fixed}), sameDecision})
			}

			// The RESP calls, pipelined.
			pipe := rdb.Pipeline()
			cmds := make([]*redis.Cmd, len(steps))
			for i, s := range steps {
				cmds[i] = pipe.Do(ctx, s.args...)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatalf("pipeline: %v", err)
			}
			for i, s := range steps {
				gr, err := s.grpc()
				if err != nil {
					t.Fatalf("step %d %v over gRPC: %v", i, s.args, err)
				}
				t.Run(s.args[0].(string), func(t *testing.T) {
					if err := cmds[i].Err(); err != nil {
						t.Fatalf("%v: %v", s.args, err)
					}
					s.check(t, cmds[i].Val(), gr)
				})
			}

			// Leases: acquire twice (the second refused), renew, release,
			// pipelined; the same over gRPC.
			pipe = rdb.Pipeline()
			a1 := pipe.Do(ctx, "RL.ACQUIRE", "job", 1, 60000)
			a2 := pipe.Do(ctx, "RL.ACQUIRE", "job", 1, 60000)
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatalf("acquire pipeline: %v", err)
			}
			g1, err := g.Acquire(ctx, &limiterv1.AcquireRequest{Key: "job", Limit: 1, Ttl: d(time.Minute)})
			if err != nil {
				t.Fatal(err)
			}
			g2, err := g.Acquire(ctx, &limiterv1.AcquireRequest{Key: "job", Limit: 1, Ttl: d(time.Minute)})
			if err != nil {
				t.Fatal(err)
			}
			for i, c := range []struct {
				r *redis.Cmd
				g *limiterv1.AcquireResponse
			}{{a1, g1}, {a2, g2}} {
				m := respMap(t, c.r.Val())
				if respBool(m["acquired"]) != c.g.GetAcquired() || m["held"].(int64) != c.g.GetHeld() ||
					m["expires_at_ms"].(int64) != c.g.GetExpiresAt().AsTime().UnixMilli()*map[bool]int64{true: 1, false: 0}[c.g.GetAcquired()] ||
					m["retry_after_ms"].(int64) != ms(c.g.GetRetryAfter().AsDuration()) {
					t.Errorf("acquire %d: RESP %v; gRPC %v", i+1, m, c.g)
				}
			}
			lease := respMap(t, a1.Val())["lease"].(string)
			pipe = rdb.Pipeline()
			rn := pipe.Do(ctx, "RL.RENEW", lease, 1000)
			rl := pipe.Do(ctx, "RL.RELEASE", lease)
			rl2 := pipe.Do(ctx, "RL.RELEASE", lease)
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatalf("release pipeline: %v", err)
			}
			grn, _ := g.Renew(ctx, &limiterv1.RenewRequest{Lease: g1.GetLease(), Ttl: d(time.Second)})
			grl, _ := g.Release(ctx, &limiterv1.ReleaseRequest{Lease: g1.GetLease()})
			grl2, _ := g.Release(ctx, &limiterv1.ReleaseRequest{Lease: g1.GetLease()})
			if m := respMap(t, rn.Val()); respBool(m["renewed"]) != grn.GetRenewed() || m["expires_at_ms"].(int64) != grn.GetExpiresAt().AsTime().UnixMilli() {
				t.Errorf("renew: RESP %v; gRPC %v", m, grn)
			}
			for i, c := range []struct {
				r *redis.Cmd
				g *limiterv1.ReleaseResponse
			}{{rl, grl}, {rl2, grl2}} {
				if m := respMap(t, c.r.Val()); respBool(m["released"]) != c.g.GetReleased() || respBool(m["pending"]) != c.g.GetPending() {
					t.Errorf("release %d: RESP %v; gRPC %v", i+1, m, c.g)
				}
			}

			// An error names the field as gRPC's INVALID_ARGUMENT does.
			err = rdb.Do(ctx, "RL.ALLOW", "w", 7000, 1).Err()
			_, gerr := g.Allow(ctx, &limiterv1.AllowRequest{Key: "w", Limits: []*limiterv1.Limit{{WindowSize: d(7 * time.Second), Limit: 1}}})
			if err == nil || gerr == nil || err.Error() != "ERR "+statusMessage(gerr) {
				t.Errorf("error: RESP %v; gRPC %v", err, gerr)
			}
		})
	}
}

func statusMessage(err error) string { return grpcstatus.Convert(err).Message() }

func fmtSscan(s string, x *float64) (int, error) { return fmt.Sscan(s, x) }

// TestManyConnections: 50 go-redis connections take from one token
// bucket of 100 at once, pipelined: exactly 100 takes are admitted (an
// answer of at least 1 token before the take), as on one connection.
func TestManyConnections(t *testing.T) {
	_, addr := serveFront(t, newService(t, nil), Config{})
	ctx := context.Background()
	admitted := make(chan int, 50)
	for range 50 {
		go func() {
			rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
			defer rdb.Close()
			pipe := rdb.Pipeline()
			var cmds []*redis.Cmd
			for range 10 {
				cmds = append(cmds, pipe.Do(ctx, "RL.REDUCE", "shared", 100, 3600))
			}
			n := 0
			if _, err := pipe.Exec(ctx); err != nil {
				t.Error(err)
			}
			for _, c := range cmds {
				if v, err := c.Int64(); err == nil && v >= 1 {
					n++
				}
			}
			admitted <- n
		}()
	}
	total := 0
	for range 50 {
		total += <-admitted
	}
	if total != 100 {
		t.Errorf("%d takes admitted of 500 on a bucket of 100; want exactly 100", total)
	}
}

// TestGoRedisConnection: go-redis's own connection set-up (HELLO,
// CLIENT SETINFO, CLIENT SETNAME) and its typed connection commands work;
// a DB other than 0 fails the connection with the reason.
func TestGoRedisConnection(t *testing.T) {
	_, addr := serveFront(t, newService(t, nil), Config{})
	ctx := context.Background()
	for _, proto := range []int{2, 3} {
		rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto, ClientName: "app"})
		if got, err := rdb.ClientGetName(ctx).Result(); err != nil || got != "app" {
			t.Errorf("RESP%d CLIENT GETNAME: %q, %v", proto, got, err)
		}
		if got, err := rdb.Ping(ctx).Result(); err != nil || got != "PONG" {
			t.Errorf("RESP%d PING: %q, %v", proto, got, err)
		}
		if got, err := rdb.Echo(ctx, "hi").Result(); err != nil || got != "hi" {
			t.Errorf("RESP%d ECHO: %q, %v", proto, got, err)
		}
		if got, err := rdb.Info(ctx).Result(); err != nil || !strings.Contains(got, "limiterd_version:") || !strings.Contains(got, "namespace_names:api,default") {
			t.Errorf("RESP%d INFO: %q, %v", proto, got, err)
		}
		if got, err := rdb.Do(ctx, "COMMAND", "COUNT").Int64(); err != nil || got != 29 {
			t.Errorf("RESP%d COMMAND COUNT: %d, %v", proto, got, err)
		}
		rdb.Close()
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, DB: 1, MaxRetries: -1})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "limiterd has one database, 0") {
		t.Errorf("DB 1: %v; want the SELECT error", err)
	}
	rdb2 := redis.NewClient(&redis.Options{Addr: addr, Password: "secret", MaxRetries: -1})
	defer rdb2.Close()
	if err := rdb2.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "no access tokens are configured") {
		t.Errorf("a password: %v; want the AUTH error", err)
	}
}
