package memory

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	clustersync "github.com/limiterd/limiterd/sync"
)

// errInjected is the failure Fail(nil) injects.
var errInjected = errors.New("memory: injected failure")

// mode is a Faulty's current behaviour.
type mode int

const (
	healthy mode = iota
	failing
	hanging
)

// Calls counts the calls made to a Faulty, per method (Allow counts
// AllowGroup), whatever their outcome. Faulted counts the calls that returned an injected fault
// (Fail, or Hang ended by the call's context).
type Calls struct {
	Push, Fetch, Window, PushFetch, Allow, Buckets, Leases, Close int64
	Faulted                                                       int64
}

// Faulty wraps a clustersync.Store and injects faults on demand, for tests
// of the sync loop against an unreachable or stalled store. Create it with
// NewFaulty; it starts healthy, forwarding every call to the inner store.
//
//   - Fail(err): every call returns at once an error wrapping both
//     clustersync.ErrUnavailable and err, without reaching the inner store.
//   - Hang(): every call blocks until its context is done, then returns an
//     error wrapping both clustersync.ErrUnavailable and ctx.Err(). A call
//     with a context that is never done blocks until the mode changes.
//   - Heal(): back to forwarding every call.
//
// A mode change releases the calls blocked by Hang, which then behave as
// the new mode says (after Heal they reach the inner store, like a stalled
// network resuming). Close is never faulted: it always closes the inner
// store.
//
// Faulty has PushFetch, AllowGroup, Buckets, Leases and Window whatever
// the inner store: they forward to the inner store's when it has them;
// otherwise PushFetch runs Push then Fetch (not atomically), and the
// others return an error wrapping errors.ErrUnsupported. Use Store for a
// view that has exactly the optional PushFetcher and GroupAllower of the
// inner store.
//
// Faulty is safe for concurrent use.
type Faulty struct {
	inner clustersync.Store

	mu      sync.Mutex
	mode    mode
	err     error
	changed chan struct{} // closed and replaced at every mode change
	waiting int           // calls blocked by Hang

	push, fetch, window, pushFetch, allow, buckets, leases, close, faulted atomic.Int64
}

// NewFaulty returns a healthy Faulty forwarding to inner.
func NewFaulty(inner clustersync.Store) *Faulty {
	return &Faulty{inner: inner, changed: make(chan struct{})}
}

// Inner returns the wrapped store.
func (f *Faulty) Inner() clustersync.Store { return f.inner }

// setMode switches to m and releases the calls blocked by Hang.
func (f *Faulty) setMode(m mode, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mode, f.err = m, err
	close(f.changed)
	f.changed = make(chan struct{})
}

// Fail makes every later call (and every call blocked by Hang) fail with
// an error wrapping clustersync.ErrUnavailable and err. A nil err injects
// a generic failure.
func (f *Faulty) Fail(err error) {
	if err == nil {
		err = errInjected
	}
	f.setMode(failing, err)
}

// Hang makes every later call block until its context is done.
func (f *Faulty) Hang() { f.setMode(hanging, nil) }

// Heal makes every later call, and every call blocked by Hang, reach the
// inner store.
func (f *Faulty) Heal() { f.setMode(healthy, nil) }

// Waiting returns the number of calls blocked by Hang right now, so that
// a test can wait for a call to be stuck without sleeping.
func (f *Faulty) Waiting() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waiting
}

// Calls returns the call counters.
func (f *Faulty) Calls() Calls {
	return Calls{
		Push: f.push.Load(), Fetch: f.fetch.Load(), Window: f.window.Load(),
		PushFetch: f.pushFetch.Load(), Allow: f.allow.Load(), Buckets: f.buckets.Load(), Leases: f.leases.Load(), Close: f.close.Load(),
		Faulted: f.faulted.Load(),
	}
}

// gate counts a call of op and applies the current mode: nil means go on
// to the inner store.
func (f *Faulty) gate(ctx context.Context, op string, n *atomic.Int64) error {
	n.Add(1)
	for {
		f.mu.Lock()
		m, err, changed := f.mode, f.err, f.changed
		if m == hanging {
			f.waiting++
		}
		f.mu.Unlock()
		switch m {
		case healthy:
			return nil
		case failing:
			f.faulted.Add(1)
			if errors.Is(err, clustersync.ErrUnavailable) {
				return fmt.Errorf("memory: faulty %s: %w", op, err)
			}
			return fmt.Errorf("memory: faulty %s: %w: %w", op, clustersync.ErrUnavailable, err)
		}
		select {
		case <-ctx.Done():
			f.unwait()
			f.faulted.Add(1)
			return fmt.Errorf("memory: faulty %s: hung: %w: %w", op, clustersync.ErrUnavailable, ctx.Err())
		case <-changed:
			f.unwait()
		}
	}
}

