package node_test

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// TestLeasesKeyLimitOnStoreCalls: SetRead and ReleaseElsewhere create the
// key's entry, so on a full table they fail with the key limit (and
// change nothing) instead of recording anything. (First in the file: a
// mutant that skips this error path panics here rather than leaving a
// shard locked for the later tests to hang on.)
func TestLeasesKeyLimitOnStoreCalls(t *testing.T) {
	l := node.NewLeases("ns", 1)
	if g, err := l.Acquire(t0, "a", 1, time.Minute); err != nil || !g.OK {
		t.Fatalf("Acquire: %+v, %v", g, err)
	}
	wantFieldError(t, l.SetRead(t0, "b", 1, 0), "key", node.ErrKeyLimit)
	other := node.NewLeases("ns", 0).NewID("b")
	wantFieldError(t, l.ReleaseElsewhere(t0, other, t0.Add(time.Minute).UnixNano()), "key", node.ErrKeyLimit)
	if l.Len() != 1 {
		t.Errorf("Len = %d after the refused calls, want 1", l.Len())
	}
}

// rawLeaseID encodes a version-2 lease id whose namespace length prefix
// is nsLen, followed by body (namespace and key bytes).
func rawLeaseID(nsLen uint64, body string) string {
	return rawLeaseIDTail(append(binary.AppendUvarint(nil, nsLen), body...))
}

