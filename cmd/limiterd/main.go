// Command limiterd serves clustered sliding-window rate limiting over gRPC.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	gosync "sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/internal/grpccodec"
	"github.com/limiterd/limiterd/node"
	clustersync "github.com/limiterd/limiterd/sync"
)

func main() {
	// go-redis prints pool events to stderr through a package-level
	// logger; the redis store reports the errors that matter through the
	// syncer's log instead.
	redis.SetLogger(discardPrintf{})
	setGCPercent(os.Getenv)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "limiterd:", err)
		os.Exit(1)
	}
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

// Environment variables, each overridden by its flag.
const (
	envConfig   = "LIMITERD_CONFIG"
	envGRPCAddr = "LIMITERD_GRPC_ADDR"
	envHTTPAddr = "LIMITERD_HTTP_ADDR"
	envNodeName = "LIMITERD_NODE_NAME"
	envLogLevel = "LIMITERD_LOG_LEVEL"
)

// run is limiterd: it returns when ctx is done (after a graceful shutdown)
// or on a start-up error.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "schema":
			return printSchema(args[1:], stdout)
		case "probe":
			return probe(ctx, args[1:])
		}
	}
	fs := flag.NewFlagSet("limiterd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", getenv(envConfig), "YAML config file (env "+envConfig+"); none: a local-only \"default\" namespace with 1s and 60s windows")
	grpcAddr := fs.String("grpc-addr", getenv(envGRPCAddr), "gRPC listen address (env "+envGRPCAddr+", default 127.0.0.1:7070)")
	httpAddr := fs.String("http-addr", getenv(envHTTPAddr), "HTTP address for /metrics, /healthz, /readyz (env "+envHTTPAddr+", default 127.0.0.1:7071; \"off\" disables)")
	nodeName := fs.String("node-name", getenv(envNodeName), "node name for people (env "+envNodeName+", default the host name)")
	logLevel := fs.String("log-level", getenv(envLogLevel), "debug, info, warn or error (env "+envLogLevel+")")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg := DefaultConfig()
	if *configPath != "" {
		var err error
		if cfg, err = LoadConfig(*configPath); err != nil {
			return err
		}
	}
	for dst, v := range map[*string]string{&cfg.GRPCAddr: *grpcAddr, &cfg.HTTPAddr: *httpAddr, &cfg.NodeName: *nodeName, &cfg.LogLevel: *logLevel} {
		if v != "" {
			*dst = v
		}
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.NodeName == "" {
		cfg.NodeName, _ = os.Hostname()
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: parseLevel(cfg.LogLevel)}))
	return serve(ctx, cfg, log)
}

func parseLevel(s string) slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(s))); err != nil {
		return slog.LevelInfo
	}
	return l
}

// daemon is one running limiterd: everything wired in one place.
type daemon struct {
	cfg     Config
	log     *slog.Logger
	node    *node.Node
	stores  map[string]clustersync.Store
	syncers map[string]*clustersync.Syncer
	reg     *prometheus.Registry
	health  *health.Server
	inc     string
}

func serve(ctx context.Context, cfg Config, log *slog.Logger) error {
	d, err := newDaemon(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer d.closeStores()

	lis, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("grpc listen: %w", err)
	}
	stopping := make(chan struct{})
	gs := newGRPCServer(d, stopping)

	var httpSrv *http.Server
	if cfg.HTTPAddr != "" && cfg.HTTPAddr != "off" {
		hl, err := net.Listen("tcp", cfg.HTTPAddr)
		if err != nil {
			lis.Close()
			return fmt.Errorf("http listen: %w", err)
		}
		httpSrv = &http.Server{Handler: d.httpHandler(), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := httpSrv.Serve(hl); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("http server stopped", "err", err)
			}
		}()
		log.Info("http listening", "addr", hl.Addr().String())
	}

	// Background work: reclaim and one sync loop per syncing namespace.
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var wg gosync.WaitGroup
	wg.Go(func() { d.node.Run(bg) })
	for name, s := range d.syncers {
		wg.Go(func() {
			if err := s.Run(bg); err != nil {
				log.Error("final push failed", "namespace", name, "err", err)
			}
		})
	}

	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(lis) }()
	log.Info("limiterd serving", "grpc", lis.Addr().String(), "node", cfg.NodeName, "incarnation", d.inc,
		"namespaces", len(d.node.Namespaces()))

	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	log.Info("shutting down")
	d.health.Shutdown()
	close(stopping)
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		gs.Stop()
	}
	// Every call has returned: the final pushes see every hit.
	stopBG()
	wg.Wait()
	if httpSrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = httpSrv.Shutdown(sctx)
		cancel()
	}
	return err
}

// maxRecvMsgSize bounds one request: room for a batch of thousands of
// items with long keys, well below what could exhaust memory.
const maxRecvMsgSize = 16 << 20

