package postgres_test

import (
	"fmt"
	"strings"

	pgstore "github.com/limiterd/limiterd/strategy/postgres"
)

// The DDL for teams that create the table themselves (what
// `limiterd schema postgres` prints), then run limiterd with
// create_schema: false.
func ExampleSchemaSQL() {
	cfg := pgstore.DefaultConfig()
	cfg.Schema = "ratelimit"
	ddl := pgstore.SchemaSQL(cfg)
	// The bucket function's body is long: its first line stands for it.
	head, _, _ := strings.Cut(ddl, "\n\tp_inc")
	fmt.Println(head)
	// Output:
	// -- limiterd window rows: one row per (namespace, window size, window start,
	// -- key, node incarnation) holding that incarnation's absolute total in
	// -- micro-hits and its version; limiterd purges rows past expire_at.
	// CREATE SCHEMA IF NOT EXISTS "ratelimit";
	// CREATE TABLE IF NOT EXISTS "ratelimit"."limiterd_windows" (
	//     namespace   text COLLATE "C" NOT NULL,
	//     size_ns     bigint NOT NULL,          -- window size, nanoseconds
	//     start_ns    bigint NOT NULL,          -- window start, Unix nanoseconds
	//     key         bytea NOT NULL,           -- the key's UTF-8 bytes
	//     incarnation text COLLATE "C" NOT NULL,
	//     total       bigint NOT NULL,          -- micro-hits (hits x 10^6)
	//     version     bigint NOT NULL,
	//     expire_at   timestamptz,              -- NULL: never
	//     changed     bigint NOT NULL DEFAULT 0, -- id of the transaction that last wrote the row
	//     PRIMARY KEY (namespace, size_ns, start_ns, key, incarnation)
	// ) WITH (fillfactor = 90);
	// CREATE INDEX IF NOT EXISTS "limiterd_windows_expire_at" ON "ratelimit"."limiterd_windows" (expire_at);
	// DO $$ BEGIN
	//     IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = '"ratelimit"."limiterd_windows"'::regclass AND attname = 'changed' AND NOT attisdropped) THEN
	//         ALTER TABLE "ratelimit"."limiterd_windows" ADD COLUMN changed bigint NOT NULL DEFAULT 0;
	//     END IF;
	// END $$;
	// CREATE INDEX IF NOT EXISTS "limiterd_windows_changed" ON "ratelimit"."limiterd_windows" (namespace, changed);
	// -- limiterd bucket rows (token, leaky, fixed): one row per (namespace, bucket)
	// -- holding the shared state, one per (bucket, incarnation) holding what that
	// -- incarnation applied; limiterd purges bucket rows past expire_at, their
	// -- incarnation rows with them. The function applies one BucketStore call.
	// CREATE TABLE IF NOT EXISTS "ratelimit"."limiterd_windows_bkt" (
	//     namespace   text COLLATE "C" NOT NULL,
	//     bkey        bytea NOT NULL,           -- ratelimit.BucketSpec.StoreKey()
	//     level       bigint NOT NULL,          -- micro-hits: tokens, drops or count
	//     mark        bigint NOT NULL,          -- Unix ns: refill mark, drip mark or period start
	//     waste       bigint NOT NULL DEFAULT 0, -- micro-hits: the cap's cut of a token bucket's last refill
	//     seq         bigint NOT NULL,          -- write count
	//     expire_at   timestamptz NOT NULL,     -- the row counts as absent from then
	//     PRIMARY KEY (namespace, bkey)
	// ) WITH (fillfactor = 80);
	// CREATE INDEX IF NOT EXISTS "limiterd_windows_bkt_exp" ON "ratelimit"."limiterd_windows_bkt" (expire_at);
	// -- A table of an earlier release gains the waste (0: none known); the
	// -- ALTER runs only then, as it locks out every other statement on it.
	// DO $$ BEGIN
	//     IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = '"ratelimit"."limiterd_windows_bkt"'::regclass AND attname = 'waste' AND NOT attisdropped) THEN
	//         ALTER TABLE "ratelimit"."limiterd_windows_bkt" ADD COLUMN waste bigint NOT NULL DEFAULT 0;
	//     END IF;
	// END $$;
	// CREATE TABLE IF NOT EXISTS "ratelimit"."limiterd_windows_bkt_inc" (
	//     namespace   text COLLATE "C" NOT NULL,
	//     bkey        bytea NOT NULL,
	//     incarnation text COLLATE "C" NOT NULL,
	//     life        bigint NOT NULL,
	//     applied     bigint NOT NULL,          -- micro-hits of this life the bucket holds
	//     version     bigint NOT NULL,
	//     PRIMARY KEY (namespace, bkey, incarnation),
	//     FOREIGN KEY (namespace, bkey) REFERENCES "ratelimit"."limiterd_windows_bkt" ON DELETE CASCADE
	// ) WITH (fillfactor = 80);
	// CREATE OR REPLACE FUNCTION "ratelimit"."limiterd_windows_bkt_v5"(
}
