package cassandra_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/limiterd/limiterd/integration/harness"
	"github.com/limiterd/limiterd/ratelimit"
	cassandrastore "github.com/limiterd/limiterd/strategy/cassandra"
	clustersync "github.com/limiterd/limiterd/sync"
)

func TestDefaultConfig(t *testing.T) {
	cfg := cassandrastore.DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	for name, got := range map[string]any{
		"keyspace": cfg.Keyspace, "table": cfg.Table, "write_consistency": cfg.WriteConsistency,
		"read_consistency": cfg.ReadConsistency, "proto_version": cfg.ProtoVersion, "create_schema": cfg.CreateSchema,
		"port": cfg.Port, "replication": cfg.Replication.CQL(),
	} {
		want := map[string]any{
			"keyspace": "limiterd", "table": "windows", "write_consistency": "LOCAL_QUORUM",
			"read_consistency": "LOCAL_QUORUM", "proto_version": 4, "create_schema": true, "port": 9042,
			"replication": "{'class': 'SimpleStrategy', 'replication_factor': '1'}",
		}[name]
		if got != want {
			t.Errorf("DefaultConfig().%s = %v, want %v", name, got, want)
		}
	}
	// Zero fields with a default are valid too.
	if err := (cassandrastore.Config{Hosts: []string{"db"}}).Validate(); err != nil {
		t.Errorf("Config{Hosts}.Validate() = %v", err)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		field string // the field the error must name
		edit  func(*cassandrastore.Config)
	}{
		{"hosts", func(c *cassandrastore.Config) { c.Hosts = nil }},
		{"hosts[1]", func(c *cassandrastore.Config) { c.Hosts = []string{"a", "b:0"} }},
		{"hosts[0]", func(c *cassandrastore.Config) { c.Hosts = []string{":9042"} }},
		{"hosts[0]", func(c *cassandrastore.Config) { c.Hosts = []string{""} }},
		{"port", func(c *cassandrastore.Config) { c.Port = 70000 }},
		{"keyspace", func(c *cassandrastore.Config) { c.Keyspace = "Limiterd" }},
		{"keyspace", func(c *cassandrastore.Config) { c.Keyspace = "a-b" }},
		{"keyspace", func(c *cassandrastore.Config) { c.Keyspace = strings.Repeat("k", 49) }},
		{"table", func(c *cassandrastore.Config) { c.Table = "1windows" }},
		{"table", func(c *cassandrastore.Config) { c.Table = "w; DROP KEYSPACE x" }},
		{"replication", func(c *cassandrastore.Config) { c.Replication = cassandrastore.Replication{"replication_factor": "1"} }},
		{"replication", func(c *cassandrastore.Config) {
			c.Replication = cassandrastore.Replication{"class": "SimpleStrategy"}
		}},
		{"replication", func(c *cassandrastore.Config) {
			c.Replication = cassandrastore.Replication{"class": "SimpleStrategy", "replication_factor": "0"}
		}},
		{"replication", func(c *cassandrastore.Config) {
			c.Replication = cassandrastore.Replication{"class": "NetworkTopologyStrategy"}
		}},
		{"replication", func(c *cassandrastore.Config) {
			c.Replication = cassandrastore.Replication{"class": "NetworkTopologyStrategy", "dc1": "3'}; DROP"}
		}},
		{"write_consistency", func(c *cassandrastore.Config) { c.WriteConsistency = "MOST" }},
		{"write_consistency", func(c *cassandrastore.Config) { c.WriteConsistency = "SERIAL" }},
		{"read_consistency", func(c *cassandrastore.Config) { c.ReadConsistency = "ANY" }},
		{"read_consistency", func(c *cassandrastore.Config) { c.ReadConsistency = "EACH_QUORUM" }},
		{"username", func(c *cassandrastore.Config) { c.Password = "secret" }},
		{"tls.enabled", func(c *cassandrastore.Config) { c.TLS.CAFile = "/ca.pem" }},
		{"connect_timeout", func(c *cassandrastore.Config) { c.ConnectTimeout = -1 }},
		{"timeout", func(c *cassandrastore.Config) { c.Timeout = cassandrastore.Duration(-time.Second) }},
		{"proto_version", func(c *cassandrastore.Config) { c.ProtoVersion = 2 }},
		{"proto_version", func(c *cassandrastore.Config) { c.ProtoVersion = 6 }},
		{"concurrency", func(c *cassandrastore.Config) { c.Concurrency = -1 }},
		{"batch_rows", func(c *cassandrastore.Config) { c.BatchRows = 101 }},
	} {
		cfg := cassandrastore.DefaultConfig()
		tc.edit(&cfg)
		err := cfg.Validate()
		if err == nil {
			t.Errorf("%s: Validate() = nil, want an error", tc.field)
			continue
		}
		if !strings.HasPrefix(err.Error(), "cassandra: "+tc.field+": ") {
			t.Errorf("Validate() = %q, want it to name %q", err, tc.field)
		}
		var fe *ratelimit.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || fe.Reason == "" {
			t.Errorf("Validate() = %#v, want a *ratelimit.FieldError with field %q and a reason", err, tc.field)
		}
		if !errors.Is(err, cassandrastore.ErrInvalidConfig) {
			t.Errorf("Validate() = %v, want it to wrap ErrInvalidConfig", err)
		}
		if _, oerr := cassandrastore.Open(cfg); oerr == nil {
			t.Errorf("%s: Open accepted an invalid config", tc.field)
		}
	}
	// Valid variations.
	for _, edit := range []func(*cassandrastore.Config){
		func(c *cassandrastore.Config) {
			c.Hosts = []string{"10.0.0.1", "10.0.0.2:9142", "[::1]:9042", "::1", "db.example"}
		},
		func(c *cassandrastore.Config) { c.WriteConsistency, c.ReadConsistency = "each_quorum", "local_one" },
		func(c *cassandrastore.Config) { c.WriteConsistency, c.ReadConsistency = "ANY", "ONE" },
		func(c *cassandrastore.Config) {
			c.Replication = cassandrastore.Replication{"class": "NetworkTopologyStrategy", "dc-1": "3", "dc2": "2"}
		},
		func(c *cassandrastore.Config) {
			c.TLS = cassandrastore.TLSConfig{Enabled: true, InsecureSkipVerify: true}
		},
		func(c *cassandrastore.Config) { c.Username, c.Password = "u", "p" },
		func(c *cassandrastore.Config) { c.ProtoVersion, c.BatchRows, c.Concurrency = 5, 1, 1 },
	} {
		cfg := cassandrastore.DefaultConfig()
		edit(&cfg)
		if err := cfg.Validate(); err != nil {
			t.Errorf("Validate() = %v, want nil", err)
		}
	}
}

