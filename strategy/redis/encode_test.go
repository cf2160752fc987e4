package redis

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limiterd/limiterd/integration/harness"
	clustersync "github.com/limiterd/limiterd/sync"
)

// probe runs, on a real Redis, a script's layout header followed by body,
// with call's KEYS and ARGV, and returns its reply.
func probe(t *testing.T, c *redis.Client, script, body string, call scriptCall) []any {
	t.Helper()
	header, err := lua.ReadFile(script + "_layout.lua")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := c.Eval(ctx, string(header)+body, call.keys, call.args...).Slice()
	if err != nil {
		t.Fatalf("%s probe: %v", script, err)
	}
	return v
}

// named reads a probe's reply of name, value pairs.
func named(v []any) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(v); i += 2 {
		m[fmt.Sprint(v[i])] = fmt.Sprint(v[i+1])
	}
	return m
}

// adds returns Lua lines add(item .. ' <name>', <base><NAME>]) per field
// name, NAME being the name in Lua's style ("cur total" is CUR_TOTAL).
func adds(item, base string, names ...string) string {
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "add(%s .. '%s', %s%s])\n", item, n, base, strings.ToUpper(strings.ReplaceAll(n, " ", "_")))
	}
	return b.String()
}

// sameBucket returns the n-th key "<key>-<i>" in key's bucket of namespace.
func sameBucket(namespace, key string, n int) string {
	for i := 0; ; i++ {
		k := fmt.Sprint(key, "-", i)
		if bucketOf(namespace, k) == bucketOf(namespace, key) {
			if n--; n == 0 {
				return k
			}
		}
	}
}

// probeLib is the start of every probe: add(name, value) appends a pair.
const probeLib = `
local out = {}
local function add(name, v) out[#out + 1] = name; out[#out + 1] = v end
`

