package postgres

import (
	"fmt"
	"strings"
	"testing"
	"time"

	clustersync "github.com/limiterd/limiterd/sync"
)

func TestRowBatchSortsAndDedupes(t *testing.T) {
	k := func(ns, key string, size time.Duration, start int64) clustersync.WindowKey {
		return clustersync.WindowKey{Namespace: ns, Size: size, Start: start, Key: key}
	}
	rows := []clustersync.Row{
		{WindowKey: k("b", "x", time.Second, 0), Total: 1, Version: 1},
		{WindowKey: k("a", "y", time.Second, 0), Total: 2, Version: 1},
		{WindowKey: k("a", "x", 2*time.Second, 0), Total: 3, Version: 1},
		{WindowKey: k("a", "x", time.Second, 1), Total: 4, Version: 1},
		{WindowKey: k("a", "x", time.Second, 0), Total: 5, Version: 7},
		{WindowKey: k("a", "x", time.Second, 0), Total: 6, Version: 9}, // same window, newer
		{WindowKey: k("a", "x", time.Second, 0), Total: 7, Version: 8}, // same window, older
		{WindowKey: k("a", "x\x00", time.Second, 0), Total: 8, Version: 1},
	}
	b := newRowBatch(rows)
	var got []string
	for i := range b.ns {
		got = append(got, fmt.Sprintf("%s/%q/%d/%d=%d@%d", b.ns[i], b.key[i], b.size[i]/1e9, b.start[i], b.total[i], b.version[i]))
	}
	want := []string{`a/"x"/1/0=6@9`, `a/"x\x00"/1/0=8@1`, `a/"y"/1/0=2@1`, `a/"x"/1/1=4@1`, `a/"x"/2/0=3@1`, `b/"x"/1/0=1@1`}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("sorted batch:\n got %v\nwant %v", got, want)
	}
	if wantPos := []int{5, 2, 4, 3, 0, 0, 0, 1}; fmt.Sprint(b.pos) != fmt.Sprint(wantPos) {
		t.Errorf("pos: got %v, want %v", b.pos, wantPos)
	}
}

func TestExpireAt(t *testing.T) {
	if v := expireAt(time.Time{}); v.Valid {
		t.Errorf("zero time: got %v, want NULL", v)
	}
	base := time.Unix(1700000000, 0)
	for in, want := range map[time.Duration]time.Duration{0: 0, 1: time.Microsecond, 999: time.Microsecond, 1000: time.Microsecond, 1001: 2 * time.Microsecond} {
		if got := expireAt(base.Add(in)); !got.Valid || !got.Time.Equal(base.Add(want)) {
			t.Errorf("+%dns: got %v, want +%s", in, got.Time.Sub(base), want)
		}
	}
}

// The advisory lock key is part of the protocol between nodes: nodes of
// different versions must compute the same key, so it must never change.
func TestLockKeyStable(t *testing.T) {
	// want was computed by a separate implementation of FNV-1a 64.
	if got, want := lockKey("public.limiterd_windows", "api", "alice"), int64(57072001922007277); got != want {
		t.Errorf("lockKey changed: got %d, want %d", got, want)
	}
	// Length prefixes keep the parts apart.
	if lockKey("t", "ab", "c") == lockKey("t", "a", "bc") || lockKey("t", "a", "b") == lockKey("t.a", "", "b") {
		t.Error("lockKey is not length-prefixed")
	}
}

func TestTransient(t *testing.T) {
	for code, want := range map[string]bool{
		"08006": true, "08001": true, "57P01": true, "57P03": true, "53300": true, "57014": true,
		"40001": true, "40P01": true, "25006": true,
		"42P01": false, "42501": false, "28P01": false, "22021": false, "23505": false, "3D000": false,
	} {
		if got := transient(code); got != want {
			t.Errorf("transient(%s) = %v, want %v", code, got, want)
		}
	}
}

// Only the quoted table name is spliced into the statements.
func TestQueriesQuoteTable(t *testing.T) {
	cfg := Config{Schema: "S", Table: "t"}
	q := buildQueries(cfg.tableName(), cfg.bucketNames(), cfg.leaseNames())
	for name, sql := range map[string]string{"push": q.push, "fetch": q.fetch, "pfetch": q.pfetch,
		"window": q.window, "allow": q.allow, "purge": q.purge, "buckets": q.buckets,
		"purge buckets": q.purgeBuckets, "leases": q.leases, "purge leases": q.purgeLeases,
		"purge releases": q.purgeReleases, "schema": schemaSQL(cfg, true)} {
		if strings.Contains(sql, "%!") {
			t.Errorf("%s: bad format: %s", name, sql)
		}
		if !strings.Contains(sql, `"S"."t"`) && !strings.Contains(sql, `"S"."t_bkt`) && !strings.Contains(sql, `"S"."t_lease`) {
			t.Errorf("%s does not use the quoted table name: %s", name, sql)
		}
	}
}
