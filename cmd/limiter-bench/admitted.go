package main

import (
	"math"
	"time"
)

// admitted counts admitted hits per key and per window, the windows aligned
// to the Unix epoch as limiterd aligns them (start = floor(t / size) × size).
// Hits are counted in micro-hits, as limiterd counts them, so fractional
// costs add up exactly. The zero value is not usable: see newAdmitted. Not
// safe for concurrent use: each caller counts into its own and they are
// merged.
type admitted struct {
	size   time.Duration
	counts map[int64]map[int]int64 // window index → key → micro-hits
	// The window last added to, as calls arrive in time order: one map
	// look-up per hit, on an integer key, is what this costs a caller.
	lastWindow int64
	last       map[int]int64
}

// keyWindow is one key's window, by index: the window holding t has index
// floor(t / size) since the Unix epoch.
type keyWindow struct {
	key    int
	window int64
}

func newAdmitted(size time.Duration) *admitted {
	return &admitted{size: size, counts: make(map[int64]map[int]int64)}
}

// windowOf returns the index of the window holding t (floor division, so
// times before the epoch fall in negative windows as they should).
func (a *admitted) windowOf(t time.Time) int64 {
	ns := t.UnixNano()
	w := ns / int64(a.size)
	if ns%int64(a.size) < 0 {
		w--
	}
	return w
}

// window returns the counts of window w, creating them.
func (a *admitted) window(w int64) map[int]int64 {
	if a.last != nil && a.lastWindow == w {
		return a.last
	}
	m := a.counts[w]
	if m == nil {
		m = make(map[int]int64)
		a.counts[w] = m
	}
	a.lastWindow, a.last = w, m
	return m
}

// add counts micro micro-hits admitted for key at t.
func (a *admitted) add(key int, t time.Time, micro int64) {
	a.window(a.windowOf(t))[key] += micro
}

// merge adds o's counts to a; both must have the same window size.
func (a *admitted) merge(o *admitted) {
	for w, keys := range o.counts {
		m := a.window(w)
		for k, c := range keys {
			m[k] += c
		}
	}
}

// windowStats summarises admitted hits per window against a limit.
type windowStats struct {
	// Windows is how many (key, window) pairs were complete (the window
	// lay wholly inside [from, to)) and admitted at least one hit.
	Windows int `json:"windows"`
	// Mean is the mean of admitted hits over those windows.
	Mean float64 `json:"mean"`
	// Worst is the most hits admitted in one window, complete or not
	// (a partial window can only hold fewer hits than its whole would).
	Worst float64 `json:"worst"`
	// WorstKey and WorstStart name the worst window.
	WorstKey   int       `json:"worst_key"`
	WorstStart time.Time `json:"worst_start"`
	// Over is how many windows admitted more than the limit.
	Over int `json:"over"`
}

// stats summarises the windows of a run from from to to against limit
// (in hits).
func (a *admitted) stats(from, to time.Time, limit float64) windowStats {
	var s windowStats
	var sum int64
	first, last := a.windowOf(from), a.windowOf(to)
	if from.UnixNano()%int64(a.size) != 0 {
		first++ // the window holding from started before the run
	}
	// The window holding to ends after the run, unless to is its start.
	limitMicro := int64(math.Round(limit * 1e6))
	worst, worstKW := int64(-1), keyWindow{}
	for w, keys := range a.counts {
		for k, c := range keys {
			kw := keyWindow{k, w}
			// Ties go to the lowest key, then the earliest window, so the
			// report does not depend on map order.
			if c > worst || c == worst && (kw.key < worstKW.key || kw.key == worstKW.key && kw.window < worstKW.window) {
				worst, worstKW = c, kw
			}
			if c > limitMicro {
				s.Over++
			}
			if kw.window >= first && kw.window < last {
				s.Windows++
				sum += c
			}
		}
	}
	if worst >= 0 {
		s.Worst = float64(worst) / 1e6
		s.WorstKey, s.WorstStart = worstKW.key, time.Unix(0, worstKW.window*int64(a.size)).UTC()
	}
	if s.Windows > 0 {
		s.Mean = float64(sum) / 1e6 / float64(s.Windows)
	}
	return s
}
