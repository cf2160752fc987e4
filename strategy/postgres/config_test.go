package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/limiterd/limiterd/ratelimit"
	pgstore "github.com/limiterd/limiterd/strategy/postgres"
	clustersync "github.com/limiterd/limiterd/sync"
)

const testDSN = "postgres://limiterd:secret@db.example:5432/limiter?sslmode=verify-full"

func TestDefaultConfig(t *testing.T) {
	c := pgstore.DefaultConfig()
	if c.Schema != "public" || c.Table != "limiterd_windows" || !c.CreateSchema ||
		time.Duration(c.StatementTimeout) != 5*time.Second || time.Duration(c.PurgeInterval) != 30*time.Second {
		t.Errorf("DefaultConfig() = %+v", c)
	}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "dsn") {
		t.Errorf("default config without a DSN: got %v, want an error naming dsn", err)
	}
	c.DSN = testDSN
	if err := c.Validate(); err != nil {
		t.Errorf("default config with a DSN: %v", err)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*pgstore.Config)
		field string // "" for valid
	}{
		{"key=value dsn", func(c *pgstore.Config) { c.DSN = "host=localhost dbname=x sslmode=disable" }, ""},
		{"empty schema and table mean defaults", func(c *pgstore.Config) { c.Schema, c.Table = "", "" }, ""},
		{"mixed case identifiers", func(c *pgstore.Config) { c.Schema, c.Table = "Rate_Limits", "W2" }, ""},
		{"no dsn", func(c *pgstore.Config) { c.DSN = " " }, "dsn"},
		{"bad dsn", func(c *pgstore.Config) { c.DSN = "postgres://u:secret@host:notaport/db" }, "dsn"},
		{"bad sslmode", func(c *pgstore.Config) { c.DSN = "postgres://h/db?sslmode=sometimes" }, "dsn"},
		{"negative pool", func(c *pgstore.Config) { c.PoolSize = -1 }, "pool_size"},
		{"negative timeout", func(c *pgstore.Config) { c.StatementTimeout = -1 }, "statement_timeout"},
		{"sub-millisecond timeout", func(c *pgstore.Config) { c.StatementTimeout = pgstore.Duration(1500 * time.Microsecond) }, "statement_timeout"},
		{"schema with a quote", func(c *pgstore.Config) { c.Schema = `a"b` }, "schema"},
		{"schema with a dot", func(c *pgstore.Config) { c.Schema = "a.b" }, "schema"},
		{"table starting with a digit", func(c *pgstore.Config) { c.Table = "1t" }, "table"},
		{"table with a space", func(c *pgstore.Config) { c.Table = "my table" }, "table"},
		{"table with SQL", func(c *pgstore.Config) { c.Table = "t; DROP TABLE x" }, "table"},
		{"table too long", func(c *pgstore.Config) { c.Table = strings.Repeat("t", 54) }, "table"},
		{"schema too long", func(c *pgstore.Config) { c.Schema = strings.Repeat("s", 64) }, "schema"},
		{"non-ASCII table", func(c *pgstore.Config) { c.Table = "tablé" }, "table"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := pgstore.DefaultConfig()
			c.DSN = testDSN
			tt.edit(&c)
			err := c.Validate()
			switch {
			case tt.field == "" && err != nil:
				t.Errorf("got %v, want valid", err)
			case tt.field != "" && (err == nil || !strings.HasPrefix(err.Error(), "postgres: "+tt.field+":")):
				t.Errorf("got %v, want an error naming %s", err, tt.field)
			case err != nil && strings.Contains(err.Error(), "secret"):
				t.Errorf("error leaks the password: %v", err)
			}
			if err == nil {
				return
			}
			var fe *ratelimit.FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field || fe.Reason == "" {
				t.Errorf("got %#v, want a *ratelimit.FieldError with field %s and a reason", err, tt.field)
			}
			if !errors.Is(err, pgstore.ErrInvalidConfig) {
				t.Errorf("got %v, want it to wrap ErrInvalidConfig", err)
			}
		})
	}
}

