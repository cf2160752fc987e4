package main

import (
	"testing"
	"time"
)

func TestAdmittedWindowOf(t *testing.T) {
	a := newAdmitted(time.Second)
	for _, c := range []struct {
		t    time.Time
		want int64
	}{
		{time.Unix(10, 0), 10},
		{time.Unix(10, 999_999_999), 10},
		{time.Unix(11, 0), 11},
		{time.Unix(-1, 500_000_000), -1}, // before the epoch: floor, not truncation
		{time.Unix(0, -1), -1},
	} {
		if got := a.windowOf(c.t); got != c.want {
			t.Errorf("windowOf(%v) = %d, want %d", c.t.UnixNano(), got, c.want)
		}
	}
	a = newAdmitted(100 * time.Millisecond)
	if got, want := a.windowOf(time.Unix(1, 250_000_000)), int64(12); got != want {
		t.Errorf("100ms windowOf(1.25s) = %d, want %d", got, want)
	}
}

func TestAdmittedStats(t *testing.T) {
	base := time.Unix(1000, 0)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	a := newAdmitted(time.Second)
	b := newAdmitted(time.Second) // a second caller's counts, merged
	// Key 0: 3 hits in [999.5, 1000), 10 in [1000, 1001), 12 in [1001, 1002),
	// 4 in [1002, 1003).
	for range 3 {
		a.add(0, at(-500), 1e6)
	}
	for i := range 10 {
		a.add(0, at(i*90), 1e6)
	}
	for i := range 6 {
		a.add(0, at(1000+i), 1e6)
		b.add(0, at(1999-i), 1e6)
	}
	for range 4 {
		b.add(0, at(2000), 1e6)
	}
	// Key 1: half hits, 2.5 in [1001, 1002).
	for range 5 {
		b.add(1, at(1500), 500_000)
	}
	a.merge(b)

	// The run lasted from 999.5 to 1002.5: complete windows are [1000,
	// 1001) and [1001, 1002).
	s := a.stats(at(-500), at(2500), 10)
	if s.Windows != 3 { // key 0 twice, key 1 once
		t.Errorf("Windows = %d, want 3", s.Windows)
	}
	if want := (10 + 12 + 2.5) / 3; s.Mean != want {
		t.Errorf("Mean = %v, want %v", s.Mean, want)
	}
	if s.Worst != 12 || s.WorstKey != 0 || !s.WorstStart.Equal(time.Unix(1001, 0)) {
		t.Errorf("worst = %v key %d from %v, want 12 key 0 from %v", s.Worst, s.WorstKey, s.WorstStart, time.Unix(1001, 0))
	}
	if s.Over != 1 {
		t.Errorf("Over = %d, want 1 (only 12 > 10; 10 is at the limit)", s.Over)
	}

	// A run starting exactly on a window boundary counts that window whole.
	s = a.stats(at(0), at(2000), 10)
	if s.Windows != 3 {
		t.Errorf("aligned run: Windows = %d, want 3", s.Windows)
	}
}

func TestAdmittedStatsTieAndEmpty(t *testing.T) {
	a := newAdmitted(time.Second)
	if s := a.stats(time.Unix(0, 0), time.Unix(10, 0), 5); s.Worst != 0 || s.Windows != 0 || s.Mean != 0 {
		t.Errorf("empty: %+v, want zeros", s)
	}
	// Equal worst windows: the lowest key, then the earliest window, wins,
	// whatever the map order.
	for k := 3; k >= 1; k-- {
		for w := 5; w >= 2; w-- {
			a.add(k, time.Unix(int64(w), 0), 7e6)
		}
	}
	for range 20 {
		s := a.stats(time.Unix(0, 0), time.Unix(10, 0), 5)
		if s.WorstKey != 1 || !s.WorstStart.Equal(time.Unix(2, 0)) || s.Over != 12 {
			t.Fatalf("tie: worst key %d from %v, over %d; want key 1 from %v, over 12", s.WorstKey, s.WorstStart, s.Over, time.Unix(2, 0))
		}
	}
}
