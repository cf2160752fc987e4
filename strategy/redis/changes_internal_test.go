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
// past the reader's own writes.
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
	seqs, ok := parseCursor(cursor, "n")
	if !ok {
		t.Fatalf("cursor %q does not parse", cursor)
	}
	members := func(reader string) (n int) {
		for b := range buckets {
			call := scriptCall{keys: []string{string(appendLogBase(nil, s.prefix, "n", b)) + "c"}, args: []any{-1, s.rowPrefix(reader), seqs[b]}}
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
			n += (len(v) - int(changesReplyHeadWidth)) / int(changesReplyWidth)
		}
		return n
	}
	if got := members("a"); got != 1 {
		t.Errorf("reader a reads %d members, want 1 (b's write)", got)
	}
	if got := members("b"); got != 300 {
		t.Errorf("reader b reads %d members, want 300 (a's writes)", got)
	}
	if got := members("c"); got != 301 {
		t.Errorf("reader c reads %d members, want 301", got)
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
