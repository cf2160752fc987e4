package memory_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/strategy/memory"
	"github.com/limiterd/limiterd/strategy/strategytest"
	clustersync "github.com/limiterd/limiterd/sync"
)

var (
	_ clustersync.Store        = (*memory.Store)(nil)
	_ clustersync.PushFetcher  = (*memory.Store)(nil)
	_ clustersync.GroupAllower = (*memory.Store)(nil)
	_ clustersync.Windower     = (*memory.Store)(nil)
	_ strategytest.Purger      = (*memory.Store)(nil)

	_ clustersync.Store        = (*memory.Faulty)(nil)
	_ clustersync.PushFetcher  = (*memory.Faulty)(nil)
	_ clustersync.GroupAllower = (*memory.Faulty)(nil)
	_ clustersync.Windower     = (*memory.Faulty)(nil)
)

func TestConformance(t *testing.T) {
	strategytest.Run(t, func(t *testing.T) clustersync.Store { return memory.New() })
}

// The suite through a healthy Faulty: it must be transparent.
func TestConformanceThroughFaulty(t *testing.T) {
	strategytest.Run(t, func(t *testing.T) clustersync.Store { return memory.NewFaulty(memory.New()) })
}

var t0 = time.Unix(1_800_000_000, 0)

func wk(key string) clustersync.WindowKey {
	return clustersync.WindowKey{Namespace: "ns", Size: time.Minute, Start: t0.Truncate(time.Minute).UnixNano(), Key: key}
}

func window(t *testing.T, s clustersync.Windower, k clustersync.WindowKey) int64 {
	t.Helper()
	n, err := s.Window(context.Background(), k)
	if err != nil {
		t.Fatalf("Window(%q): %v", k.Key, err)
	}
	return n
}

func TestExpiryFollowsClock(t *testing.T) {
	clock := fakeclock.New(t0)
	s := memory.New(memory.WithClock(clock.Now), memory.WithPurgeInterval(0))
	ctx := context.Background()
	rows := []clustersync.Row{
		{WindowKey: wk("short"), Total: 5, Version: 1, ExpireAt: t0.Add(time.Second)},
		{WindowKey: wk("long"), Total: 7, Version: 1, ExpireAt: t0.Add(time.Hour)},
		{WindowKey: wk("never"), Total: 9, Version: 1}, // zero ExpireAt: no expiry
	}
	if err := s.Push(ctx, "a", rows); err != nil {
		t.Fatal(err)
	}
	clock.Add(time.Second - 1)
	if got := window(t, s, wk("short")); got != 5 {
		t.Fatalf("1ns before ExpireAt: Window = %d, want 5", got)
	}
	clock.Add(1) // now == ExpireAt: expired
	if got := window(t, s, wk("short")); got != 0 {
		t.Fatalf("at ExpireAt: Window = %d, want 0", got)
	}
	others := []int64{-1}
	if err := s.Fetch(ctx, "b", []clustersync.WindowKey{wk("short")}, others); err != nil || others[0] != 0 {
		t.Fatalf("at ExpireAt: Fetch = %v, %v; want [0], nil", others, err)
	}
	if got := s.Len(); got != 3 {
		t.Fatalf("Len before any purge = %d, want 3 (expired rows are dropped lazily)", got)
	}
	n, err := s.Purge(ctx)
	if err != nil || n != 1 {
		t.Fatalf("Purge = %d, %v; want 1, nil", n, err)
	}
	if got := s.Len(); got != 2 {
		t.Fatalf("Len after Purge = %d, want 2", got)
	}
	clock.Add(100 * 365 * 24 * time.Hour)
	if got := window(t, s, wk("never")); got != 9 {
		t.Fatalf("row without ExpireAt after 100 years: Window = %d, want 9", got)
	}
}

func TestExpiredRowReadsAbsentToWrites(t *testing.T) {
	clock := fakeclock.New(t0)
	s := memory.New(memory.WithClock(clock.Now))
	ctx := context.Background()
	push := func(total, version int64, exp time.Time) {
		t.Helper()
		if err := s.Push(ctx, "a", []clustersync.Row{{WindowKey: wk("k"), Total: total, Version: version, ExpireAt: exp}}); err != nil {
			t.Fatal(err)
		}
	}
	push(5, 10, t0.Add(time.Second))
	clock.Add(time.Second)
	push(3, 2, t0.Add(time.Hour)) // older version, but the stored row expired
	if got := window(t, s, wk("k")); got != 3 {
		t.Fatalf("Window = %d, want 3", got)
	}
	// A newer version never brings the expiry forward.
	push(4, 11, t0.Add(2*time.Second))
	clock.Add(time.Minute)
	if got := window(t, s, wk("k")); got != 4 {
		t.Fatalf("after the newer row's own ExpireAt but before the older one's: Window = %d, want 4", got)
	}
}

