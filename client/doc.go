// Package client is the Go client of limiterd's gRPC API
// (limiter.v1.RateLimiter).
//
// New connects lazily (grpc.NewClient; plaintext unless a dial option says
// otherwise). Every call runs under a deadline (Options: WithTimeout,
// default 50 ms); an Allow whose leaky buckets carry a wait_timeout gets
// that much more, since the server may wait that long before it answers.
//
// When limiterd cannot answer (not listening, hanging past the deadline,
// any error), Allow does not return an error: it returns a Decision whose
// Err says what went wrong and whose Allowed follows the failure policy.
// The default is fail-open (Allowed true): a rate limiter that is down
// should not take the service it protects down with it. WithFailClosed
// refuses instead. WithErrorHook reports every failure, e.g. to a metric.
//
// Retries: Allow, Increment and Acquire count, so a failed call is never
// repeated (the server may have counted it before the answer was lost).
// SlidingWindow without cur_diff only reads, and Release and Renew have the
// same effect done twice: they are retried on UNAVAILABLE (WithRetries,
// default 1 retry, 5 ms apart) within the same deadline.
//
// Concurrency limits: Acquire takes a lease (at most limit held at once
// per key), Release frees it, Renew extends it. Acquire returns its error
// rather than following the failure policy: without a lease there is
// nothing to release.
//
// WithBatching gathers concurrent Allow calls for up to a short wait or a
// number of items into one AllowBatch RPC and hands each caller its own
// answer. It is off by default: it trades a little latency for fewer RPCs.
//
// A Client is safe for concurrent use. Close it when done.
package client
