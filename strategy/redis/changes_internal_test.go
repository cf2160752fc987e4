package redis

import (
	"context"
	"fmt"
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
	c := redis.NewClient(&redis.Options{Addr: harness.SharedRedis(t).Addr()})
	t.Cleanup(func() { _ = c.Close() })
	s := New(c, fmt.Sprintf("own-%d", time.Now().UnixNano()))
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
