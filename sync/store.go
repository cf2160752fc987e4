package sync

import (
	"context"
	"errors"
	"time"
)

// Sentinel errors a Store may return (wrapped with %w). Callers test them
// with errors.Is.
var (
	// ErrUnavailable means the store could not be reached or did not answer
	// in time. The Syncer keeps the rows dirty and retries on a later tick.
	ErrUnavailable = errors.New("sync: store unavailable")
	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("sync: store closed")
)

// WindowKey names one window of one key: the unit a store keeps one row per
// incarnation for.
type WindowKey struct {
	Namespace string
	// Size is the window size; Start is the window start in Unix
	// nanoseconds, a multiple of Size.
	Size  time.Duration
	Start int64
	Key   string
}

// Row is one incarnation's absolute total for one window.
type Row struct {
	WindowKey
	// Total is this incarnation's own count for the window, in micro-hits
	// (hits × 10^6). It may be negative.
	Total int64
	// Version only grows per incarnation. A store applies a row only if its
	// Version is greater than the stored row's Version for the same
	// (WindowKey, incarnation); otherwise the push of that row is a no-op.
	Version int64
	// ExpireAt is when the row may disappear (window end + size +
	// 2 × sync_rate). Stores round it up to their own TTL granularity.
	ExpireAt time.Time
}

// Store is what a shared backend provides so that nodes converge.
//
// Every row belongs to one node incarnation (a string unique per process
// start). The cluster count of a window is the sum of the Totals of all
// incarnations' rows for that WindowKey.
//
// Concurrency: all methods must be safe for concurrent use by several
// goroutines and several processes. Methods must honour ctx: when ctx is done
// they return promptly with an error wrapping ctx.Err() or ErrUnavailable.
//
// Ownership: a Store must not retain the slices passed to it after the call
// returns; results are written into caller-owned slices.
type Store interface {
	// Push stores rows for incarnation inc. It is idempotent: pushing the
	// same rows twice, or an older version after a newer one, changes
	// nothing. On error some, all or none of the rows may have been applied;
	// the caller pushes them again later.
	Push(ctx context.Context, inc string, rows []Row) error

	// Fetch writes into others[i] the sum of the Totals of every
	// incarnation except inc for keys[i]. Unknown keys read 0.
	// len(others) must equal len(keys).
	Fetch(ctx context.Context, inc string, keys []WindowKey, others []int64) error

	// Close releases the store's resources.
	Close() error

	// Abilities is what the store can do beside these methods: the
	// optional interfaces below that it implements and that limiterd may
	// use. It is the same for every store of a type.
	Abilities() Abilities
}

// Windower is the optional read of one window's sum over all
// incarnations (the seed's get_window): for tests and tools, as nothing in
// limiterd's serving path needs it. An unknown window reads 0.
type Windower interface {
	Window(ctx context.Context, key WindowKey) (int64, error)
}

// PushFetcher is the optional one-round-trip write-and-read: it pushes rows
// like Push and then, in the same round trip, writes into others[i] what
// Fetch would return for rows[i].WindowKey. Synchronous namespaces
// (sync_rate = 0) write through with it; a tick pushes its dirty windows
// with it and fetches only the rest of the interest set. Batches are up to
// Config.BatchSize rows. On error, as for Push, some, all or none of the
// rows may have been applied, and others is not to be used.
type PushFetcher interface {
	PushFetch(ctx context.Context, inc string, rows []Row, others []int64) error
}

// AllowLimit is one limit of an AllowRequest, with this incarnation's own
// rows for the current and previous window of that size as they are now
// (Cur.Start is the window holding At; Prev.Start = Cur.Start - Size).
type AllowLimit struct {
	Size  time.Duration
	Limit int64 // micro-hits
	Cur   Row
	Prev  Row
}

// AllowRequest asks a store to decide an Allow atomically across the cluster.
type AllowRequest struct {
	Inc string
	// At is the decision time in Unix nanoseconds.
	At   int64
	Cost int64 // micro-hits
	// Limits to check, at most one per window size.
	Limits []AllowLimit
	// CountRejected counts Cost even when the answer is no.
	CountRejected bool
}

// AllowResult is the store's decision. Others[i] holds the other
// incarnations' summed totals for Limits[i] as read inside the decision:
// [0] the current window, [1] the previous one.
type AllowResult struct {
	Allowed bool
	Others  [][2]int64
}

// AtomicAllower is the optional store-side Allow, for stores that can decide
// atomically (a Lua script, one transaction). In one atomic step the store:
//
//  1. reads the other incarnations' totals for each limit's Cur and Prev;
//  2. computes, in float64, rate = (Cur.Total + othersCur) +
//     (Prev.Total + othersPrev) × (Size − (At − Cur.Start)) / Size, and admits
//     iff rate + Cost ≤ Limit for every limit;
//  3. writes every limit's Prev row and Cur row (Cur.Total + Cost when the
//     cost is counted: admitted, or CountRejected), each version-checked
//     exactly like Push.
//
// The caller serialises Allow calls per key within its incarnation, so the
// totals it sends are its exact own totals.
type AtomicAllower interface {
	Allow(ctx context.Context, req AllowRequest) (AllowResult, error)
}
