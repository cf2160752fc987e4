package redis_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/limiterd/limiterd/integration/harness"
	"github.com/limiterd/limiterd/ratelimit"
	redisstore "github.com/limiterd/limiterd/strategy/redis"
)

// decode decodes YAML over DefaultConfig the way cmd/limiterd does
// (unknown fields rejected).
func decode(src string) (redisstore.Config, error) {
	cfg := redisstore.DefaultConfig()
	dec := yaml.NewDecoder(strings.NewReader(src))
	dec.KnownFields(true)
	err := dec.Decode(&cfg)
	return cfg, err
}

func TestConfigYAML(t *testing.T) {
	cfg, err := decode(`
addrs: ["10.0.0.1:6379", "10.0.0.2:6379"]
username: limiterd
password: secret
tls: {enabled: true, server_name: redis.internal, ca_file: /etc/ca.pem}
pool_size: 20
dial_timeout: 250ms
read_timeout: 2
write_timeout: 0.5
key_prefix: rl
`)
	if err != nil {
		t.Fatal(err)
	}
	want := redisstore.Config{
		Addrs:    []string{"10.0.0.1:6379", "10.0.0.2:6379"},
		Username: "limiterd", Password: "secret",
		TLS:          redisstore.TLSConfig{Enabled: true, ServerName: "redis.internal", CAFile: "/etc/ca.pem"},
		PoolSize:     20,
		DialTimeout:  redisstore.Duration(250 * time.Millisecond),
		ReadTimeout:  redisstore.Duration(2 * time.Second),
		WriteTimeout: redisstore.Duration(500 * time.Millisecond),
		KeyPrefix:    "rl",
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("got  %+v\nwant %+v", cfg, want)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}

	// Defaults survive a mapping that does not mention them.
	cfg, err = decode(`addrs: ["127.0.0.1:7000"]`)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.KeyPrefix != "limiterd" || cfg.DialTimeout != redisstore.Duration(5*time.Second) {
		t.Errorf("defaults lost: %+v", cfg)
	}

	for _, bad := range []string{"tls: {enabld: true}", "dial_timeout: soon", "pool: 3", "read_timeout: .nan"} {
		if _, err := decode(bad); err == nil {
			t.Errorf("decode(%q) succeeded", bad)
		}
	}
}

