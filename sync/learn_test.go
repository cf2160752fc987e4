package sync_test

import (
	"context"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

// TestLearnKeysFromChanges: once a's change reads have run without a gap
// since before the previous window of every size began, a holds the
// others' totals of keys it never counted, and decides its first call on
// such a key, and on a key no node counted, in the node. Before that, and
// again after a lost cursor, such calls go to the store.
func TestLearnKeysFromChanges(t *testing.T) {
	clock := fakeclock.New(start.Add(500 * time.Millisecond))
	mem := memory.New()
	a, b, esc := periodicPair(t, mem, clock, clustersync.Config{})
	syncOnce(t, a) // the full read: a's change reads start
	escalations := func(t *testing.T, want int64) {
		t.Helper()
		if got := esc.n.Load(); got != want {
			t.Fatalf("%d escalations, want %d", got, want)
		}
	}

	// The minute window that began before the reads may hold writes a
	// never read: a key new to a goes to the store.
	incrementAt(t, b, "early", 100)
	syncOnce(t, b)
	syncOnce(t, a)
	if d := allowOne(t, a, "early", 100); d.Allowed {
		t.Fatalf("early: admitted past b's 100: %+v", d)
	}
	escalations(t, 1)
	if d := allowOne(t, a, "nobody-early", 100); !d.Allowed {
		t.Fatalf("nobody-early refused: %+v", d)
	}
	escalations(t, 2)

	// Two minutes and a second later the previous minute began after the
	// reads did.
	clock.Add(2*time.Minute + 2*time.Second)
	syncOnce(t, a)
	incrementAt(t, b, "full", 100)
	syncOnce(t, b)
	held := a.ns.ActiveKeys()
	syncOnce(t, a) // a learns "full", a key it never counted
	if got := a.ns.ActiveKeys(); got != held+1 {
		t.Fatalf("a holds %d keys after learning, want %d", got, held+1)
	}
	if d := allowOne(t, a, "full", 100); d.Allowed || d.Limits[0].Rate < 100 {
		t.Errorf("full: %+v, want refused at b's 100, in the node", d)
	}
	if d := allowOne(t, a, "nobody", 100); !d.Allowed {
		t.Errorf("nobody: refused %+v", d)
	}
	escalations(t, 2)

	// A lost cursor: what a holds may lack writes, so new keys go to the
	// store again.
	incrementAt(t, b, "later", 1)
	syncOnce(t, b)
	if err := mem.TrimChanges(context.Background(), "api"); err != nil {
		t.Fatal(err)
	}
	syncOnce(t, a)
	allowOne(t, a, "after-loss", 100)
	escalations(t, 3)
}
