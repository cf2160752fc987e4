// Package grpcfront serves limiterd's gRPC API (limiter.v1.RateLimiter)
// over a service.Service, with the standard health service and server
// reflection.
//
// A handler only translates: it decodes a request into the service's
// terms, makes one service call and encodes the answer. What it cannot
// decode (a malformed Timestamp or Duration) it refuses itself, before the
// call; everything else is validated by the service, so the gRPC API gives
// the same errors as every other front. Errors become statuses in one
// function, toStatus: INVALID_ARGUMENT with a google.rpc.BadRequest naming
// the field, NOT_FOUND for an unknown namespace, RESOURCE_EXHAUSTED at a
// namespace's key cap, FAILED_PRECONDITION for a call the namespace's mode
// cannot serve (another node's lease in a local-only namespace),
// UNAVAILABLE when a synchronous namespace's store cannot be reached,
// UNAUTHENTICATED and PERMISSION_DENIED when authorization is on.
//
// UnaryAuth is the interceptor that gives each call its principal (a
// bearer token in metadata, else the TLS client certificate); the service
// decides.
//
// An absent window_size, like a zero one, means every window size of the
// namespace; an absent value or cost means 1; an absent lease ttl is
// refused like a zero one (INVALID_ARGUMENT on "ttl"). A batch of more than
// service.MaxBatchItems items is refused as a whole; otherwise each item
// carries its own response or status.
//
// Messages are encoded by internal/grpccodec, without protobuf reflection
// for the limiter's own messages; responses are cut from slabs (one
// allocation per message type rather than one per message) and Allow's
// scratch is pooled, so a call on an existing key allocates little beyond
// gRPC's own.
package grpcfront