func TestConfigYAML(t *testing.T) {
	const doc = `
hosts: ["10.0.0.1", "10.0.0.2:9142"]
port: 19042
keyspace: rl
table: w2
local_dc: dc1
replication: {class: NetworkTopologyStrategy, dc1: 3, dc2: 2}
write_consistency: local_quorum
read_consistency: LOCAL_QUORUM
username: limiter
password: secret
tls: {enabled: true, server_name: cassandra.internal, insecure_skip_verify: false}
connect_timeout: 2
timeout: 750ms
proto_version: 5
create_schema: false
concurrency: 16
batch_rows: 1
`
	cfg := cassandrastore.DefaultConfig()
	dec := yaml.NewDecoder(strings.NewReader(doc))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	got := fmt.Sprintf("%v %d %s.%s %s %s %s/%s %s %v %s %s %d %v %d %d",
		cfg.Hosts, cfg.Port, cfg.Keyspace, cfg.Table, cfg.LocalDC, cfg.Replication.CQL(),
		cfg.WriteConsistency, cfg.ReadConsistency, cfg.Username, cfg.TLS,
		cfg.ConnectTimeout, cfg.Timeout, cfg.ProtoVersion, cfg.CreateSchema, cfg.Concurrency, cfg.BatchRows)
	want := "[10.0.0.1 10.0.0.2:9142] 19042 rl.w2 dc1 {'class': 'NetworkTopologyStrategy', 'dc1': '3', 'dc2': '2'} " +
		"local_quorum/LOCAL_QUORUM limiter {true  cassandra.internal false} 2s 750ms 5 false 16 1"
	if got != want {
		t.Errorf("decoded\n got %s\nwant %s", got, want)
	}

	// Replication as a CQL string; fields left out keep their defaults.
	cfg = cassandrastore.DefaultConfig()
	if err := yaml.Unmarshal([]byte(`replication: "{'class': 'SimpleStrategy', 'replication_factor': 3}"`), &cfg); err != nil {
		t.Fatalf("decode string replication: %v", err)
	}
	if got, want := cfg.Replication.CQL(), "{'class': 'SimpleStrategy', 'replication_factor': '3'}"; got != want {
		t.Errorf("replication = %s, want %s", got, want)
	}
	if !cfg.CreateSchema || cfg.Keyspace != "limiterd" || time.Duration(cfg.Timeout) != 5*time.Second {
		t.Errorf("defaults lost: %+v", cfg)
	}

	for _, bad := range []string{
		"timeout: soon", "connect_timeout: [1]", "replication: \"{'class' 'x'}\"", "replication: [1, 2]",
		"replication: \"{'replication_factor': 1}\"", "nonsense: 1", "tls: {enabled: true, ca: x}",
	} {
		cfg := cassandrastore.DefaultConfig()
		dec := yaml.NewDecoder(strings.NewReader(bad))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err == nil {
			t.Errorf("decode %q succeeded", bad)
		}
	}
}

func TestDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"1s": time.Second, "250ms": 250 * time.Millisecond, "2": 2 * time.Second, "0.5": 500 * time.Millisecond, " 1m ": time.Minute} {
		var d cassandrastore.Duration
		if err := d.UnmarshalText([]byte(in)); err != nil || time.Duration(d) != want {
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v", in, time.Duration(d), err, want)
		}
	}
	for _, in := range []string{"", "x", "1e300", "NaN", "1 s"} {
		var d cassandrastore.Duration
		if err := d.UnmarshalText([]byte(in)); err == nil {
			t.Errorf("UnmarshalText(%q) succeeded: %v", in, d)
		}
	}
}

func TestParseReplication(t *testing.T) {
	r, err := cassandrastore.ParseReplication(`{'class' : 'NetworkTopologyStrategy', 'eu-west': '3', "us": 2}`)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.CQL(), "{'class': 'NetworkTopologyStrategy', 'eu-west': '3', 'us': '2'}"; got != want {
		t.Errorf("CQL() = %s, want %s", got, want)
	}
	for _, bad := range []string{"", "{}", "{'class': 'SimpleStrategy'}", "class", "{'class': 'SimpleStrategy', 'replication_factor': 1, 'class': 'x'}", "{'class': 'a b'}"} {
		if _, err := cassandrastore.ParseReplication(bad); err == nil {
			t.Errorf("ParseReplication(%q) succeeded", bad)
		}
	}
}

func TestSchemaCQL(t *testing.T) {
	cfg := cassandrastore.DefaultConfig()
	cfg.Keyspace, cfg.Table = "rl", "w"
	cfg.Replication = cassandrastore.Replication{"class": "NetworkTopologyStrategy", "dc1": "3"}
	got := cassandrastore.SchemaCQL(cfg)
	for _, want := range []string{
		"CREATE KEYSPACE IF NOT EXISTS rl\n  WITH replication = {'class': 'NetworkTopologyStrategy', 'dc1': '3'};",
		"CREATE TABLE IF NOT EXISTS rl.w (",
		"key         blob,",
		"PRIMARY KEY ((namespace, size_ns, start_ns, key), incarnation)",
		"TimeWindowCompactionStrategy",
		"CREATE TABLE IF NOT EXISTS rl.w_leases (",
		"seq       bigint static,",
		"PRIMARY KEY ((namespace, key), id)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("SchemaCQL lacks %q:\n%s", want, got)
		}
	}
	if def := cassandrastore.SchemaCQL(cassandrastore.Config{}); !strings.Contains(def, "limiterd.windows") || !strings.Contains(def, "'replication_factor': '1'") {
		t.Errorf("SchemaCQL(Config{}) does not use the defaults:\n%s", def)
	}
}

