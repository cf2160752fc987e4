// Command limiterd serves clustered sliding-window rate limiting.
//
// The files of this command: main.go starts the process; cli.go parses the
// command line (limiterd check loads the config as serving does);
// daemon.go wires the engine, the owner of the running configuration
// (internal/live) and the service, and runs the listeners; each listener
// has its own file (listen_grpc.go for the gRPC front, http.go for the
// operators' endpoints, which also serve the JSON API of
// listen_http_api.go, admin.go for the admin API and /debug/pprof/), and
// tls.go puts TLS on every listener when configured. The config file is
// read and validated by internal/config, whose Load is the one load path.
// A new front adds its config fields there and its listen_*.go file here;
// request handling lives in the fronts' packages.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/limiterd/limiterd/internal/config"
	"github.com/redis/go-redis/v9"
)

func main() {
	// go-redis prints pool events to stderr through a package-level
	// logger; the redis store reports the errors that matter through the
	// syncer's log instead.
	redis.SetLogger(discardPrintf{})
	setGCPercent(os.Getenv)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err))
}

// exitCode reports err on stderr and returns the process's exit status:
// 0 on success, 2 on a usage error (after the usage), 1 otherwise.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	for _, e := range config.Flatten(err) { // a config's errors, one a line
		fmt.Fprintln(os.Stderr, "limiterd:", e)
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprint(os.Stderr, ue.usage)
		return 2
	}
	return 1
}

// defaultGCPercent is the garbage collector's target when GOGC is not set.
// limiterd's heap is mostly long-lived counters plus short-lived request
// garbage: collecting at 4× the live heap instead of Go's 2× cut the CPU
// per unary call by a fifth and per batch decision by a third. GOMEMLIMIT,
// when set, still bounds the heap; GOGC=100 restores Go's default.
const defaultGCPercent = 400

func setGCPercent(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
}

type discardPrintf struct{}

func (discardPrintf) Printf(context.Context, string, ...any) {}
