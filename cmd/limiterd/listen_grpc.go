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
	// The requests' metrics: the calls by the interceptor, the decisions
	// reported by the service.
	m := grpcfront.NewMetrics(d.reg, d.configured)
	opts := append(d.grpcCreds(), d.grpcTelemetry(m)...)
	opts = append(opts, grpc.ChainUnaryInterceptor(d.logInternal))
	if age := time.Duration(d.cfg.GRPCMaxConnectionAge); age > 0 {
		// The grace lets the calls of a closing connection finish.
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: age, MaxConnectionAgeGrace: 30 * time.Second}))
	}
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