func TestDurationText(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"1s": time.Second, "100ms": 100 * time.Millisecond, "1m30s": 90 * time.Second,
		"2": 2 * time.Second, "0.25": 250 * time.Millisecond, "0": 0, " 3s ": 3 * time.Second,
	} {
		var d redisstore.Duration
		if err := d.UnmarshalText([]byte(in)); err != nil || time.Duration(d) != want {
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v", in, time.Duration(d), err, want)
		}
	}
	for _, in := range []string{"", "s", "1x", "inf", "NaN", "1e300"} {
		var d redisstore.Duration
		if err := d.UnmarshalText([]byte(in)); err == nil {
			t.Errorf("UnmarshalText(%q) = %v, want an error", in, time.Duration(d))
		}
	}
	out, err := yaml.Marshal(struct{ D redisstore.Duration }{redisstore.Duration(1500 * time.Millisecond)})
	if err != nil || !bytes.Contains(out, []byte("1.5s")) {
		t.Errorf("Marshal = %q, %v; want 1.5s", out, err)
	}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		field string
		edit  func(c *redisstore.Config)
	}{
		{"addrs", func(c *redisstore.Config) { c.Addrs = nil }},
		{"addrs[1]", func(c *redisstore.Config) { c.Addrs = []string{"a:1", "no-port"} }},
		{"db", func(c *redisstore.Config) { c.DB = -1 }},
		{"db", func(c *redisstore.Config) { c.Addrs = []string{"a:1", "b:1"}; c.DB = 2 }},
		{"db", func(c *redisstore.Config) { c.Cluster = true; c.DB = 2 }},
		{"pool_size", func(c *redisstore.Config) { c.PoolSize = -1 }},
		{"dial_timeout", func(c *redisstore.Config) { c.DialTimeout = -1 }},
		{"read_timeout", func(c *redisstore.Config) { c.ReadTimeout = -1 }},
		{"write_timeout", func(c *redisstore.Config) { c.WriteTimeout = -1 }},
		{"key_prefix", func(c *redisstore.Config) { c.KeyPrefix = "" }},
		{"key_prefix", func(c *redisstore.Config) { c.KeyPrefix = "a{b" }},
		{"tls.enabled", func(c *redisstore.Config) { c.TLS.CAFile = "/ca.pem" }},
	}
	for _, c := range cases {
		cfg := redisstore.DefaultConfig()
		c.edit(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), "redis: "+c.field+": ") {
			t.Errorf("%s: Validate() = %v, want an error naming %s", c.field, err, c.field)
		}
		var fe *ratelimit.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || fe.Reason == "" {
			t.Errorf("%s: Validate() = %#v, want a *ratelimit.FieldError with that field and a reason", c.field, err)
		}
		if !errors.Is(err, redisstore.ErrInvalidConfig) {
			t.Errorf("%s: Validate() = %v, want it to wrap ErrInvalidConfig", c.field, err)
		}
		if _, oerr := redisstore.Open(cfg); oerr == nil {
			t.Errorf("%s: Open accepted an invalid config", c.field)
		}
	}
	// Valid: sentinel with a db, cluster seeds, defaults.
	for _, edit := range []func(c *redisstore.Config){
		func(c *redisstore.Config) {},
		func(c *redisstore.Config) {
			c.Addrs = []string{"s1:26379", "s2:26379"}
			c.MasterName = "mymaster"
			c.DB = 3
		},
		func(c *redisstore.Config) { c.Addrs = []string{"[::1]:7000", "[::1]:7001"} },
	} {
		cfg := redisstore.DefaultConfig()
		edit(&cfg)
		if err := cfg.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", cfg, err)
		}
	}
}

func TestOpenDoesNotConnect(t *testing.T) {
	for _, addrs := range [][]string{
		{fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))},                                                   // standalone
		{fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t)), fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))}, // cluster
	} {
		cfg := redisstore.DefaultConfig()
		cfg.Addrs = addrs
		s, err := redisstore.Open(cfg)
		if err != nil {
			t.Fatalf("Open(%v) with the store down = %v", addrs, err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("Close = %v", err)
		}
	}
	cfg := redisstore.DefaultConfig()
	cfg.Addrs = []string{fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))}
	cfg.MasterName = "mymaster"
	s, err := redisstore.Open(cfg)
	if err != nil {
		t.Fatalf("Open(sentinel) with the store down = %v", err)
	}
	_ = s.Close()
}

func TestOpenTLSCAFile(t *testing.T) {
	cfg := redisstore.DefaultConfig()
	cfg.TLS.Enabled = true
	cfg.TLS.CAFile = filepath.Join(t.TempDir(), "missing.pem")
	if _, err := redisstore.Open(cfg); err == nil || !strings.Contains(err.Error(), "tls.ca_file") {
		t.Errorf("Open with a missing CA file = %v, want an error naming tls.ca_file", err)
	}
	if err := os.WriteFile(cfg.TLS.CAFile, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := redisstore.Open(cfg); err == nil || !strings.Contains(err.Error(), "tls.ca_file") {
		t.Errorf("Open with a bad CA file = %v, want an error naming tls.ca_file", err)
	}
}

func FuzzDurationText(f *testing.F) {
	for _, s := range []string{"1s", "250ms", "2", "0.5", "-1", "1e3", "1h2m3s", " 7 ", "", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var d redisstore.Duration
		if err := d.UnmarshalText([]byte(s)); err != nil {
			return
		}
		// What was read writes back in Go syntax and reads back the same.
		text, _ := d.MarshalText()
		var again redisstore.Duration
		if err := again.UnmarshalText(text); err != nil || again != d {
			t.Fatalf("%q → %v → %q → %v, %v", s, time.Duration(d), text, time.Duration(again), err)
		}
	})
}
