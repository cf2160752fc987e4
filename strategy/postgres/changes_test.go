package postgres_test

import (
	"testing"
	"time"

	"github.com/limiterd/limiterd/integration/harness"
	pgstore "github.com/limiterd/limiterd/strategy/postgres"
	clustersync "github.com/limiterd/limiterd/sync"
)

// A transaction that writes first and commits after a later one (and
// after a read) has the lower id: a read from the highest id read would
// miss it. The read after its commit must report it.
func TestChangesLateCommit(t *testing.T) {
	d := pgdb{dsn: harness.SharedPostgres(t).DSN()}
	s, cfg := newStore(t, d)
	ctx := ctxT(t)
	early, late := wk("ns", "early", time.Minute, 0), wk("ns", "late", time.Minute, 0)
	push(t, s, "x", row(wk("ns", "first", time.Minute, 0), 1, 1)) // the table exists
	read := func(cur clustersync.Cursor) (map[clustersync.WindowKey]int64, clustersync.Cursor) {
		t.Helper()
		changes, next, more, err := s.Changes(ctx, "r", "ns", cur, 0, nil)
		if err != nil || more {
			t.Fatalf("Changes: more %v, %v", more, err)
		}
		got := map[clustersync.WindowKey]int64{}
		for _, c := range changes {
			got[c.WindowKey] = c.Others
		}
		return got, next
	}
	_, cur := read("")

	tx, err := connect(t, d.dsn).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// After Commit, a no-op.
	defer func() { _ = tx.Rollback(ctx) }()

	push(t, pgstore.New(tx, cfg), "a", row(early, 5, 1)) // the lower id, not committed
	push(t, s, "b", row(late, 7, 1))                     // a higher id, committed
	got, cur := read(cur)
	if got[late] != 7 {
		t.Errorf("read before the late commit: %v, want %v: 7", got, late)
	}
	if _, ok := got[early]; ok {
		t.Errorf("read before the commit saw the uncommitted row")
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got, _ = read(cur)
	if v, ok := got[early]; !ok || v != 5 {
		t.Errorf("read after the late commit: %v, want %v: 5", got, early)
	}
}
