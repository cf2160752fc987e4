package grpcfront

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/auth"
	"github.com/limiterd/limiterd/internal/testcerts"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/service"
)

const testToken = "test-token-0123456789abcdef"

// newAuthorizer grants the token and the client certificate of CN
// "svc-a" (verified) read and write in every namespace.
func newAuthorizer(tb testing.TB) *auth.Authorizer {
	tb.Helper()
	a, err := auth.New(auth.Config{
		Tokens:     []auth.Token{{Name: "t", Secret: testToken, Namespaces: []string{"*"}, Ops: auth.Read | auth.Write}},
		Identities: []auth.Identity{{SubjectCN: "svc-a", Namespaces: []string{"*"}, Ops: auth.Read | auth.Write}},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return a
}

// serveAuth serves the API with authorization a (nil: off) on lis, with
// the server options opts.
func serveAuth(tb testing.TB, a *auth.Authorizer, lis net.Listener, opts ...grpc.ServerOption) {
	tb.Helper()
	n, err := node.New(testNamespaces(), nil)
	if err != nil {
		tb.Fatal(err)
	}
	svc, err := service.New(n)
	if err != nil {
		tb.Fatal(err)
	}
	if a != nil {
		svc = svc.WithAuthorizer(a)
		opts = append(opts, grpc.InTapHandle(TapAuth(a)), grpc.ChainUnaryInterceptor(UnaryAuth(a)))
	}
	gs := NewServer(svc, opts...)
	go gs.Serve(lis)
	tb.Cleanup(gs.Stop)
}

func dialWith(tb testing.TB, target string, opts ...grpc.DialOption) *grpc.ClientConn {
	tb.Helper()
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	return conn
}

func withToken(ctx context.Context, values ...string) context.Context {
	for _, v := range values {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", v)
	}
	return ctx
}

// TestPrincipalWithoutAuthorization: a call without "authorization"
// metadata (none at all, or other keys only) has no principal without a
// client certificate; it runs first, as a failure here would otherwise
// surface as a hung call in the tests below.
func TestPrincipalWithoutAuthorization(t *testing.T) {
	a := newAuthorizer(t)
	for name, ctx := range map[string]context.Context{
		"no metadata":    bg,
		"other metadata": metadata.NewIncomingContext(bg, metadata.Pairs("user-agent", "test")),
	} {
		if p := principal(ctx, a); p != nil {
			t.Errorf("%s: principal %q, want none", name, p.Name())
		}
	}
	if p := principal(metadata.NewIncomingContext(bg, metadata.Pairs("authorization", "Bearer "+testToken)), a); p == nil {
		t.Error("the token's metadata: no principal")
	}
}

// TestAuthClientCertificate: over mTLS, a verified certificate of a
// configured identity is a principal; another certificate, or none, is
// not; a bearer token works beside either.
func TestAuthClientCertificate(t *testing.T) {
	ca := testcerts.NewCA(t, "limiterd test CA")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveAuth(t, newAuthorizer(t), lis, grpc.Creds(credentials.NewTLS(ca.ServerConfig(t, false))))
	for _, c := range []struct {
		name  string
		certs []tls.Certificate
		ctx   context.Context
		want  codes.Code
	}{
		{"configured certificate", []tls.Certificate{ca.Client(t, "svc-a", "", "").TLS(t)}, bg, codes.OK},
		{"other certificate", []tls.Certificate{ca.Client(t, "svc-b", "", "").TLS(t)}, bg, codes.Unauthenticated},
		{"no certificate", nil, bg, codes.Unauthenticated},
		{"no certificate, a token", nil, withToken(bg, "Bearer "+testToken), codes.OK},
		{"a wrong token beside the certificate", []tls.Certificate{ca.Client(t, "svc-a", "", "").TLS(t)}, withToken(bg, "Bearer wrong"), codes.Unauthenticated},
		{"basic credentials beside the certificate", []tls.Certificate{ca.Client(t, "svc-a", "", "").TLS(t)}, withToken(bg, "Basic dXNlcjpwYXNz"), codes.Unauthenticated},
	} {
		conn := dialWith(t, lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(ca.ClientConfig(c.certs...))))
		_, err := limiterv1.NewRateLimiterClient(conn).Increment(c.ctx, &limiterv1.IncrementRequest{Key: "k"})
		if got := status.Code(err); got != c.want {
			t.Errorf("%s: %v; want %s", c.name, err, c.want)
		}
	}
	// A certificate signed by another CA does not even connect.
	other := testcerts.NewCA(t, "limiterd test CA")
	conn := dialWith(t, lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(ca.ClientConfig(other.Client(t, "svc-a", "", "").TLS(t)))))
	if _, err := limiterv1.NewRateLimiterClient(conn).Increment(bg, &limiterv1.IncrementRequest{Key: "k"}); err == nil {
		t.Error("a certificate of another CA was served")
	}
}

