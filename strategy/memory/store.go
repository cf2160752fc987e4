package memory

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clustersync "github.com/limiterd/limiterd/sync"
)

// DefaultPurgeInterval is how often, at most, writes sweep out every
// expired row unless WithPurgeInterval says otherwise.
const DefaultPurgeInterval = time.Minute

// errSize is returned by AllowGroup for a window whose size is not
// positive: the sliding formula divides by it.
var errSize = errors.New("memory: allow: window size must be positive")

// Option configures a Store.
type Option func(*Store)

// WithClock makes the store read the time from now instead of time.Now.
// The clock decides which rows have expired (ExpireAt ≤ now()).
func WithClock(now func() time.Time) Option {
	return func(s *Store) { s.now = now }
}

// WithPurgeInterval sets how often, at most, a write also sweeps out every
// expired row (the sweep runs inside a write; the store starts no
// goroutine). d ≤ 0 disables the sweep: expired rows are then dropped only
// when a write replaces them or Purge is called. Default
// DefaultPurgeInterval.
func WithPurgeInterval(d time.Duration) Option {
	return func(s *Store) { s.purgeEvery = d }
}

// row is one incarnation's stored row of one window.
type row struct {
	total    int64
	version  int64
	expireAt time.Time // zero: never expires
}

// Store is the in-memory reference store. Create it with New; the zero
// value is not usable. It is safe for concurrent use; each method holds
// one mutex for its whole duration, so every call, including PushFetch and
// Allow, is atomic.
type Store struct {
	now        func() time.Time
	purgeEvery time.Duration

	mu        sync.RWMutex
	closed    bool
	windows   map[clustersync.WindowKey]map[string]row // window → incarnation → row
	rows      int                                      // rows held, expired or not
	lastPurge time.Time
	buckets   map[bucketKey]*clustersync.BucketRow
	leases    map[leaseKey]*clustersync.LeaseSet
	changes   changeLogs // see changes.go
}

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{
		now:        time.Now,
		purgeEvery: DefaultPurgeInterval,
		windows:    make(map[clustersync.WindowKey]map[string]row),
	}
	for _, o := range opts {
		o(s)
	}
	s.changes.init()
	s.lastPurge = s.now()
	return s
}

// live reports whether r still counts at now. The zero ExpireAt means the
// row never expires.
func (r row) live(now time.Time) bool {
	return r.expireAt.IsZero() || r.expireAt.After(now)
}

// later returns the later of two expiry times, the zero time (never)
// being the latest.
func later(a, b time.Time) time.Time {
	if a.IsZero() || b.IsZero() {
		return time.Time{}
	}
	if a.After(b) {
		return a
	}
	return b
}

