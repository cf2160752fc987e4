package node

import (
	"slices"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// A LeaseTick is one exchange of a namespace's leases with a store, in
// the style of a Tick (raft's Ready and Advance): TakeTick lists in it
// what to send, the caller sends it and records the store's answers in
// it, and ApplyTick applies them to the table, the one step that changes
// it.
//
// The exchange is a tick's, or one call's when Key is set. A tick sends
// the releases not sent yet and writes this node's leases, and with All
// reads the count of every key held. A call sends one op of its own on
// lease ID of Key: TakeTick names that lease in the store, ApplyTick
// records what the call leaves to the table (Unsent, Counted). A call
// that only leaves something may fill t without TakeTick (ID set when
// Unsent): TakeTick would make a lease id it does not need.
type LeaseTick struct {
	// Set by the caller before TakeTick, which keeps them.
	//
	// Key, when set, makes the exchange one call's, on lease ID of Key
	// (zero: a new lease of Key, which TakeTick makes, for an
	// acquisition the store decides). All: a tick reads the count of
	// every key held. Keep: the leases of this node a tick writes stay
	// its own (periodic); otherwise the store decides them from then on
	// (synchronous).
	Key       string
	ID        ratelimit.LeaseID
	All, Keep bool

	// A tick's ops, in the order to send them, a key's together: op i is
	// on key OpKey[i]; it reads the key's count when OpID[i] is empty;
	// else, where OpRelease[i], it releases the lease of store id
	// OpID[i], remembered until OpUntil[i]; otherwise it writes that
	// lease of this node, to expire at OpUntil[i].
	OpKey, OpID []string
	OpUntil     []int64
	OpRelease   []bool
	// A call's lease: StoreID, its id in the store; Mine, whether this
	// table granted it (its release and renewal are decided here first).
	StoreID string
	Mine    bool

	// A tick's outcome, per op, where the store answered it (Got[i]; a
	// key's ops all or none): OK[i], whether a write found the lease
	// live and not released (false: released elsewhere); Held[i] and
	// Next[i], a count's live leases and the earliest of their expiries.
	Got, OK    []bool
	Held, Next []int64
	// A call's outcome. Unsent: ID is to be released in the store (a
	// release, or an acquisition the store may have granted) and the call
	// could not tell it; the table sends the release with its ticks until
	// Until and counts one fewer of the others' leases of Key at once.
	// Counted: Key's count was read before this node held any of its
	// leases: KeyHeld live, the earliest expiring at KeyNext (ignored
	// once the key was read).
	Unsent           bool
	Until            int64
	Counted          bool
	KeyHeld, KeyNext int64

	// Per op: a write's lease serial and secret (0 and 0 otherwise).
	serial, secret []uint64
	// applied ends the ops ApplyTick went through.
	applied int
}

// TakeTick readies t for an exchange at now, as its Key, ID, All and
// Keep say, its outcome unset: for a call it names the call's lease; for
// a tick it lists the ops of every key with leases of this node or
// releases to send (with All: of every key held, each with a count). The
// lists reuse t's memory.
func (l *Leases) TakeTick(now time.Time, t *LeaseTick) {
	clear(t.OpKey) // drop references to keys
	clear(t.OpID)
	t.OpKey, t.OpID, t.OpUntil, t.OpRelease = t.OpKey[:0], t.OpID[:0], t.OpUntil[:0], t.OpRelease[:0]
	t.serial, t.secret, t.applied = t.serial[:0], t.secret[:0], 0
	t.StoreID, t.Mine = "", false
	t.Unsent, t.Until, t.Counted, t.KeyHeld, t.KeyNext = false, 0, false, 0, 0
	if t.Key != "" {
		if t.ID == (ratelimit.LeaseID{}) {
			t.ID = l.newID(t.Key)
		}
		t.StoreID, t.Mine = storeID(t.ID), t.ID.Holder == l.holder
		t.ready()
		return
	}
	tn := now.UnixNano()
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for key, k := range sh.keys {
			k.purge(tn)
			if !t.All && k.idle() {
				continue
			}
			for id, until := range k.releases {
				t.op(key, id, until, true, 0, 0)
			}
			for serial, o := range k.own {
				t.op(key, "", o.exp, false, serial, o.secret) // its id below
			}
			if t.All {
				t.op(key, "", 0, false, 0, 0)
			}
		}
		sh.mu.Unlock()
	}
	// The writes' store ids, encoded with no shard locked. Serials start
	// at 1: 0 is no write.
	for i, serial := range t.serial {
		if serial != 0 {
			t.OpID[i] = storeID(ratelimit.LeaseID{Holder: l.holder, Serial: serial, Secret: t.secret[i]})
		}
	}
	t.ready()
}

