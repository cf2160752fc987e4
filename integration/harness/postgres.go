package harness

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvPostgres names the environment variable with the DSN of a running
// PostgreSQL server, whose user may create databases, that SharedPostgres
// uses.
const EnvPostgres = "LIMITERD_TEST_POSTGRES"

// Postgres is a PostgreSQL server on a loopback port with a database
// "limiter", or a fresh database on a shared server (SharedPostgres).
type Postgres struct {
	tb       testing.TB
	dsn      string
	port     int
	external bool
	bin      string // directory of postgres and initdb
	dir      string // socket directory; the cluster is in dir/data
	logPath  string
	cred     *syscall.Credential

	mu   sync.Mutex
	proc *process
}

// StartPostgres creates a cluster with initdb (Debian package postgresql;
// as the user postgres when running as root, in a directory under /tmp
// that it owns), starts it on a free loopback port with fsync off and
// creates the database "limiter". It is stopped and removed at cleanup.
// When PostgreSQL is missing the test is skipped (fails under CI=true).
//
// The postmaster is run directly rather than through pg_ctl, so that it
// dies with the test process even when the cleanup does not run.
func StartPostgres(tb testing.TB) *Postgres {
	tb.Helper()
	bin, err := postgresBinDir()
	if err != nil {
		unavailable(tb, "%v", err)
		return nil
	}
	p := &Postgres{tb: tb, bin: bin, port: FreePort(tb)}
	uid, gid := -1, -1
	if os.Geteuid() == 0 {
		// initdb and postgres refuse to run as root.
		u, err := user.Lookup("postgres")
		if err != nil {
			unavailable(tb, "running as root and there is no user postgres to run PostgreSQL: %v", err)
			return nil
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	// Under /tmp, not TMPDIR: every parent directory must be searchable by
	// the user postgres.
	dir, err := os.MkdirTemp("/tmp", "limiterd-pg-")
	if err != nil {
		tb.Fatal(err)
	}
	p.dir = dir
	p.logPath = filepath.Join(dir, "postgres.log")
	tb.Cleanup(func() {
		p.stop(syscall.SIGKILL)
		removeOrKeep(tb, dir, fmt.Sprintf("postgres port %d", p.port), p.logPath)
	})
	if uid >= 0 {
		if err := os.Chown(dir, uid, gid); err != nil {
			tb.Fatal(err)
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", filepath.Join(dir, "data"),
		"-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale", "--no-sync")
	initdb.Dir = dir
	initdb.SysProcAttr = sysProcAttr(p.cred)
	if out, err := initdb.CombinedOutput(); err != nil {
		tb.Fatalf("harness: initdb: %v\n%s", err, out)
	}
	p.dsn = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/limiter?sslmode=disable", p.port)
	p.Start()
	admin := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
	if err := pgExec(admin, "CREATE DATABASE limiter"); err != nil {
		tb.Fatalf("harness: create database limiter: %v", err)
	}
	return p
}

// SharedPostgres creates a fresh database on the server named by
// LIMITERD_TEST_POSTGRES when it is set, dropped at cleanup, and otherwise
// starts a server (StartPostgres). A shared server must not be stopped or
// restarted.
func SharedPostgres(tb testing.TB) *Postgres {
	tb.Helper()
	base := os.Getenv(EnvPostgres)
	if base == "" {
		return StartPostgres(tb)
	}
	name := UniqueName("limiter")
	dsn, err := withDatabase(base, name)
	if err != nil {
		tb.Fatalf("harness: %s: %v", EnvPostgres, err)
	}
	if err := pgExec(base, "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("harness: %s: create database %s: %v", EnvPostgres, name, err)
	}
	tb.Cleanup(func() {
		if err := pgExec(base, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			tb.Logf("harness: drop database %s: %v", name, err)
		}
	})
	return &Postgres{tb: tb, dsn: dsn, external: true}
}

// DSN returns the URL of the database, as
// postgres://postgres@127.0.0.1:PORT/limiter?sslmode=disable.
func (p *Postgres) DSN() string { return p.dsn }

// Start starts the server again on the same port and data (after Stop),
// and waits until it accepts connections.
func (p *Postgres) Start() {
	p.tb.Helper()
	p.own("Start")
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc != nil && p.proc.running() {
		p.tb.Fatalf("harness: postgres port %d already running", p.port)
	}
	proc, err := startProcess(p.logPath, p.dir, p.cred, filepath.Join(p.bin, "postgres"),
		"-D", filepath.Join(p.dir, "data"), "-p", strconv.Itoa(p.port), "-k", p.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
		"-c", "full_page_writes=off",
		"-c", "max_connections=300")
	if err != nil {
		p.tb.Fatalf("harness: postgres: %v", err)
	}
	p.proc = proc
	admin := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", p.port)
	if err := waitReady(proc, 60*time.Second, 50*time.Millisecond, func() error { return pgExec(admin, "SELECT 1") }); err != nil {
		proc.stop(syscall.SIGKILL, 0)
		p.tb.Fatalf("harness: postgres port %d: %v; log %s ends:\n%s", p.port, err, p.logPath, logTail(p.logPath, 50))
	}
}

// Stop stops the server in immediate mode (as pg_ctl -m immediate: no
// checkpoint, crash recovery at the next Start) and waits for its exit.
func (p *Postgres) Stop() {
	p.tb.Helper()
	p.own("Stop")
	p.stop(syscall.SIGQUIT)
}

func (p *Postgres) stop(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc != nil {
		p.proc.stop(sig, 30*time.Second)
		p.proc = nil
	}
}

func (p *Postgres) own(method string) {
	p.tb.Helper()
	if p.external {
		p.tb.Fatalf("harness: Postgres.%s on the shared server %s", method, EnvPostgres)
	}
}

// postgresBinDir finds the directory of initdb and postgres: the newest
// /usr/lib/postgresql/*/bin (Debian), else pg_config --bindir.
func postgresBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	if pgc, err := exec.LookPath("pg_config"); err == nil {
		if out, err := exec.Command(pgc, "--bindir").Output(); err == nil {
			dirs = append(dirs, strings.TrimSpace(string(out)))
		}
	}
	for _, d := range dirs {
		if isExecutable(filepath.Join(d, "initdb")) && isExecutable(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", fmt.Errorf("PostgreSQL's initdb not found in /usr/lib/postgresql/*/bin (apt-get install postgresql)")
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// pgExec runs one statement on a new connection.
func pgExec(dsn, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// withDatabase returns dsn naming database name instead of its own, for a
// URL (postgres://...) or a keyword/value DSN.
func withDatabase(dsn, name string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", err
		}
		u.Path = "/" + name
		u.RawPath = ""
		return u.String(), nil
	}
	if _, err := pgx.ParseConfig(dsn); err != nil {
		return "", err
	}
	return dsn + " dbname=" + name, nil
}