// check returns the error a call must return before it starts: ErrClosed
// after Close, else ctx's error. The caller holds s.mu.
func (s *Store) check(ctx context.Context, op string) error {
	if s.closed {
		return fmt.Errorf("memory: %s: %w", op, clustersync.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: %s: %w", op, err)
	}
	return nil
}

// put applies r for inc if its version is newer than the stored row's
// (an expired stored row counts as absent). The caller holds s.mu for
// writing.
func (s *Store) put(inc string, r *clustersync.Row, now time.Time) {
	incs := s.windows[r.WindowKey]
	if incs == nil {
		incs = make(map[string]row, 1)
		s.windows[r.WindowKey] = incs
	}
	exp := r.ExpireAt
	old, ok := incs[inc]
	switch {
	case !ok:
		s.rows++
	case !old.live(now):
		// Absent: any version applies.
	case r.Version <= old.version:
		return
	default:
		// A newer version never brings the expiry forward.
		exp = later(old.expireAt, exp)
	}
	incs[inc] = row{total: r.Total, version: r.Version, expireAt: exp}
	s.changes.record(&r.WindowKey, inc)
}

// sum returns the sum of the live totals of window k over every
// incarnation, except skip when all is false. The caller holds s.mu.
func (s *Store) sum(k clustersync.WindowKey, skip string, all bool, now time.Time) int64 {
	var n int64
	for inc, r := range s.windows[k] {
		if (all || inc != skip) && r.live(now) {
			n += r.total
		}
	}
	return n
}

// maybePurge sweeps expired rows when the purge interval has passed. The
// caller holds s.mu for writing.
func (s *Store) maybePurge(now time.Time) {
	if s.purgeEvery > 0 && now.Sub(s.lastPurge) >= s.purgeEvery {
		s.purge(now)
	}
}

// purge drops every expired row and returns how many. The caller holds
// s.mu for writing.
func (s *Store) purge(now time.Time) int64 {
	var n int64
	for k, incs := range s.windows {
		for inc, r := range incs {
			if !r.live(now) {
				delete(incs, inc)
				n++
			}
		}
		if len(incs) == 0 {
			delete(s.windows, k)
			s.changes.forget(&k)
		}
	}
	for k, r := range s.buckets {
		if !r.ExpireAt.After(now) {
			delete(s.buckets, k)
		}
	}
	s.rows -= int(n)
	s.lastPurge = now
	return n
}

// Push stores rows for incarnation inc, each only if its version is newer
// than the stored row's. Rows for the same window in one call are applied
// in order, so the newest version wins.
func (s *Store) Push(ctx context.Context, inc string, rows []clustersync.Row) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "push"); err != nil {
		return err
	}
	now := s.now()
	for i := range rows {
		s.put(inc, &rows[i], now)
	}
	s.maybePurge(now)
	return nil
}

// Fetch writes into others[i] the sum of the live totals of every
// incarnation except inc for keys[i].
func (s *Store) Fetch(ctx context.Context, inc string, keys []clustersync.WindowKey, others []int64) error {
	if len(others) != len(keys) {
		return fmt.Errorf("memory: fetch: len(others) = %d, want len(keys) = %d", len(others), len(keys))
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "fetch"); err != nil {
		return err
	}
	now := s.now()
	for i, k := range keys {
		others[i] = s.sum(k, inc, false, now)
	}
	return nil
}

// Window returns the sum of the live totals of every incarnation for key.
func (s *Store) Window(ctx context.Context, key clustersync.WindowKey) (int64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "window"); err != nil {
		return 0, err
	}
	return s.sum(key, "", true, s.now()), nil
}

// PushFetch pushes rows like Push and then, in the same atomic step,
// writes into others[i] what Fetch would return for rows[i].WindowKey.
func (s *Store) PushFetch(ctx context.Context, inc string, rows []clustersync.Row, others []int64) error {
	if len(others) != len(rows) {
		return fmt.Errorf("memory: pushfetch: len(others) = %d, want len(rows) = %d", len(others), len(rows))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "pushfetch"); err != nil {
		return err
	}
	now := s.now()
	for i := range rows {
		s.put(inc, &rows[i], now)
	}
	for i := range rows {
		others[i] = s.sum(rows[i].WindowKey, inc, false, now)
	}
	s.maybePurge(now)
	return nil
}

// Purge drops every expired row now and returns how many it dropped. It
// has the signature of the optional purge the conformance suite calls.
func (s *Store) Purge(ctx context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "purge"); err != nil {
		return 0, err
	}
	return s.purge(s.now()), nil
}

// Len returns the number of rows the store holds, counting expired rows
// not dropped yet (0 after Close). For tests of expiry.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.rows
}

// Abilities are every ability of the clustersync contract: the memory
// store is the reference the others are tested against.
const Abilities = clustersync.PushFetch | clustersync.Decide | clustersync.Buckets | clustersync.Leases | clustersync.Changes | clustersync.Window

// Abilities returns the package's Abilities.
func (s *Store) Abilities() clustersync.Abilities { return Abilities }

// Close drops every row. Every later call, Close included, returns an
// error wrapping clustersync.ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("memory: close: %w", clustersync.ErrClosed)
	}
	s.closed = true
	s.windows = nil
	s.rows = 0
	return nil
}
