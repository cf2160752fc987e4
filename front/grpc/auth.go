package grpcfront

import (
	"context"
	"crypto/tls"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/limiterd/limiterd/auth"
)

// UnaryAuth returns an interceptor that puts every call's principal in
// its context: the bearer token of its "authorization" metadata
// ("Bearer <token>", as Envoy's rate limit filter sends it when told to),
// else the client certificate of its TLS connection. It refuses nothing
// itself: package service refuses a call without a principal, or one not
// granted the call, so health checks and reflection stay open. gRPC's
// own bound on metadata size bounds what is read.
func UnaryAuth(a *auth.Authorizer) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if auth.FromContext(ctx) != nil {
			return handler(ctx, req) // found by TapAuth
		}
		if p := principal(ctx, a); p != nil {
			ctx = auth.WithPrincipal(ctx, p)
		}
		return handler(ctx, req)
	}
}

// principal returns the principal of an incoming call's context, or nil.
func principal(ctx context.Context, a *auth.Authorizer) *auth.Principal {
	token := ""
	// ValueFromIncomingContext copies one key's values, not the whole
	// metadata. Only the first value counts: a second one cannot widen
	// access.
	if v := metadata.ValueFromIncomingContext(ctx, "authorization"); len(v) > 0 {
		if token = auth.Bearer(v[0]); token == "" {
			return nil // a credential that is not a bearer token
		}
	}
	var cs *tls.ConnectionState
	if pr, ok := peer.FromContext(ctx); ok {
		if ti, ok := pr.AuthInfo.(credentials.TLSInfo); ok {
			cs = &ti.State
		}
	}
	return a.Authenticate(token, cs)
}

// TapAuth returns the transport's tap that authenticates every call as
// its headers arrive, before a byte of its message is read: a call
// without a configured token or client certificate is refused with
// UNAUTHENTICATED and its stream reset, so that what an unauthenticated
// client sends is never read nor decoded. The health and reflection
// services stay open. A call that passes carries its principal, for
// UnaryAuth and the service, which still check the grant.
func TapAuth(a *auth.Authorizer) tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if open(info.FullMethodName) {
			return ctx, nil
		}
		p := principal(ctx, a)
		if p == nil {
			return ctx, errUnauthenticated
		}
		return auth.WithPrincipal(ctx, p), nil
	}
}

var errUnauthenticated = status.Error(codes.Unauthenticated, auth.ErrUnauthenticated.Error())

// open reports whether method is of a service every caller may call:
// health checking and reflection.
func open(method string) bool {
	return strings.HasPrefix(method, "/grpc.health.v1.Health/") || strings.HasPrefix(method, "/grpc.reflection.")
}
