package main

import (
	grpcfront "github.com/limiterd/limiterd/front/grpc"
	httpfront "github.com/limiterd/limiterd/front/http"
	"google.golang.org/grpc"
)

// grpcAuth is the gRPC server's options for authorization.
func (d *daemon) grpcAuth() []grpc.ServerOption {
	if d.authz == nil {
		return nil
	}
	// The tap refuses a call without a principal before its message is
	// read; the interceptor, for calls the tap lets through, keeps the
	// principal it found.
	return []grpc.ServerOption{grpc.InTapHandle(grpcfront.TapAuth(d.authz)), grpc.ChainUnaryInterceptor(grpcfront.UnaryAuth(d.authz))}
}

// httpAuth is the JSON API's options for authorization.
func (d *daemon) httpAuth() []httpfront.Option {
	if d.authz == nil {
		return nil
	}
	return []httpfront.Option{httpfront.WithAuthorizer(d.authz)}
}
