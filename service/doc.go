// Package service is the one entry point every front calls: gRPC today,
// the Redis protocol, HTTP/JSON and Envoy's rate limit service later. A
// front decodes its wire format into a request of this package, makes one
// call and encodes the answer; it holds no counting or validation logic.
//
// Each call resolves its namespace (empty means "default"), validates the
// request once, in one fixed order, and routes it: to the node's memory for
// local-only and periodic namespaces, to the namespace's clustersync.Syncer
// for synchronous ones. The order is
//
//	namespace → at → key → window_size → value | cur_diff | cost →
//	limits (their count, then each limit's window_size and limit)
//
// so the first error of a bad request is the same whatever the
// namespace's mode. Errors are *ratelimit.FieldError values (aliased here as
// FieldError) naming the field and wrapping a sentinel, which fronts map to
// their protocol's codes with errors.Is. What a front cannot decode (a
// malformed timestamp on the wire, say) it reports itself, before calling.
//
// The time of a call, `at`, defaults to the namespace clock's now; the
// range it may take depends on the limiter kind (see AtRange): for the
// sliding window, [now − the largest window size, now + MaxFuture].
//
// Authorization: a Service made by WithAuthorizer checks, first of all,
// that the principal in a call's context (auth.WithPrincipal, put there
// by the front) may do the call's operation in its namespace: read for
// SlidingWindow, write for every other call; a call that can create state
// is a write, so an Allow of cost 0 is one, and so is a SlidingWindow in a
// syncing namespace (it adds the key to the node's table and, synchronous,
// to the store); a lease's namespace is the one in its id. A refusal (ErrUnauthenticated,
// ErrPermissionDenied) comes before any validation or counting, so every
// front refuses the same calls the same way.
//
// Batches: a front serves a batch call through a Batch, which refuses more
// than MaxBatchItems items as a whole and otherwise answers each item on
// its own, an item's error being its own.
//
// Calls on an existing key do not allocate: answers are appended to
// caller-supplied slices, as in package node.
package service
