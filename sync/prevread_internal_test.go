package sync

import (
	"testing"
	"time"
)

// TestPrevReads: the previous windows count as read once a call read them
// since they closed and, past grace, since grace passed — for every window
// size — and not in the next windows; prune drops only records no later
// call can use.
func TestPrevReads(t *testing.T) {
	sizes := []time.Duration{time.Second, time.Minute}
	const grace = 250 * time.Millisecond
	minute := time.Unix(1_800_000_000, 0).Truncate(time.Minute) // a boundary of both sizes
	at := func(d time.Duration) time.Time { return minute.Add(d) }
	p := newPrevReads()
	check := func(d time.Duration, want bool) {
		t.Helper()
		if got := p.fresh("k", at(d), sizes, grace); got != want {
			t.Errorf("at +%v: fresh = %v, want %v", d, got, want)
		}
	}

	check(0, false) // never read
	p.mark("k", at(0))
	check(0, true)
	check(grace-time.Nanosecond, true) // still within grace
	check(grace, false)                // past grace: read again
	p.mark("k", at(grace-time.Nanosecond))
	check(grace+100*time.Millisecond, false)
	p.mark("k", at(grace))
	check(grace+100*time.Millisecond, true)
	check(time.Second-time.Nanosecond, true)
	check(time.Second, false) // the next 1 s window
	p.mark("k", at(time.Second+300*time.Millisecond))
	check(time.Second+400*time.Millisecond, true)
	if p.fresh("other", at(time.Second+400*time.Millisecond), sizes, grace) {
		t.Error("another key counts as read")
	}
	// A call locked before the read (it waited for the key lock) in the
	// same windows may use it; one in earlier windows may not.
	check(time.Second+260*time.Millisecond, true)
	check(900*time.Millisecond, false)
	// A read 300 ms into the minute is also past grace for the minute
	// window; in the next minute it no longer counts.
	p.mark("k", at(time.Minute-500*time.Millisecond))
	check(time.Minute-400*time.Millisecond, true)
	check(time.Minute+100*time.Millisecond, false)

	p.prune(at(time.Minute-100*time.Millisecond), sizes)
	check(time.Minute-50*time.Millisecond, true) // still in the read's windows
	p.prune(at(time.Minute), sizes)
	if n := len(p.shard("k").m); n != 0 {
		t.Errorf("%d records left after their windows ended, want 0", n)
	}
	// A read at the first instant of the next window is not this one's.
	p.mark("k", at(time.Minute+time.Second))
	check(time.Minute+900*time.Millisecond, false)

	// Mid-minute, a read before the current second serves no call (every
	// size must have been read); one at its first instant does.
	p = newPrevReads()
	p.mark("old", at(30*time.Second))
	p.mark("new", at(31*time.Second))
	p.prune(at(31*time.Second+500*time.Millisecond), sizes)
	if _, old := p.shard("old").m["old"]; old {
		t.Error("a read before the current second kept")
	}
	if _, kept := p.shard("new").m["new"]; !kept {
		t.Error("a read at the current second's first instant dropped")
	}
}
