package grpcfront

import (
	"context"
	"runtime"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/internal/grpccodec"
	"github.com/limiterd/limiterd/service"
)

// MaxRecvMsgSize bounds one request: room for a batch of thousands of
// items with long keys, well below what could exhaust memory.
const MaxRecvMsgSize = 16 << 20

// MaxHeaderBytes bounds one call's metadata, as net/http's default bounds
// an HTTP request's headers: gRPC's own default is 16 MiB.
const MaxHeaderBytes = 1 << 20

// Server is the gRPC server of the limiter, health checking and
// reflection. Serve it with Serve; end it with Shutdown.
type Server struct {
	*grpc.Server
	health   *health.Server
	stopping chan struct{}
	once     sync.Once
}

// NewServer serves svc. opts are added to the server's own options
// (message and metadata size bounds, codec, stream workers), later ones
// winning.
func NewServer(svc *service.Service, opts ...grpc.ServerOption) *Server {
	s := &Server{health: health.NewServer(), stopping: make(chan struct{})}
	opts = append([]grpc.ServerOption{grpc.MaxRecvMsgSize(MaxRecvMsgSize), grpc.MaxHeaderListSize(MaxHeaderBytes), grpc.ForceServerCodecV2(grpccodec.Codec{}),
		grpc.NumStreamWorkers(streamWorkers())}, opts...)
	s.Server = grpc.NewServer(opts...)
	limiterv1.RegisterRateLimiterServer(s.Server, NewRateLimiterServer(svc))
	healthpb.RegisterHealthServer(s.Server, &healthService{Server: s.health, stopping: s.stopping})
	reflection.Register(s.Server)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(limiterv1.RateLimiter_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	return s
}

// Drain reports NOT_SERVING to health checks, and keeps serving: the
// first step of a stop, so that load balancers send no new calls before
// the listener closes.
func (s *Server) Drain() {
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	s.health.SetServingStatus(limiterv1.RateLimiter_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
}

// Shutdown reports NOT_SERVING, ends the health Watch streams (so they do
// not hold up the stop) and stops gracefully: it returns once every call
// has returned, or, when ctx ends first, after cutting the rest off.
func (s *Server) Shutdown(ctx context.Context) {
	s.once.Do(func() {
		s.health.Shutdown()
		close(s.stopping)
	})
	stopped := make(chan struct{})
	go func() { s.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		s.Stop()
		<-stopped
	}
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