// newGRPCServer serves the limiter, health checking and reflection.
// Health Watch streams end once shutdown has begun (closing stopping), so
// they do not hold up the graceful stop. Messages are encoded by
// grpccodec, without protobuf reflection for the limiter's own messages.
func newGRPCServer(d *daemon, stopping <-chan struct{}) *grpc.Server {
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(maxRecvMsgSize), grpc.ForceServerCodecV2(grpccodec.Codec{}),
		grpc.NumStreamWorkers(streamWorkers()))
	limiterv1.RegisterRateLimiterServer(gs, newServer(d))
	healthpb.RegisterHealthServer(gs, &healthService{Server: d.health, stopping: stopping})
	reflection.Register(gs)
	return gs
}

// streamWorkers is how many goroutines serve calls, each reused for many
// calls. A goroutine per call, gRPC's default, starts with a small stack
// that every call grows again: a fifth of a node's CPU under unary Allow
// load went to copying stacks. A call that finds every worker busy (say,
// waiting on a synchronous store call) gets a goroutine of its own, so the
// count bounds nothing; 16 per CPU served most calls on workers at 50
// concurrent callers.
func streamWorkers() uint32 { return uint32(16 * runtime.GOMAXPROCS(0)) }

// healthService is the standard health service whose Watch streams end
// at shutdown: once they have sent NOT_SERVING, or after watchDrain.
type healthService struct {
	*health.Server
	stopping <-chan struct{}
}

// watchDrain is how long a Watch stream may stay open after shutdown
// began without having sent NOT_SERVING (a watch of an unknown service).
const watchDrain = 500 * time.Millisecond

func (h *healthService) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	go func() {
		select {
		case <-h.stopping:
		case <-ctx.Done():
			return
		}
		t := time.NewTimer(watchDrain)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-ctx.Done():
		}
	}()
	return h.Server.Watch(req, &watchStream{Health_WatchServer: stream, ctx: ctx, cancel: cancel, stopping: h.stopping})
}

type watchStream struct {
	healthpb.Health_WatchServer
	ctx      context.Context
	cancel   context.CancelFunc
	stopping <-chan struct{}
}

func (w *watchStream) Context() context.Context { return w.ctx }

func (w *watchStream) Send(m *healthpb.HealthCheckResponse) error {
	err := w.Health_WatchServer.Send(m)
	if m.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING {
		select {
		case <-w.stopping:
			w.cancel()
		default:
		}
	}
	return err
}

func newDaemon(ctx context.Context, cfg Config, log *slog.Logger) (*daemon, error) {
	n, err := node.New(cfg.NodeConfigs(), node.SystemClock{})
	if err != nil {
		return nil, err
	}
	d := &daemon{
		cfg: cfg, log: log, node: n, reg: prometheus.NewRegistry(), health: health.NewServer(),
		stores: map[string]clustersync.Store{}, syncers: map[string]*clustersync.Syncer{},
		inc: clustersync.NewIncarnation(cfg.NodeName),
	}
	d.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	d.registerNodeMetrics()
	metrics := clustersync.NewMetrics(d.reg)
	versions := clustersync.NewVersions(time.Now)
	for _, ns := range n.Namespaces() {
		nc := ns.Config()
		if nc.Mode() == node.LocalOnly {
			continue
		}
		st, ok := d.stores[nc.Store]
		if !ok {
			if st, err = openStore(ctx, nc.Store, cfg.Stores[nc.Store], log); err != nil {
				d.closeStores()
				return nil, fmt.Errorf("store %q: %w", nc.Store, err)
			}
			d.stores[nc.Store] = st
		}
		s, err := clustersync.NewSyncer(ns, st, d.inc, versions, cfg.SyncerConfig(), log, metrics)
		if err != nil {
			d.closeStores()
			return nil, err
		}
		d.syncers[nc.Name] = s
		started := time.Now()
		d.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "limiterd_sync_seconds_since_success", Help: "Seconds since the namespace's last fully successful sync (since start if none yet).",
			ConstLabels: prometheus.Labels{"namespace": nc.Name},
		}, func() float64 {
			last, _ := s.Status()
			if last.IsZero() {
				last = started
			}
			return time.Since(last).Seconds()
		}))
	}
	d.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	d.health.SetServingStatus(limiterv1.RateLimiter_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	return d, nil
}

// storeCloseTimeout bounds closing the stores at exit. A store cut off by
// the network does not answer a polite goodbye (PostgreSQL's pool waits up
// to 15 s per connection for one), and the process's exit closes the
// connections all the same.
const storeCloseTimeout = 2 * time.Second

func (d *daemon) closeStores() { d.closeStoresWithin(storeCloseTimeout) }

// closeStoresWithin closes every store, waiting at most timeout for them.
func (d *daemon) closeStoresWithin(timeout time.Duration) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for name, s := range d.stores {
			if err := s.Close(); err != nil {
				d.log.Warn("closing store", "store", name, "err", err)
			}
		}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		d.log.Warn("stores not closed in time; leaving their connections to the exit", "timeout", timeout)
	}
}

// probe is the container health check (the image has no curl): GET a URL,
// succeed on 200.
func probe(ctx context.Context, args []string) error {
	if len(args) != 1 {
		return errors.New("usage: limiterd probe URL")
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, args[0], nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", args[0], resp.Status)
	}
	return nil
}