func (f *Faulty) unwait() {
	f.mu.Lock()
	f.waiting--
	f.mu.Unlock()
}

// Push forwards to the inner store unless a fault is injected.
func (f *Faulty) Push(ctx context.Context, inc string, rows []clustersync.Row) error {
	if err := f.gate(ctx, "push", &f.push); err != nil {
		return err
	}
	return f.inner.Push(ctx, inc, rows)
}

// Fetch forwards to the inner store unless a fault is injected.
func (f *Faulty) Fetch(ctx context.Context, inc string, keys []clustersync.WindowKey, others []int64) error {
	if err := f.gate(ctx, "fetch", &f.fetch); err != nil {
		return err
	}
	return f.inner.Fetch(ctx, inc, keys, others)
}

// Window forwards to the inner store's Window unless a fault is injected;
// an inner store without one makes it fail with errors.ErrUnsupported.
func (f *Faulty) Window(ctx context.Context, key clustersync.WindowKey) (int64, error) {
	if err := f.gate(ctx, "window", &f.window); err != nil {
		return 0, err
	}
	w, ok := f.inner.(clustersync.Windower)
	if !ok {
		return 0, fmt.Errorf("memory: faulty window: inner store %T: %w", f.inner, errors.ErrUnsupported)
	}
	return w.Window(ctx, key)
}

// PushFetch forwards to the inner store's PushFetch unless a fault is
// injected; an inner store without one gets Push then Fetch.
func (f *Faulty) PushFetch(ctx context.Context, inc string, rows []clustersync.Row, others []int64) error {
	if err := f.gate(ctx, "pushfetch", &f.pushFetch); err != nil {
		return err
	}
	if pf, ok := f.inner.(clustersync.PushFetcher); ok {
		return pf.PushFetch(ctx, inc, rows, others)
	}
	if len(others) != len(rows) {
		return fmt.Errorf("memory: faulty pushfetch: len(others) = %d, want len(rows) = %d", len(others), len(rows))
	}
	if err := f.inner.Push(ctx, inc, rows); err != nil {
		return err
	}
	keys := make([]clustersync.WindowKey, len(rows))
	for i := range rows {
		keys[i] = rows[i].WindowKey
	}
	return f.inner.Fetch(ctx, inc, keys, others)
}

// Buckets forwards to the inner store's Buckets unless a fault is
// injected; an inner store without one makes it fail with
// errors.ErrUnsupported.
func (f *Faulty) Buckets(ctx context.Context, inc string, at, take int64, calls []clustersync.BucketCall, replies []clustersync.BucketReply) (bool, error) {
	if err := f.gate(ctx, "buckets", &f.buckets); err != nil {
		return false, err
	}
	bs, ok := f.inner.(clustersync.BucketStore)
	if !ok {
		return false, fmt.Errorf("memory: faulty buckets: inner store %T: %w", f.inner, errors.ErrUnsupported)
	}
	return bs.Buckets(ctx, inc, at, take, calls, replies)
}

// Leases forwards to the inner store's LeaseStore, unless a fault is
// injected.
func (f *Faulty) Leases(ctx context.Context, now int64, ops []clustersync.LeaseOp, replies []clustersync.LeaseReply) error {
	if err := f.gate(ctx, "leases", &f.leases); err != nil {
		return err
	}
	ls, ok := f.inner.(clustersync.LeaseStore)
	if !ok {
		return fmt.Errorf("memory: faulty leases: inner store %T: %w", f.inner, errors.ErrUnsupported)
	}
	return ls.Leases(ctx, now, ops, replies)
}

// Close closes the inner store, whatever fault is injected.
func (f *Faulty) Close() error {
	f.close.Add(1)
	return f.inner.Close()
}

// Abilities are the inner store's but change reads, which f does not
// pass on: a Syncer takes the paths it takes with the inner store alone.
func (f *Faulty) Abilities() clustersync.Abilities {
	return f.inner.Abilities() &^ clustersync.Changes
}

// Store returns f as a clustersync.Store.
func (f *Faulty) Store() clustersync.Store { return f }
