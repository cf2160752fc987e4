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
	"github.com/limiterd/limiterd/ratelimit"
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
	// PgBouncer in transaction mode add default_query_exec_mode=exec (the
	// store otherwise uses prepared statements) and list the startup
	// parameters Open sets in PgBouncer's ignore_startup_parameters; the
	// server's defaults then apply, and must be READ COMMITTED. Required.
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

// ErrInvalidConfig is wrapped by every error of Config.Validate.
var ErrInvalidConfig = errors.New("postgres: invalid config")

// Validate reports the first invalid field: its error wraps a
// *ratelimit.FieldError naming the field (as written in YAML) and the reason,
// which wraps ErrInvalidConfig. Empty Schema and Table mean their defaults.
func (c Config) Validate() error {
	c = c.withDefaults()
	if strings.TrimSpace(c.DSN) == "" {
		return configErr("dsn", "required, e.g. postgres://user:password@host:5432/db?sslmode=verify-full")
	}
	if _, err := pgxpool.ParseConfig(c.DSN); err != nil {
		// pgconn redacts the password from its parse errors.
		return configErr("dsn", "%v", err)
	}
	switch {
	case c.PoolSize < 0:
		return configErr("pool_size", "must not be negative, got %d", c.PoolSize)
	case c.PoolSize > math.MaxInt32:
		return configErr("pool_size", "too large, got %d", c.PoolSize)
	case c.StatementTimeout < 0:
		return configErr("statement_timeout", "must not be negative, got %s", c.StatementTimeout)
	case time.Duration(c.StatementTimeout)%time.Millisecond != 0:
		return configErr("statement_timeout", "must be a whole number of milliseconds, got %s", c.StatementTimeout)
	case time.Duration(c.StatementTimeout) > math.MaxInt32*time.Millisecond:
		return configErr("statement_timeout", "must be at most %s, got %s", math.MaxInt32*time.Millisecond, c.StatementTimeout)
	}
	if err := checkIdent("schema", c.Schema, 63); err != nil {
		return err
	}
	return checkIdent("table", c.Table, maxTableLen)
}

func checkIdent(field, v string, maxLen int) error {
	switch {
	case v == "":
		return configErr(field, "must not be empty")
	case !identRE.MatchString(v):
		return configErr(field, "must be a plain identifier (letters, digits and _, not starting with a digit), got %q", v)
	case len(v) > maxLen:
		return configErr(field, "must be at most %d bytes, got %d", maxLen, len(v))
	}
	return nil
}

// configErr is an error of Validate: the package prefix, then a
// *ratelimit.FieldError, so a caller can name the field without parsing text.
func configErr(field, format string, args ...any) error {
	return fmt.Errorf("postgres: %w", &ratelimit.FieldError{Field: field, Reason: fmt.Sprintf(format, args...), Err: ErrInvalidConfig})
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

// Duration is a time.Duration written in config as a Go duration string
// ("250ms", "1s") or a bare number of seconds (1, 0.5).
type Duration = confval.Duration
