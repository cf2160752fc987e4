package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	grpcfront "github.com/limiterd/limiterd/front/grpc"
	"github.com/limiterd/limiterd/service"
)

// listenGRPC opens the gRPC front on cfg.GRPCAddr, with Envoy's rate limit
// service when configured.
func listenGRPC(d *daemon) (*listener, error) {
	lis, err := net.Listen("tcp", d.cfg.GRPCAddr)
	if err != nil {
		return nil, fmt.Errorf("grpc listen: %w", err)
	}
	lis = d.limitListener("grpc", lis)
	// The requests' metrics: the calls by the interceptor, the decisions
	// reported by the service.
	m := grpcfront.NewMetrics(d.reg, d.configured)
	opts := append(d.grpcCreds(), d.grpcTelemetry(m)...)
	cc, _ := d.connections()
	opts = append(opts, grpc.ChainUnaryInterceptor(d.logInternal, grpcfront.InflightBytes(cc.MaxInflightBytes)))
	kp := keepalive.ServerParameters{MaxConnectionIdle: duration(cc.IdleTimeout)}
	if age := time.Duration(d.cfg.GRPCMaxConnectionAge); age > 0 {
		// The grace lets the calls of a closing connection finish.
		kp.MaxConnectionAge, kp.MaxConnectionAgeGrace = age, 30*time.Second
	}
	opts = append(opts, grpc.KeepaliveParams(kp),
		// A client may ping every 10 s, with or without a call; one that
		// pings more often is sent a GOAWAY after a few pings.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: grpcMinPing, PermitWithoutStream: true}),
		grpc.MaxConcurrentStreams(uint32(cc.GRPCMaxStreams)),
		// A connection that has not finished its HTTP/2 handshake (the
		// preface and settings) by then is closed.
		grpc.ConnectionTimeout(grpcHandshakeTimeout))
	gs := grpcfront.NewServer(d.svc.Observe(service.FrontGRPC, m), append(opts, d.grpcAuth()...)...)
	if d.envoy != nil {
		d.envoy.Register(gs.Server)
	}
	return &listener{
		name:     "grpc",
		lis:      lis,
		serve:    gs.Serve,
		shutdown: func(ctx context.Context) { gs.Shutdown(ctx) },
		unready:  gs.Drain,
	}, nil
}

// grpcMinPing is the shortest interval between a client's keepalive
// pings, and grpcHandshakeTimeout how long a connection has to complete
// its HTTP/2 handshake.
const (
	grpcMinPing          = 10 * time.Second
	grpcHandshakeTimeout = 10 * time.Second
)

// logInternal logs the calls that fail with INTERNAL (a bug, or a store
// answering what it should not), with their namespace: the caller sees
// only the status. The key is logged at debug only.
func (d *daemon) logInternal(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err != nil && status.Code(err) == codes.Internal {
		ns, _ := req.(interface{ GetNamespace() string })
		attrs := []any{"method", info.FullMethod, "err", err}
		if ns != nil {
			attrs = append(attrs, "namespace", ns.GetNamespace())
		}
		if k, ok := req.(interface{ GetKey() string }); ok && d.log.Enabled(ctx, slog.LevelDebug) {
			attrs = append(attrs, "key", k.GetKey())
		}
		d.log.Error("call failed with an internal error", attrs...)
	}
	return resp, err
}
