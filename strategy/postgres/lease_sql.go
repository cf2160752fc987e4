package postgres

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The lease objects are named after the windows table T: T_lease (live
// leases), T_lease_rel (remembered releases) and the function T_lease_v2.
// Every suffix is at most as long as "_expire_at", so the names fit
// PostgreSQL's 63 bytes for any valid Table.
//
// As with the buckets, the function's version is in its name: a change
// to its arguments or behaviour is a new function (T_lease_v2) created
// beside the old one, so nodes of the previous release keep calling
// theirs during a rolling upgrade. v2 added the clear (kind 6).
const leaseFuncVersion = "v2"

// leaseNames are the quoted, schema-qualified names of the lease objects,
// the function's signature for to_regprocedure, and lockNS, the identity
// mixed into the leases' advisory lock keys (distinct from Allow's, so a
// lease call and an Allow on the same key do not wait for each other).
type leaseNames struct {
	live, rel, fn, fnSig, lockNS string
}

func (c Config) leaseNames() leaseNames {
	q := func(suffix string) string { return pgx.Identifier{c.Schema, c.Table + suffix}.Sanitize() }
	fn := q("_lease_" + leaseFuncVersion)
	return leaseNames{
		live:   q("_lease"),
		rel:    q("_lease_rel"),
		fn:     fn,
		fnSig:  fn + "(int8,int4[],text[],bytea[],bytea[],int8[],int8[],int8[])",
		lockNS: c.Schema + "." + c.Table + "_lease",
	}
}

// leaseSchemaSQL is the DDL of the lease tables and of the function that
// applies the ops of a LeaseStore call to them.
//
// Live leases and releases are apart so that a key's live leases are
// counted without reading its releases, however many it remembers. Times
// are int8 Unix nanoseconds on the callers' clocks; a row at or before
// the call's now counts as absent. The tables have no index but their
// primary keys: an index on (namespace, key, time) would let a generic
// plan look an id up through it, reading every row of the key, and one on
// the time alone would slow every write for the purge's sake only. The
// purge reads the tables in full instead: they hold little more than the
// live leases and the remembered releases.
func leaseSchemaSQL(n leaseNames) string {
	return fmt.Sprintf(`-- limiterd concurrency leases: one row per live lease (namespace, key,
-- lease id) with its expiry, one per remembered release with the time it
-- is remembered until; a row past its time counts as absent, and limiterd
-- purges it. The function applies the ops of one LeaseStore call.
CREATE TABLE IF NOT EXISTS %[1]s (
    namespace   text COLLATE "C" NOT NULL,
    lkey        bytea NOT NULL,           -- the key's UTF-8 bytes
    id          bytea NOT NULL,           -- the lease's store id
    expiry      bigint NOT NULL,          -- Unix ns
    PRIMARY KEY (namespace, lkey, id)
);
CREATE TABLE IF NOT EXISTS %[2]s (
    namespace   text COLLATE "C" NOT NULL,
    lkey        bytea NOT NULL,
    id          bytea NOT NULL,
    until       bigint NOT NULL,          -- Unix ns
    PRIMARY KEY (namespace, lkey, id)
);
`, n.live, n.rel) + fmt.Sprintf(leaseFuncSQL, n.fn, n.live, n.rel)
}

// leaseFuncSQL is clustersync.ApplyLease in PL/pgSQL, in the one
// transaction of the statement that calls it:
//
//  1. lock: a transaction-scoped advisory lock per distinct key of the
//     call (p_lock, computed by lockKey), taken in ascending order, so
//     calls sharing keys queue instead of deadlocking. Advisory locks
//     rather than row locks, because a key with no lease has no row to
//     lock. The function is VOLATILE: under READ COMMITTED each of its
//     later statements takes a new snapshot, which sees what the previous
//     holder of a lock committed before releasing it;
//  2. apply the ops key by key, each key's in the call's order (ops of
//     different keys touch different rows, so this is the call's order
//     as far as anyone can tell): read the id's live lease and release,
//     decide as ApplyLease, write what changed (upserts, so a row the
//     purge is deleting meanwhile is written again), and reply the key's
//     live count and earliest expiry. Those are read once per key and
//     then kept up to date, the earliest expiry read again only when its
//     lease moved or left.
//
// Rows at or before p_now are skipped, not deleted: as ApplyLease drops
// them, as long as callers' clocks agree. A caller whose clock is behind
// another's may still count a lease, or remember a release, that the
// other's call would have dropped: the cautious side.
//
// %[1]s function, %[2]s live table, %[3]s release table. Kinds are
// clustersync.LeaseOpKind: 1 acquire, 2 put, 3 release, 4 renew, 5 count,
// 6 clear.
const leaseFuncSQL = `CREATE OR REPLACE FUNCTION %[1]s(
	p_now int8, p_kind int4[], p_ns text[], p_key bytea[], p_id bytea[],
	p_limit int8[], p_exp int8[], p_lock int8[])
RETURNS TABLE (o_ord int4, o_ok bool, o_held int8, o_next int8)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
	i int4; lk int8;
	v_ns text; v_key bytea; v_id bytea; v_exp int8;
	v_live int8; v_rel int8; v_ok bool; v_moved bool; r record;
	-- The key of the previous op, its live count and earliest expiry.
	c_ns text; c_key bytea; c_held int8; c_next int8;
BEGIN
	FOR lk IN SELECT DISTINCT u.k FROM unnest(p_lock) AS u(k) ORDER BY 1 LOOP
		PERFORM pg_advisory_xact_lock(lk);
	END LOOP;

	FOR i IN SELECT u.ord FROM unnest(p_ns, p_key) WITH ORDINALITY AS u(ns, lkey, ord)
		ORDER BY u.ns COLLATE "C", u.lkey, u.ord
	LOOP
		v_ns := p_ns[i]; v_key := p_key[i]; v_id := p_id[i]; v_exp := p_exp[i];
		IF c_ns IS DISTINCT FROM v_ns OR c_key IS DISTINCT FROM v_key THEN
			SELECT count(*), min(x.expiry) INTO c_held, c_next FROM %[2]s AS x
			WHERE x.namespace = v_ns AND x.lkey = v_key AND x.expiry > p_now;
			c_ns := v_ns; c_key := v_key;
		END IF;
		v_ok := false; v_moved := false; v_live := NULL; v_rel := NULL;
		IF p_kind[i] BETWEEN 1 AND 4 THEN
			SELECT x.expiry INTO v_live FROM %[2]s AS x
			WHERE x.namespace = v_ns AND x.lkey = v_key AND x.id = v_id AND x.expiry > p_now;
			SELECT x.until INTO v_rel FROM %[3]s AS x
			WHERE x.namespace = v_ns AND x.lkey = v_key AND x.id = v_id AND x.until > p_now;
		END IF;

		IF p_kind[i] IN (1, 2) THEN -- acquire, put
			IF v_exp > p_now AND v_rel IS NULL THEN
				IF v_live IS NOT NULL THEN
					v_ok := true; -- a replay, or a put of a live id: the later expiry
					IF v_exp > v_live THEN
						v_moved := true;
					END IF;
				ELSIF p_kind[i] = 2 OR c_held < p_limit[i] THEN
					v_ok := true;
					c_held := c_held + 1;
					c_next := least(c_next, v_exp); -- least skips NULLs
				END IF;
				IF v_ok AND (v_live IS NULL OR v_moved) THEN
					INSERT INTO %[2]s AS x (namespace, lkey, id, expiry) VALUES (v_ns, v_key, v_id, v_exp)
					ON CONFLICT (namespace, lkey, id) DO UPDATE SET expiry = excluded.expiry;
				END IF;
			END IF;
		ELSIF p_kind[i] = 3 THEN -- release
			IF v_live IS NOT NULL THEN
				v_ok := true; v_moved := true;
				c_held := c_held - 1;
				DELETE FROM %[2]s AS x WHERE x.namespace = v_ns AND x.lkey = v_key AND x.id = v_id;
			END IF;
			v_exp := greatest(v_exp, v_live, v_rel); -- greatest skips NULLs
			IF v_exp > p_now AND (v_rel IS NULL OR v_exp > v_rel) THEN
				INSERT INTO %[3]s AS x (namespace, lkey, id, until) VALUES (v_ns, v_key, v_id, v_exp)
				ON CONFLICT (namespace, lkey, id) DO UPDATE SET until = excluded.until;
			END IF;
		ELSIF p_kind[i] = 4 THEN -- renew
			IF v_exp > p_now AND v_live IS NOT NULL THEN
				v_ok := true;
				IF v_exp <> v_live THEN
					v_moved := true;
					INSERT INTO %[2]s AS x (namespace, lkey, id, expiry) VALUES (v_ns, v_key, v_id, v_exp)
					ON CONFLICT (namespace, lkey, id) DO UPDATE SET expiry = excluded.expiry;
				END IF;
			END IF;
		ELSIF p_kind[i] = 5 THEN -- count
			v_ok := true;
		ELSIF p_kind[i] = 6 THEN -- clear: every live lease released as a release
			FOR r IN DELETE FROM %[2]s AS x WHERE x.namespace = v_ns AND x.lkey = v_key AND x.expiry > p_now
				RETURNING x.id, x.expiry
			LOOP
				v_ok := true;
				INSERT INTO %[3]s AS x (namespace, lkey, id, until) VALUES (v_ns, v_key, r.id, greatest(v_exp, r.expiry))
				ON CONFLICT (namespace, lkey, id) DO UPDATE SET until = greatest(x.until, excluded.until);
			END LOOP;
			c_held := 0; c_next := NULL;
		END IF;

		IF v_moved THEN
			-- The lease moved from v_live: if it was the earliest, the
			-- earliest is read again.
			IF p_kind[i] <> 3 AND v_exp < c_next THEN
				c_next := v_exp;
			ELSIF v_live = c_next THEN
				SELECT min(x.expiry) INTO c_next FROM %[2]s AS x
				WHERE x.namespace = v_ns AND x.lkey = v_key AND x.expiry > p_now;
			END IF;
		END IF;
		o_ord := i; o_ok := v_ok; o_held := c_held; o_next := coalesce(c_next, 0);
		RETURN NEXT;
	END LOOP;
END
$fn$;
`

// leasePurgeGrace is how long past its time the purge leaves a lease or
// release row. Its time is on the caller's clock and the purge reads the
// server's: a caller whose clock is behind still counts the row, and a
// release forgotten early would let a late Put bring its lease back.
const leasePurgeGrace = time.Minute

// leaseQueries builds the statements of the lease objects: the call of
// the function, and the purge of each table: rows past their time on the
// server's clock less leasePurgeGrace, found by reading the table (see
// leaseSchemaSQL), in
// batches of $1 rows as the other purges.
func leaseQueries(n leaseNames) (apply, purgeLive, purgeRel string) {
	purge := `DELETE FROM %[1]s WHERE ctid = ANY(ARRAY(
	SELECT ctid FROM %[1]s WHERE %[2]s < (extract(epoch FROM now()) * 1000000000)::int8 - %[3]d
	LIMIT $1 FOR UPDATE SKIP LOCKED))`
	return fmt.Sprintf(`SELECT * FROM %s($1, $2, $3, $4, $5, $6, $7, $8)`, n.fn),
		fmt.Sprintf(purge, n.live, "expiry", int64(leasePurgeGrace)),
		fmt.Sprintf(purge, n.rel, "until", int64(leasePurgeGrace))
}
