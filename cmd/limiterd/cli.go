package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/limiterd/limiterd/internal/config"
)

// Environment variables, each overridden by its flag.
const (
	envConfig    = "LIMITERD_CONFIG"
	envGRPCAddr  = "LIMITERD_GRPC_ADDR"
	envHTTPAddr  = "LIMITERD_HTTP_ADDR"
	envRESPAddr  = "LIMITERD_RESP_ADDR"
	envNodeName  = "LIMITERD_NODE_NAME"
	envLogLevel  = "LIMITERD_LOG_LEVEL"
	envLogFormat = "LIMITERD_LOG_FORMAT"
	envEnvoyDir  = "LIMITERD_ENVOY_CONFIG_DIR"
	envAdminAddr = "LIMITERD_ADMIN_ADDR"
)

const usageHead = `Usage:
  limiterd [flags]                 serve (until SIGINT or SIGTERM)
  limiterd schema postgres|cassandra [--config file] [--store name]
                                   print a store's schema
  limiterd check [flags]           load the config as serving would (the same
                                   flags), print every error or "ok"
  limiterd probe [--ca-file F] [--cert-file F --key-file F] URL
                                   GET URL, succeed on 200 (container health check)
  limiterd version                 print the version (also --version)
  limiterd help                    print this help (also -h, --help)

Flags:
`

// usageError is a command line limiterd does not understand; main prints
// the usage after it and exits with status 2.
type usageError struct {
	msg   string
	usage string
}

func (e *usageError) Error() string { return e.msg }

// run is limiterd: it returns when ctx is done (after a graceful shutdown),
// at once for the commands other than serving, or on an error (a
// *usageError when the command line is wrong).
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs, flags := serveFlags(getenv)
	usage := usageText(fs)
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		switch cmd, rest := args[0], args[1:]; cmd {
		case "schema":
			return printSchema(rest, stdout)
		case "probe":
			return probe(ctx, rest)
		case "check":
			return checkConfig(rest, getenv, stdout, usage)
		case "version", "help":
			if len(rest) > 0 {
				return &usageError{msg: fmt.Sprintf("%s takes no arguments, got %q", cmd, rest), usage: usage}
			}
			if cmd == "help" {
				_, err := io.WriteString(stdout, usage)
				return err
			}
			_, err := fmt.Fprintln(stdout, version())
			return err
		default:
			return &usageError{msg: fmt.Sprintf("unknown command %q", cmd), usage: usage}
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			_, err = io.WriteString(stdout, usage)
			return err
		}
		return &usageError{msg: err.Error(), usage: usage}
	}
	if fs.NArg() > 0 {
		return &usageError{msg: fmt.Sprintf("unexpected argument %q (a config file is given with --config FILE)", fs.Arg(0)), usage: usage}
	}
	if *flags.version {
		_, err := fmt.Fprintln(stdout, version())
		return err
	}
	src := flags.source()
	cfg, err := config.Load(src)
	if err != nil {
		return err
	}
	log := newLogger(stderr, cfg.LogFormat, cfg.LogLevel)
	var load func() (config.Config, error)
	if src.Path != "" {
		load = func() (config.Config, error) { return config.Load(src) }
	}
	return serveWith(ctx, cfg, log, flags.getenv, src.Path, load)
}

// newLogger writes format ("json", else text) records at level and above
// to w.
func newLogger(w io.Writer, format, level string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: parseLevel(level)}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// flagValues are the serving flags, defaulted from the environment.
type flagValues struct {
	configPath, grpcAddr, httpAddr, respAddr, nodeName, logLevel, envoyDir *string
	logFormat                                                              *string
	adminAddr                                                              *string
	version                                                                *bool
	getenv                                                                 func(string) string
}

