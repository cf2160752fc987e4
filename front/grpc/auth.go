package grpcfront

import (
	"context"
	"crypto/tls"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

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
