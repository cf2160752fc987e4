// Package limiterv1 is the Go code generated from limiter.proto, limiterd's
// gRPC API (service limiter.v1.RateLimiter): messages, client and server.
// The .proto file documents every call, message and field.
//
// Do not edit limiter.pb.go or limiter_grpc.pb.go: change limiter.proto and
// run `make generate` (scripts/generate.sh).
package limiterv1
