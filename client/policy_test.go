package client_test

import (
	"context"
	"net"
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

// policyLimiter is a limiterd stand-in whose Allow admits a dry run of
// the policy "trial" it would refuse, and whose Reset fails resets times
// with UNAVAILABLE before it answers.
type policyLimiter struct {
	fakeLimiter
	got    *limiterv1.AllowRequest
	reset  *limiterv1.ResetRequest
	resets int
	calls  int
}

func (p *policyLimiter) Allow(_ context.Context, req *limiterv1.AllowRequest) (*limiterv1.AllowResponse, error) {
	p.got = req
	return &limiterv1.AllowResponse{Allowed: true, DryRun: req.GetPolicy() == "trial", WouldAllow: req.GetPolicy() != "trial"}, nil
}

func (p *policyLimiter) Reset(_ context.Context, req *limiterv1.ResetRequest) (*limiterv1.ResetResponse, error) {
	p.calls++
	p.reset = req
	if p.calls <= p.resets {
		return nil, status.Error(codes.Unavailable, "try again")
	}
	return &limiterv1.ResetResponse{Rates: []*limiterv1.WindowRate{{Rate: 0}}}, nil
}

// serveServer serves srv over bufconn and returns a Client of it.
func serveServer(tb testing.TB, srv limiterv1.RateLimiterServer, opts ...client.Option) *client.Client {
	tb.Helper()
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	limiterv1.RegisterRateLimiterServer(gs, srv)
	go gs.Serve(lis)
	dial := client.WithDialOptions(grpc.WithContextDialer(
		func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	c, err := client.New("passthrough:///bufconn", append([]client.Option{dial, client.WithTimeout(10 * time.Second)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		c.Close()
		gs.Stop()
	})
	return c
}

// TestAllowPolicy: AllowPolicy sends the policy, namespace, key and cost
// (no limits), and the Decision carries DryRun and WouldAllow.
func TestAllowPolicy(t *testing.T) {
	p := &policyLimiter{}
	c := serveServer(t, p)
	d := c.AllowPolicy(context.Background(), "api", "trial", "alice", 2)
	if d.Err != nil || !d.Allowed || !d.DryRun || d.WouldAllow {
		t.Errorf("AllowPolicy = %+v; want admitted, a dry run the limits refused", d)
	}
	if r := p.got; r.GetPolicy() != "trial" || r.GetNamespace() != "api" || r.GetKey() != "alice" || r.GetCost() != 2 || len(r.GetLimits()) != 0 {
		t.Errorf("request sent: %v", r)
	}
	if d := c.AllowPolicy(context.Background(), "", "login", "bob", 1); !d.Allowed || d.DryRun || !d.WouldAllow {
		t.Errorf("AllowPolicy login = %+v; want admitted, not a dry run", d)
	}
}

// TestResetRetried: Reset, harmless to take again, is retried on
// UNAVAILABLE within WithRetries.
func TestResetRetried(t *testing.T) {
	p := &policyLimiter{resets: 2}
	c := serveServer(t, p, client.WithRetries(2))
	if _, err := c.Reset(context.Background(), &limiterv1.ResetRequest{Key: "k"}); err != nil || p.calls != 3 {
		t.Fatalf("Reset after 2 UNAVAILABLE: %v after %d calls, want success after 3", err, p.calls)
	}
	p.calls, p.resets = 0, 5
	if _, err := c.Reset(context.Background(), &limiterv1.ResetRequest{Key: "k"}); status.Code(err) != codes.Unavailable || p.calls != 3 {
		t.Fatalf("Reset failing for good: %v after %d calls, want UNAVAILABLE after 3", err, p.calls)
	}
}

// TestResetBucketsAndLeases: Reset sends the buckets and leases of its
// request as given.
func TestResetBucketsAndLeases(t *testing.T) {
	p := &policyLimiter{}
	c := serveServer(t, p)
	token := &limiterv1.Limit{Kind: &limiterv1.Limit_Token{Token: &limiterv1.TokenBucket{Max: 3, RefillTime: durationpb.New(time.Minute)}}}
	if _, err := c.Reset(context.Background(), &limiterv1.ResetRequest{Namespace: "api", Key: "k", Buckets: []*limiterv1.Limit{token}, Leases: true}); err != nil {
		t.Fatal(err)
	}
	r := p.reset
	if r.GetNamespace() != "api" || r.GetKey() != "k" || !r.GetLeases() || len(r.GetBuckets()) != 1 ||
		r.GetBuckets()[0].GetToken().GetMax() != 3 || r.GetBuckets()[0].GetToken().GetRefillTime().AsDuration() != time.Minute {
		t.Errorf("request sent: %v", r)
	}
}