// TestAuthMetadata: the first authorization value counts; health checks
// need no credential; a huge value is refused, unhashed.
func TestAuthMetadata(t *testing.T) {
	lis := bufconn.Listen(1 << 20)
	serveAuth(t, newAuthorizer(t), lis)
	conn := dialWith(t, "passthrough:///bufconn", grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	c := limiterv1.NewRateLimiterClient(conn)
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want codes.Code
	}{
		{"token", withToken(bg, "Bearer "+testToken), codes.OK},
		{"lower-case scheme", withToken(bg, "bearer "+testToken), codes.OK},
		{"token then a wrong one", withToken(bg, "Bearer "+testToken, "Bearer wrong"), codes.OK},
		{"a wrong one then the token", withToken(bg, "Bearer wrong", "Bearer "+testToken), codes.Unauthenticated},
		{"none", bg, codes.Unauthenticated},
		{"huge", withToken(bg, "Bearer "+strings.Repeat("x", 512<<10)), codes.Unauthenticated},
	} {
		_, err := c.Increment(tc.ctx, &limiterv1.IncrementRequest{Key: "k"})
		if got := status.Code(err); got != tc.want {
			t.Errorf("%s: %v; want %s", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), testToken) {
			t.Errorf("%s: the error holds the token", tc.name)
		}
	}
	// Past MaxHeaderBytes the call is refused before it reaches a handler.
	if _, err := c.Increment(withToken(bg, "Bearer "+strings.Repeat("x", MaxHeaderBytes+1)), &limiterv1.IncrementRequest{Key: "k"}); err == nil || status.Code(err) == codes.OK {
		t.Errorf("metadata over MaxHeaderBytes: %v", err)
	} else {
		t.Logf("metadata over MaxHeaderBytes: %v", err)
	}
	if _, err := healthpb.NewHealthClient(conn).Check(bg, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health check without a credential: %v", err)
	}
}

// bearer sends a token with every call.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return false }

// BenchmarkGRPCAuth is BenchmarkGRPC's Allow with authorization off and
// with a bearer token, same run.
func BenchmarkGRPCAuth(b *testing.B) {
	for _, on := range []bool{false, true} {
		name, opts := "off", []grpc.DialOption(nil)
		var a *auth.Authorizer
		if on {
			name, a = "token", newAuthorizer(b)
			opts = append(opts, grpc.WithPerRPCCredentials(bearer(testToken)))
		}
		lis := bufconn.Listen(1 << 20)
		serveAuth(b, a, lis)
		conn := dialWith(b, "passthrough:///bufconn", append(opts, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		c := limiterv1.NewRateLimiterClient(conn)
		b.Run("Allow/"+name, func(b *testing.B) {
			serialOrParallel(b, 1, func(key string) func() error {
				req := &limiterv1.AllowRequest{Key: key, Limits: benchLimits}
				return func() error {
					_, err := c.Allow(bg, req)
					return err
				}
			})
		})
	}
}
