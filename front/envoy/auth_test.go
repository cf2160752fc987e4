package envoyfront

import (
	"context"
	"net"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/limiterd/limiterd/auth"
	grpcfront "github.com/limiterd/limiterd/front/grpc"
	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/service"
)

// TestAuthorization: Envoy's calls pass the gRPC front's interceptor:
// its token in metadata (Envoy's rate limit filter sends it when its
// grpc_service has initial_metadata "authorization: Bearer <token>") must
// be granted write in the front's namespace; a refused call counts
// nothing.
func TestAuthorization(t *testing.T) {
	const envoyToken, otherToken = "envoy-token-0123456789abcdef", "other-token-0123456789abcdef"
	a, err := auth.New(auth.Config{Tokens: []auth.Token{
		{Name: "envoy", Secret: envoyToken, Namespaces: []string{"envoy"}, Ops: auth.Write},
		{Name: "other", Secret: otherToken, Namespaces: []string{"default"}, Ops: auth.Read | auth.Write},
	}})
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New([]node.Config{node.DefaultConfig(), {Name: "envoy", WindowSizes: daySizes}}, fakeclock.New(minute))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(n)
	if err != nil {
		t.Fatal(err)
	}
	svc = svc.WithAuthorizer(a)
	dir := t.TempDir()
	writeFile(t, dir, "api.yaml", perMinute)
	es, err := New(svc, Config{Dir: dir, Namespace: "envoy"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	gs := grpcfront.NewServer(svc, grpc.ChainUnaryInterceptor(grpcfront.UnaryAuth(a)))
	es.Register(gs.Server)
	go gs.Serve(lis)
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); gs.Stop() })
	client := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("client", "c1")}}
	with := func(token string) context.Context {
		if token == "" {
			return context.Background()
		}
		return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	}
	for _, c := range []struct {
		token string
		want  codes.Code
	}{{"", codes.Unauthenticated}, {"wrong-wrong-wrong-wrong", codes.Unauthenticated}, {otherToken, codes.PermissionDenied}} {
		if _, err := client.ShouldRateLimit(with(c.token), req); status.Code(err) != c.want {
			t.Errorf("token %q: %v; want %s", c.token, err, c.want)
		}
	}
	// Without a credential, nothing is looked at: an unknown domain, an
	// empty one, a descriptor no rule matches and a limit override whose
	// window size the namespace lacks (whose error, authorized, names the
	// sizes) are all UNAUTHENTICATED, and the answer is the same for all.
	odd := desc("client", "c1")
	odd.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_MONTH}
	for name, r := range map[string]*rlsv3.RateLimitRequest{
		"unknown domain":   {Domain: "no-such-domain", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("client", "c1")}},
		"empty domain":     {Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("client", "c1")}},
		"no descriptors":   {Domain: "api"},
		"unmatched":        {Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("nothing", "here")}},
		"odd override":     {Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{odd}},
		"a matching entry": req,
	} {
		_, err := client.ShouldRateLimit(with(""), r)
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s without a token: %v; want UNAUTHENTICATED", name, err)
		}
		if msg := status.Convert(err).Message(); msg != auth.ErrUnauthenticated.Error() {
			t.Errorf("%s without a token: the error %q tells of the rules", name, msg)
		}
	}
	resp, err := client.ShouldRateLimit(with(envoyToken), req)
	if err != nil {
		t.Fatal(err)
	}
	check(t, "the first granted call", resp, ok, stat{ok, 10, minUnit, 9})
}