func serveFlags(getenv func(string) string) (*flag.FlagSet, flagValues) {
	fs := flag.NewFlagSet("limiterd", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // run reports errors and usage itself
	return fs, flagValues{
		configPath: fs.String("config", getenv(envConfig), "YAML config file (env "+envConfig+"); none: a local-only \"default\" namespace with 1s and 60s windows"),
		grpcAddr:   fs.String("grpc-addr", getenv(envGRPCAddr), "gRPC listen address (env "+envGRPCAddr+", default 127.0.0.1:7070)"),
		httpAddr:   fs.String("http-addr", getenv(envHTTPAddr), "HTTP address for /metrics, /healthz, /readyz (env "+envHTTPAddr+", default 127.0.0.1:7071; \"off\" disables)"),
		respAddr:   fs.String("resp-addr", getenv(envRESPAddr), "Redis protocol listen address (env "+envRESPAddr+"; default off)"),
		adminAddr:  fs.String("admin-addr", getenv(envAdminAddr), "admin listen address: the admin API (namespaces, reload, sync) and /debug/pprof/ (env "+envAdminAddr+"; default off; a bare port binds 127.0.0.1)"),
		nodeName:   fs.String("node-name", getenv(envNodeName), "node name for people (env "+envNodeName+", default the host name)"),
		logLevel:   fs.String("log-level", getenv(envLogLevel), "debug, info, warn or error (env "+envLogLevel+")"),
		logFormat:  fs.String("log-format", getenv(envLogFormat), "text or json (env "+envLogFormat+")"),
		envoyDir:   fs.String("envoy-config-dir", getenv(envEnvoyDir), "serve Envoy's rate limit service with envoyproxy/ratelimit's domain files from this directory (env "+envEnvoyDir+"; overrides envoy.config_dir)"),
		version:    fs.Bool("version", false, "print the version and exit"),
		getenv:     getenv,
	}
}

// source is where the flags say the config comes from.
func (f flagValues) source() config.Source {
	return config.Source{Path: *f.configPath, Getenv: f.getenv, Overrides: config.Overrides{
		GRPCAddr: *f.grpcAddr, HTTPAddr: *f.httpAddr, RESPAddr: *f.respAddr, AdminAddr: *f.adminAddr,
		NodeName: *f.nodeName, LogLevel: *f.logLevel, LogFormat: *f.logFormat, EnvoyDir: *f.envoyDir}}
}

// checkConfig is limiterd check: it loads the config as serving would,
// with the same flags and environment, and prints every error as
// "file:line: field: reason", one a line, or "ok"; the error it returns
// sets the exit status.
func checkConfig(args []string, getenv func(string) string, stdout io.Writer, usage string) error {
	fs, flags := serveFlags(getenv)
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		msg := "check takes the serving flags only"
		if err != nil {
			msg = err.Error()
		}
		return &usageError{msg: msg, usage: usage}
	}
	src := flags.source()
	name := src.Path
	if name == "" {
		name = "the embedded default config"
	}
	_, err := config.Load(src)
	errs := config.Flatten(err)
	if len(errs) == 0 {
		_, err = fmt.Fprintf(stdout, "%s: ok\n", name)
		return err
	}
	for _, e := range errs {
		line := e.Error()
		if ce, ok := e.(*config.Error); ok {
			line = ce.Position()
		}
		if _, err := fmt.Fprintln(stdout, line); err != nil {
			return err
		}
	}
	return fmt.Errorf("%s: %d error(s)", name, len(errs))
}

func usageText(fs *flag.FlagSet) string {
	var b strings.Builder
	b.WriteString(usageHead)
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	return b.String()
}

func parseLevel(s string) slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(s))); err != nil {
		return slog.LevelInfo
	}
	return l
}

// version is the module's version and the VCS revision it was built from.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "limiterd (no build information)"
	}
	v := "limiterd " + bi.Main.Version
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = " (modified)"
			}
		}
	}
	if rev == "" {
		rev = "unknown"
	}
	return v + " revision " + rev + modified + " " + bi.GoVersion
}

// probe is the container health check (the image has no curl): GET a URL,
// succeed on 200.
func probe(ctx context.Context, args []string) error {
	client, url, err := probeClient(args)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}
