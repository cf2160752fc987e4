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