// TestEncodersMatchLayouts encodes known calls with the Go encoders and
// reads every field back by name in Lua, through the scripts' layout
// headers; and decodes replies the Lua side builds by name. It fails when
// an encoder or decoder and a script's header disagree on any position.
func TestEncodersMatchLayouts(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: harness.SharedRedis(t).Addr()})
	t.Cleanup(func() { _ = c.Close() })
	exp := time.UnixMilli(1_800_000_000_123)
	rw := func(ns, key string, size time.Duration, start, total, version int64) clustersync.Row {
		return clustersync.Row{WindowKey: clustersync.WindowKey{Namespace: ns, Key: key, Size: size, Start: start}, Total: total, Version: version, ExpireAt: exp}
	}
	const rp = "+3:inc:"

	t.Run("push", func(t *testing.T) {
		// b and d share a's hash and a version a does not have: two groups
		// of that hash.
		b, d := sameBucket("n", "a", 1), sameBucket("n", "a", 2)
		rows := []clustersync.Row{rw("n", "a", time.Second, 7, 11, 12), rw("n", b, time.Second, 7, 21, 22), rw("n", "c", time.Minute, 60, 31, 32), rw("n", d, time.Second, 7, 41, 22)}
		g := (&Store{prefix: "p"}).group(len(rows), func(i int) *clustersync.WindowKey { return &rows[i].WindowKey })
		prefix := rp
		call := encodePush(&g, pushCall{h0: 0, h1: len(g.hashes), j0: 0, j1: len(rows)}, &prefix, rows, true)
		got := named(probe(t, c, "push", probeLib+`
`+adds("''", "ARGV[PUSH_HEAD_", "row prefix", "reply")+`
local a, groups = PUSH_HEAD_WIDTH, 0
while a < #ARGV do
  local g = a
  groups = groups + 1
  a = a + PUSH_GROUP_WIDTH
  for i = 1, tonumber(ARGV[g + PUSH_GROUP_ROWS]) do
    local k = ARGV[a + PUSH_ROW_KEY]
    add(k .. ' hash', KEYS[tonumber(ARGV[g + PUSH_GROUP_HASH])])
    add(k .. ' total', ARGV[a + PUSH_ROW_TOTAL])
    `+adds("k .. ' '", "ARGV[g + PUSH_GROUP_", "version", "expire")+`
    a = a + PUSH_ROW_WIDTH
  end
end
add('groups', groups)
return out`, call))
		want := map[string]string{"row prefix": rp, "reply": "1", "groups": "3"}
		for _, r := range rows {
			want[r.Key+" hash"] = redisKey("p", &r.WindowKey)
			want[r.Key+" total"] = fmt.Sprint(r.Total)
			want[r.Key+" version"] = fmt.Sprint(r.Version)
			want[r.Key+" expire"] = "1800000000123"
		}
		if !maps.Equal(got, want) {
			t.Errorf("the push script reads\n%v\nwant\n%v", got, want)
		}
	})

	t.Run("key", func(t *testing.T) {
		rows := []clustersync.Row{rw("n", "k", time.Second, 7, 11, 12), rw("n", "k", time.Minute, 60, -21, 22)}
		call := encodeKey("p", rp, rows)
		got := named(probe(t, c, "key", probeLib+`
`+adds("''", "ARGV[KEY_HEAD_", "sum field", "row field")+`
for i = 1, #KEYS do
  local a = KEY_HEAD_WIDTH + (i - 1) * KEY_WINDOW_WIDTH
  add(i .. ' hash', KEYS[i])
  `+adds("i .. ' '", "ARGV[a + KEY_WINDOW_", "row", "total", "version", "expire")+`
end
return out`, call))
		want := map[string]string{"sum field": "=k", "row field": rp + "k"}
		for i, r := range rows {
			for name, v := range map[string]any{
				"hash": redisKey("p", &r.WindowKey), "row": fmt.Sprint(r.Total, ":", r.Version, ":1800000000123"),
				"total": r.Total, "version": r.Version, "expire": "1800000000123",
			} {
				want[fmt.Sprint(i+1, " ", name)] = fmt.Sprint(v)
			}
		}
		if !maps.Equal(got, want) {
			t.Errorf("the key script reads\n%v\nwant\n%v", got, want)
		}
	})

	t.Run("row reply", func(t *testing.T) {
		for _, script := range []string{"push", "key"} {
			v := probe(t, c, script, `
local out = {}
for i = 1, 3 do
  local o = (i - 1) * ROW_REPLY_WIDTH
  out[o + ROW_REPLY_SUM], out[o + ROW_REPLY_OWN] = tostring(100 * i), tostring(i)
end
return out`, scriptCall{})
			reply := make([]int64, len(v))
			for i := range v {
				fmt.Sscan(v[i].(string), &reply[i])
			}
			others := make([]int64, 3)
			if err := decodeRows(reply, 3, others); err != nil || !slices.Equal(others, []int64{99, 198, 297}) {
				t.Errorf("%s: decodeRows(%v) = %v, %v; want [99 198 297]", script, reply, others, err)
			}
		}
	})

	req := &clustersync.GroupAllowRequest{Inc: "inc", At: 1_500}
	for i, size := range []time.Duration{1000, 60_000} {
		n := int64(10 * (i + 1))
		w := clustersync.GroupWindow{Size: size,
			Cur:  rw("n", "k", size, 1000, n+2, n+3),
			Prev: rw("n", "k", size, 1000-int64(size), n+4, n+5)}
		w.Prev.ExpireAt = exp.Add(time.Duration(n) * time.Millisecond)
		req.Windows = append(req.Windows, w)
	}
	req.Entries = []clustersync.GroupEntry{
		{Cost: 3, CountRejected: true, Limits: []clustersync.GroupLimit{{Window: 1, Limit: 21}}},
		{Cost: 4, Limits: []clustersync.GroupLimit{{Window: 0, Limit: 11}, {Window: 1, Limit: 22}}},
	}

	t.Run("allowgroup", func(t *testing.T) {
		call := encodeAllowGroup("p", rp, req)
		got := named(probe(t, c, "allowgroup", probeLib+`
`+adds("''", "ARGV[GROUP_HEAD_", "sum field", "row field")+`
local nw = #KEYS / GROUP_KEYS_WIDTH
for w = 1, nw do
  local a = GROUP_HEAD_WIDTH + (w - 1) * GROUP_WINDOW_WIDTH
  local k = (w - 1) * GROUP_KEYS_WIDTH
  add(w .. ' cur hash', KEYS[k + GROUP_KEYS_CUR])
  add(w .. ' prev hash', KEYS[k + GROUP_KEYS_PREV])
  `+adds("w .. ' '", "ARGV[a + GROUP_WINDOW_", "size", "pos", "cur total", "cur all", "cur version", "cur expire",
			"prev total", "prev version", "prev expire", "prev row")+`
end
local ebase = GROUP_HEAD_WIDTH + nw * GROUP_WINDOW_WIDTH
for e = 1, (#ARGV - ebase) / (GROUP_ENTRY_WIDTH + nw) do
  local a = ebase + (e - 1) * (GROUP_ENTRY_WIDTH + nw)
  `+adds("'e' .. e .. ' '", "ARGV[a + GROUP_ENTRY_", "cost", "count rejected")+`
  for w = 1, nw do add('e' .. e .. ' limit ' .. w, ARGV[a + GROUP_ENTRY_WIDTH + w]) end
end
return out`, call))
		want := map[string]string{"sum field": "=k", "row field": rp + "k",
			"e1 cost": "3", "e1 count rejected": "1", "e1 limit 1": "", "e1 limit 2": "21",
			"e2 cost": "4", "e2 count rejected": "0", "e2 limit 1": "11", "e2 limit 2": "22"}
		for i, w := range req.Windows {
			pe := expireArg(&w.Prev)
			for name, v := range map[string]any{
				"cur hash": redisKey("p", &w.Cur.WindowKey), "prev hash": redisKey("p", &w.Prev.WindowKey),
				"size": int64(w.Size), "pos": 500,
				"cur total": w.Cur.Total, "cur all": w.Cur.Total + 7, "cur version": w.Cur.Version, "cur expire": "1800000000123",
				"prev total": w.Prev.Total, "prev version": w.Prev.Version, "prev expire": pe,
				"prev row": fmt.Sprint(w.Prev.Total, ":", w.Prev.Version, ":", pe),
			} {
				want[fmt.Sprint(i+1, " ", name)] = fmt.Sprint(v)
			}
		}
		if !maps.Equal(got, want) {
			t.Errorf("the allowgroup script reads\n%v\nwant\n%v", got, want)
		}
	})
}
