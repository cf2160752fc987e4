package redis

import (
	"context"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	clustersync "github.com/limiterd/limiterd/sync"
)

// Changes implements clustersync.ChangeReader. Each bucket of a namespace
// has its change log (lib.lua): a sorted set with one member per script
// call that wrote to the bucket, listing the windows it wrote, scored by
// a sequence the writing script assigns from Redis TIME and the log's
// last one, so a log's order is the order its writes committed in. A
// member starts with its writer's row prefix, so a read skips the
// reader's own writes (the script leaves them out: they change no others'
// sum). A read runs the changes script over the 64 logs in one pipeline
// (16 logs per call on a single server, one on a cluster or ring), which
// only reads the logs, then Fetch reads the sums of the windows listed:
// two round trips, each cheap per window. The cursor holds the
// namespace's hash and, per log, the last sequence read, or the sequence
// of a member read in part and how many of its keys were taken. A log
// trims what is older than a minute; a reader that comes back later, or
// finds a log lost (a flush, a failover to a replica that lagged), gets
// ErrChangesLost.
//
// limit is shared out over the logs; what a read cuts off is left for
// the next, from the cursor it returns.
func (s *Store) Changes(ctx context.Context, inc, namespace string, since clustersync.Cursor, limit int, dst []clustersync.Change) ([]clustersync.Change, clustersync.Cursor, bool, error) {
	if s.closed.Load() {
		return dst, since, false, fmt.Errorf("redis: changes: %w", clustersync.ErrClosed)
	}
	var pos [buckets]logPos
	if since != "" {
		var ok bool
		if pos, ok = parseCursor(since, namespace); !ok {
			return dst, since, false, fmt.Errorf("redis: changes of %q: cursor %.40q: %w", namespace, since, clustersync.ErrChangesLost)
		}
	}
	per := -1
	if limit > 0 {
		per = (limit + buckets - 1) / buckets
	}
	// On a single server one call reads 16 logs (4 calls: none holds the
	// server long); on a cluster or ring, one call per log (each its own
	// hash tag).
	perCall := 1
	if s.single {
		perCall = logsPerCall
	}
	own := s.rowPrefix(inc)
	calls := make([]scriptCall, 0, buckets/perCall)
	for b0 := 0; b0 < buckets; b0 += perCall {
		c := scriptCall{args: []any{per, own}}
		for b := b0; b < b0+perCall; b++ {
			c.keys = append(c.keys, string(appendLogBase(nil, s.prefix, namespace, b))+"c")
			c.args = append(c.args, pos[b].after(since != ""))
		}
		calls = append(calls, c)
	}
	if err := runScripts(ctx, s.c, changesScript, calls); err != nil {
		return dst, since, false, s.fail("changes", err)
	}
	var keys, listed []clustersync.WindowKey
	seen := make(map[clustersync.WindowKey]struct{})
	more := false
	b := 0 // the log being decoded
	for _, call := range calls {
		v, err := call.cmd.StringSlice()
		if err != nil {
			return dst, since, false, fmt.Errorf("redis: changes: unexpected reply: %w", err)
		}
		for range call.keys {
			const hw, w = int(changesReplyHeadWidth), int(changesReplyWidth)
			count := -1
			if len(v) >= hw {
				count, err = strconv.Atoi(v[changesReplyHeadCount])
			}
			if count < 0 || err != nil || len(v) < hw+count*w {
				return dst, since, false, fmt.Errorf("redis: changes: unexpected reply %.200q", v)
			}
			if v[changesReplyHeadKnown] != "1" {
				return dst, since, false, fmt.Errorf("redis: changes of %q: bucket %d: %w", namespace, b, clustersync.ErrChangesLost)
			}
			next, ok := parseLogPos(v[changesReplyHeadNext])
			if !ok {
				return dst, since, false, fmt.Errorf("redis: changes: unexpected sequence %.40q", v[changesReplyHeadNext])
			}
			more = more || v[changesReplyHeadMore] == "1"
		members:
			for o := hw; o < hw+count*w; o += w {
				seq, ok := parseLogPos(v[o+int(changesReplySeq)])
				if !ok || seq.taken > 0 {
					return dst, since, false, fmt.Errorf("redis: changes: unexpected sequence %.40q", v[o+int(changesReplySeq)])
				}
				if listed, err = appendMember(listed[:0], namespace, v[o+int(changesReplyMember)]); err != nil {
					return dst, since, false, fmt.Errorf("redis: changes: %w", err)
				}
				first := 0
				if seq.seq == pos[b].seq {
					first = pos[b].taken // read in part before
				}
				for i := first; i < len(listed); i++ {
					k := listed[i]
					if _, ok := seen[k]; ok {
						continue // written by several since the cursor
					}
					if limit > 0 && len(keys) == limit {
						// Cut here: this log resumes at this key.
						next, more = logPos{seq: seq.seq - 1}, true
						if i > 0 {
							next = logPos{seq: seq.seq, taken: i}
						}
						break members
					}
					seen[k] = struct{}{}
					keys = append(keys, k)
				}
			}
			pos[b] = next
			v = v[hw+count*w:]
			b++
		}
	}
	// The sums, read after the logs: as new as the cursor or newer.
	others := make([]int64, len(keys))
	if err := s.Fetch(ctx, inc, keys, others); err != nil {
		return dst, since, false, err
	}
	for i, k := range keys {
		dst = append(dst, clustersync.Change{WindowKey: k, Others: others[i]})
	}
	return dst, formatCursor(namespace, &pos), more, nil
}

