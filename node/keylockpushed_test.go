package node_test

import (
	"testing"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// TestKeyLockMarkPushedStaleVersion: a store acknowledgement whose version
// is not newer than the one already recorded (a reordered or repeated
// answer) does not mark a later total as pushed: the window stays dirty
// and Stored reports the total as not stored, until a newer version
// acknowledges it.
func TestKeyLockMarkPushedStaleVersion(t *testing.T) {
	const size = time.Second
	cfg := syncedConfig(size)
	cfg.Shared = true
	ns := newNS(t, cfg, nil)
	at := epoch.Add(size / 2)
	k, err := ns.LockKey(at, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer k.Unlock()
	k.Add(size, ratelimit.Micro)
	cur, _ := k.Window(size)
	k.Pushed(cur, 5)
	if v, ok := k.Stored(cur); !ok || v != 5 {
		t.Fatalf("Stored after MarkPushed(5) = %d, %v; want 5, true", v, ok)
	}
	k.Add(size, ratelimit.Micro)
	cur, _ = k.Window(size)
	k.Pushed(cur, 5) // not newer than 5
	if v, ok := k.Stored(cur); ok {
		t.Errorf("Stored of the new total after a repeated version 5 = %d, true; want not stored", v)
	}
	k.Pushed(cur, 6)
	if v, ok := k.Stored(cur); !ok || v != 6 {
		t.Errorf("Stored after MarkPushed(6) = %d, %v; want 6, true", v, ok)
	}
}
