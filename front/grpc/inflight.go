package grpcfront

import (
	"context"

	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// InflightBytes returns an interceptor that caps the bytes of the
// requests a server holds at once at max: a request is counted from when
// it is decoded until its call returns, and one that does not fit is
// refused with RESOURCE_EXHAUSTED before it is served. A message is
// read whole before its size is known, so what is being read is bounded
// by MaxRecvMsgSize per call and by the calls a connection may run at
// once (grpc.MaxConcurrentStreams), not by max.
func InflightBytes(max int64) grpc.UnaryServerInterceptor {
	held := semaphore.NewWeighted(max)
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		var n int64
		switch m := req.(type) {
		case interface{ SizeVT() int }: // the API's messages, without reflection
			n = int64(m.SizeVT())
		case proto.Message:
			n = int64(proto.Size(m))
		}
		if n == 0 {
			return handler(ctx, req)
		}
		if !held.TryAcquire(n) {
			return nil, status.Errorf(codes.ResourceExhausted, "the server holds %d bytes of requests already (connections.max_inflight_bytes): retry later", max)
		}
		defer held.Release(n)
		return handler(ctx, req)
	}
}