// appendMember appends the windows a change log member lists: "<writer's
// row prefix>*<n>:" and then groups "<size>:<start>:<m>:" of m keys
// "<len(key)>:<key>", n keys in all; or, written by an earlier version,
// one window "<row prefix><size>:<start>:<key>". The row prefix is
// "+<len(inc)>:<inc>:".
func appendMember(dst []clustersync.WindowKey, namespace, m string) ([]clustersync.WindowKey, error) {
	bad := fmt.Errorf("unexpected change log member %.80q", m)
	n, rest, ok := strings.Cut(strings.TrimPrefix(m, "+"), ":")
	l, err := strconv.Atoi(n)
	if !ok || err != nil || l < 0 || len(rest) < l+1 || rest[l] != ':' {
		return dst, bad
	}
	rest = rest[l+1:]
	field := func() (int64, bool) {
		f, r, ok := strings.Cut(rest, ":")
		n, err := strconv.ParseInt(f, 10, 64)
		rest = r
		return n, ok && err == nil
	}
	if rest, ok = strings.CutPrefix(rest, "*"); !ok {
		size, ok1 := field()
		st, ok2 := field()
		if !ok1 || !ok2 {
			return dst, bad
		}
		return append(dst, clustersync.WindowKey{Namespace: namespace, Size: time.Duration(size), Start: st, Key: rest}), nil
	}
	total, ok := field()
	if !ok || total < 0 {
		return dst, bad
	}
	start := len(dst)
	for rest != "" {
		size, ok1 := field()
		st, ok2 := field()
		c, ok3 := field()
		if !ok1 || !ok2 || !ok3 || c <= 0 || c > total {
			return dst, bad
		}
		for range c {
			kl, ok := field()
			if !ok || kl < 0 || kl > int64(len(rest)) {
				return dst, bad
			}
			dst = append(dst, clustersync.WindowKey{Namespace: namespace, Size: time.Duration(size), Start: st, Key: rest[:kl]})
			rest = rest[kl:]
		}
	}
	if int64(len(dst)-start) != total {
		return dst, bad
	}
	return dst, nil
}

// appendLogBase appends the key of a bucket's hashes up to their
// "<size>:<start>": "<prefix>:{<tag>}:<bucket>:<len(ns)>:<ns>:". The
// bucket's change log is that plus "c", which no hash key ends with.
func appendLogBase(b []byte, prefix, namespace string, bucket int) []byte {
	b = appendHashKey(b, prefix, bucketTag(namespace, bucket), &hashID{namespace: namespace, bucket: bucket})
	// appendHashKey ended with ":0:0" (size and start 0): cut them.
	return b[:len(b)-len("0:0")]
}

// logsPerCall is how many change logs one call of the changes script
// reads on a single server.
const logsPerCall = 16

// cursorVersion starts every cursor: "r2:<namespace hash>:" and one
// position per bucket, comma-separated.
const cursorVersion = "r2:"

func nsHash(namespace string) string {
	h := fnv.New64a()
	writeNamespace(h, namespace)
	return hex.EncodeToString(h.Sum(nil))
}

// logPos is a reader's position in one change log: every member up to
// sequence seq read, or, when taken > 0, those before seq and the first
// taken keys of the member at seq.
type logPos struct {
	seq   int64
	taken int
}

// after returns the sequence a read resumes after, as the changes script
// takes it: "" for no cursor.
func (p logPos) after(cursor bool) string {
	switch {
	case !cursor:
		return ""
	case p.taken > 0:
		return strconv.FormatInt(p.seq-1, 10)
	}
	return strconv.FormatInt(p.seq, 10)
}

// parseLogPos parses "<seq>" or "<seq>/<taken>".
func parseLogPos(s string) (logPos, bool) {
	q, t, part := strings.Cut(s, "/")
	seq, err := strconv.ParseInt(q, 10, 64)
	if err != nil || seq < 0 || (part && seq == 0) {
		return logPos{}, false
	}
	p := logPos{seq: seq}
	if part {
		if p.taken, err = strconv.Atoi(t); err != nil || p.taken <= 0 {
			return logPos{}, false
		}
	}
	return p, true
}

func formatCursor(namespace string, pos *[buckets]logPos) clustersync.Cursor {
	var b strings.Builder
	b.WriteString(cursorVersion)
	b.WriteString(nsHash(namespace))
	b.WriteByte(':')
	for i, p := range pos {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(p.seq, 10))
		if p.taken > 0 {
			b.WriteByte('/')
			b.WriteString(strconv.Itoa(p.taken))
		}
	}
	return clustersync.Cursor(b.String())
}

// parseCursor returns the positions of a cursor of namespace, or false.
func parseCursor(c clustersync.Cursor, namespace string) (pos [buckets]logPos, ok bool) {
	rest, found := strings.CutPrefix(string(c), cursorVersion)
	if !found {
		return pos, false
	}
	h, list, found := strings.Cut(rest, ":")
	if !found || h != nsHash(namespace) {
		return pos, false
	}
	parts := strings.Split(list, ",")
	if len(parts) != buckets {
		return pos, false
	}
	for i, p := range parts {
		if pos[i], ok = parseLogPos(p); !ok {
			return pos, false
		}
	}
	return pos, true
}