func TestPeriodicPurge(t *testing.T) {
	clock := fakeclock.New(t0)
	s := memory.New(memory.WithClock(clock.Now), memory.WithPurgeInterval(time.Minute))
	ctx := context.Background()
	for i, key := range []string{"a", "b", "c"} {
		if err := s.Push(ctx, "a", []clustersync.Row{{WindowKey: wk(key), Total: 1, Version: int64(i + 1), ExpireAt: t0.Add(time.Second)}}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Add(59 * time.Second)
	if err := s.Push(ctx, "a", []clustersync.Row{{WindowKey: wk("d"), Total: 1, Version: 9, ExpireAt: t0.Add(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	if got := s.Len(); got != 4 {
		t.Fatalf("Len before the purge interval = %d, want 4", got)
	}
	clock.Add(time.Second)
	if err := s.Push(ctx, "a", nil); err != nil {
		t.Fatal(err)
	}
	if got := s.Len(); got != 1 {
		t.Fatalf("Len after a write past the purge interval = %d, want 1", got)
	}
}

func TestLengthMismatch(t *testing.T) {
	s := memory.New()
	ctx := context.Background()
	if err := s.Fetch(ctx, "a", []clustersync.WindowKey{wk("k")}, nil); err == nil {
		t.Error("Fetch with len(others) != len(keys): got nil error")
	}
	if err := s.PushFetch(ctx, "a", []clustersync.Row{{WindowKey: wk("k"), Total: 1, Version: 1}}, nil); err == nil {
		t.Error("PushFetch with len(others) != len(rows): got nil error")
	}
	if got := window(t, s, wk("k")); got != 0 {
		t.Errorf("PushFetch that failed its check applied its rows: Window = %d, want 0", got)
	}
	one := &clustersync.GroupAllowRequest{Inc: "a", Windows: []clustersync.GroupWindow{{}}, Entries: []clustersync.GroupEntry{{}}}
	if err := s.AllowGroup(ctx, one, make([]bool, 1), make([][2]int64, 1)); err == nil {
		t.Error("AllowGroup with a zero window size: got nil error")
	}
}

func TestCloseDropsEverything(t *testing.T) {
	s := memory.New()
	if err := s.Push(context.Background(), "a", []clustersync.Row{{WindowKey: wk("k"), Total: 1, Version: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := s.Len(); got != 0 {
		t.Errorf("Len after Close = %d, want 0", got)
	}
	if _, err := s.Purge(context.Background()); !errors.Is(err, clustersync.ErrClosed) {
		t.Errorf("Purge after Close: error = %v, want ErrClosed", err)
	}
	if err := s.Close(); !errors.Is(err, clustersync.ErrClosed) {
		t.Errorf("second Close: error = %v, want ErrClosed", err)
	}
}

func TestFaultyFail(t *testing.T) {
	mem := memory.New()
	f := memory.NewFaulty(mem)
	ctx := context.Background()
	boom := errors.New("boom")
	f.Fail(boom)
	row := []clustersync.Row{{WindowKey: wk("k"), Total: 1, Version: 1}}
	errs := map[string]error{
		"Push":      f.Push(ctx, "a", row),
		"Fetch":     f.Fetch(ctx, "a", []clustersync.WindowKey{wk("k")}, make([]int64, 1)),
		"PushFetch": f.PushFetch(ctx, "a", row, make([]int64, 1)),
	}
	_, errs["Window"] = f.Window(ctx, wk("k"))
	errs["AllowGroup"] = f.AllowGroup(ctx, &clustersync.GroupAllowRequest{Inc: "a"}, nil, nil)
	for name, err := range errs {
		if !errors.Is(err, clustersync.ErrUnavailable) || !errors.Is(err, boom) {
			t.Errorf("%s while failing: error = %v, want one wrapping ErrUnavailable and the injected error", name, err)
		}
	}
	if got := window(t, mem, wk("k")); got != 0 {
		t.Errorf("a failed Push reached the inner store: Window = %d, want 0", got)
	}
	want := memory.Calls{Push: 1, Fetch: 1, Window: 1, PushFetch: 1, Allow: 1, Faulted: 5}
	if got := f.Calls(); got != want {
		t.Errorf("Calls = %+v, want %+v", got, want)
	}

	f.Fail(clustersync.ErrUnavailable)
	if err := f.Push(ctx, "a", row); !errors.Is(err, clustersync.ErrUnavailable) {
		t.Errorf("Fail(ErrUnavailable): error = %v, want ErrUnavailable", err)
	}
	f.Fail(nil)
	if err := f.Push(ctx, "a", row); !errors.Is(err, clustersync.ErrUnavailable) {
		t.Errorf("Fail(nil): error = %v, want ErrUnavailable", err)
	}

	f.Heal()
	if err := f.Push(ctx, "a", row); err != nil {
		t.Fatalf("Push after Heal: %v", err)
	}
	if got := window(t, f, wk("k")); got != 1 {
		t.Errorf("after Heal: Window = %d, want 1", got)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := mem.Push(ctx, "a", row); !errors.Is(err, clustersync.ErrClosed) {
		t.Errorf("Faulty.Close did not close the inner store: Push error = %v", err)
	}
	if got := f.Calls().Close; got != 1 {
		t.Errorf("Calls().Close = %d, want 1", got)
	}
}

func TestFaultyHangUntilContextDone(t *testing.T) {
	f := memory.NewFaulty(memory.New())
	f.Hang()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- f.Push(ctx, "a", []clustersync.Row{{WindowKey: wk("k"), Total: 1, Version: 1}}) }()
	waitFor(t, func() bool { return f.Waiting() == 1 })
	select {
	case err := <-done:
		t.Fatalf("Push returned %v while hanging with a live context", err)
	default:
	}
	cancel()
	err := <-done
	if !errors.Is(err, clustersync.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("hung Push: error = %v, want one wrapping ErrUnavailable and context.Canceled", err)
	}
	if got := f.Waiting(); got != 0 {
		t.Errorf("Waiting after the call returned = %d, want 0", got)
	}
	tctx, cancel2 := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel2()
	if _, err := f.Window(tctx, wk("k")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("hung Window with a timeout: error = %v, want DeadlineExceeded", err)
	}
	if got := f.Calls(); got.Faulted != 2 {
		t.Errorf("Calls().Faulted = %d, want 2", got.Faulted)
	}
}

func TestFaultyHealReleasesHungCalls(t *testing.T) {
	mem := memory.New()
	f := memory.NewFaulty(mem)
	f.Hang()
	const n = 5
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			errs <- f.Push(context.Background(), "inc", []clustersync.Row{{WindowKey: wk("k"), Total: int64(i + 1), Version: int64(i + 1)}})
		})
	}
	waitFor(t, func() bool { return f.Waiting() == n })
	f.Heal()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Push released by Heal: %v", err)
		}
	}
	if got := window(t, mem, wk("k")); got != n {
		t.Errorf("Window = %d, want %d (the newest version)", got, n)
	}
}

func TestFaultyFailReleasesHungCalls(t *testing.T) {
	f := memory.NewFaulty(memory.New())
	f.Hang()
	done := make(chan error)
	go func() {
		_, err := f.Window(context.Background(), wk("k"))
		done <- err
	}()
	waitFor(t, func() bool { return f.Waiting() == 1 })
	boom := errors.New("boom")
	f.Fail(boom)
	if err := <-done; !errors.Is(err, boom) || !errors.Is(err, clustersync.ErrUnavailable) {
		t.Fatalf("hung call after Fail: error = %v, want one wrapping ErrUnavailable and boom", err)
	}
}

// bare is a Store with none of the optional interfaces.
type bare struct{ clustersync.Store }

func (bare) Abilities() clustersync.Abilities { return 0 }

func TestFaultyStoreView(t *testing.T) {
	// A Faulty declares its inner store's abilities, so that a Syncer
	// takes the same path as with the inner store alone.
	full := memory.NewFaulty(memory.New())
	if want := memory.Abilities &^ clustersync.Changes; full.Store().Abilities() != want {
		t.Errorf("view of a Faulty over memory.Store declares %v, want %v", full.Store().Abilities(), want)
	}

	mem := memory.New()
	f := memory.NewFaulty(bare{mem})
	v := f.Store()
	if got := v.Abilities(); got != 0 {
		t.Errorf("view of a Faulty over a bare store declares %v, want none", got)
	}
	ctx := context.Background()
	if err := f.AllowGroup(ctx, &clustersync.GroupAllowRequest{}, nil, nil); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("AllowGroup over a bare store: error = %v, want ErrUnsupported", err)
	}
	// PushFetch over a bare store: Push then Fetch.
	if err := mem.Push(ctx, "b", []clustersync.Row{{WindowKey: wk("k"), Total: 2, Version: 1}}); err != nil {
		t.Fatal(err)
	}
	others := []int64{-1}
	if err := f.PushFetch(ctx, "a", []clustersync.Row{{WindowKey: wk("k"), Total: 3, Version: 1}}, others); err != nil || others[0] != 2 {
		t.Fatalf("PushFetch over a bare store = %v, %v; want [2], nil", others, err)
	}
	if got := window(t, mem, wk("k")); got != 5 {
		t.Errorf("Window = %d, want 5", got)
	}
	// The view's faults are the Faulty's.
	f.Fail(nil)
	if err := v.Push(ctx, "a", nil); !errors.Is(err, clustersync.ErrUnavailable) {
		t.Errorf("view while failing: error = %v, want ErrUnavailable", err)
	}
	if got := f.Calls().Push; got != 1 {
		t.Errorf("Calls().Push = %d, want 1 (the view's call)", got)
	}
}

// waitFor waits until cond holds, yielding between checks (it synchronises
// on the condition itself, not on time); it fails the test after 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10s")
		}
		runtime.Gosched()
	}
}
