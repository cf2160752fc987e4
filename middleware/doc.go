// Package middleware rate-limits servers with limiterd: New makes net/http
// middleware (func(http.Handler) http.Handler) and UnaryServerInterceptor a
// gRPC unary server interceptor. Both ask an Allower, the one method of
// client.Client they need, whether a request's key is within its limits.
//
// The key comes from a function of the request: KeyByIP, KeyByHeader,
// KeyByPath and KeyByRoute for HTTP; KeyByPeer, KeyByMetadata and
// KeyByMethod for gRPC; Keys and GRPCKeys join several into one. The
// limits are limiterv1.Limit values of any kind (client.Window,
// client.Token, client.Leaky, client.Fixed); a leaky bucket's wait_timeout
// is passed through, so limiterd holds the request until it fits, as
// Sidekiq's leaky limiter does.
//
// An admitted request goes on to the next handler; a refused one gets 429
// Too Many Requests (gRPC: RESOURCE_EXHAUSTED with a RetryInfo). Answers
// carry the IETF httpapi rate-limit headers in their structured-field form,
//
//	RateLimit-Policy: "default";q=100;w=60
//	RateLimit: "default";r=50;t=30
//
// one list member per limit, and refusals Retry-After (whole seconds,
// rounded up) and, with WithRateLimitedFor, Sidekiq's X-Rate-Limited-For
// (seconds as a decimal). gRPC sends the same fields as header metadata.
//
// When limiterd cannot answer, the client's failure policy decides: a
// request admitted by fail-open passes without rate-limit headers; one
// refused by fail-closed gets 503 Service Unavailable (gRPC: UNAVAILABLE),
// since its rate is unknown. A key function's error answers 400 Bad Request
// (gRPC: INVALID_ARGUMENT).
package middleware