func TestTTL(t *testing.T) {
	now := time.Unix(1_700_000_000, 300_000_000)
	for _, tc := range []struct {
		expire time.Duration // after now
		want   int
	}{
		{time.Second, 2},
		{1500 * time.Millisecond, 3},
		{700 * time.Millisecond, 2},
		{0, 1},
		{-time.Hour, 1},
		{time.Hour, 3601},
		{100 * 365 * 24 * time.Hour, 630_720_000},
	} {
		if got := cassandrastore.TTL(now.Add(tc.expire), now); got != tc.want {
			t.Errorf("TTL(now+%v) = %d, want %d", tc.expire, got, tc.want)
		}
	}
}

// Open does not contact Cassandra, so a node starts during an outage; the
// calls then fail with ErrUnavailable within their context, and fail at
// once for a second after a failed attempt to connect.
func TestOpenWhileDown(t *testing.T) {
	cfg := cassandrastore.DefaultConfig()
	cfg.Hosts = []string{fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))}
	s, err := cassandrastore.Open(cfg)
	if err != nil {
		t.Fatalf("Open with Cassandra down = %v, want nil", err)
	}
	k := clustersync.WindowKey{Namespace: "ns", Size: time.Second, Key: "k"}
	rows := []clustersync.Row{{WindowKey: k, Total: 1, Version: 1, ExpireAt: time.Now().Add(time.Minute)}}
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		began := time.Now()
		err := s.Push(ctx, "inc", rows)
		cancel()
		if !errors.Is(err, clustersync.ErrUnavailable) {
			t.Fatalf("Push %d while down = %v, want ErrUnavailable", i, err)
		}
		if took := time.Since(began); took > 2*time.Second {
			t.Errorf("Push %d while down took %v", i, took)
		}
	}
	// A context shorter than an attempt bounds the call.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	time.Sleep(1100 * time.Millisecond) // past the retry pause
	if _, err := s.Window(ctx, k); !errors.Is(err, clustersync.ErrUnavailable) {
		t.Errorf("Window while down = %v, want ErrUnavailable", err)
	}
	if got := cassandrastore.Sessions(s); got != 0 {
		t.Errorf("sessions created while down = %d", got)
	}
	s.Close()
	if err := s.Push(context.Background(), "inc", rows); !errors.Is(err, clustersync.ErrClosed) {
		t.Errorf("Push after Close = %v, want ErrClosed", err)
	}
}

func TestBadArguments(t *testing.T) {
	s, err := cassandrastore.Open(cassandrastore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	k := clustersync.WindowKey{Namespace: "ns", Size: time.Second, Key: "k"}
	rows := []clustersync.Row{{WindowKey: k, Total: 1, Version: 1}}
	bad := k
	bad.Namespace = "\xff"
	for name, err := range map[string]error{
		"empty incarnation":        s.Push(context.Background(), "", rows),
		"invalid incarnation":      s.Push(context.Background(), "a\xffb", rows),
		"invalid namespace":        s.Fetch(context.Background(), "inc", []clustersync.WindowKey{bad}, make([]int64, 1)),
		"len(others) != len(keys)": s.Fetch(context.Background(), "inc", []clustersync.WindowKey{k}, nil),
	} {
		if err == nil || errors.Is(err, clustersync.ErrUnavailable) {
			t.Errorf("%s: %v; want an error that is not ErrUnavailable", name, err)
		}
	}
}
