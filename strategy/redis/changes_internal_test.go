package redis

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limiterd/limiterd/integration/harness"
	clustersync "github.com/limiterd/limiterd/sync"
)

// TestChangesScriptLeavesOutOwnWrites: the changes script returns only
// the members of other writers, while the cursor it returns still moves
// past the reader's own writes; a push of many rows costs a log one
// member.
func TestChangesScriptLeavesOutOwnWrites(t *testing.T) {
	s, c := newChangesStore(t, "own")
	ctx := context.Background()
	_, cursor, _, err := s.Changes(ctx, "a", "n", "", 0, nil)
	if err != nil {
		t.Fatalf("Changes from no cursor: %v", err)
	}
	var rows []clustersync.Row
	for i := range 300 {
		rows = append(rows, clustersync.Row{WindowKey: clustersync.WindowKey{Namespace: "n", Key: fmt.Sprint("k", i), Size: time.Minute, Start: 0}, Total: 1, Version: 1})
	}
	if err := s.Push(ctx, "a", rows); err != nil {
		t.Fatal(err)
	}
	if err := s.Push(ctx, "b", rows[:1]); err != nil {
		t.Fatal(err)
	}
	pos, ok := parseCursor(cursor, "n")
	if !ok {
		t.Fatalf("cursor %q does not parse", cursor)
	}
	// members returns how many members reader reads and how many windows
	// they list.
	members := func(reader string) (n, windows int) {
		for b := range buckets {
			call := scriptCall{keys: []string{string(appendLogBase(nil, s.prefix, "n", b)) + "c"}, args: []any{-1, s.rowPrefix(reader), pos[b].after(true)}}
			calls := []scriptCall{call}
			if err := runScripts(ctx, c, changesScript, calls); err != nil {
				t.Fatal(err)
			}
			v, err := calls[0].cmd.StringSlice()
			if err != nil {
				t.Fatal(err)
			}
			if v[changesReplyHeadCount] != fmt.Sprint((len(v)-int(changesReplyHeadWidth))/int(changesReplyWidth)) {
				t.Fatalf("reply %q: count does not match its members", v)
			}
			for o := int(changesReplyHeadWidth); o < len(v); o += int(changesReplyWidth) {
				listed, err := appendMember(nil, "n", v[o+int(changesReplyMember)])
				if err != nil {
					t.Fatal(err)
				}
				n, windows = n+1, windows+len(listed)
			}
		}
		return n, windows
	}
	// a's 300 rows spread over the 64 logs; one call of the push script
	// takes up to 100 of them, so each log has one or two of a's members.
	if n, w := members("a"); n != 1 || w != 1 {
		t.Errorf("reader a reads %d members of %d windows, want b's one write", n, w)
	}
	if n, w := members("b"); n > 2*buckets || w != 300 {
		t.Errorf("reader b reads %d members of %d windows, want at most 128 listing a's 300", n, w)
	}
	if n, w := members("c"); n > 2*buckets+1 || w != 301 {
		t.Errorf("reader c reads %d members of %d windows, want 301 windows", n, w)
	}
	// The cursor moves past a's own writes: from it, a reads nothing more.
	changes, next, _, err := s.Changes(ctx, "a", "n", cursor, 0, nil)
	if err != nil || len(changes) != 1 {
		t.Fatalf("Changes = %v, %v; want b's one write", changes, err)
	}
	if changes, _, _, err = s.Changes(ctx, "a", "n", next, 0, nil); err != nil || len(changes) != 0 {
		t.Errorf("Changes from the next cursor = %v, %v; want none", changes, err)
	}
}

