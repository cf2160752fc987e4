package main

import (
	"context"
	"fmt"
	"net"

	grpcfront "github.com/limiterd/limiterd/front/grpc"
)

// listenGRPC opens the gRPC front on cfg.GRPCAddr, with Envoy's rate limit
// service when configured.
func listenGRPC(d *daemon) (*listener, error) {
	lis, err := net.Listen("tcp", d.cfg.GRPCAddr)
	if err != nil {
		return nil, fmt.Errorf("grpc listen: %w", err)
	}
	gs := grpcfront.NewServer(d.svc, append(d.grpcCreds(), d.grpcAuth()...)...)
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
