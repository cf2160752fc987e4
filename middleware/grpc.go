package middleware

import (
	"context"
	"fmt"
	"net"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// GRPCKeyFunc is the rate-limit key of a gRPC call, from its server
// context (grpc.Method(ctx) is the method). An error answers
// INVALID_ARGUMENT.
type GRPCKeyFunc func(ctx context.Context) (string, error)

// KeyByPeer is the caller's IP address (the whole address when it has no
// port).
func KeyByPeer(ctx context.Context) (string, error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return "", fmt.Errorf("no peer address")
	}
	addr := p.Addr.String()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host, nil
	}
	return addr, nil
}

// KeyByMethod is the full method name, "/package.Service/Method".
func KeyByMethod(ctx context.Context) (string, error) {
	m, ok := grpc.Method(ctx)
	if !ok {
		return "", fmt.Errorf("no method in context")
	}
	return m, nil
}

// KeyByMetadata is the first value of the incoming metadata key name.
func KeyByMetadata(name string) GRPCKeyFunc {
	return func(ctx context.Context) (string, error) {
		v := metadata.ValueFromIncomingContext(ctx, name)
		if len(v) == 0 || v[0] == "" {
			return "", fmt.Errorf("missing metadata %s", name)
		}
		return v[0], nil
	}
}

// GRPCKeys is the key made of every fn's key, joined injectively.
func GRPCKeys(fns ...GRPCKeyFunc) GRPCKeyFunc {
	plain := make([]func(context.Context) (string, error), len(fns))
	for i, fn := range fns {
		plain[i] = fn
	}
	return keys(plain)
}

// UnaryServerInterceptor returns a gRPC interceptor that asks a whether
// the call's key (key) is within the limits, and fails it with
// RESOURCE_EXHAUSTED (and a RetryInfo) when not. The rate-limit headers
// go out as header metadata, names in lower case.
func UnaryServerInterceptor(a Allower, key GRPCKeyFunc, opts ...Option) grpc.UnaryServerInterceptor {
	l := newLimiter(a, opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		k, err := key(ctx)
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, "rate limit key: "+err.Error())
		}
		d := l.allow(ctx, k)
		md := metadata.MD{}
		l.headers(&d, func(name, value string) { md[strings.ToLower(name)] = []string{value} })
		if len(md) > 0 {
			grpc.SetHeader(ctx, md)
		}
		switch {
		case d.Allowed:
			return handler(ctx, req)
		case d.Err != nil:
			return nil, status.Error(codes.Unavailable, "rate limiter unavailable")
		}
		st := status.New(codes.ResourceExhausted, "rate limited")
		if !d.Never {
			if det, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)}); err == nil {
				st = det
			}
		} else {
			st = status.New(codes.ResourceExhausted, "rate limited: "+d.Reason)
		}
		return nil, st.Err()
	}
}
