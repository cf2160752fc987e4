package harness

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

func TestFreePort(t *testing.T) {
	if p := FreePort(t); p <= 0 || p > 65535 {
		t.Fatalf("FreePort = %d", p)
	}
}

// TestFreePortNeverRepeats: 2,000 ports of one test are all different
// (drawn from 12,768 without the record, about 150 would repeat).
func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for range 2000 {
		p := FreePort(t)
		if seen[p] {
			t.Fatalf("FreePort handed out %d twice to one test", p)
		}
		seen[p] = true
	}
}

func TestUniqueName(t *testing.T) {
	a, b := UniqueName("KS"), UniqueName("KS")
	if a == b || !strings.HasPrefix(a, "ks_") || len(a) != len("ks_")+12 {
		t.Fatalf("UniqueName: %q, %q", a, b)
	}
}

func redisRoundTrip(t *testing.T, addr, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	if err := c.Set(ctx, key, "v1", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := c.Get(ctx, key).Result(); err != nil || got != "v1" {
		t.Fatalf("GET = %q, %v", got, err)
	}
}

func TestRedis(t *testing.T) {
	t.Parallel()
	r := StartRedis(t)
	redisRoundTrip(t, r.Addr(), "k")
	r.Stop()
	if err := redisPing(r.Addr()); err == nil {
		t.Fatal("PING answered after Stop")
	}
	r.Start()
	redisHas(t, r.Addr(), "k", "v1")
	redisRoundTrip(t, r.Addr(), "k2")
	r.Kill()
	if err := redisPing(r.Addr()); err == nil {
		t.Fatal("PING answered after Kill")
	}
	r.Start()
	redisHas(t, r.Addr(), "k2", "v1")
}

// redisHas expects key to hold want: data survives a restart.
func redisHas(t *testing.T, addr, key, want string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	if got, err := c.Get(context.Background(), key).Result(); err != nil || got != want {
		t.Fatalf("after the restart GET %s = %q, %v; want %q", key, got, err, want)
	}
}

func TestSharedRedis(t *testing.T) {
	t.Parallel()
	r := SharedRedis(t)
	redisRoundTrip(t, r.Addr(), UniqueName("shared")+":k")
}

func pgSelect1(t *testing.T, dsn string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect %s: %v", dsn, err)
	}
	defer conn.Close(context.Background())
	var one int
	if err := conn.QueryRow(ctx, "select 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("select 1 = %d, %v", one, err)
	}
	var db string
	if err := conn.QueryRow(ctx, "select current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dsn, "/"+db) {
		t.Fatalf("connected to database %q with %s", db, dsn)
	}
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	p := StartPostgres(t)
	if !strings.HasSuffix(p.DSN(), "/limiter?sslmode=disable") || !strings.HasPrefix(p.DSN(), "postgres://postgres@127.0.0.1:") {
		t.Fatalf("DSN = %s", p.DSN())
	}
	pgSelect1(t, p.DSN())
	if err := pgExec(p.DSN(), "CREATE TABLE t (v int); INSERT INTO t VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	p.Stop()
	if err := pgExec(p.DSN(), "select 1"); err == nil {
		t.Fatal("select 1 answered after Stop")
	}
	p.Start()
	pgSelect1(t, p.DSN())
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, p.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var v int
	if err := conn.QueryRow(ctx, "select v from t").Scan(&v); err != nil || v != 42 {
		t.Fatalf("after restart: v = %d, %v", v, err)
	}
}

func TestSharedPostgres(t *testing.T) {
	t.Parallel()
	a := SharedPostgres(t)
	pgSelect1(t, a.DSN())
	if os.Getenv(EnvPostgres) != "" {
		b := SharedPostgres(t)
		if a.DSN() == b.DSN() {
			t.Fatalf("two SharedPostgres with the same DSN %s", a.DSN())
		}
		pgSelect1(t, b.DSN())
	}
}

func TestWithDatabase(t *testing.T) {
	got, err := withDatabase("postgres://u:p@h:5/old?sslmode=disable", "new")
	if err != nil || got != "postgres://u:p@h:5/new?sslmode=disable" {
		t.Fatalf("URL: %q, %v", got, err)
	}
	got, err = withDatabase("host=h port=5 user=u dbname=old", "new")
	if err != nil || got != "host=h port=5 user=u dbname=old dbname=new" {
		t.Fatalf("keyword/value: %q, %v", got, err)
	}
	cfg, err := pgx.ParseConfig(got)
	if err != nil || cfg.Database != "new" {
		t.Fatalf("keyword/value parsed: %+v, %v", cfg, err)
	}
}

func cassandraSession(t *testing.T, hosts []string) *gocql.Session {
	t.Helper()
	cluster := gocql.NewCluster(hosts...)
	cluster.ProtoVersion = 4
	cluster.DisableInitialHostLookup = true
	cluster.Timeout = 10 * time.Second
	cluster.ConnectTimeout = 10 * time.Second
	cluster.Logger = gocql.NewLogger(gocql.LogLevelNone)
	s, err := cluster.CreateSession()
	if err != nil {
		t.Fatalf("gocql session to %v: %v", hosts, err)
	}
	return s
}

func cassandraRoundTrip(t *testing.T, hosts []string) {
	t.Helper()
	s := cassandraSession(t, hosts)
	defer s.Close()
	var version string
	if err := s.Query("SELECT release_version FROM system.local").Scan(&version); err != nil {
		t.Fatalf("select release_version: %v", err)
	}
	if !strings.HasPrefix(version, "5.0") {
		t.Fatalf("release_version = %q", version)
	}
}

func TestCassandra(t *testing.T) {
	t.Parallel()
	began := time.Now()
	c := StartCassandra(t)
	t.Logf("cold start: %.1fs", time.Since(began).Seconds())
	if len(c.Hosts()) != 1 || c.Hosts()[0] != c.Host()+":"+strconv.Itoa(c.Port()) {
		t.Fatalf("Hosts = %v, Host = %s, Port = %d", c.Hosts(), c.Host(), c.Port())
	}
	cassandraRoundTrip(t, c.Hosts())

	s := cassandraSession(t, c.Hosts())
	ks := UniqueName("harness")
	began = time.Now()
	for _, q := range []string{
		"CREATE KEYSPACE " + ks + " WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
		"CREATE TABLE " + ks + ".t (k text PRIMARY KEY, v int)",
	} {
		if err := s.Query(q).Exec(); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Logf("create keyspace and table: %.1fs", time.Since(began).Seconds())
	if err := s.Query("INSERT INTO "+ks+".t (k, v) VALUES (?, ?)", "a", 7).Exec(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// With commitlog_sync periodic a write is in the commit log file (not
	// yet fsynced) when it is acknowledged: killing the process loses
	// nothing, Start replays it.
	c.Kill()
	if err := cassandraReady(c.Host(), c.Port()); err == nil {
		t.Fatal("cassandra answered after Kill")
	}
	began = time.Now()
	c.Start()
	t.Logf("restart after Kill: %.1fs", time.Since(began).Seconds())
	cassandraRoundTrip(t, c.Hosts())
	s = cassandraSession(t, c.Hosts())
	var v int
	if err := s.Query("SELECT v FROM "+ks+".t WHERE k = ?", "a").Scan(&v); err != nil || v != 7 {
		t.Fatalf("after restart: v = %d, %v", v, err)
	}
	s.Close()

	began = time.Now()
	c.Stop()
	t.Logf("graceful stop: %.1fs", time.Since(began).Seconds())
	began = time.Now()
	c.Start()
	t.Logf("restart after Stop: %.1fs", time.Since(began).Seconds())
	cassandraRoundTrip(t, c.Hosts())
}

func TestSharedCassandra(t *testing.T) {
	if os.Getenv(EnvCassandra) == "" {
		t.Skipf("%s not set (TestCassandra covers StartCassandra)", EnvCassandra)
	}
	t.Parallel()
	c := SharedCassandra(t)
	cassandraRoundTrip(t, c.Hosts())
}
