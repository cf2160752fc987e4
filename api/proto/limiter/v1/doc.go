// Package limiterv1 is the Go code generated from limiter.proto, limiterd's
// gRPC API (service limiter.v1.RateLimiter): messages, client and server.
// The .proto file documents every call, message and field.
//
// Do not edit limiter.pb.go, limiter_grpc.pb.go or limiter_vtproto.pb.go:
// change limiter.proto and run `make generate` (scripts/generate.sh).
//
// limiter_vtproto.pb.go adds reflection-free MarshalVT, UnmarshalVT and
// SizeVT methods (github.com/planetscale/vtprotobuf), which the gRPC codec
// of internal/grpccodec uses on the hot path.
package limiterv1
