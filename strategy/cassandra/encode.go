package cassandra

import (
	"encoding/binary"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	clustersync "github.com/limiterd/limiterd/sync"
)

const (
	// rowOverhead estimates what Cassandra counts for a row besides its
	// strings (3 bigints, liveness info, the cell's timestamp and TTL):
	// about 80 bytes, measured against its warnings.
	rowOverhead = 96
	// maxTTL is Cassandra's largest TTL, 20 years.
	maxTTL = 20 * 365 * 24 * 3600
)

func rowBytes(inc string, r *clustersync.Row) int {
	return len(r.Namespace) + len(r.Key) + len(inc) + rowOverhead
}

// insertCols is the number of bound values of insertCQL.
const insertCols = 8

// encoded is a bound value already in its CQL wire form. Passed as a
// pointer (which an interface holds without allocating), the driver
// takes it through gocql.Marshaler as it is.
type encoded []byte

func (e *encoded) MarshalCQL(gocql.TypeInfo) ([]byte, error) { return *e, nil }

// insertArgs are the bound values of insertCQL for each row of chunk,
// insertCols per row: namespace text, size_ns, start_ns bigint, key
// blob, incarnation text, total bigint, TTL int, TIMESTAMP bigint. They
// are encoded into one buffer per chunk, which saves the driver's two
// allocations per value (boxing it, marshalling it): about half of a
// tick's allocations, on a client that shares its cores with the server.
func insertArgs(inc string, chunk []clustersync.Row, now time.Time) []any {
	size := 0
	for i := range chunk {
		size += len(chunk[i].Namespace) + len(chunk[i].Key) + len(inc) + 4*8 + 4 // 4 bigints, 1 int
	}
	// Each value is appended to buf, which size bounds so it is never
	// reallocated, and enc gets the slice of buf holding it: never nil,
	// also when empty (an empty key is a value, not null).
	buf := make([]byte, 0, size)
	enc := make([]encoded, 0, insertCols*len(chunk))
	str := func(v string) {
		buf = append(buf, v...)
		enc = append(enc, buf[len(buf)-len(v):len(buf):len(buf)])
	}
	i64 := func(v int64) {
		buf = binary.BigEndian.AppendUint64(buf, uint64(v))
		enc = append(enc, buf[len(buf)-8:len(buf):len(buf)])
	}
	for i := range chunk {
		r := &chunk[i]
		str(r.Namespace)
		i64(int64(r.Size))
		i64(r.Start)
		str(r.Key)
		str(inc)
		i64(r.Total)
		buf = binary.BigEndian.AppendUint32(buf, uint32(ttl(r.ExpireAt, now)))
		enc = append(enc, buf[len(buf)-4:len(buf):len(buf)])
		i64(r.Version)
	}
	args := make([]any, len(enc))
	for k := range enc {
		args[k] = &enc[k]
	}
	return args
}

// ttl is the TTL in whole seconds that makes a row written at now expire
// at or after expireAt: at least 1, at most Cassandra's 20 years.
// Cassandra expires a cell at floor(its write time in seconds) + TTL, up
// to a second before write time + TTL, hence the second added to the
// rounded-up remainder.
func ttl(expireAt, now time.Time) int {
	d := expireAt.Sub(now)
	secs := (d+time.Second-1)/time.Second + 1
	return int(min(max(secs, 1), maxTTL))
}