func (t *LeaseTick) op(key, id string, until int64, release bool, serial, secret uint64) {
	t.OpKey = append(t.OpKey, key)
	t.OpID = append(t.OpID, id)
	t.OpUntil = append(t.OpUntil, until)
	t.OpRelease = append(t.OpRelease, release)
	t.serial = append(t.serial, serial)
	t.secret = append(t.secret, secret)
}

// ready sizes t's outcome to its ops, all unset.
func (t *LeaseTick) ready() {
	n := len(t.OpKey)
	t.Got = slices.Grow(t.Got[:0], n)[:n]
	clear(t.Got)
	t.OK = slices.Grow(t.OK[:0], n)[:n]
	clear(t.OK)
	t.Held = slices.Grow(t.Held[:0], n)[:n]
	clear(t.Held)
	t.Next = slices.Grow(t.Next[:0], n)[:n]
	clear(t.Next)
}

// ApplyTick records t's outcome in the table at now.
//
// Of a tick: each key whose ops were all answered takes the answers: a
// release sent is forgotten (unless released again since), a lease the
// store had released is dropped (and, without Keep, one it holds too: the
// store decides), and a count sets the others' leases of the key (the
// store's live ones but this node's). ApplyTick goes on from where the
// last one stopped, up to the first key not answered after the answered
// ones, so a caller that sends a tick's ops in batches, in order, applies
// each batch as it is answered (a batch that failed stays unanswered).
//
// Of a call: its Unsent release or Counted read; the error is the key
// limit's when the key is not held and the table is full.
func (l *Leases) ApplyTick(now time.Time, t *LeaseTick) error {
	if t.Key != "" {
		switch {
		case t.Unsent:
			return l.releaseElsewhere(now, t.ID, t.Until)
		case t.Counted:
			return l.setRead(now, t.Key, t.KeyHeld, t.KeyNext)
		}
		return nil
	}
	some := false
	for lo := t.applied; lo < len(t.OpKey); {
		hi := lo + 1
		for hi < len(t.OpKey) && t.OpKey[hi] == t.OpKey[lo] {
			hi++
		}
		if slices.Contains(t.Got[lo:hi], false) {
			if some {
				break // past the answered ones: not sent yet
			}
		} else {
			l.applyKey(now, t, lo, hi)
			t.applied, some = hi, true
		}
		lo = hi
	}
	return nil
}

// applyKey applies the answers to t's ops lo to hi, all of one key.
func (l *Leases) applyKey(now time.Time, t *LeaseTick, lo, hi int) {
	sh, k, _ := l.lockKey(t.OpKey[lo], now.UnixNano(), false)
	defer sh.mu.Unlock()
	if k == nil {
		return
	}
	mine := int64(0)
	counted, held, next := false, int64(0), int64(0)
	for i := lo; i < hi; i++ {
		switch {
		case t.OpID[i] == "":
			counted, held, next = true, t.Held[i], t.Next[i]
		case t.OpRelease[i]:
			if k.releases[t.OpID[i]] == t.OpUntil[i] {
				delete(k.releases, t.OpID[i])
			}
		default:
			serial, stored := t.serial[i], t.OK[i]
			_, live := k.own[serial]
			// Only a lease still the node's is in its own count: one that
			// expired since the tick listed it is in the others' count
			// (purge), and the store's count holds it if it was renewed
			// elsewhere.
			if stored && live {
				mine++
			}
			if live && (!stored || !t.Keep) {
				delete(k.own, serial)
			}
		}
	}
	if counted {
		k.others, k.nextOther, k.read = max(held-mine, 0), 0, true
		if k.others > 0 {
			k.nextOther = next // a lower bound: next may be one of this node's
		}
	}
}
