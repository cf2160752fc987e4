package node

import (
	"slices"
	"time"
)

// A Tick is one exchange of a namespace's sliding windows and buckets
// with a store, in the style of raft's Ready and Advance: TakeTick lists
// what the namespace changed since its last push (Push), the windows
// whose other nodes' totals it needs (Read) and the buckets to sync
// (Buckets); the caller writes and reads the store and records the
// outcome in the same Tick (Version, Others, Got, each bucket's answer);
// ApplyTick applies it, the one step that changes the namespace. A caller
// may also fill Read itself (windows it found by key, say) before filling
// Others and Got, or Changes.
type Tick struct {
	// Push lists the windows whose own totals changed since their last
	// push.
	Push []Pending
	// Read lists the windows whose other nodes' totals are wanted.
	Read []Window
	// Version[i] is the version Push[i] was stored with: 0 when it was
	// not sent, Uncertain when its push failed after it was sent (the
	// store may hold it or not).
	Version []int64
	// Others[i] is the other nodes' total of Read[i], read where Got[i].
	Others []int64
	Got    []bool
	// Changes lists other nodes' totals read by key (from a store's log
	// of changes), which ApplyTick finds without walking the keys and
	// applies after Read, in order: a later change of a window is newer.
	Changes []KeyTotal
	// Buckets lists the buckets to sync in key order, so that a key's
	// buckets, which one store call holds, are next to each other; the
	// caller records the store's answers in place.
	Buckets []BucketSync

	// now is when the tick was taken, the time its calls are sent at: an
	// answer to calls sent before the ones taken last is older.
	now int64
	// learnedAt is the time of the last tick whose buckets' answers were
	// taken: a bucket's rate is learned over the time since
	// (bucketmargin.go).
	learnedAt int64
}

// TickParts selects what TakeTick lists.
type TickParts uint8

// The parts of a Tick.
const (
	// PushWindows lists the windows whose own totals changed since their
	// last push.
	PushWindows TickParts = 1 << iota
	// ReadWindows lists the current and previous windows of every key
	// touched in either: those whose other nodes' totals the node needs.
	ReadWindows
	// DirtyBuckets lists the buckets whose consumption has not all
	// reached the store; AllBuckets every bucket held (a periodic
	// namespace reads them all).
	DirtyBuckets
	AllBuckets
)

// KeyTotal is the other nodes' total of one window of a key, as a
// change log reports it.
type KeyTotal struct {
	Key    string
	Size   time.Duration
	Start  int64
	Others int64
	// Learn inserts a key the node does not hold (never past three
	// quarters of MaxKeys), so that the others' totals of a key are known
	// before the node's first call on it; it stays unfetched, as a change
	// tells nothing of the key's other windows. Without Learn, a change
	// applies only to a key touched in the current or previous window.
	Learn bool
	// Set by ApplyTick: Ahead when the window starts after the current
	// one (a writer whose clock runs ahead; give it again later), Full
	// when Learn found no room. A change neither applied nor Ahead nor
	// Full is of a window that no longer counts here. ApplyTick stops at
	// a Full and shortens Changes to end there, so that the caller may
	// decide again whether to learn the rest.
	Applied, Ahead, Full bool
}

// Uncertain is the Version of a push that failed after it was sent: the
// window stays dirty until a push of it succeeds.
const Uncertain = -1

// TakeTick empties t (Changes too) and lists in it, at now, the parts
// asked for, with room for their outcome. The lists reuse t's memory.
func (ns *Namespace) TakeTick(now time.Time, t *Tick, parts TickParts) {
	clear(t.Push) // drop references to entries and keys
	clear(t.Read)
	clear(t.Changes)
	clear(t.Buckets)
	t.Push, t.Read, t.Changes, t.Buckets = t.Push[:0], t.Read[:0], t.Changes[:0], t.Buckets[:0]
	t.now = now.UnixNano()
	if parts&PushWindows != 0 {
		t.Push = ns.collectDirty(now, t.Push)
	}
	if parts&ReadWindows != 0 {
		t.Read = ns.collectInterest(now, t.Read)
	}
	if parts&(DirtyBuckets|AllBuckets) != 0 {
		ns.takeBuckets(t, parts&AllBuckets != 0)
	}
	t.ready()
}

// ready sizes t's outcome to its lists, all unset.
func (t *Tick) ready() {
	t.Version = slices.Grow(t.Version[:0], len(t.Push))[:len(t.Push)]
	clear(t.Version)
	t.Others = slices.Grow(t.Others[:0], len(t.Read))[:len(t.Read)]
	clear(t.Others)
	t.Got = slices.Grow(t.Got[:0], len(t.Read))[:len(t.Read)]
	clear(t.Got)
}

// ApplyTick records t's outcome in the namespace: each window pushed as
// stored with its version (a push completed after a newer one does not
// move the mark back), each failed one as uncertain, each window read
// with the others' total, each bucket the store answered for, then the
// changes.
func (ns *Namespace) ApplyTick(t *Tick) {
	for i, p := range t.Push {
		switch v := t.Version[i]; {
		case v == Uncertain:
			ns.markUncertain(p)
		case v > 0:
			ns.markPushed(p, v)
		}
	}
	for i, w := range t.Read {
		if t.Got[i] {
			ns.setOthers(w, t.Others[i])
		}
	}
	ns.applyBuckets(t)
	now := time.Unix(0, t.now)
	for i := range t.Changes {
		c := &t.Changes[i]
		if c.Learn {
			var w Window
			if w, c.Applied, c.Ahead, c.Full = ns.learnWindow(now, c.Key, c.Size, c.Start); c.Applied {
				ns.setLearned(w, c.Others)
			}
			if c.Full {
				t.Changes = t.Changes[:i+1]
				return
			}
			continue
		}
		var w Window
		if w, c.Applied, c.Ahead = ns.interestWindow(now, c.Key, c.Size, c.Start); c.Applied {
			ns.setOthers(w, c.Others)
		}
	}
}
