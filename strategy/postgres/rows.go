package postgres

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	clustersync "github.com/limiterd/limiterd/sync"
)

// rowBatch is rows as the parallel arrays a push statement unnests,
// sorted by primary key with one entry per window.
type rowBatch struct {
	ns      []string
	size    []int64
	start   []int64
	key     [][]byte
	total   []int64
	version []int64
	exp     []pgtype.Timestamptz
	// pos[i] is the entry holding input row i.
	pos []int
}

// newRowBatch sorts rows by (namespace, size, start, key) — bytewise, the
// order of the primary key, whose text columns are COLLATE "C" — so every
// statement locks rows in one global order and concurrent statements
// cannot deadlock. Of rows naming one window the highest version is kept:
// ON CONFLICT cannot update a row twice in one statement.
func newRowBatch(rows []clustersync.Row) *rowBatch {
	order := make([]int, len(rows))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return compareKey(&rows[a].WindowKey, &rows[b].WindowKey) })
	n := len(rows)
	b := &rowBatch{
		ns: make([]string, 0, n), size: make([]int64, 0, n), start: make([]int64, 0, n),
		key: make([][]byte, 0, n), total: make([]int64, 0, n), version: make([]int64, 0, n),
		exp: make([]pgtype.Timestamptz, 0, n), pos: make([]int, n),
	}
	last := -1
	for _, i := range order {
		r := &rows[i]
		if last >= 0 && compareKey(&rows[last].WindowKey, &r.WindowKey) == 0 {
			j := len(b.ns) - 1
			b.pos[i] = j
			if r.Version > b.version[j] {
				b.total[j], b.version[j], b.exp[j] = r.Total, r.Version, expireAt(r.ExpireAt)
			}
			continue
		}
		last = i
		b.pos[i] = len(b.ns)
		b.ns = append(b.ns, r.Namespace)
		b.size = append(b.size, int64(r.Size))
		b.start = append(b.start, r.Start)
		b.key = append(b.key, []byte(r.Key))
		b.total = append(b.total, r.Total)
		b.version = append(b.version, r.Version)
		b.exp = append(b.exp, expireAt(r.ExpireAt))
	}
	return b
}

func (b *rowBatch) len() int { return len(b.ns) }

// pushArgs are the parameters $1 … $8 of a push of entries [lo, hi).
func (b *rowBatch) pushArgs(inc string, lo, hi int) []any {
	return []any{inc, b.ns[lo:hi], b.size[lo:hi], b.start[lo:hi], b.key[lo:hi],
		b.total[lo:hi], b.version[lo:hi], b.exp[lo:hi]}
}

func compareKey(a, b *clustersync.WindowKey) int {
	if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Size, b.Size); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Start, b.Start); c != 0 {
		return c
	}
	return strings.Compare(a.Key, b.Key)
}

// expireAt is t for a timestamptz column, rounded up to PostgreSQL's
// microsecond; the zero time (no expiry) is NULL.
func expireAt(t time.Time) pgtype.Timestamptz {
	if t.IsZero() {
		return pgtype.Timestamptz{}
	}
	if r := t.Truncate(time.Microsecond); !r.Equal(t) {
		t = r.Add(time.Microsecond)
	}
	return pgtype.Timestamptz{Time: t, Valid: true}
}
