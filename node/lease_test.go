package node_test

import (
	"errors"
	"strings"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

var t0 = time.Unix(1_700_000_000, 0)

func TestLeaseIDRoundTrip(t *testing.T) {
	l := node.NewLeases("ns-1", 0)
	for _, key := range []string{"k", "a:b{c}", "ключ", strings.Repeat("x", ratelimit.MaxKeyLen)} {
		id := l.NewID(key)
		got, err := ratelimit.ParseLeaseID(id.String())
		if err != nil {
			t.Fatalf("ParseLeaseID(%q): %v", id.String(), err)
		}
		if got != id {
			t.Fatalf("round trip of %+v gave %+v", id, got)
		}
		if len(node.StoreID(id)) != 32 {
			t.Fatalf("StoreID %q: want 32 characters", node.StoreID(id))
		}
	}
	if a, b := l.NewID("k"), l.NewID("k"); node.StoreID(a) == node.StoreID(b) {
		t.Fatal("two leases of one key share a store id")
	}
	if node.NewLeases("ns-1", 0).NewID("k").Holder == l.NewID("k").Holder {
		t.Fatal("two tables drew the same holder")
	}
}

// TestLeaseIDForgedSerial: the serials of a table are sequential, so a
// caller holding one lease knows the serial of the lease granted before
// it; an id changed to carry that serial lacks that lease's secret, and
// neither releases nor renews it: the lease stays held.
func TestLeaseIDForgedSerial(t *testing.T) {
	l := node.NewLeases("ns", 0)
	victim, err := l.Acquire(t0, "k", 2, time.Minute)
	if err != nil || !victim.OK {
		t.Fatalf("acquire: %+v, %v", victim, err)
	}
	mine, err := l.Acquire(t0, "k", 2, time.Minute)
	if err != nil || !mine.OK {
		t.Fatalf("acquire: %+v, %v", mine, err)
	}
	if mine.ID.Serial != victim.ID.Serial+1 {
		t.Fatalf("serials %d then %d: the test expects them sequential", victim.ID.Serial, mine.ID.Serial)
	}
	if mine.ID.Secret == victim.ID.Secret {
		t.Fatal("two leases drew the same secret")
	}
	forged := mine.ID
	forged.Serial = victim.ID.Serial
	parsed, err := ratelimit.ParseLeaseID(forged.String())
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := l.Release(t0, parsed, true); ok || err != nil {
		t.Errorf("release of the forged id: %v, %v; want not released", ok, err)
	}
	if ok, _, err := l.Renew(t0, parsed, time.Hour); ok || err != nil {
		t.Errorf("renewal of the forged id: %v, %v; want not renewed", ok, err)
	}
	// Both leases are still held: a third is refused.
	if g, _ := l.Acquire(t0, "k", 2, time.Minute); g.OK || g.Held != 2 {
		t.Errorf("acquire after the forged release: %+v; want refused with 2 held", g)
	}
	// No release of the victim's lease waits for the store.
	if got := l.Collect(t0, false, nil); len(got) != 1 || len(got[0].Releases) != 0 {
		t.Errorf("Collect after the forged release: %+v; want no release to send", got)
	}
	if ok, _ := l.Release(t0, victim.ID, true); !ok {
		t.Error("the victim's own id no longer releases its lease")
	}
}

func TestParseLeaseIDRejects(t *testing.T) {
	good := node.NewLeases("ns", 0).NewID("key").String()
	for name, s := range map[string]string{
		"empty":      "",
		"not base64": "!!!",
		"truncated":  good[:10],
		"version 1":  "AQ" + good[2:], // the format without a secret
		"version 3":  "Aw" + good[2:],
		"too long":   strings.Repeat("A", 3*ratelimit.MaxKeyLen),
		"no key":     ratelimit.LeaseID{Namespace: "ns", Holder: 1, Serial: 1}.String(),
		"bad ns":     ratelimit.LeaseID{Namespace: "a b", Key: "k", Holder: 1, Serial: 1}.String(),
		"bad utf8":   ratelimit.LeaseID{Namespace: "ns", Key: "\xff", Holder: 1, Serial: 1}.String(),
	} {
		_, err := ratelimit.ParseLeaseID(s)
		var fe *ratelimit.FieldError
		if !errors.As(err, &fe) || fe.Field != "lease" || !errors.Is(err, ratelimit.ErrInvalidLease) {
			t.Errorf("%s: ParseLeaseID(%q) = %v, want a FieldError on lease wrapping ErrInvalidLease", name, s, err)
		}
	}
}

func FuzzParseLeaseID(f *testing.F) {
	f.Add(node.NewLeases("ns", 0).NewID("key").String())
	f.Add("AQ")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ratelimit.ParseLeaseID(s)
		if err != nil {
			return
		}
		// Whatever parses is a lease of a valid namespace and key, and
		// encodes back to an id that parses the same.
		again, err := ratelimit.ParseLeaseID(id.String())
		if err != nil || again != id {
			t.Fatalf("%q parsed as %+v, which re-parses as %+v, %v", s, id, again, err)
		}
	})
}