// rawLeaseIDTail encodes a version-2 lease id head followed by tail.
func rawLeaseIDTail(tail []byte) string {
	b := []byte{2}
	b = binary.BigEndian.AppendUint64(b, 1)
	b = binary.BigEndian.AppendUint64(b, 2)
	b = binary.BigEndian.AppendUint64(b, 3)
	b = append(b, tail...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// TestLeaseIDRefusalReasons: the reason of a refused id names what is
// wrong with it: a namespace length beyond the id's end, or one whose
// varint does not end, is "truncated", while a namespace that takes every remaining byte (no key) is a
// malformed key, not a truncated id.
func TestLeaseIDRefusalReasons(t *testing.T) {
	for _, tc := range []struct {
		name, s, reason string
	}{
		{"namespace past the end", rawLeaseID(3, "ns"), "truncated"},
		{"no key", rawLeaseID(2, "ns"), "malformed namespace or key"},
		{"unfinished length", rawLeaseIDTail([]byte{0x80}), "truncated"}, // a varint's continuation byte, then nothing
	} {
		_, err := ratelimit.ParseLeaseID(tc.s)
		var fe *ratelimit.FieldError
		if !errors.As(err, &fe) || !errors.Is(err, ratelimit.ErrInvalidLease) || !strings.Contains(fe.Reason, tc.reason) {
			t.Errorf("%s: ParseLeaseID = %v, want a FieldError wrapping ErrInvalidLease saying %q", tc.name, err, tc.reason)
		}
	}
	if id, err := ratelimit.ParseLeaseID(rawLeaseID(2, "nsk")); err != nil || id.Namespace != "ns" || id.Key != "k" {
		t.Errorf("a one-byte key: %+v, %v; want ns/k", id, err)
	}
}

// TestLeaseReleaseKeptUntilItsExpiry: a recorded release is sent by every
// sync until the lease's expiry, and no longer at that instant (a lease
// expired in the store needs no release).
func TestLeaseReleaseKeptUntilItsExpiry(t *testing.T) {
	l := node.NewLeases("ns", 0)
	g, err := l.Acquire(t0, "k", 1, time.Minute)
	if err != nil || !g.OK {
		t.Fatalf("Acquire: %+v, %v", g, err)
	}
	if ok, err := l.Release(t0, g.ID, true); !ok || err != nil {
		t.Fatalf("Release: %v, %v", ok, err)
	}
	exp := time.Unix(0, g.Expiry)
	if got := l.Collect(exp.Add(-1), false, nil); len(got) != 1 || got[0].Releases[node.StoreID(g.ID)] != g.Expiry {
		t.Fatalf("Collect 1ns before the expiry: %+v, want the release", got)
	}
	if got := l.Collect(exp, false, nil); len(got) != 0 {
		t.Errorf("Collect at the expiry: %+v, want nothing to send", got)
	}
}

// TestLeasesReclaimKeepsKeyUsedAtCut: Reclaim removes keys last used
// strictly before idleBefore; one used exactly at it stays.
func TestLeasesReclaimKeepsKeyUsedAtCut(t *testing.T) {
	l := node.NewLeases("ns", 0)
	if g, _ := l.Acquire(t0, "k", 1, time.Second); !g.OK {
		t.Fatal("Acquire refused")
	}
	now := t0.Add(time.Minute) // the lease has expired: the key is idle
	if n := l.Reclaim(now, t0); n != 0 || l.Len() != 1 {
		t.Fatalf("Reclaim with idleBefore at the last use removed %d, %d left; want 0, 1", n, l.Len())
	}
	if n := l.Reclaim(now, t0.Add(1)); n != 1 || l.Len() != 0 {
		t.Fatalf("Reclaim with idleBefore 1ns after the last use removed %d, %d left; want 1, 0", n, l.Len())
	}
}

// TestLeasesNextOtherForgottenAfterItPasses: a refused Acquire reports
// the earliest expiry the last read of the store gave (Next) until that
// instant; from it on (it passed, the lease may be gone) Next is unknown
// (0) while the others' count stays until the next sync.
func TestLeasesNextOtherForgottenAfterItPasses(t *testing.T) {
	l := node.NewLeases("ns", 0)
	next := t0.Add(time.Second)
	if err := l.SetRead(t0, "k", 2, next.UnixNano()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		at   time.Time
		next int64
	}{
		{t0, next.UnixNano()},
		{next.Add(-1), next.UnixNano()},
		{next, 0},
		{next.Add(time.Second), 0},
	} {
		g, err := l.Acquire(tc.at, "k", 2, time.Minute)
		if err != nil || g.OK || g.Held != 2 || g.Next != tc.next {
			t.Errorf("Acquire at %v: %+v, %v; want refused, held 2, next %d", tc.at, g, err, tc.next)
		}
	}
}

// TestLeasesSyncedNextOnlyWithOthers: after a counted sync, a refused
// Acquire's Next is the store's earliest expiry when other nodes hold
// leases of the key; when the store's count is only this node's own
// leases, Next is the earliest of their local expiries (here renewed
// since the sync collected them), not the store's older one.
func TestLeasesSyncedNextOnlyWithOthers(t *testing.T) {
	l := node.NewLeases("ns", 0)
	storeNext := t0.Add(10 * time.Second).UnixNano()

	// Key a: one lease here, one of another node.
	if g, _ := l.Acquire(t0, "a", 3, time.Minute); !g.OK {
		t.Fatal("Acquire of a refused")
	}
	sa := leaseSyncOf(t, l, "a")
	l.Synced(t0, sa, []bool{true}, true, true, 2, storeNext)
	if g, _ := l.Acquire(t0, "a", 2, time.Minute); g.OK || g.Held != 2 || g.Next != storeNext {
		t.Errorf("a: %+v; want refused, held 2, next %d (the store's)", g, storeNext)
	}

	// Key b: only this node's lease, renewed after the sync collected it.
	gb, _ := l.Acquire(t0, "b", 3, time.Minute)
	sb := leaseSyncOf(t, l, "b")
	ok, renewed, _ := l.Renew(t0.Add(5*time.Second), gb.ID, time.Minute)
	if !ok {
		t.Fatal("Renew of b's lease failed")
	}
	l.Synced(t0.Add(5*time.Second), sb, []bool{true}, true, true, 1, gb.Expiry)
	if g, _ := l.Acquire(t0.Add(5*time.Second), "b", 1, time.Minute); g.OK || g.Held != 1 || g.Next != renewed {
		t.Errorf("b: %+v; want refused, held 1, next %d (the renewed expiry)", g, renewed)
	}
}

// leaseSyncOf returns key's part of a full Collect of l at t0.
func leaseSyncOf(t *testing.T, l *node.Leases, key string) node.LeaseSync {
	t.Helper()
	for _, s := range l.Collect(t0, true, nil) {
		if s.Key == key {
			return s
		}
	}
	t.Fatalf("Collect holds no %q", key)
	return node.LeaseSync{}
}

// TestLeasesReadAndSetReadOnce: Read reports whether the others' count of
// a key was read; SetRead records it only the first time.
func TestLeasesReadAndSetReadOnce(t *testing.T) {
	l := node.NewLeases("ns", 0)
	if l.Read(t0, "k") {
		t.Error("Read of a key never seen = true")
	}
	if g, _ := l.Acquire(t0, "k", 5, time.Minute); !g.OK {
		t.Fatal("Acquire refused")
	}
	if l.Read(t0, "k") {
		t.Error("Read before SetRead = true")
	}
	if err := l.SetRead(t0, "k", 3, 0); err != nil {
		t.Fatal(err)
	}
	if !l.Read(t0, "k") {
		t.Error("Read after SetRead = false")
	}
	if err := l.SetRead(t0, "k", 0, 0); err != nil { // ignored: already read
		t.Fatal(err)
	}
	if g, _ := l.Acquire(t0, "k", 5, time.Minute); !g.OK || g.Held != 5 {
		t.Errorf("Acquire: %+v, want granted with 5 held (1 own, 3 others, this)", g)
	}
}

// TestLeasesReleaseElsewhere: a release of another node's lease counts
// one fewer of the others' leases at once, once per lease however often
// it is repeated, never below zero, and is kept for the sync to send.
func TestLeasesReleaseElsewhere(t *testing.T) {
	l := node.NewLeases("ns", 0)
	other := node.NewLeases("ns", 0)
	if err := l.SetRead(t0, "k", 2, 0); err != nil {
		t.Fatal(err)
	}
	g1, _ := other.Acquire(t0, "k", 5, time.Minute)
	until := g1.Expiry
	for range 2 { // the second time changes no count
		if err := l.ReleaseElsewhere(t0, g1.ID, until); err != nil {
			t.Fatal(err)
		}
	}
	if g, _ := l.Acquire(t0, "k", 3, time.Minute); !g.OK || g.Held != 2 {
		t.Errorf("Acquire after the release elsewhere: %+v, want granted with 2 held (1 other, this)", g)
	}
	s := leaseSyncOf(t, l, "k")
	if len(s.Releases) != 1 || s.Releases[node.StoreID(g1.ID)] != until {
		t.Errorf("releases to send: %v, want %s until %d", s.Releases, node.StoreID(g1.ID), until)
	}

	// No others counted: the count stays at zero.
	g2, _ := other.Acquire(t0, "z", 5, time.Minute)
	if err := l.ReleaseElsewhere(t0, g2.ID, g2.Expiry); err != nil {
		t.Fatal(err)
	}
	if g, _ := l.Acquire(t0, "z", 1, time.Minute); !g.OK || g.Held != 1 {
		t.Errorf("Acquire of z: %+v, want granted with 1 held", g)
	}
	if g, _ := l.Acquire(t0, "z", 1, time.Minute); g.OK || g.Held != 1 {
		t.Errorf("second Acquire of z at limit 1: %+v, want refused with 1 held", g)
	}
}

// TestLeaseIDLongNamespaceRoundTrip: an id of a namespace of the longest
// name (64 characters) and a one-byte key encodes and parses back.
func TestLeaseIDLongNamespaceRoundTrip(t *testing.T) {
	ns := strings.Repeat("n", 64)
	id := node.NewLeases(ns, 0).NewID("k")
	got, err := ratelimit.ParseLeaseID(id.String())
	if err != nil || got != id {
		t.Fatalf("round trip of %+v: %+v, %v", id, got, err)
	}
}

// TestMaxLeaseTTLAWeek: a namespace's max_lease_ttl may be as long as a
// week, and no longer.
func TestMaxLeaseTTLAWeek(t *testing.T) {
	week := 7 * 24 * time.Hour
	c := localConfig(time.Second)
	c.MaxLeaseTTL = week
	if err := c.Validate(); err != nil {
		t.Errorf("max_lease_ttl of a week: %v", err)
	}
	c.MaxLeaseTTL = week + time.Nanosecond
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "max_lease_ttl") {
		t.Errorf("max_lease_ttl of a week and 1ns: %v, want refused", err)
	}
}
