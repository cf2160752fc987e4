package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ensureSchema makes sure the tables and the bucket and lease functions
// exist, creating them when CreateSchema is set (a table of an earlier
// release gets the bucket and lease objects it lacks). Until that
// succeeds every call tries again (one at a time); once it has, it costs
// one atomic load.
func (s *Store) ensureSchema(ctx context.Context) error {
	if !s.cfg.CreateSchema || s.ready.Load() {
		return nil
	}
	select {
	case s.schemaSem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("waiting for the table to be created: %w", ctx.Err())
	}
	defer func() { <-s.schemaSem }()
	if s.ready.Load() {
		return nil
	}
	var schemaOK, tableOK bool
	bn, ln := s.cfg.bucketNames(), s.cfg.leaseNames()
	if err := s.db.QueryRow(ctx, s.q.exists, pgx.Identifier{s.cfg.Schema}.Sanitize(), s.cfg.tableName(),
		bn.table, bn.inc, bn.fnSig, ln.live, ln.rel, ln.fnSig).Scan(&schemaOK, &tableOK); err != nil {
		return err
	}
	if !tableOK {
		// One implicit transaction (a simple-protocol query of several
		// statements): the advisory lock serialises nodes that start
		// together, and each later one finds the table made by the first.
		// CREATE SCHEMA is left out when the schema exists, so a user
		// without CREATE on the database can still create the table.
		ddl := fmt.Sprintf("SELECT pg_advisory_xact_lock(%d);\n%s", int64(schemaLockKey), schemaSQL(s.cfg, !schemaOK))
		if _, err := s.db.Exec(ctx, ddl); err != nil {
			return fmt.Errorf("creating table %s: %w", s.cfg.tableName(), err)
		}
	}
	s.ready.Store(true)
	return nil
}

// SchemaSQL returns the DDL that creates cfg's schema, table and index, for
// teams that run migrations themselves (limiterd schema postgres). It is
// what the store runs on first use when CreateSchema is set, and it may be
// run any number of times. Empty Schema and Table mean their defaults;
// they must be plain identifiers (see Validate).
func SchemaSQL(cfg Config) string {
	cfg = cfg.withDefaults()
	return schemaSQL(cfg, true)
}

// schemaSQL is the DDL of cfg's table, with CREATE SCHEMA when
// createSchema. Window size and start are nanoseconds, as
// clustersync.WindowKey holds them, so no rounding can merge two windows.
// Keys are bytea, since text cannot hold U+0000: any two distinct keys
// stay distinct. Text columns are COLLATE "C", so the primary key's order
// is the bytewise order in which newRowBatch sorts rows.
func schemaSQL(cfg Config, createSchema bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "-- limiterd window rows: one row per (namespace, window size, window start,\n")
	fmt.Fprintf(&b, "-- key, node incarnation) holding that incarnation's absolute total in\n")
	fmt.Fprintf(&b, "-- micro-hits and its version; limiterd purges rows past expire_at.\n")
	if createSchema {
		fmt.Fprintf(&b, "CREATE SCHEMA IF NOT EXISTS %s;\n", pgx.Identifier{cfg.Schema}.Sanitize())
	}
	fmt.Fprintf(&b, `CREATE TABLE IF NOT EXISTS %s (
    namespace   text COLLATE "C" NOT NULL,
    size_ns     bigint NOT NULL,          -- window size, nanoseconds
    start_ns    bigint NOT NULL,          -- window start, Unix nanoseconds
    key         bytea NOT NULL,           -- the key's UTF-8 bytes
    incarnation text COLLATE "C" NOT NULL,
    total       bigint NOT NULL,          -- micro-hits (hits x 10^6)
    version     bigint NOT NULL,
    expire_at   timestamptz,              -- NULL: never
    changed     bigint NOT NULL DEFAULT 0, -- id of the transaction that last wrote the row
    PRIMARY KEY (namespace, size_ns, start_ns, key, incarnation)
) WITH (fillfactor = 90);
`, cfg.tableName())
	fmt.Fprintf(&b, "CREATE INDEX IF NOT EXISTS %s ON %s (expire_at);\n",
		pgx.Identifier{cfg.Table + "_expire_at"}.Sanitize(), cfg.tableName())
	// The change read (clustersync.ChangeReader). A table of an earlier
	// release gains the column (0: written before any cursor); the ALTER
	// runs only then, as it locks out every other statement on the table.
	fmt.Fprintf(&b, `DO $$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = %[1]s::regclass AND attname = 'changed' AND NOT attisdropped) THEN
        ALTER TABLE %[2]s ADD COLUMN changed bigint NOT NULL DEFAULT 0;
    END IF;
END $$;
`, quoteLiteral(cfg.tableName()), cfg.tableName())
	fmt.Fprintf(&b, "CREATE INDEX IF NOT EXISTS %s ON %s (namespace, changed);\n",
		pgx.Identifier{cfg.Table + "_changed"}.Sanitize(), cfg.tableName())
	b.WriteString(bucketSchemaSQL(cfg.bucketNames()))
	b.WriteString(leaseSchemaSQL(cfg.leaseNames()))
	return b.String()
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
