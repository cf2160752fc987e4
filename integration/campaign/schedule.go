// Package campaign runs random schedules of faults against a real
// three-node limiterd cluster under a mixed load, records every call with
// its outcome, and judges the history against the guarantees the docs
// state (docs/reliability.md). This file makes schedules; oracle.go judges
// histories; the campaign itself (build tag integration) drives processes.
package campaign

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"
)

// FaultKind is one kind of fault the nemesis injects.
type FaultKind string

// The faults. Each lasts from At to At+For, then is undone (a node
// restarted, the store started, a cut healed, a clock set right).
const (
	Kill      FaultKind = "kill"       // SIGKILL a node; restart it after For
	Term      FaultKind = "term"       // SIGTERM a node; restart it after For
	StoreDown FaultKind = "store-down" // stop the store (every node loses it); start it after For
	Cut       FaultKind = "cut"        // cut one node from the store
	Slow      FaultKind = "slow"       // delay one node's store traffic by Delay each way
	Skew      FaultKind = "skew"       // offset one node's clock by Offset
)

// Fault is one fault of a schedule.
type Fault struct {
	Kind FaultKind
	// Node is the node it strikes; -1 for the store.
	Node   int
	At     time.Duration
	For    time.Duration
	Delay  time.Duration `json:",omitempty"` // Slow
	Offset time.Duration `json:",omitempty"` // Skew
}

// End is when the fault is undone.
func (f Fault) End() time.Duration { return f.At + f.For }

func (f Fault) String() string {
	s := fmt.Sprintf("%s", f.Kind)
	if f.Node >= 0 {
		s += fmt.Sprintf(" node-%d", f.Node)
	}
	switch f.Kind {
	case Slow:
		s += fmt.Sprintf(" by %v", f.Delay)
	case Skew:
		s += fmt.Sprintf(" by %v", f.Offset)
	}
	return fmt.Sprintf("%s at %v for %v", s, f.At, f.For)
}

// Params shape the schedules of a campaign.
type Params struct {
	Nodes    int
	Duration time.Duration
	// MaxSkew bounds a Skew fault's offset (the docs' tolerated skew).
	MaxSkew time.Duration
	// MaxSlow bounds a Slow fault's delay.
	MaxSlow time.Duration
	// Kinds are the faults to draw from; nil: all.
	Kinds []FaultKind
}

// Schedule is the faults of one run, made from its seed.
type Schedule struct {
	Seed   uint64
	Faults []Fault
}

func (s Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d:", s.Seed)
	for _, f := range s.Faults {
		fmt.Fprintf(&b, "\n  %s", f)
	}
	return b.String()
}

var allKinds = []FaultKind{Kill, Term, StoreDown, Cut, Slow, Skew}

// Generate makes the schedule of seed: the same seed and params give the
// same faults at the same offsets. At least three faults overlap at one
// instant; faults on one target (a node's process, the store) never
// overlap, so each is undone before the next begins.
func Generate(seed uint64, p Params) Schedule {
	rnd := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	kinds := p.Kinds
	if len(kinds) == 0 {
		kinds = allKinds
	}
	ms := func(lo, hi time.Duration) time.Duration {
		return lo + time.Duration(rnd.Int64N(int64(hi-lo)/int64(time.Millisecond)+1))*time.Millisecond
	}
	// Faults start after the load's first second and end 3 s before the
	// run does, so that every fault's effect ends inside the run.
	first, last := time.Second, p.Duration-3*time.Second
	s := Schedule{Seed: seed}
	draw := func(around time.Duration) (Fault, bool) {
		f := Fault{Kind: kinds[rnd.IntN(len(kinds))], Node: rnd.IntN(p.Nodes)}
		f.For = ms(500*time.Millisecond, 5*time.Second)
		if around >= 0 {
			f.At = around - ms(0, min(f.For, around-first))
		} else {
			f.At = ms(first, last-f.For)
		}
		if f.At < first {
			f.At = first
		}
		if f.End() > last {
			f.For = last - f.At
		}
		switch f.Kind {
		case StoreDown:
			f.Node = -1
		case Slow:
			f.Delay = ms(10*time.Millisecond, p.MaxSlow)
		case Skew:
			f.Offset = ms(-p.MaxSkew, p.MaxSkew)
		}
		for _, g := range s.Faults {
			if target(g) == target(f) && f.At < g.End()+200*time.Millisecond && g.At < f.End()+200*time.Millisecond {
				return f, false
			}
		}
		return f, f.For >= 200*time.Millisecond
	}
	// Three around one instant, then up to three more anywhere.
	center := ms(first+2*time.Second, last-2*time.Second)
	for tries := 0; len(s.Faults) < 3 && tries < 1000; tries++ {
		if f, ok := draw(center); ok && f.At <= center && center < f.End() {
			s.Faults = append(s.Faults, f)
		}
	}
	extra := rnd.IntN(4)
	for tries := 0; extra > 0 && tries < 1000; tries++ {
		if f, ok := draw(-1); ok {
			s.Faults = append(s.Faults, f)
			extra--
		}
	}
	sort.SliceStable(s.Faults, func(i, j int) bool { return s.Faults[i].At < s.Faults[j].At })
	return s
}

// target is what a fault acts on: faults on one target take turns.
func target(f Fault) string {
	switch f.Kind {
	case Kill, Term:
		return fmt.Sprintf("process %d", f.Node)
	case StoreDown:
		return "store"
	case Cut, Slow:
		return fmt.Sprintf("link %d", f.Node)
	default:
		return fmt.Sprintf("clock %d", f.Node)
	}
}

// MaxOverlap is the largest number of faults active at one instant.
func (s Schedule) MaxOverlap() int {
	best := 0
	for _, f := range s.Faults {
		n := 0
		for _, g := range s.Faults {
			if g.At <= f.At && f.At < g.End() {
				n++
			}
		}
		best = max(best, n)
	}
	return best
}
