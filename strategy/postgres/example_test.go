package postgres_test

import (
	"fmt"

	pgstore "github.com/limiterd/limiterd/strategy/postgres"
)

// The DDL for teams that create the table themselves (what
// `limiterd schema postgres` prints), then run limiterd with
// create_schema: false.
func ExampleSchemaSQL() {
	cfg := pgstore.DefaultConfig()
	cfg.Schema = "ratelimit"
	fmt.Print(pgstore.SchemaSQL(cfg))
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
	//     PRIMARY KEY (namespace, size_ns, start_ns, key, incarnation)
	// ) WITH (fillfactor = 90);
	// CREATE INDEX IF NOT EXISTS "limiterd_windows_expire_at" ON "ratelimit"."limiterd_windows" (expire_at);
}
