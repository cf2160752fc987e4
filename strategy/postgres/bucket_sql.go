package postgres

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The bucket objects are named after the windows table T: T_bkt (one row
// per bucket), T_bkt_inc (one row per bucket and incarnation), the index
// T_bkt_exp and the function T_bkt_v5. The suffixes are short so that
// every name fits PostgreSQL's 63 bytes for any valid Table.
//
// The function's name carries its version: a change to its arguments or
// behaviour is a new function (T_bkt_v4) created beside the old one, so
// nodes of the previous release keep calling theirs during a rolling
// upgrade. v2 added the resets (p_reset); v3 puts an empty leaky
// bucket's drip mark on the drip grid; v4 a full token bucket's refill
// mark on the refill grid; v5 keeps a token bucket's waste (the part of
// its last refill the cap cut off) and gives it back to late takes.
const bucketFuncVersion = "v5"

// bucketNames are the quoted, schema-qualified names of the bucket
// objects, and the function's signature for to_regprocedure.
type bucketNames struct {
	table, inc, fn, fnSig string
	indexName             string // unqualified: CREATE INDEX puts it in the table's schema
}

func (c Config) bucketNames() bucketNames {
	q := func(suffix string) string { return pgx.Identifier{c.Schema, c.Table + suffix}.Sanitize() }
	fn := q("_bkt_" + bucketFuncVersion)
	return bucketNames{
		table:     q("_bkt"),
		inc:       q("_bkt_inc"),
		indexName: pgx.Identifier{c.Table + "_bkt_exp"}.Sanitize(),
		fn:        fn,
		fnSig:     fn + "(text,text,int8,int8,bytea[],int4[],int8[],int8[],int8[],bool[],int8[],int8[],int8[],int8[],timestamptz[],bool[],int8[],int8[])",
	}
}

// bucketSchemaSQL is the DDL of the bucket rows and of the function that
// applies a BucketStore call to them.
func bucketSchemaSQL(n bucketNames) string {
	var b strings.Builder
	fmt.Fprintf(&b, `-- limiterd bucket rows (token, leaky, fixed): one row per (namespace, bucket)
-- holding the shared state, one per (bucket, incarnation) holding what that
-- incarnation applied; limiterd purges bucket rows past expire_at, their
-- incarnation rows with them. The function applies one BucketStore call.
CREATE TABLE IF NOT EXISTS %[1]s (
    namespace   text COLLATE "C" NOT NULL,
    bkey        bytea NOT NULL,           -- ratelimit.BucketSpec.StoreKey()
    level       bigint NOT NULL,          -- micro-hits: tokens, drops or count
    mark        bigint NOT NULL,          -- Unix ns: refill mark, drip mark or period start
    waste       bigint NOT NULL DEFAULT 0, -- micro-hits: the cap's cut of a token bucket's last refill
    seq         bigint NOT NULL,          -- write count
    expire_at   timestamptz NOT NULL,     -- the row counts as absent from then
    PRIMARY KEY (namespace, bkey)
) WITH (fillfactor = 80);
CREATE INDEX IF NOT EXISTS %[3]s ON %[1]s (expire_at);
-- A table of an earlier release gains the waste (0: none known); the
-- ALTER runs only then, as it locks out every other statement on it.
DO $$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = %[4]s::regclass AND attname = 'waste' AND NOT attisdropped) THEN
        ALTER TABLE %[1]s ADD COLUMN waste bigint NOT NULL DEFAULT 0;
    END IF;
END $$;
CREATE TABLE IF NOT EXISTS %[2]s (
    namespace   text COLLATE "C" NOT NULL,
    bkey        bytea NOT NULL,
    incarnation text COLLATE "C" NOT NULL,
    life        bigint NOT NULL,
    applied     bigint NOT NULL,          -- micro-hits of this life the bucket holds
    version     bigint NOT NULL,
    PRIMARY KEY (namespace, bkey, incarnation),
    FOREIGN KEY (namespace, bkey) REFERENCES %[1]s ON DELETE CASCADE
) WITH (fillfactor = 80);
`, n.table, n.inc, n.indexName, quoteLiteral(n.table))
	fmt.Fprintf(&b, bucketFuncSQL, n.fn, n.table, n.inc, advanceSQL)
	return b.String()
}

// advanceSQL is node's advance of each kind (tokenParams, leakyParams and
// fixedParams.advance) on the function's variables: kind k, parameters
// a, b, c, state l (level), m (mark), w (waste), brought to time t, which
// becomes the time used (a t before the mark counts as the mark). Every
// product is at most a difference of times or of levels, so none
// overflows.
const advanceSQL = `
		IF k = 1 THEN -- token: a max, b refill time, c refill amount
			IF t < m THEN
				t := m;
			ELSE
				wasfull := l >= a;
				q := (t - m) / b;
				IF q > 0 THEN
					w := c;
					IF NOT wasfull THEN
						g := (a - l + c - 1) / c; -- refills to fill it
						IF q > g THEN
							l := a;
						ELSIF q = g THEN
							w := g * c - (a - l); -- the cap cut off the last one's excess
							l := a;
						ELSE
							l := l + q * c;
							w := 0;
						END IF;
					END IF;
					m := m + q * b;
				END IF;
				IF l >= a THEN
					g := t - greatest(t, 0) % b;
					IF g <> m THEN
						w := CASE WHEN wasfull AND g > m THEN c ELSE 0 END;
						m := g;
					END IF;
				END IF;
			END IF;
		ELSIF k = 2 THEN -- leaky: a size, c drip interval
			IF t < m THEN
				t := m;
			END IF;
			IF l > 0 THEN
				q := (t - m) / c;
				IF q >= (l + 999999) / 1000000 THEN
					l := 0;
				ELSE
					l := l - q * 1000000;
					m := m + q * c;
				END IF;
			END IF;
			IF l = 0 THEN
				m := t - greatest(t, 0) % c;
			END IF;
		ELSE -- fixed: a period, b limit
			IF t < m THEN
				t := m;
			ELSIF t - m >= a THEN
				l := 0;
				m := t / a;
				IF t % a < 0 THEN -- floor division, as ratelimit.WindowStart
					m := m - 1;
				END IF;
				m := m * a;
			END IF;
		END IF;`

// bucketFuncSQL is clustersync.ApplyBuckets in PL/pgSQL, on the rows of
// one call, in one transaction:
//
//  1. lock: one INSERT ... ON CONFLICT DO UPDATE, in key order, inserts
//     a placeholder row (expired: it counts as absent) for each bucket
//     missing and locks every existing one (a no-op update), returning
//     the rows. Every call locks in the same order (bytea compares
//     bytewise), so calls on the same buckets queue instead of
//     deadlocking. Unlike INSERT ... DO NOTHING then SELECT ... FOR
//     UPDATE, no row can be purged between the two and no retry is ever
//     made while holding locks;
//  2. read each bucket's state and this incarnation's record; an expired
//     row is a new bucket (its stale records are deleted);
//  3. catch up (and, for a reset, take a new bucket's state at the
//     call's time, computed by the caller), decide the take with
//     ratelimit.TakeBuckets's all-or-none rule, and write back the rows that
//     changed.
//
// %[1]s function, %[2]s bucket table, %[3]s record table, %[4]s advance.
const bucketFuncSQL = `CREATE OR REPLACE FUNCTION %[1]s(
	p_inc text, p_ns text, p_at int8, p_take int8,
	p_key bytea[], p_kind int4[], p_a int8[], p_b int8[], p_c int8[], p_strict bool[],
	p_life int8[], p_total int8[], p_last_at int8[], p_version int8[], p_expire timestamptz[],
	p_reset bool[], p_reset_level int8[], p_reset_mark int8[])
RETURNS TABLE (o_allowed bool, o_ord int4, o_before_level int8, o_before_mark int8,
	o_after_level int8, o_after_mark int8, o_applied int8, o_seq int8,
	o_before_waste int8, o_after_waste int8)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
	n int4 := coalesce(cardinality(p_key), 0);
	zero int8[] := array_fill(0::int8, ARRAY[n]);
	nay bool[] := array_fill(false, ARRAY[n]);
	-- Per bucket: state, write count, expiry; the incarnation's record
	-- (life, applied, version); the state before the take; the take's
	-- next state, verdict and consumption; what must be written.
	lv int8[] := zero; mk int8[] := zero; wv int8[] := zero; sq int8[] := zero;
	ex timestamptz[] := array_fill('-infinity'::timestamptz, ARRAY[n]);
	rl int8[] := zero; ra int8[] := zero; rv int8[] := zero;
	bl int8[] := zero; bm int8[] := zero; bw int8[] := zero;
	nl int8[] := zero; nm int8[] := zero; nw int8[] := zero; okb bool[] := nay; used int8[] := zero;
	chg bool[] := nay; wrec bool[] := nay;
	replays int4 := 0; replay_ok bool := true; allowed bool := true;
	i int4; r record;
	k int4; a int8; b int8; c int8; l int8; m int8; w int8; t int8; q int8; g int8; bef int8;
	d int8; wasfull bool; late bool;
BEGIN
	FOR r IN INSERT INTO %[2]s AS x (namespace, bkey, level, mark, seq, expire_at)
		SELECT p_ns, u.bkey, 0, 0, 0, '-infinity' FROM unnest(p_key) AS u(bkey) ORDER BY u.bkey
		ON CONFLICT (namespace, bkey) DO UPDATE SET seq = x.seq
		RETURNING x.bkey, x.level, x.mark, x.waste, x.seq, x.expire_at
	LOOP
		i := array_position(p_key, r.bkey);
		lv[i] := r.level; mk[i] := r.mark; wv[i] := r.waste; sq[i] := r.seq; ex[i] := r.expire_at;
	END LOOP;

	FOR i IN 1 .. n LOOP
		k := p_kind[i]; a := p_a[i]; b := p_b[i]; c := p_c[i];
		IF ex[i] <= now() THEN
			-- Absent: a new bucket (ratelimit.BucketSpec.Init), at the
			-- caller's first consumption when it counted some.
			IF sq[i] > 0 THEN
				DELETE FROM %[3]s AS x WHERE x.namespace = p_ns AND x.bkey = p_key[i];
			END IF;
			t := p_at;
			IF p_last_at[i] <> 0 AND p_total[i] > 0 THEN
				t := least(t, p_last_at[i]);
			END IF;
			IF k = 1 THEN
				-- Full for ever: the cap cut off all of its last refill.
				lv[i] := a; mk[i] := t - greatest(t, 0) %% b; wv[i] := c;
			ELSIF k = 2 THEN
				lv[i] := 0; mk[i] := t - greatest(t, 0) %% c;
			ELSE
				lv[i] := 0; mk[i] := t / a;
				IF t %% a < 0 THEN
					mk[i] := mk[i] - 1;
				END IF;
				mk[i] := mk[i] * a;
			END IF;
			ex[i] := '-infinity';
			chg[i] := true;
		ELSE
			-- (INTO takes no array elements: r, then the arrays.)
			SELECT x.life, x.applied, x.version INTO r FROM %[3]s AS x
			WHERE x.namespace = p_ns AND x.bkey = p_key[i] AND x.incarnation = p_inc;
			IF FOUND THEN
				rl[i] := r.life; ra[i] := r.applied; rv[i] := r.version;
			END IF;
		END IF;
		IF p_life[i] < rl[i] OR (p_life[i] = rl[i] AND p_version[i] < rv[i]) THEN
			-- Late: a newer call of this incarnation went first.
			replays := replays + 1;
			replay_ok := false;
		ELSIF p_life[i] = rl[i] AND p_version[i] = rv[i] THEN
			replays := replays + 1;
			replay_ok := replay_ok AND ra[i] - p_total[i] >= p_take;
		ELSE
			IF p_life[i] > rl[i] THEN
				rl[i] := p_life[i]; ra[i] := 0;
			END IF;
			IF p_total[i] > ra[i] THEN
				-- Catch up (ratelimit.BucketSpec.Force at ApplyAt): tokens
				-- taken before the last refill get back the cap's cut of it.
				l := lv[i]; m := mk[i]; w := wv[i]; t := greatest(p_last_at[i], 0);
				late := t < m;
				%[4]s
				d := p_total[i] - ra[i];
				IF k = 1 THEN
					IF late THEN
						q := least(d, w);
						w := w - q;
						d := d - q;
					END IF;
					l := l - d;
				ELSE
					l := l + d;
				END IF;
				lv[i] := l; mk[i] := m; wv[i] := w;
				ra[i] := p_total[i];
			END IF;
			IF p_reset[i] THEN
				-- A reset: a new bucket's state at the call's time.
				lv[i] := p_reset_level[i]; mk[i] := p_reset_mark[i];
				wv[i] := CASE WHEN k = 1 THEN c ELSE 0 END;
			END IF;
			rv[i] := p_version[i];
			chg[i] := true; wrec[i] := true;
		END IF;
		IF p_expire[i] > ex[i] THEN
			ex[i] := p_expire[i];
			chg[i] := true;
		END IF;
		bl[i] := lv[i]; bm[i] := mk[i]; bw[i] := wv[i];
	END LOOP;

	IF replays = n THEN
		allowed := replay_ok;
	ELSIF replays > 0 THEN
		allowed := false; -- a call partly replayed decides nothing
	ELSE
		-- ratelimit.TakeBuckets: every bucket's take, then all or none.
		FOR i IN 1 .. n LOOP
			k := p_kind[i]; a := p_a[i]; b := p_b[i]; c := p_c[i];
			l := lv[i]; m := mk[i]; w := wv[i]; t := p_at;
			late := t < m;
			%[4]s
			IF k = 1 AND late AND p_take > 0 THEN
				-- Made before the last refill and admitted: taken first,
				-- it leaves room for what the cap cut off of that refill.
				q := least(p_take, w);
				IF l + q >= p_take THEN
					l := l + q; w := w - q;
				END IF;
			END IF;
			bef := l;
			IF k = 1 THEN
				okb[i] := bef >= p_take;
				IF p_take > 0 THEN
					-- A refused take empties the bucket; one in debt
					-- stays in debt.
					l := greatest(bef - p_take, least(bef, 0));
					IF p_strict[i] AND l <= 0 THEN
						m := t; w := 0;
					END IF;
				END IF;
				used[i] := bef - l;
			ELSE
				okb[i] := bef + p_take <= CASE WHEN k = 2 THEN a ELSE b END;
				IF okb[i] THEN
					l := l + p_take;
					used[i] := p_take;
				END IF;
			END IF;
			nl[i] := l; nm[i] := m; nw[i] := w;
			allowed := allowed AND okb[i];
		END LOOP;
		FOR i IN 1 .. n LOOP
			-- A take of nothing leaves the state where it was: a later
			-- catch-up applies from its own time (sync.ApplyBuckets).
			IF p_take <> 0 AND (allowed OR NOT okb[i]) AND (nl[i] <> lv[i] OR nm[i] <> mk[i] OR nw[i] <> wv[i] OR used[i] <> 0) THEN
				lv[i] := nl[i]; mk[i] := nm[i]; wv[i] := nw[i];
				ra[i] := ra[i] + used[i];
				chg[i] := true; wrec[i] := true;
			END IF;
		END LOOP;
	END IF;

	FOR i IN 1 .. n LOOP
		IF chg[i] THEN
			sq[i] := sq[i] + 1;
			UPDATE %[2]s AS x SET level = lv[i], mark = mk[i], waste = wv[i], seq = sq[i], expire_at = ex[i]
			WHERE x.namespace = p_ns AND x.bkey = p_key[i];
		END IF;
		IF wrec[i] THEN
			INSERT INTO %[3]s AS x (namespace, bkey, incarnation, life, applied, version)
			VALUES (p_ns, p_key[i], p_inc, rl[i], ra[i], rv[i])
			ON CONFLICT (namespace, bkey, incarnation) DO UPDATE
			SET life = excluded.life, applied = excluded.applied, version = excluded.version;
		END IF;
		o_allowed := allowed; o_ord := i;
		o_before_level := bl[i]; o_before_mark := bm[i];
		o_after_level := lv[i]; o_after_mark := mk[i];
		o_applied := CASE WHEN rl[i] = p_life[i] THEN ra[i] ELSE 0 END;
		o_seq := sq[i];
		o_before_waste := bw[i]; o_after_waste := wv[i];
		RETURN NEXT;
	END LOOP;
END
$fn$;
`
