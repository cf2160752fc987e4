package cassandra

import (
	"bytes"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	clustersync "github.com/limiterd/limiterd/sync"
)

// insertArgs must bind exactly what the driver would marshal from the
// plain values, including empty strings (a value, not null).
func TestInsertArgsEncoding(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	rows := []clustersync.Row{
		{WindowKey: clustersync.WindowKey{Namespace: "api", Size: time.Second, Start: 1_800_000_000_000_000_000, Key: "user-1"},
			Total: -5, Version: 1_800_000_000_000_001, ExpireAt: now.Add(3 * time.Second)},
		{WindowKey: clustersync.WindowKey{Namespace: "", Size: 100 * time.Millisecond, Start: -300_000_000, Key: ""},
			Total: 1<<63 - 1, Version: 1, ExpireAt: now.Add(-time.Hour)},
		{WindowKey: clustersync.WindowKey{Namespace: "ünï", Size: time.Hour, Start: 0, Key: "a\x00b\xff|:"},
			Total: 0, Version: -1 << 63, ExpireAt: now.Add(100 * 365 * 24 * time.Hour)},
	}
	const inc = "node-1/5f2c"
	types := [insertCols]gocql.Type{gocql.TypeVarchar, gocql.TypeBigInt, gocql.TypeBigInt, gocql.TypeBlob,
		gocql.TypeVarchar, gocql.TypeBigInt, gocql.TypeInt, gocql.TypeBigInt}
	args := insertArgs(inc, rows, now)
	if len(args) != insertCols*len(rows) {
		t.Fatalf("%d args for %d rows", len(args), len(rows))
	}
	for i := range rows {
		r := &rows[i]
		plain := []any{r.Namespace, int64(r.Size), r.Start, r.Key, inc, r.Total, ttl(r.ExpireAt, now), r.Version}
		for c, v := range plain {
			info := gocql.NewNativeType(4, types[c], "")
			want, err := gocql.Marshal(info, v)
			if err != nil {
				t.Fatal(err)
			}
			got, err := gocql.Marshal(info, args[i*insertCols+c])
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) || got == nil {
				t.Errorf("row %d column %d: got %x (nil %v), want %x", i, c, got, got == nil, want)
			}
		}
	}
}