// TestChangesCutInsideAMember: a read whose limit ends inside a member
// (one push script call lists many windows) resumes at the next window
// of that member, so reads of any limit see every window once.
func TestChangesCutInsideAMember(t *testing.T) {
	s, _ := newChangesStore(t, "cut")
	ctx := context.Background()
	for _, limit := range []int{1, 7, 64, 65, 1000} {
		ns := fmt.Sprint("n", limit)
		_, cursor, _, err := s.Changes(ctx, "r", ns, "", 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		var rows []clustersync.Row
		for i := range 300 {
			rows = append(rows, clustersync.Row{WindowKey: clustersync.WindowKey{Namespace: ns, Key: fmt.Sprint("k", i), Size: time.Minute}, Total: int64(i + 1), Version: 1})
		}
		if err := s.Push(ctx, "a", rows); err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		parts := 0
		for range 1000 {
			changes, next, more, err := s.Changes(ctx, "r", ns, cursor, limit, nil)
			if err != nil {
				t.Fatalf("limit %d: %v", limit, err)
			}
			if len(changes) > limit {
				t.Fatalf("limit %d: read %d", limit, len(changes))
			}
			for _, ch := range changes {
				seen[ch.Key]++
				if want := 1 + int64(mustAtoi(t, ch.Key[1:])); ch.Others != want {
					t.Errorf("limit %d: %s: others %d, want %d", limit, ch.Key, ch.Others, want)
				}
			}
			if strings.Contains(string(next), "/") {
				parts++
			}
			cursor = next
			if !more {
				break
			}
		}
		if len(seen) != 300 {
			t.Errorf("limit %d: read %d distinct windows, want 300", limit, len(seen))
		}
		for k, n := range seen {
			if n != 1 {
				t.Errorf("limit %d: %s read %d times, want once", limit, k, n)
			}
		}
		if limit < 64 && parts == 0 {
			t.Errorf("limit %d: no read ended inside a member", limit)
		}
	}
}

// TestChangesMemberWrittenAgain: a writer that writes the same windows
// again re-adds an identical member, which moves to its new sequence; a
// reader part way through it reads it whole at the new place.
func TestChangesMemberWrittenAgain(t *testing.T) {
	s, _ := newChangesStore(t, "again")
	ctx := context.Background()
	_, cursor, _, err := s.Changes(ctx, "r", "n", "", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Keys of one bucket, so one member lists them all.
	keys := []string{"k0"}
	for i := 1; i < 5; i++ {
		keys = append(keys, sameBucket("n", "k0", i))
	}
	push := func(total int64) {
		t.Helper()
		var rows []clustersync.Row
		for _, k := range keys {
			rows = append(rows, clustersync.Row{WindowKey: clustersync.WindowKey{Namespace: "n", Key: k, Size: time.Minute}, Total: total, Version: total})
		}
		if err := s.Push(ctx, "a", rows); err != nil {
			t.Fatal(err)
		}
	}
	push(1)
	changes, cursor, more, err := s.Changes(ctx, "r", "n", cursor, 2, nil)
	if err != nil || len(changes) != 2 || !more || !strings.Contains(string(cursor), "/") {
		t.Fatalf("first read = %d changes, more %v, cursor %q, %v; want 2, more, a cursor inside the member", len(changes), more, cursor, err)
	}
	push(2) // the same member, moved past the cursor
	got := map[string]int64{}
	for _, ch := range changes {
		got[ch.Key] = ch.Others
	}
	for range 10 {
		changes, next, more, err := s.Changes(ctx, "r", "n", cursor, 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range changes {
			got[ch.Key] = ch.Others
		}
		if cursor = next; !more {
			break
		}
	}
	for _, k := range keys {
		if got[k] != 2 {
			t.Errorf("%s: others %d, want 2 (the second write)", k, got[k])
		}
	}
}

func TestAppendMember(t *testing.T) {
	rp := rowPrefix("inc:1")
	good := rp + "*3:60000:120:2:" + "1:a" + "3:b:c" + "1000:0:1:" + "0:"
	ks, err := appendMember(nil, "n", good)
	want := []clustersync.WindowKey{
		{Namespace: "n", Size: 60000, Start: 120, Key: "a"},
		{Namespace: "n", Size: 60000, Start: 120, Key: "b:c"},
		{Namespace: "n", Size: 1000, Start: 0, Key: ""},
	}
	if err != nil || !slices.Equal(ks, want) {
		t.Errorf("appendMember(%q) = %v, %v; want %v", good, ks, err, want)
	}
	// A member of an earlier writer: one window.
	if ks, err := appendMember(nil, "n", rp+"60000:120:a:b"); err != nil || !slices.Equal(ks, []clustersync.WindowKey{{Namespace: "n", Size: 60000, Start: 120, Key: "a:b"}}) {
		t.Errorf("appendMember of an earlier writer's member = %v, %v", ks, err)
	}
	for _, bad := range []string{
		"",
		rp,
		rp + "*1:",                          // no window
		rp + "*2:60000:120:1:1:a",           // one key short
		rp + "*1:60000:120:1:5:a",           // key longer than the rest
		rp + "*1:60000:120:1:1:ab",          // bytes left over
		rp + "*1:60000:120:0:",              // an empty window
		rp + "*1:x:120:1:1:a",               // size not a number
		rp + "x:120:a",                      // an earlier writer's, size not a number
		rp + "60000:a",                      // an earlier writer's, no start
		rp + "*-1:60000:120:1:1:a",          // negative count
		"+9:inc:1:*1:60000:120:1:1:a",       // row prefix longer than the member
		rp + "*1:60000:120:2:1:a1:b",        // window's count above the member's
		rp + "*1:60000:120:1:-1:a",          // negative key length
		rp + "*1:60000:120:1:99999999999:a", // huge key length
	} {
		if ks, err := appendMember(nil, "n", bad); err == nil {
			t.Errorf("appendMember(%q) = %v, nil; want an error", bad, ks)
		}
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestChangesReadsEarlierMembers: a member in the format of earlier
// writers (one window each) is read among the new ones, so a cluster can
// be upgraded node by node.
func TestChangesReadsEarlierMembers(t *testing.T) {
	s, c := newChangesStore(t, "earlier")
	ctx := context.Background()
	_, cursor, _, err := s.Changes(ctx, "r", "n", "", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	old := clustersync.Row{WindowKey: clustersync.WindowKey{Namespace: "n", Key: "old", Size: time.Minute, Start: 60e9}, Total: 4, Version: 1}
	if err := s.Push(ctx, "e", []clustersync.Row{old}); err != nil {
		t.Fatal(err)
	}
	if err := s.Push(ctx, "a", []clustersync.Row{{WindowKey: clustersync.WindowKey{Namespace: "n", Key: "new", Size: time.Minute}, Total: 2, Version: 1}}); err != nil {
		t.Fatal(err)
	}
	// Writer e's member, as an earlier version wrote it, after the others.
	const add = `local n = redis.call('ZSCORE', KEYS[1], '!n')
local seq = -tonumber(n) + 1
redis.call('ZADD', KEYS[1], seq, ARGV[1], -seq, '!n')
return seq`
	log := string(appendLogBase(nil, s.prefix, "n", bucketOf("n", "old"))) + "c"
	// Without e's member in the new format: the earlier one alone tells.
	if n, err := c.ZRem(ctx, log, rowPrefix("e")+"*1:60000000000:60000000000:1:3:old").Result(); err != nil || n != 1 {
		t.Fatalf("removing e's member: %d, %v", n, err)
	}
	if err := c.Eval(ctx, add, []string{log}, rowPrefix("e")+"60000000000:60000000000:old").Err(); err != nil {
		t.Fatal(err)
	}
	changes, _, _, err := s.Changes(ctx, "r", "n", cursor, 1000, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, ch := range changes {
		got[ch.Key] = ch.Others
	}
	if len(got) != 2 || got["old"] != 4 || got["new"] != 2 {
		t.Errorf("changes = %v, want old: 4 and new: 2", got)
	}
}

// newChangesStore returns a Store under a new prefix on the shared
// Redis, and its client.
func newChangesStore(t *testing.T, name string) (*Store, *redis.Client) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: harness.SharedRedis(t).Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return New(c, fmt.Sprintf("%s-%d", name, time.Now().UnixNano())), c
}
