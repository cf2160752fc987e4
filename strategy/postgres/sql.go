package postgres

import "fmt"

// The statements, built once per Store from the quoted table name: the only
// text spliced into SQL is that identifier (from config, validated and
// quoted); every value is a bound parameter.
//
// Rows travel as parallel arrays expanded by unnest ... WITH ORDINALITY, so
// a batch of any size is one statement with a fixed number of parameters
// (one prepared plan). Sums are numeric in PostgreSQL; sat clamps them to
// the int64 range so one absurd window cannot make a whole batch fail.
type queries struct {
	exists string // $1 schema, $2 table (quoted): schema exists, table exists
	push   string
	fetch  string
	pfetch string // push and fetch in one statement
	window string
	lock   string // the per-key advisory lock of AllowGroup
	allow  string // AllowGroup's decision (groupAllowSQL)
	purge  string
	// The change read (changes.go).
	cursor, changes string
	// The bucket rows (bucket_sql.go).
	buckets      string
	purgeBuckets string
	// The leases (lease_sql.go).
	leases, purgeLeases, purgeReleases string
	leaseLockNS                        string // mixed into the leases' advisory lock keys
}

// sat clamps a numeric expression to bigint (NULL stays NULL).
func sat(expr string) string {
	return "(CASE WHEN " + expr + " > 9223372036854775807 THEN 9223372036854775807" +
		" WHEN " + expr + " < -9223372036854775808 THEN -9223372036854775808" +
		" ELSE " + expr + " END)::int8"
}

// currentXact is the id of the current transaction as an int8: xid8,
// which never wraps, and which a snapshot's xmin and xmax compare with.
const currentXact = "pg_current_xact_id()::text::int8"

// schemaLockKey is the transaction-scoped advisory lock that serialises
// schema creation by concurrently starting nodes ("limiterd" in ASCII).
const schemaLockKey = 0x6c696d6974657264

// pushRows is the unnest of a row batch: $2 … $8.
const pushRows = `unnest($2::text[], $3::int8[], $4::int8[], $5::bytea[], $6::int8[], $7::int8[], $8::timestamptz[])
		WITH ORDINALITY AS r(namespace, size_ns, start_ns, key, total, version, expire_at, ord)`

func buildQueries(table string, bn bucketNames, ln leaseNames) queries {
	// upsert writes the rows of relation r, in ord order (which the caller
	// sorted by primary key) so that concurrent statements lock rows in
	// one global order and cannot deadlock.
	// changed is the writing transaction's id, for the change read.
	upsert := fmt.Sprintf(`INSERT INTO %[1]s AS t (namespace, size_ns, start_ns, key, incarnation, total, version, expire_at, changed)
	SELECT r.namespace, r.size_ns, r.start_ns, r.key, $1, r.total, r.version, r.expire_at, %[2]s
	FROM %%s
	ORDER BY r.ord
	ON CONFLICT (namespace, size_ns, start_ns, key, incarnation) DO UPDATE
	SET total = excluded.total, version = excluded.version,
		expire_at = greatest(t.expire_at, excluded.expire_at), changed = excluded.changed
	WHERE t.version < excluded.version`, table, currentXact)

	// others sums, for each window of relation r, the totals of every
	// incarnation but $1: one primary-key index range per window.
	others := fmt.Sprintf(`SELECT r.ord, s.sum
	FROM %%s
	CROSS JOIN LATERAL (
		SELECT %[2]s AS sum FROM %[1]s o
		WHERE o.namespace = r.namespace AND o.size_ns = r.size_ns AND o.start_ns = r.start_ns
			AND o.key = r.key AND o.incarnation <> $1
	) s
	WHERE s.sum IS NOT NULL`, table, sat("sum(o.total)"))

	leases, purgeLeases, purgeReleases := leaseQueries(ln)
	return queries{
		// $3 … $5: the bucket tables and function, $6 … $8 the lease
		// tables and function (a table made by an earlier release lacks
		// them: the schema is then completed).
		exists: `SELECT to_regnamespace($1) IS NOT NULL, to_regclass($2) IS NOT NULL
	AND to_regclass($3) IS NOT NULL AND to_regclass($4) IS NOT NULL AND to_regprocedure($5) IS NOT NULL
	AND to_regclass($6) IS NOT NULL AND to_regclass($7) IS NOT NULL AND to_regprocedure($8) IS NOT NULL
	AND EXISTS (SELECT FROM pg_attribute WHERE attrelid = to_regclass($2) AND attname = 'changed' AND NOT attisdropped)
	AND EXISTS (SELECT FROM pg_attribute WHERE attrelid = to_regclass($3) AND attname = 'waste' AND NOT attisdropped)`,
		push: fmt.Sprintf(upsert, pushRows),
		fetch: fmt.Sprintf(others, `unnest($2::text[], $3::int8[], $4::int8[], $5::bytea[])
		WITH ORDINALITY AS r(namespace, size_ns, start_ns, key, ord)`),
		// The read does not see the write (one snapshot), and need not: it
		// sums the other incarnations' rows, which the write never touches.
		pfetch: fmt.Sprintf("WITH r AS MATERIALIZED (SELECT * FROM %s),\nw AS (%s)\n%s",
			pushRows, fmt.Sprintf(upsert, "r"), fmt.Sprintf(others, "r")),
		window: fmt.Sprintf(`SELECT coalesce(%[2]s, 0) FROM %[1]s
	WHERE namespace = $1 AND size_ns = $2 AND start_ns = $3 AND key = $4`, table, sat("sum(total)")),
		lock:  `SELECT pg_advisory_xact_lock($1::int8)`,
		allow: fmt.Sprintf(groupAllowSQL, table, sat("w.oc"), sat("w.op")),
		purge: fmt.Sprintf(`DELETE FROM %[1]s WHERE ctid = ANY(ARRAY(
	SELECT ctid FROM %[1]s WHERE expire_at < now() LIMIT $1 FOR UPDATE SKIP LOCKED))`, table),
		buckets: fmt.Sprintf(`SELECT * FROM %s($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)`, bn.fn),
		// A bucket's incarnation rows go with it (ON DELETE CASCADE).
		purgeBuckets: fmt.Sprintf(`DELETE FROM %[1]s WHERE ctid = ANY(ARRAY(
	SELECT ctid FROM %[1]s WHERE expire_at < now() LIMIT $1 FOR UPDATE SKIP LOCKED))`, bn.table),
		cursor:        cursorSQL,
		changes:       fmt.Sprintf(changesSQL, table, sat("sum(o.total)")),
		leases:        leases,
		purgeLeases:   purgeLeases,
		purgeReleases: purgeReleases,
		leaseLockNS:   ln.lockNS,
	}
}
