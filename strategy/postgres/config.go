package postgres

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/limiterd/limiterd/internal/confval"
)

// Defaults of Config.
const (
	DefaultSchema           = "public"
	DefaultTable            = "limiterd_windows"
	DefaultStatementTimeout = 5 * time.Second
	DefaultPurgeInterval    = 30 * time.Second
)

// maxTableLen leaves room for the "_expire_at" suffix of the index name
// within PostgreSQL's 63-byte identifiers.
const maxTableLen = 63 - len("_expire_at")

// Config is a PostgreSQL store's configuration, as written under a store of
// type postgres in limiterd's YAML config. Start from DefaultConfig.
type Config struct {
	// DSN is the connection string, as a URL or key=value pairs:
	// "postgres://limiterd:secret@db.example:5432/limiter?sslmode=verify-full".
	// Say sslmode explicitly: verify-full (TLS, certificate and host name
	// checked) in production; disable only on a trusted loopback. Without
	// it pgx tries TLS and falls back to plain text (prefer). Behind
	// PgBouncer in transaction mode add default_query_exec_mode=exec: the
	// store otherwise uses prepared statements. Required.
	DSN string `yaml:"dsn"`
	// PoolSize is the most connections this node opens; 0 means pgxpool's
	// default, max(4, number of CPUs). Every node holds its own pool, so
	// the server needs nodes × pool_size connections. A large Push, Fetch
	// or PushFetch runs its statements on up to half of them at once
	// (at most 4).
	PoolSize int `yaml:"pool_size"`
	// StatementTimeout is the server-side statement_timeout of the store's
	// connections, in whole milliseconds, so the server abandons a
	// statement whose caller has given up (calls are bounded by their
	// context on the client side). 0 keeps the server's setting. Default 5s.
	StatementTimeout Duration `yaml:"statement_timeout"`
	// Schema holds the table: a plain identifier (letters, digits, _; not
	// starting with a digit), quoted in SQL. Default "public".
	Schema string `yaml:"schema"`
	// Table is the table of window rows: a plain identifier of at most 53
	// bytes (its expiry index is named <table>_expire_at). Default
	// "limiterd_windows".
	Table string `yaml:"table"`
	// CreateSchema creates the schema, table and index on first use when
	// the table is missing (retried on later calls until it succeeds).
	// Set it to false when migrations are run by hand from
	// `limiterd schema postgres`; the user then needs only SELECT, INSERT,
	// UPDATE and DELETE on the table. Default true.
	CreateSchema bool `yaml:"create_schema"`
	// PurgeInterval is how often a store made by Open deletes expired rows
	// in the background (first run at a random point of the first
	// interval). 0 means the default, 30s; a negative value turns the
	// background purge off (call Store.Purge yourself).
	PurgeInterval Duration `yaml:"purge_interval"`
	// Logger receives the background purge's errors; nil discards them.
	Logger *slog.Logger `yaml:"-"`
}

// DefaultConfig returns the defaults; DSN must still be set.
func DefaultConfig() Config {
	return Config{
		StatementTimeout: Duration(DefaultStatementTimeout),
		Schema:           DefaultSchema,
		Table:            DefaultTable,
		CreateSchema:     true,
		PurgeInterval:    Duration(DefaultPurgeInterval),
	}
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate reports the first invalid field, naming it. Empty Schema and
// Table mean their defaults.
func (c Config) Validate() error {
	c = c.withDefaults()
	if strings.TrimSpace(c.DSN) == "" {
		return errors.New("postgres: dsn: required, e.g. postgres://user:password@host:5432/db?sslmode=verify-full")
	}
	if _, err := pgxpool.ParseConfig(c.DSN); err != nil {
		// pgconn redacts the password from its parse errors.
		return fmt.Errorf("postgres: dsn: %w", err)
	}
	switch {
	case c.PoolSize < 0:
		return fmt.Errorf("postgres: pool_size: must not be negative, got %d", c.PoolSize)
	case c.PoolSize > math.MaxInt32:
		return fmt.Errorf("postgres: pool_size: too large, got %d", c.PoolSize)
	case c.StatementTimeout < 0:
		return fmt.Errorf("postgres: statement_timeout: must not be negative, got %s", c.StatementTimeout)
	case time.Duration(c.StatementTimeout)%time.Millisecond != 0:
		return fmt.Errorf("postgres: statement_timeout: must be a whole number of milliseconds, got %s", c.StatementTimeout)
	case time.Duration(c.StatementTimeout) > math.MaxInt32*time.Millisecond:
		return fmt.Errorf("postgres: statement_timeout: must be at most %s, got %s", math.MaxInt32*time.Millisecond, c.StatementTimeout)
	}
	if err := checkIdent("schema", c.Schema, 63); err != nil {
		return err
	}
	return checkIdent("table", c.Table, maxTableLen)
}

func checkIdent(field, v string, maxLen int) error {
	switch {
	case v == "":
		return fmt.Errorf("postgres: %s: must not be empty", field)
	case !identRE.MatchString(v):
		return fmt.Errorf("postgres: %s: must be a plain identifier (letters, digits and _, not starting with a digit), got %q", field, v)
	case len(v) > maxLen:
		return fmt.Errorf("postgres: %s: must be at most %d bytes, got %d", field, maxLen, len(v))
	}
	return nil
}

// withDefaults fills the fields whose zero value means "default".
func (c Config) withDefaults() Config {
	if c.Schema == "" {
		c.Schema = DefaultSchema
	}
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.PurgeInterval == 0 {
		c.PurgeInterval = Duration(DefaultPurgeInterval)
	}
	return c
}

// tableName is the quoted, schema-qualified table name.
func (c Config) tableName() string { return pgx.Identifier{c.Schema, c.Table}.Sanitize() }

// SchemaSQL returns the DDL that creates cfg's schema, table and index, for
// teams that run migrations themselves (limiterd schema postgres). It is
// what the store runs on first use when CreateSchema is set, and it may be
// run any number of times. Empty Schema and Table mean their defaults;
// they must be plain identifiers (see Validate).
func SchemaSQL(cfg Config) string {
	cfg = cfg.withDefaults()
	return schemaSQL(cfg, true)
}

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
    PRIMARY KEY (namespace, size_ns, start_ns, key, incarnation)
) WITH (fillfactor = 90);
`, cfg.tableName())
	fmt.Fprintf(&b, "CREATE INDEX IF NOT EXISTS %s ON %s (expire_at);\n",
		pgx.Identifier{cfg.Table + "_expire_at"}.Sanitize(), cfg.tableName())
	return b.String()
}

// Duration is a time.Duration written in config as a Go duration string
// ("250ms", "1s") or a bare number of seconds (1, 0.5).
type Duration = confval.Duration
