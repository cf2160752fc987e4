package node_test

import (
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
)

// TestKeyLockBasics: the write-through path of synchronous namespaces counts,
// reports own totals and takes the others' totals.
func TestKeyLockBasics(t *testing.T) {
	const size = time.Second
	cfg := syncedConfig(size, time.Minute)
	cfg.SyncRate = 0
	ns := newNS(t, cfg, nil)
	at := epoch.Add(size + size/2)
	incr(t, ns, epoch, "k", size, 4) // previous 1s window

	k, err := ns.LockKey(at, "k")
	if err != nil {
		t.Fatal(err)
	}
	k.Add(0, 2*node.Micro)
	cur, prev := k.Own("k", 0)
	if cur.Start != epoch.Add(size).UnixNano() || cur.Total != 2*node.Micro || prev.Start != epoch.UnixNano() || prev.Total != 4*node.Micro {
		t.Errorf("Own = %+v, %+v; want cur 2e6 at +1s, prev 4e6 at +0s", cur, prev)
	}
	k.SetOthers(0, 1*node.Micro, 2*node.Micro)
	if c, p := k.Totals(0); c != 3*node.Micro || p != 6*node.Micro {
		t.Errorf("Totals = %d, %d; want 3e6, 6e6", c, p)
	}
	if got := k.Rates(0, 1, 0, nil); got[0].Rate != 3+6*0.5 {
		t.Errorf("Rates = %v, want 6", got)
	}
	k.MarkPushed(cur, 5)
	k.MarkPushed(prev, 5)
	k.Unlock()
	for _, p := range ns.CollectDirty(at, nil) {
		if p.Size == size {
			t.Errorf("CollectDirty lists %+v after MarkPushed", p)
		}
	}
}

// TestKeyLockLateTime: a write-through call whose time was read before
// another call on the same key rolled its window forward (it waited for the
// key lock) must not crash.
func TestKeyLockLateTime(t *testing.T) {
	const size = 100 * time.Millisecond
	for _, late := range []time.Duration{time.Millisecond, size + time.Millisecond, 5 * size} {
		t.Run(late.String(), func(t *testing.T) {
			cfg := syncedConfig(size, time.Second)
			cfg.SyncRate = 0
			ns := newNS(t, cfg, nil)
			newer := epoch.Add(10 * size)
			incr(t, ns, newer, "k", 0, 1) // rolls the key to newer's windows
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("KeyLock with a time %v behind the key's window panicked: %v", late, r)
				}
			}()
			k, err := ns.LockKey(newer.Add(-late), "k")
			if err != nil {
				t.Fatal(err)
			}
			defer k.Unlock()
			for i := range 2 {
				k.Add(i, node.Micro)
				cur, prev := k.Own("k", i)
				k.SetOthers(i, 0, 0)
				k.MarkPushed(cur, 1)
				k.MarkPushed(prev, 1)
			}
			if got := k.Rates(0, 2, 0, nil); len(got) != 2 {
				t.Errorf("Rates = %v, want 2 rates", got)
			}
		})
	}
}

// TestKeyLockPrevRead: the previous windows count as read once a call
// read them since they closed and, past grace, since grace passed — for
// every window size — and not in the next windows; times are kept in
// 10 ms units, rounded towards reading again.
func TestKeyLockPrevRead(t *testing.T) {
	cfg := syncedConfig(time.Second, time.Minute)
	cfg.SyncRate = 0
	ns := newNS(t, cfg, nil)
	const grace = 250 * time.Millisecond
	minute := epoch.Truncate(time.Minute).Add(time.Minute) // a boundary of both sizes
	at := func(d time.Duration) time.Time { return minute.Add(d) }
	lock := func(d time.Duration) *node.KeyLock {
		t.Helper()
		k, err := ns.LockKey(at(d), "k")
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	mark := func(d time.Duration) {
		k := lock(d)
		k.MarkPrevRead()
		k.Unlock()
	}
	check := func(d time.Duration, want bool) {
		t.Helper()
		k := lock(d)
		defer k.Unlock()
		if got := k.PrevRead(grace); got != want {
			t.Errorf("at +%v: PrevRead = %v, want %v", d, got, want)
		}
	}

	check(0, false) // never read
	mark(0)
	check(0, true)
	check(grace-10*time.Millisecond, true) // still within grace
	check(grace, false)                    // past grace: read again
	mark(grace - 5*time.Millisecond)       // a read just before grace passed
	check(grace+100*time.Millisecond, false)
	mark(grace + 5*time.Millisecond) // a read just after grace passed
	check(grace+100*time.Millisecond, true)
	check(time.Second-time.Millisecond, true)
	check(time.Second, false) // the next 1 s window
	mark(time.Second + 300*time.Millisecond)
	check(time.Second+400*time.Millisecond, true)
	// A read 300 ms into the minute is also past grace for the minute
	// window; in the next minute it no longer counts.
	mark(time.Minute - 500*time.Millisecond)
	check(time.Minute-400*time.Millisecond, true)
	check(time.Minute+100*time.Millisecond, false)
}

// TestKeyLockAcked: Acked is the total and version of the newest
// acknowledged push, none before one, and none after a failed push until
// the next success.
func TestKeyLockAcked(t *testing.T) {
	cfg := syncedConfig(time.Second)
	cfg.SyncRate = 0
	ns := newNS(t, cfg, nil)
	k, err := ns.LockKey(epoch, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer k.Unlock()
	acked := func(what string, wantTotal, wantVersion int64, wantOK bool) {
		t.Helper()
		cur, _ := k.Own("k", 0)
		if total, version, ok := k.Acked(cur); total != wantTotal || version != wantVersion || ok != wantOK {
			t.Errorf("%s: Acked = %d, %d, %v; want %d, %d, %v", what, total, version, ok, wantTotal, wantVersion, wantOK)
		}
	}
	acked("never pushed", 0, 0, false)
	k.Add(0, 3)
	cur, _ := k.Own("k", 0)
	k.MarkPushed(cur, 7)
	k.Add(0, 2) // counted after the push
	acked("pushed", 3, 7, true)
	cur, _ = k.Own("k", 0)
	k.MarkPushed(cur, 6) // an older push acknowledged late
	acked("older push acknowledged", 3, 7, true)
	k.MarkUncertain(cur)
	acked("after a failed push", 0, 0, false)
	k.MarkPushed(cur, 9)
	acked("pushed again", 5, 9, true)
}