func TestConfigYAML(t *testing.T) {
	src := `
dsn: "postgres://u@h/db?sslmode=disable"
pool_size: 8
statement_timeout: 1.5
schema: rl
table: windows
create_schema: false
purge_interval: 1m
`
	c := pgstore.DefaultConfig()
	dec := yaml.NewDecoder(strings.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		t.Fatal(err)
	}
	want := pgstore.Config{DSN: "postgres://u@h/db?sslmode=disable", PoolSize: 8,
		StatementTimeout: pgstore.Duration(1500 * time.Millisecond), Schema: "rl", Table: "windows",
		CreateSchema: false, PurgeInterval: pgstore.Duration(time.Minute)}
	if c != want {
		t.Errorf("got %+v\nwant %+v", c, want)
	}
	// Omitted fields keep DefaultConfig's values.
	c = pgstore.DefaultConfig()
	if err := yaml.Unmarshal([]byte(`dsn: x`), &c); err != nil || !c.CreateSchema || c.Table != "limiterd_windows" {
		t.Errorf("partial config: %+v, %v", c, err)
	}
	for _, bad := range []string{`statement_timeout: soon`, `statement_timeout: [1]`, `purge_interval: 1x`} {
		c := pgstore.DefaultConfig()
		if err := yaml.Unmarshal([]byte(bad), &c); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

func TestDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"1s": time.Second, "250ms": 250 * time.Millisecond, "1": time.Second, "0.5": 500 * time.Millisecond,
		"0": 0, " 2m ": 2 * time.Minute, "-1": -time.Second, "1e-3": time.Millisecond,
	} {
		var d pgstore.Duration
		if err := d.UnmarshalText([]byte(in)); err != nil || time.Duration(d) != want {
			t.Errorf("%q: got %s, %v; want %s", in, d, err, want)
		}
	}
	for _, in := range []string{"", "s", "1 s", "NaN", "Inf", "1e300"} {
		var d pgstore.Duration
		if err := d.UnmarshalText([]byte(in)); err == nil {
			t.Errorf("%q: got %s, want an error", in, d)
		}
	}
	if b, _ := pgstore.Duration(1500 * time.Millisecond).MarshalText(); string(b) != "1.5s" {
		t.Errorf("MarshalText: got %s, want 1.5s", b)
	}
}

func FuzzDuration(f *testing.F) {
	for _, s := range []string{"1s", "0.5", "250ms", "-3h", "1e9", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var d pgstore.Duration
		if d.UnmarshalText([]byte(s)) != nil {
			return
		}
		b, _ := d.MarshalText()
		var back pgstore.Duration
		if err := back.UnmarshalText(b); err != nil || back != d {
			t.Fatalf("%q → %s → %s, %v", s, b, back, err)
		}
	})
}

func TestSchemaSQL(t *testing.T) {
	got := pgstore.SchemaSQL(pgstore.Config{Schema: "Rate", Table: "w"})
	for _, want := range []string{
		`CREATE SCHEMA IF NOT EXISTS "Rate";`,
		`CREATE TABLE IF NOT EXISTS "Rate"."w" (`,
		`key         bytea NOT NULL`,
		`PRIMARY KEY (namespace, size_ns, start_ns, key, incarnation)`,
		`CREATE INDEX IF NOT EXISTS "w_expire_at" ON "Rate"."w" (expire_at);`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("SchemaSQL lacks %q:\n%s", want, got)
		}
	}
	if def := pgstore.SchemaSQL(pgstore.Config{}); !strings.Contains(def, `"public"."limiterd_windows"`) {
		t.Errorf("SchemaSQL of the zero config does not use the defaults:\n%s", def)
	}
}

// Open needs no server; calls then fail with ErrUnavailable within their
// deadline.
func TestOpenWithoutServer(t *testing.T) {
	cfg := pgstore.DefaultConfig()
	cfg.DSN = "postgres://u@127.0.0.1:1/db?sslmode=disable&connect_timeout=5"
	start := time.Now()
	s, err := pgstore.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
	defer cancel()
	if _, err := s.Window(ctx, clustersync.WindowKey{Namespace: "n", Size: time.Second, Key: "k"}); !errors.Is(err, clustersync.ErrUnavailable) {
		t.Errorf("Window without a server: got %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Open and a failed call took %s", d)
	}
	if _, err := pgstore.Open(context.Background(), pgstore.Config{DSN: testDSN, Table: "bad table"}); err == nil {
		t.Error("Open with an invalid table: no error")
	}
}