func TestLeasesLimitReleaseExpiry(t *testing.T) {
	l := node.NewLeases("ns", 0)
	now := t0
	var ids []ratelimit.LeaseID
	for i := range 3 {
		g, err := l.Acquire(now.Add(time.Duration(i)*time.Second), "k", 3, 10*time.Second)
		if err != nil || !g.OK || g.Held != int64(i+1) {
			t.Fatalf("acquire %d: %+v, %v", i, g, err)
		}
		ids = append(ids, g.ID)
	}
	g, _ := l.Acquire(now, "k", 3, 10*time.Second)
	if g.OK || g.Held != 3 || g.Next != now.Add(10*time.Second).UnixNano() {
		t.Fatalf("4th acquire: %+v, want refused, held 3, next at the first expiry", g)
	}
	if ok, err := l.Release(now, ids[1], false); !ok || err != nil {
		t.Fatalf("release: %v, %v", ok, err)
	}
	if ok, _ := l.Release(now, ids[1], false); ok {
		t.Fatal("second release reported live")
	}
	if g, _ := l.Acquire(now, "k", 3, 10*time.Second); !g.OK {
		t.Fatalf("acquire after release: %+v", g)
	}
	// Renew the first past the others' expiry; at +11 s only it is left.
	if ok, exp, _ := l.Renew(now.Add(5*time.Second), ids[0], 20*time.Second); !ok || exp != now.Add(25*time.Second).UnixNano() {
		t.Fatalf("renew: %v %d", ok, exp)
	}
	g, _ = l.Acquire(now.Add(12*time.Second), "k", 2, time.Second)
	if !g.OK || g.Held != 2 {
		t.Fatalf("after expiry: %+v, want granted with held 2 (the renewed one and this)", g)
	}
	if ok, _, _ := l.Renew(now.Add(12*time.Second), ids[2], time.Second); ok {
		t.Fatal("renewed an expired lease")
	}
	// A lower limit than held refuses; other keys are independent.
	if g, _ := l.Acquire(now.Add(12*time.Second), "k", 1, time.Second); g.OK {
		t.Fatal("limit 1 granted with 2 held")
	}
	if g, _ := l.Acquire(now, "other", 1, time.Second); !g.OK {
		t.Fatal("another key refused")
	}
}

func TestLeasesForeign(t *testing.T) {
	a, b := node.NewLeases("ns", 0), node.NewLeases("ns", 0)
	g, _ := a.Acquire(t0, "k", 1, time.Second)
	if _, err := b.Release(t0, g.ID, false); !errors.Is(err, node.ErrForeignLease) || !errors.Is(err, node.ErrNotLocal) {
		t.Fatalf("release at another table: %v, want ErrForeignLease", err)
	}
	if _, _, err := b.Renew(t0, g.ID, time.Second); !errors.Is(err, node.ErrForeignLease) {
		t.Fatalf("renew at another table: %v, want ErrForeignLease", err)
	}
}

