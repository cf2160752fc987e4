// Package httpfront serves limiterd's API, limiter.v1.RateLimiter, as JSON
// over HTTP, and the OpenAPI document that describes it.
//
// Every RPC is POST /limiter.v1.RateLimiter/<Method> with the request
// message as the JSON body (the proto3 JSON mapping: field names in
// lowerCamelCase or as in the .proto, durations as "1.5s", timestamps as
// RFC 3339) and the response message as the answer, every field present,
// false and 0 included, except unset messages (retryAfter when allowed).
// The routes are generated from limiter.proto by grpc-gateway
// (api/proto/limiter/v1/limiterv1gw): an RPC added to the .proto is served
// after `make generate` without hand work. GET /openapi.json is the
// generated OpenAPI (Swagger 2.0) document.
//
// The handlers are the gRPC front's (grpcfront.NewRateLimiterServer),
// called in-process, so both fronts give the same answers and errors. An
// error is a google.rpc.Status in JSON ({"code", "message", "details"})
// with the HTTP status grpc-gateway maps its code to: INVALID_ARGUMENT is
// 400, with a google.rpc.BadRequest detail naming the field, also for a
// field the JSON decoder refused ("limits[0].window_size") or does not
// know; NOT_FOUND (unknown namespace) 404; RESOURCE_EXHAUSTED (key cap)
// 429; FAILED_PRECONDITION 400; UNAVAILABLE (a synchronous namespace's
// store down) 503. A request body over MaxRequestBytes is refused with 413.
// The common Allow calls skip the gateway's transcoding (fastallow.go),
// and on a plain listener served through Listen, net/http's server too
// (conn.go); the answers are the same.
//
// A refusal by a limit is no error: Allow answers 200 with "allowed":
// false, Acquire 200 with "acquired": false.
package httpfront
