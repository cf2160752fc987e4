// Command limiter-bench drives load against one or several limiterd nodes
// and reports throughput, latency percentiles, errors and, for Allow, how
// many hits were admitted per key and window against the limit.
//
// It runs closed loop (-c callers, each sending its next call when the
// previous one returned) or open loop (-rate calls per second whatever the
// answers' speed, latency measured from each call's scheduled time so a
// slow server cannot hide its queueing). Calls go round-robin over -targets
// and over -conns connections per target.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	// The load tool's own garbage collection competes with the server for
	// the same cores: collect less often unless GOGC says otherwise.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "limiter-bench:", err)
		os.Exit(1)
	}
}

// The calls limiter-bench can make.
const (
	callHealth         = "health"
	callIncrement      = "increment"
	callAllow          = "allow"
	callAllowBatch     = "allow-batch"
	callIncrementBatch = "increment-batch"
)

// config is one run's parameters, from the flags.
type config struct {
	targets   []string
	call      string
	callers   int
	rate      float64
	conns     int
	keys      int
	dist      string
	zipfS     float64
	keyPrefix string
	namespace string
	limit     float64
	window    time.Duration
	batch     int
	duration  time.Duration
	warmup    time.Duration
	timeout   time.Duration
	progress  time.Duration
	sendAt    bool
	pids      []int
	json      bool
	// tls: CA file (turns TLS on), client certificate and key (mTLS).
	caFile, certFile, keyFile string
}

const usageHead = `limiter-bench drives load against limiterd nodes and reports calls/s,
latency percentiles (p50 p90 p99 p99.9), errors, and for Allow the hits
admitted per key and window against the limit.

Usage: limiter-bench [flags]

Examples:
  limiter-bench -call health -c 50 -conns 4 -duration 20s
  limiter-bench -call allow -targets 127.0.0.1:7070,127.0.0.1:7080 -rate 2000 -keys 1 -limit 100 -window 1s -at
  limiter-bench -call allow-batch -batch 100 -keys 100000 -dist zipf -pids $(pidof limiterd)

Flags:
`

// parseFlags turns args into a config; usage goes to stderr.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("limiter-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageHead)
		fs.PrintDefaults()
	}
	targets := fs.String("targets", "127.0.0.1:7070", "comma-separated gRPC addresses of limiterd nodes; calls go round-robin over them")
	fs.StringVar(&c.call, "call", callAllow, "what to call: health (the standard gRPC health check, a floor), increment, allow, allow-batch, increment-batch")
	fs.IntVar(&c.callers, "c", 50, "concurrent callers: closed loop, or the most calls in flight with -rate")
	fs.Float64Var(&c.rate, "rate", 0, "open loop: calls per second in all (0: closed loop); latency counts from each call's scheduled time")
	fs.IntVar(&c.conns, "conns", 4, "gRPC connections per target")
	fs.IntVar(&c.keys, "keys", 1000, "number of distinct keys")
	fs.StringVar(&c.dist, "dist", "uniform", "key distribution: uniform or zipf")
	fs.Float64Var(&c.zipfS, "zipf-s", 1.1, "Zipf exponent s (> 1); key i is drawn with probability proportional to (1+i)^-s")
	fs.StringVar(&c.keyPrefix, "key-prefix", "", "prefix of the key names (default: bench-<start time>-, fresh every run so runs do not share counts)")
	fs.StringVar(&c.namespace, "namespace", "", "namespace to call (empty: limiterd's default)")
	fs.Float64Var(&c.limit, "limit", 100, "Allow: the limit, in hits per window")
	fs.DurationVar(&c.window, "window", time.Second, "Allow: the limit's window size (one of the namespace's), also the window admitted hits are counted in")
	fs.IntVar(&c.batch, "batch", 100, "items per call of allow-batch and increment-batch")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "how long to measure (after the warm-up)")
	fs.DurationVar(&c.warmup, "warmup", 0, "load sent before measuring, not counted")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Second, "deadline of each call")
	fs.DurationVar(&c.progress, "progress", 5*time.Second, "print a progress line to stderr this often (0: never)")
	fs.BoolVar(&c.sendAt, "at", false, "send the client's clock as each request's at field (increment, allow), so admitted hits are counted in exactly the window the server decided in; needs clocks in step with the nodes'")
	pids := fs.String("pids", "", "comma-separated process ids (Linux) whose CPU time is read before and after the measurement, to report server CPU µs per call")
	fs.BoolVar(&c.json, "json", false, "print the report as JSON")
	fs.StringVar(&c.caFile, "ca-file", "", "TLS: PEM CA bundle the servers' certificates must chain to (turns TLS on)")
	fs.StringVar(&c.certFile, "cert-file", "", "mTLS: PEM client certificate (with -key-file and -ca-file)")
	fs.StringVar(&c.keyFile, "key-file", "", "mTLS: PEM client key")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, t := range strings.Split(*targets, ",") {
		if t = strings.TrimSpace(t); t != "" {
			c.targets = append(c.targets, t)
		}
	}
	for _, p := range strings.Split(*pids, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		pid, err := strconv.Atoi(p)
		if err != nil || pid <= 0 {
			return c, fmt.Errorf("-pids: %q is not a process id", p)
		}
		c.pids = append(c.pids, pid)
	}
	if c.keyPrefix == "" {
		c.keyPrefix = fmt.Sprintf("bench-%d-", time.Now().UnixNano())
	}
	return c, c.validate()
}

