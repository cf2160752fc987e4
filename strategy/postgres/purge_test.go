package postgres_test

import (
	"fmt"
	"testing"
	"time"

	clustersync "github.com/limiterd/limiterd/sync"
)

// Purge deletes the rows past their ExpireAt (more than one batch of them)
// and keeps the live ones and those without expiry.
func testPurge(t *testing.T, d pgdb) {
	s, _ := newStore(t, d)
	now := time.Now()
	const expired, live = 2500, 300
	var rows []clustersync.Row
	for i := range expired {
		rows = append(rows, clustersync.Row{WindowKey: wk("ns", fmt.Sprintf("old%d", i), time.Second, 0),
			Total: 1, Version: 1, ExpireAt: now.Add(-time.Duration(i+1) * time.Second)})
	}
	for i := range live {
		rows = append(rows, clustersync.Row{WindowKey: wk("ns", fmt.Sprintf("live%d", i), time.Second, 0),
			Total: 1, Version: 1, ExpireAt: now.Add(time.Hour)})
	}
	never := clustersync.Row{WindowKey: wk("ns", "never", time.Second, 0), Total: 1, Version: 1}
	rows = append(rows, never)
	push(t, s, "a", rows...)

	n, err := s.Purge(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if n != expired {
		t.Errorf("Purge deleted %d rows, want %d", n, expired)
	}
	for _, r := range rows {
		want := r.Total
		if !r.ExpireAt.IsZero() && r.ExpireAt.Before(now) {
			want = 0
		}
		if got := window(t, s, r.WindowKey); got != want {
			t.Fatalf("window %q after purge: got %d, want %d", r.Key, got, want)
		}
	}
	if n, err = s.Purge(ctxT(t)); err != nil || n != 0 {
		t.Errorf("second Purge: %d, %v; want 0, nil", n, err)
	}
	// A row whose expiry was moved later by a newer push is kept.
	k := wk("ns", "moved", time.Second, 0)
	push(t, s, "a", clustersync.Row{WindowKey: k, Total: 1, Version: 1, ExpireAt: now.Add(-time.Minute)})
	push(t, s, "a", clustersync.Row{WindowKey: k, Total: 2, Version: 2, ExpireAt: now.Add(time.Minute)})
	push(t, s, "a", clustersync.Row{WindowKey: k, Total: 3, Version: 3, ExpireAt: now.Add(-time.Hour)}) // never moves it earlier
	if _, err := s.Purge(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if got := window(t, s, k); got != 3 {
		t.Errorf("row with a later expiry: got %d, want 3", got)
	}
}

// A store made by Open purges by itself every PurgeInterval, and Close
// stops that.
func testBackgroundPurge(t *testing.T, d pgdb) {
	cfg := d.config()
	cfg.PurgeInterval = 100_000_000 // 100ms
	s := openStore(t, cfg)
	k := wk("ns", "old", time.Second, 0)
	push(t, s, "a", clustersync.Row{WindowKey: k, Total: 1, Version: 1, ExpireAt: time.Now().Add(-time.Second)})
	deadline := time.Now().Add(10 * time.Second)
	for window(t, s, k) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("expired row still there after 10 s of background purge")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
