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
// has its change log (lib.lua): a sorted set of the windows written,
// scored by a sequence the writing script assigns from Redis TIME and the
// log's last one, so a log's order is the order its writes committed in.
// A log holds one member per writer of a window, so a read skips the
// reader's own writes (the script leaves them out: they change no others'
// sum). A read runs the changes script over the 64 logs in one pipeline
// (16 logs per call on a single server, one on a cluster or ring), which
// only reads the logs, then Fetch reads the sums of the windows listed:
// two round trips, each cheap per window. The cursor holds the namespace's
// hash and the last sequence read of each log. A log trims what is older
// than a minute; a reader that comes back later, or finds a log lost (a
// flush, a failover to a replica that lagged), gets ErrChangesLost.
//
// limit is shared out over the logs; what a read cuts off is left for
// the next, from the cursor it returns.
func (s *Store) Changes(ctx context.Context, inc, namespace string, since clustersync.Cursor, limit int, dst []clustersync.Change) ([]clustersync.Change, clustersync.Cursor, bool, error) {
	if s.closed.Load() {
		return dst, since, false, fmt.Errorf("redis: changes: %w", clustersync.ErrClosed)
	}
	var seqs [buckets]string
	if since != "" {
		var ok bool
		if seqs, ok = parseCursor(since, namespace); !ok {
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
			c.args = append(c.args, seqs[b])
		}
		calls = append(calls, c)
	}
	if err := runScripts(ctx, s.c, changesScript, calls); err != nil {
		return dst, since, false, s.fail("changes", err)
	}
	var keys []clustersync.WindowKey
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
			next := v[changesReplyHeadNext]
			more = more || v[changesReplyHeadMore] == "1"
			for o := hw; o < hw+count*w; o += w {
				m := v[o+int(changesReplyMember)]
				k, err := decodeMember(namespace, m)
				if err != nil {
					return dst, since, false, fmt.Errorf("redis: changes: %w", err)
				}
				if _, ok := seen[k]; ok {
					continue // written by several since the cursor
				}
				if limit > 0 && len(keys) == limit {
					// Cut here: this log resumes before this member.
					next, more = seqs[b], true
					if o > hw {
						next = v[o-w+int(changesReplySeq)]
					}
					break
				}
				seen[k] = struct{}{}
				keys = append(keys, k)
			}
			seqs[b] = next
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
	return dst, formatCursor(namespace, &seqs), more, nil
}

// decodeMember decodes a change log member, "<writer's row
// prefix><size>:<start>:<key>" (the row prefix is "+<len(inc)>:<inc>:").
func decodeMember(namespace, m string) (clustersync.WindowKey, error) {
	bad := fmt.Errorf("unexpected change log member %.80q", m)
	n, rest, ok := strings.Cut(strings.TrimPrefix(m, "+"), ":")
	l, err := strconv.Atoi(n)
	if !ok || err != nil || l < 0 || len(rest) < l+1 || rest[l] != ':' {
		return clustersync.WindowKey{}, bad
	}
	size, rest, ok1 := strings.Cut(rest[l+1:], ":")
	start, key, ok2 := strings.Cut(rest, ":")
	sz, err1 := strconv.ParseInt(size, 10, 64)
	st, err2 := strconv.ParseInt(start, 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil {
		return clustersync.WindowKey{}, bad
	}
	return clustersync.WindowKey{Namespace: namespace, Size: time.Duration(sz), Start: st, Key: key}, nil
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

// cursorVersion starts every cursor: "r1:<namespace hash>:" and one
// sequence per bucket, comma-separated.
const cursorVersion = "r1:"

func nsHash(namespace string) string {
	h := fnv.New64a()
	writeNamespace(h, namespace)
	return hex.EncodeToString(h.Sum(nil))
}

func formatCursor(namespace string, seqs *[buckets]string) clustersync.Cursor {
	var b strings.Builder
	b.WriteString(cursorVersion)
	b.WriteString(nsHash(namespace))
	b.WriteByte(':')
	for i, s := range seqs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(s)
	}
	return clustersync.Cursor(b.String())
}

// parseCursor returns the sequences of a cursor of namespace, or false.
func parseCursor(c clustersync.Cursor, namespace string) (seqs [buckets]string, ok bool) {
	rest, found := strings.CutPrefix(string(c), cursorVersion)
	if !found {
		return seqs, false
	}
	h, list, found := strings.Cut(rest, ":")
	if !found || h != nsHash(namespace) {
		return seqs, false
	}
	parts := strings.Split(list, ",")
	if len(parts) != buckets {
		return seqs, false
	}
	for i, p := range parts {
		if n, err := strconv.ParseInt(p, 10, 64); err != nil || n < 0 {
			return seqs, false
		}
		seqs[i] = p
	}
	return seqs, true
}