func (c *config) validate() error {
	switch {
	case len(c.targets) == 0:
		return errors.New("-targets: none given")
	case c.call != callHealth && c.call != callIncrement && c.call != callAllow && c.call != callAllowBatch && c.call != callIncrementBatch:
		return fmt.Errorf("-call: unknown call %q", c.call)
	case c.callers < 1:
		return fmt.Errorf("-c: must be at least 1, got %d", c.callers)
	case c.rate < 0:
		return fmt.Errorf("-rate: must not be negative, got %v", c.rate)
	case c.conns < 1:
		return fmt.Errorf("-conns: must be at least 1, got %d", c.conns)
	case c.keys < 1:
		return fmt.Errorf("-keys: must be at least 1, got %d", c.keys)
	case c.dist != "uniform" && c.dist != "zipf":
		return fmt.Errorf("-dist: want uniform or zipf, got %q", c.dist)
	case c.dist == "zipf" && !(c.zipfS > 1):
		return fmt.Errorf("-zipf-s: must be above 1, got %v", c.zipfS)
	case c.limit < 0:
		return fmt.Errorf("-limit: must not be negative, got %v", c.limit)
	case c.window <= 0:
		return fmt.Errorf("-window: must be positive, got %s", c.window)
	case c.batch < 1:
		return fmt.Errorf("-batch: must be at least 1, got %d", c.batch)
	case c.duration <= 0:
		return fmt.Errorf("-duration: must be positive, got %s", c.duration)
	case c.warmup < 0:
		return fmt.Errorf("-warmup: must not be negative, got %s", c.warmup)
	case c.timeout <= 0:
		return fmt.Errorf("-timeout: must be positive, got %s", c.timeout)
	case c.progress < 0:
		return fmt.Errorf("-progress: must not be negative, got %s", c.progress)
	case (c.certFile == "") != (c.keyFile == ""):
		return errors.New("-cert-file and -key-file: give both or neither")
	case c.certFile != "" && c.caFile == "":
		return errors.New("-cert-file: needs -ca-file (TLS)")
	}
	return nil
}

// run is limiter-bench: it parses args, drives the load until the duration
// has passed or ctx ends (then reporting what was measured so far), and
// writes the report to stdout and progress to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	res, err := runLoad(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	if cfg.json {
		return writeJSON(stdout, cfg, res)
	}
	writeText(stdout, cfg, res)
	return nil
}
