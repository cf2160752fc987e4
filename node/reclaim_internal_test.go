package node

import (
	"errors"
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/limiterd/limiterd/ratelimit"
)

// TestReclaimMarksRemovedEntries: a writer that found an entry before a
// reclaim removed it must learn so and count on a fresh entry instead.
func TestReclaimMarksRemovedEntries(t *testing.T) {
	ns, err := NewNamespace(Config{Name: "t", WindowSizes: []time.Duration{time.Second}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1_700_000_000, 0)
	if _, err := ns.IncrementAt(at, "k", 0, 1, nil); err != nil {
		t.Fatal(err)
	}
	e, err := ns.acquire("k")
	if err != nil {
		t.Fatal(err)
	}
	if got := ns.Reclaim(at.Add(3 * time.Second)); got != 1 {
		t.Fatalf("Reclaim removed %d keys, want 1", got)
	}
	if !e.dead.Load() {
		t.Fatal("reclaimed entry not marked dead")
	}
	if _, err := ns.addLocked(e, e.slot(0), at.UnixNano(), int64(time.Second), ratelimit.Micro); !errors.Is(err, errDead) {
		t.Errorf("addLocked on a reclaimed entry = %v, want errDead", err)
	}
	e2, err := ns.acquire("k")
	if err != nil || e2 == e || e2.dead.Load() {
		t.Fatalf("acquire after reclaim = %p (dead %v), %v; want a fresh live entry, not %p", e2, e2 != nil && e2.dead.Load(), err, e)
	}
	if r, err := ns.IncrementAt(at, "k", 0, 1, nil); err != nil || r[0].Rate != 1 {
		t.Errorf("IncrementAt after reclaim = %v, %v; want rate 1", r, err)
	}
}

// TestTableGrowsAndShrinks: a shard table keeps every key through growth
// and gives memory back once reclaim empties it.
func TestTableGrowsAndShrinks(t *testing.T) {
	ns, err := NewNamespace(Config{Name: "t", WindowSizes: []time.Duration{time.Second}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1_700_000_000, 0)
	const n = 20_000
	for i := range n {
		if _, err := ns.IncrementAt(at, fmt.Sprint("key-", i), 0, float64(i), nil); err != nil {
			t.Fatal(err)
		}
	}
	size := 0
	for i := range ns.shards.s {
		sh := &ns.shards.s[i]
		if got := len(sh.tab.Load().slots); 4*sh.used > 3*got {
			t.Errorf("shard %d: %d used of %d slots, want at most three quarters", i, sh.used, got)
		}
		size += len(ns.shards.s[i].tab.Load().slots)
	}
	if size < n {
		t.Fatalf("tables hold %d slots for %d keys", size, n)
	}
	for i := range n {
		r, err := ns.RateAt(at, fmt.Sprint("key-", i), 0, 0, nil)
		if err != nil || r[0].Rate != float64(i) {
			t.Fatalf("rate of key-%d = %v, %v; want %d", i, r, err, i)
		}
	}
	ns.Reclaim(at.Add(3 * time.Second))
	for i := range ns.shards.s {
		if got := len(ns.shards.s[i].tab.Load().slots); got != minTableSize {
			t.Errorf("shard %d: %d slots after reclaiming every key, want %d", i, got, minTableSize)
		}
	}
}

// TestEntryBlockLayout: entry.slot finds the slots right after the entry,
// which holds only if every block lays them out there.
func TestEntryBlockLayout(t *testing.T) {
	for n := 1; n <= MaxWindowSizes; n++ {
		for _, key := range []string{"k", "sixteen-byte-key", string(make([]byte, 64)), string(make([]byte, 65)), string(make([]byte, ratelimit.MaxKeyLen))} {
			e := newEntry(key, n)
			if e.key != key {
				t.Fatalf("newEntry(%d-byte key, %d).key differs", len(key), n)
			}
			for i := range n {
				e.slot(i).p.Store(&pair{start: int64(i)})
			}
			for i := range n {
				if got := e.slot(i).p.Load().start; got != int64(i) {
					t.Fatalf("newEntry(%d-byte key, %d): slot %d holds %d", len(key), n, i, got)
				}
			}
		}
	}
	if off := unsafe.Offsetof(entryBlock[[2]slot, [16]byte]{}.s); off != entrySize {
		t.Errorf("slots at offset %d, want %d", off, entrySize)
	}
	if off := unsafe.Offsetof(entryBlockLong[[2]slot]{}.s); off != entrySize {
		t.Errorf("slots at offset %d, want %d", off, entrySize)
	}
}
