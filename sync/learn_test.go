package sync_test

import (
	"context"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

// TestLearnKeysFromChanges: once a's change reads have run without a gap
// since before the previous window of a size began, a holds the others'
// totals of keys it never counted, and decides its first call on such a
// key, and on a key no node counted, in the node, for limits of that
// size. Before that, and again after a lost cursor, such calls go to the
// store.
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

	// Three seconds later the previous second began after the reads did,
	// but not the previous minute: a key new to a goes to the store for a
	// limit of a minute only.
	clock.Add(3 * time.Second)
	syncOnce(t, a)
	if d := allowOne(t, a, "nobody-second", 100); !d.Allowed {
		t.Fatalf("nobody-second refused: %+v", d)
	}
	escalations(t, 2)
	minute := node.AllowRequest{Key: "nobody-minute", Cost: 1, Limits: []node.Limit{{Size: time.Minute, Limit: 100}}}
	if d, err := a.sy.AllowNearAt(context.Background(), a.ns.Now(), minute, nil); err != nil || !d.Allowed {
		t.Fatalf("nobody-minute: %+v, %v", d, err)
	}
	escalations(t, 3)

	// Two minutes later the previous minute began after the reads did.
	clock.Add(2 * time.Minute)
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
	escalations(t, 3)

	// A lost cursor: what a holds may lack writes, so new keys go to the
	// store again.
	incrementAt(t, b, "later", 1)
	syncOnce(t, b)
	if err := mem.TrimChanges(context.Background(), "api"); err != nil {
		t.Fatal(err)
	}
	syncOnce(t, a)
	allowOne(t, a, "after-loss", 100)
	escalations(t, 4)
}
