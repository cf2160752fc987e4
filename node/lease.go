package node

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math"
	gosync "sync"
	"sync/atomic"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// Concurrency limits: at most Limit leases of a key held at once, each
// living until released or until its expiry.
//
// A namespace's Leases table holds the leases this node granted itself
// (all of a local-only or periodic namespace's; a synchronous one's only
// those granted while its store was down), the other nodes' leases of a
// key as a count read at the last sync (periodic), and the releases that
// could not reach the store yet. Times are Unix nanoseconds.

// Lease limits.
const (
	// DefaultMaxLeaseTTL is a namespace's longest lease TTL unless its
	// MaxLeaseTTL says otherwise.
	DefaultMaxLeaseTTL = time.Hour
	// MaxLeaseTTLCap is the longest MaxLeaseTTL a namespace may set.
	MaxLeaseTTLCap = 7 * 24 * time.Hour
)

// ErrForeignLease is wrapped (with ErrNotLocal) by the error of a
// release or renewal, in a local-only namespace, of a lease another node
// (or an earlier run of this one) granted.
var ErrForeignLease = fmt.Errorf("%w: lease granted by another node", ErrNotLocal)

// storeID is the part of id a store keeps per lease of a key: the holder,
// serial and secret, 32 characters. A store finds a lease by it, so an id
// whose secret is not the lease's finds none.
func storeID(id ratelimit.LeaseID) string {
	var b [24]byte
	binary.BigEndian.PutUint64(b[:8], id.Holder)
	binary.BigEndian.PutUint64(b[8:16], id.Serial)
	binary.BigEndian.PutUint64(b[16:], id.Secret)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// ownLease is one of this node's leases: its expiry and its id's secret.
type ownLease struct {
	exp    int64
	secret uint64
}

// leaseKey is one key's leases on this node.
type leaseKey struct {
	own map[uint64]ownLease // this node's leases by serial
	// others is the other holders' live leases as of the last sync
	// (nextOther the earliest of their expiries); read whether it was
	// read at all.
	others, nextOther int64
	read              bool
	// releases are the store ids of leases released here whose release
	// has not reached the store yet, with until when it matters.
	releases map[string]int64
	used     int64 // last call, for reclaim
}

func (k *leaseKey) purge(now int64) {
	for s, o := range k.own {
		if o.exp <= now {
			delete(k.own, s)
			if k.read {
				// A syncing node's lease may have been renewed at another
				// node, in the store: it stays counted, as the others'
				// are, until the next sync reads the key's count.
				k.others++
			}
		}
	}
	for id, until := range k.releases {
		if until <= now {
			delete(k.releases, id)
		}
	}
	if k.nextOther != 0 && k.nextOther <= now {
		// Past the earliest expiry the sync saw. It may have been one of
		// this node's own leases, so the others' count stays as it is
		// (never under the truth) until the next sync.
		k.nextOther = 0
	}
}

func (k *leaseKey) held() int64 { return int64(len(k.own)) + k.others }

func (k *leaseKey) next() int64 {
	n := k.nextOther
	for _, o := range k.own {
		if n == 0 || o.exp < n {
			n = o.exp
		}
	}
	return n
}

func (k *leaseKey) idle() bool { return len(k.own) == 0 && len(k.releases) == 0 }

type leaseShard struct {
	mu   gosync.Mutex
	keys map[string]*leaseKey
}

const leaseShards = 64

// Leases is a namespace's table of concurrency leases. It is safe for
// concurrent use.
type Leases struct {
	name    string
	holder  uint64
	serial  atomic.Uint64
	maxKeys atomic.Int64 // the namespace's max_keys (setMaxKeys)
	n       atomic.Int64
	seed    maphash.Seed
	shards  [leaseShards]leaseShard
}

// newLeases returns an empty table for namespace name, holding at most
// maxKeys keys (0: DefaultMaxKeys), with a holder id drawn at random so
// that its leases are told from every other table's, this process's
// earlier runs' included.
func newLeases(name string, maxKeys int) *Leases {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	l := &Leases{name: name, holder: binary.BigEndian.Uint64(b[:]), seed: maphash.MakeSeed()}
	l.setMaxKeys(maxKeys)
	for i := range l.shards {
		l.shards[i].keys = map[string]*leaseKey{}
	}
	return l
}

// setMaxKeys sets the most keys the table holds (0: DefaultMaxKeys).
// Keys held beyond a lowered cap stay until idle; new ones are refused
// meanwhile.
func (l *Leases) setMaxKeys(n int) {
	if n <= 0 {
		n = DefaultMaxKeys
	}
	l.maxKeys.Store(int64(n))
}

func (l *Leases) shard(key string) *leaseShard {
	return &l.shards[maphash.String(l.seed, key)%leaseShards]
}

// newID returns a new lease id of key, unique in the table, with a secret
// drawn at random.
func (l *Leases) newID(key string) ratelimit.LeaseID {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return ratelimit.LeaseID{Namespace: l.name, Key: key, Holder: l.holder, Serial: l.serial.Add(1), Secret: binary.BigEndian.Uint64(b[:])}
}

// mine reports whether o is the lease id names: its secret is id's (one
// comparison of two words, whose time tells nothing of either).
func (o ownLease) mine(id ratelimit.LeaseID) bool { return o.secret == id.Secret }

// lockKey returns key's entry, created if create, with its shard locked
// (nil and unlocked when absent and not created). The caller unlocks.
func (l *Leases) lockKey(key string, now int64, create bool) (*leaseShard, *leaseKey, error) {
	sh := l.shard(key)
	sh.mu.Lock()
	k := sh.keys[key]
	if k == nil {
		if !create {
			return sh, nil, nil
		}
		if max := l.maxKeys.Load(); l.n.Add(1) > max {
			l.n.Add(-1)
			sh.mu.Unlock()
			return nil, nil, fieldErr("key", ErrKeyLimit, "namespace %q holds the leases of %d keys, its max_keys", l.name, max)
		}
		k = &leaseKey{own: map[uint64]ownLease{}}
		sh.keys[key] = k
	}
	k.purge(now)
	k.used = now
	return sh, k, nil
}

// Acquire grants a lease of key until now + ttl if fewer than limit are
// held: this node's own and the others' as last synced.
func (l *Leases) Acquire(now time.Time, key string, limit int64, ttl time.Duration) (ratelimit.LeaseGrant, error) {
	t := now.UnixNano()
	sh, k, err := l.lockKey(key, t, true)
	if err != nil {
		return ratelimit.LeaseGrant{}, err
	}
	defer sh.mu.Unlock()
	g := ratelimit.LeaseGrant{Held: k.held()}
	if g.Held >= limit {
		g.Next = k.next()
		return g, nil
	}
	g.OK, g.ID, g.Expiry = true, l.newID(key), addTTL(t, ttl)
	k.own[g.ID.Serial] = ownLease{exp: g.Expiry, secret: g.ID.Secret}
	g.Held++
	return g, nil
}

// addTTL is t + ttl, saturated.
func addTTL(t int64, ttl time.Duration) int64 {
	if t > math.MaxInt64-int64(ttl) {
		return math.MaxInt64
	}
	return t + int64(ttl)
}

// Release frees id, which this table granted (ErrForeignLease
// otherwise), and reports whether it was live. When record, the release
// is kept for the next sync to send (the store may hold the lease).
func (l *Leases) Release(now time.Time, id ratelimit.LeaseID, record bool) (bool, error) {
	if id.Holder != l.holder {
		return false, l.foreign()
	}
	t := now.UnixNano()
	sh, k, _ := l.lockKey(id.Key, t, false)
	defer sh.mu.Unlock()
	if k == nil {
		return false, nil
	}
	o, ok := k.own[id.Serial]
	if !ok || !o.mine(id) {
		return false, nil // none, or another's: its serial, not its secret
	}
	delete(k.own, id.Serial)
	if record {
		k.note(storeID(id), o.exp)
	}
	return true, nil
}

func (l *Leases) foreign() error {
	return fieldErr("lease", ErrForeignLease, "namespace %q is local only: a lease is released or renewed only at the node (and in the run) that granted it", l.name)
}

func (k *leaseKey) note(storeID string, until int64) {
	if k.releases == nil {
		k.releases = map[string]int64{}
	}
	k.releases[storeID] = max(k.releases[storeID], until)
}

// releaseElsewhere records the release of a lease this table did not
// grant, for the next sync to send (until: when it stops mattering), and
// counts one fewer of the others' leases of its key at once.
func (l *Leases) releaseElsewhere(now time.Time, id ratelimit.LeaseID, until int64) error {
	sh, k, err := l.lockKey(id.Key, now.UnixNano(), true)
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	if _, seen := k.releases[storeID(id)]; !seen && k.others > 0 {
		k.others--
	}
	k.note(storeID(id), until)
	return nil
}

// Renew sets id's expiry to now + ttl if it is live here; id must be
// this table's (ErrForeignLease otherwise).
func (l *Leases) Renew(now time.Time, id ratelimit.LeaseID, ttl time.Duration) (ok bool, expiry int64, err error) {
	if id.Holder != l.holder {
		return false, 0, l.foreign()
	}
	t := now.UnixNano()
	sh, k, _ := l.lockKey(id.Key, t, false)
	defer sh.mu.Unlock()
	if k == nil {
		return false, 0, nil
	}
	o, ok := k.own[id.Serial]
	if !ok || !o.mine(id) {
		return false, 0, nil
	}
	exp := addTTL(t, ttl)
	k.own[id.Serial] = ownLease{exp: exp, secret: o.secret}
	return true, exp, nil
}

// Read reports whether the others' leases of key were read from the
// store since the key was last created here.
func (l *Leases) Read(now time.Time, key string) bool {
	sh, k, _ := l.lockKey(key, now.UnixNano(), false)
	defer sh.mu.Unlock()
	return k != nil && k.read
}

// setRead records the store's count of key's live leases, read before
// this node held any of them (a key new to the node): held of them, the
// earliest expiring at next. It does nothing once the key was read.
func (l *Leases) setRead(now time.Time, key string, held, next int64) error {
	sh, k, err := l.lockKey(key, now.UnixNano(), true)
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	if !k.read {
		k.others, k.nextOther, k.read = held, next, true
	}
	return nil
}

// reclaim removes the keys with no lease or release of this node that
// were last used before idleBefore.
func (l *Leases) reclaim(now, idleBefore time.Time) int {
	t, cut := now.UnixNano(), idleBefore.UnixNano()
	removed := 0
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for key, k := range sh.keys {
			k.purge(t)
			if k.idle() && k.used < cut {
				delete(sh.keys, key)
				removed++
			}
		}
		sh.mu.Unlock()
	}
	l.n.Add(-int64(removed))
	return removed
}
