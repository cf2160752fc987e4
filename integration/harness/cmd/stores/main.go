// Command stores runs one store of the integration harness outside of a
// test, for scripts/test.sh to share it among test processes: it starts the
// server as harness.StartRedis, StartPostgres or StartCassandra do, writes
// its address (host:port, or the DSN for postgres) to the -out file once it
// answers, and runs until SIGINT or SIGTERM, or until the -parent process
// is gone; then it stops the server and removes its directory.
//
//	go run ./integration/harness/cmd/stores -store cassandra -out /tmp/c.addr
//
// Exit status: 0 after a signal, 1 when the server could not be started,
// 3 when the store is not installed (under CI=true that is 1).
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/limiterd/limiterd/integration/harness"
)

func main() {
	store := flag.String("store", "", "redis, postgres or cassandra")
	out := flag.String("out", "", "file to write the address to once the server answers")
	parent := flag.Int("parent", 0, "stop when the process with this id is gone")
	flag.Parse()

	t := &tb{name: "stores/" + *store}
	defer t.exit(0)

	var addr string
	switch *store {
	case "redis":
		addr = harness.StartRedis(t).Addr()
	case "postgres":
		addr = harness.StartPostgres(t).DSN()
	case "cassandra":
		addr = harness.StartCassandra(t).Hosts()[0]
	default:
		fmt.Fprintln(os.Stderr, "stores: -store must be redis, postgres or cassandra")
		os.Exit(2)
	}
	if *out != "" {
		tmp := *out + ".tmp"
		if err := os.WriteFile(tmp, []byte(addr+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, *out); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%s ready at %s", *store, addr)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case s := <-sig:
			t.Logf("%v: stopping %s", s, *store)
			return
		case <-tick.C:
			if *parent > 0 && syscall.Kill(*parent, 0) == syscall.ESRCH {
				t.Logf("parent %d gone: stopping %s", *parent, *store)
				return
			}
		}
	}
}

// tb is the testing.TB the harness is given here: it logs to standard
// error, and Fatal or Skip run the cleanups and exit. Methods the harness
// does not call are those of the nil embedded TB and would panic.
type tb struct {
	testing.TB
	name     string
	cleanups []func()
	failed   bool
}

func (t *tb) Helper()          {}
func (t *tb) Name() string     { return t.name }
func (t *tb) Failed() bool     { return t.failed }
func (t *tb) Skipped() bool    { return false }
func (t *tb) Cleanup(f func()) { t.cleanups = append(t.cleanups, f) }

func (t *tb) Log(args ...any) { t.Logf("%s", strings.TrimSuffix(fmt.Sprintln(args...), "\n")) }
func (t *tb) Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s %s: %s\n", time.Now().Format("15:04:05.000"), t.name, fmt.Sprintf(format, args...))
}
func (t *tb) Error(args ...any)                 { t.failed = true; t.Log(args...) }
func (t *tb) Errorf(format string, args ...any) { t.failed = true; t.Logf(format, args...) }
func (t *tb) Fail()                             { t.failed = true }
func (t *tb) FailNow()                          { t.failed = true; t.exit(1) }
func (t *tb) Fatal(args ...any)                 { t.Error(args...); t.exit(1) }
func (t *tb) Fatalf(format string, args ...any) { t.Errorf(format, args...); t.exit(1) }
func (t *tb) SkipNow()                          { t.exit(3) }
func (t *tb) Skip(args ...any)                  { t.Log(args...); t.exit(3) }
func (t *tb) Skipf(format string, args ...any)  { t.Logf(format, args...); t.exit(3) }

func (t *tb) TempDir() string {
	dir, err := os.MkdirTemp("", "limiterd-stores-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// exit runs the cleanups, last first, and exits with code.
func (t *tb) exit(code int) {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
	os.Exit(code)
}
