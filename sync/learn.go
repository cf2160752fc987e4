package sync

import (
	"sync/atomic"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// Learning the keys the node does not hold. An escalating namespace on a
// ChangeReader store applies every change the others write, inserting
// the keys it does not hold (node.KeyTotal.Learn, up to three
// quarters of max_keys), instead of dropping them. Once its change reads
// have run without a gap since before the previous window of a size
// began, every write to a window of that size that still counts reached
// the node: a key it holds no count of there has none elsewhere either,
// as of its last read. A call on such a key whose limits are all of such
// sizes is then decided in the node like any other, by its margin (see
// escalate.go), not sent to the store as a key never fetched; once every
// size is, new keys are not fetched in the background either. That is one round trip less
// for every call that is a key's first on the node, which a long tail of
// keys makes often, for memory that follows the cluster's keys rather
// than the node's.
//
// The knowledge starts over, a span of windows later, after anything
// that may have missed a write: a lost change cursor, a key not learned
// for lack of room, a key evicted (its others' totals went with it).
type learning struct {
	on bool
	// skew is how far ahead a writer's clock may run: a period and a
	// second.
	skew time.Duration
	// sizes are the namespace's window sizes, ascending.
	sizes []time.Duration
	// since (Unix ns, the namespace's clock) is when the change reads
	// began without a gap; 0 while they have not.
	since atomic.Int64
	// evicted is the namespace's evicted keys as of the last tick.
	evicted int64
}

// restart starts the knowledge over at now, if it had begun.
func (l *learning) restart(now time.Time) {
	for {
		v := l.since.Load()
		if v == 0 || l.since.CompareAndSwap(v, now.UnixNano()) {
			return
		}
	}
}

// knownSizes returns a bit per window size (ascending, as node.Margin's
// Known) whose every other node's total the node knows at t, for keys it
// holds and keys it does not: the previous window of that size began
// after the change reads did, give or take the writers' clocks.
func (tk ticker) knownSizes(t time.Time) uint32 {
	s := tk.s
	since := s.learn.since.Load()
	if since == 0 {
		return 0
	}
	tn := t.UnixNano()
	var mask uint32
	for i, size := range s.learn.sizes {
		if ratelimit.WindowStart(tn, size)-int64(size) >= since+int64(s.learn.skew) {
			mask |= 1 << i
		}
	}
	return mask
}

// knowsAll reports whether the node knows the others' totals of every
// window size at t (knownSizes).
func (tk ticker) knowsAll(t time.Time) bool {
	s := tk.s
	return s.learn.on && tk.knownSizes(t) == 1<<len(s.learn.sizes)-1
}

// learns reports whether ch is learned: a window that began after the
// change reads did (give or take the writers' clocks), so that every
// write to it was read, with the others' hits in it.
func (tk ticker) learns(ch *Change) bool {
	s := tk.s
	since := s.learn.since.Load()
	return s.learn.on && since != 0 && ch.Others != 0 && ch.Start >= since+int64(s.learn.skew)
}

// checkEvicted starts the knowledge over when keys were evicted since the
// last tick.
func (tk ticker) checkEvicted(now time.Time) {
	s := tk.s
	if !s.learn.on {
		return
	}
	if ev := s.ns.Stats().EvictedKeys; ev != s.learn.evicted {
		s.learn.evicted = ev
		s.learn.restart(now)
	}
}