func TestLeasesKeyCap(t *testing.T) {
	l := node.NewLeases("ns", 2)
	for _, k := range []string{"a", "b"} {
		if _, err := l.Acquire(t0, k, 1, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Acquire(t0, "c", 1, time.Second); !errors.Is(err, node.ErrKeyLimit) {
		t.Fatalf("third key: %v, want ErrKeyLimit", err)
	}
	// Reclaim frees keys without leases once idle.
	if n := l.Reclaim(t0.Add(2*time.Second), t0.Add(time.Second)); n != 2 || l.Len() != 0 {
		t.Fatalf("Reclaim removed %d, %d left", n, l.Len())
	}
	if _, err := l.Acquire(t0, "c", 1, time.Second); err != nil {
		t.Fatal(err)
	}
}

// The sync side: the others' count, releases kept for the store, leases
// released elsewhere dropped.
func TestLeasesSync(t *testing.T) {
	l := node.NewLeases("ns", 0)
	g1, _ := l.Acquire(t0, "k", 5, time.Minute)
	g2, _ := l.Acquire(t0, "k", 5, time.Minute)
	got := l.Collect(t0, true, nil)
	if len(got) != 1 || len(got[0].Serials) != 2 || len(got[0].Releases) != 0 {
		t.Fatalf("Collect: %+v", got)
	}
	// The store holds g1, not g2 (released elsewhere), and 3 more leases.
	stored := make([]bool, 2)
	for i, s := range got[0].Serials {
		stored[i] = s == g1.ID.Serial
	}
	l.Synced(t0, got[0], stored, true, true, 4, t0.Add(time.Second).UnixNano())
	if g, _ := l.Acquire(t0, "k", 5, time.Minute); !g.OK || g.Held != 5 {
		t.Fatalf("acquire after sync: %+v, want granted at held 5 (g1, 3 others, this)", g)
	}
	if ok, _ := l.Release(t0, g2.ID, true); ok {
		t.Fatal("g2 still live after the store said it was released")
	}
	// A release here is kept for the store until sent.
	if ok, _ := l.Release(t0, g1.ID, true); !ok {
		t.Fatal("release of g1")
	}
	got = l.Collect(t0, false, nil)
	if len(got) != 1 || got[0].Releases[node.StoreID(g1.ID)] != g1.Expiry {
		t.Fatalf("Collect after release: %+v", got)
	}
	all := []bool{true} // g3, granted after the first sync
	l.Synced(t0, got[0], all, true, false, 0, 0)
	if got = l.Collect(t0, false, nil); len(got) != 1 || len(got[0].Releases) != 0 {
		t.Fatalf("release still kept after the store took it: %+v", got)
	}
	// Past the earliest expiry the sync saw, the others' count stays
	// until the next sync (that lease may have been this node's).
	if g, _ := l.Acquire(t0.Add(2*time.Second), "k", 5, time.Minute); !g.OK || g.Held != 5 {
		t.Fatalf("after the earliest expiry: %+v, want held 5 (g3, 3 others, this)", g)
	}
}

func TestLeasesExactUnderConcurrency(t *testing.T) {
	l := node.NewLeases("ns", 0)
	var granted atomic.Int64
	var wg gosync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				if g, _ := l.Acquire(t0, "k", 10, time.Minute); g.OK {
					granted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if granted.Load() != 10 {
		t.Fatalf("granted %d leases with limit 10", granted.Load())
	}
}

func TestNamespaceLeaseConfig(t *testing.T) {
	c := node.DefaultConfig()
	c.MaxLeaseTTL = -time.Second
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "max_lease_ttl") {
		t.Fatalf("negative max_lease_ttl: %v", err)
	}
	ns, err := node.NewNamespace(node.DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := ns.Config(); got.MaxLeaseTTL != node.DefaultMaxLeaseTTL {
		t.Fatalf("defaults: %s", got.MaxLeaseTTL)
	}
}

// TestMaxLeaseTTLBounds: max_lease_ttl may be 0 (the default) to
// MaxLeaseTTLCap, both included; outside, the error names the field.
func TestMaxLeaseTTLBounds(t *testing.T) {
	for _, tc := range []struct {
		ttl time.Duration
		ok  bool
	}{{0, true}, {node.MaxLeaseTTLCap, true}, {node.MaxLeaseTTLCap + 1, false}, {-1, false}} {
		c := localConfig(time.Second)
		c.MaxLeaseTTL = tc.ttl
		err := c.Validate()
		if (err == nil) != tc.ok || err != nil && !strings.Contains(err.Error(), "max_lease_ttl") {
			t.Errorf("max_lease_ttl %v: %v, want ok %v", tc.ttl, err, tc.ok)
		}
	}
}
