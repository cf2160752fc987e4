package httpfront

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/limiterd/limiterd/api/proto/limiter/v1/limiterv1gw"
	"github.com/limiterd/limiterd/auth"
	grpcfront "github.com/limiterd/limiterd/front/grpc"
	"github.com/limiterd/limiterd/service"
)

// MaxRequestBytes bounds a request body, as grpcfront.MaxRecvMsgSize
// bounds a gRPC request.
const MaxRequestBytes = grpcfront.MaxRecvMsgSize

// Paths served.
const (
	// APIPrefix is the prefix of the RPCs' paths: /limiter.v1.RateLimiter/.
	APIPrefix = "/limiter.v1.RateLimiter/"
	// OpenAPIPath is where the OpenAPI document is served (GET).
	OpenAPIPath = "/openapi.json"
)

// Handler serves the JSON API. Mount it with Register; stop it with
// Shutdown. It is safe for concurrent use.
type Handler struct {
	gw       *runtime.ServeMux
	marshal  *jsonMarshaler
	inflight atomic.Int64
	closing  atomic.Bool
	authz    *auth.Authorizer
	log      *slog.Logger
}

// Option configures a Handler.
type Option func(*Handler)

// WithAuthorizer makes every call carry its principal: the bearer token
// of its Authorization header ("Bearer <token>"), else its TLS client
// certificate. The service (given the authorizer too) refuses a call
// without one with 401, or one not granted the call with 403.
func WithAuthorizer(a *auth.Authorizer) Option { return func(h *Handler) { h.authz = a } }

// WithLogger logs the calls answered INTERNAL (a bug, or a store
// answering what it should not), with their path: the caller sees only
// the status.
func WithLogger(l *slog.Logger) Option { return func(h *Handler) { h.log = l } }

// New returns the JSON API over svc.
func New(svc *service.Service, opts ...Option) (*Handler, error) {
	h := &Handler{marshal: newJSONMarshaler()}
	for _, o := range opts {
		o(h)
	}
	h.gw = runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, h.marshal),
		runtime.WithErrorHandler(h.errorHandler),
		// The service reads no metadata: none is made from the headers.
		runtime.WithIncomingHeaderMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithOutgoingHeaderMatcher(func(string) (string, bool) { return "", false }),
	)
	if err := limiterv1gw.RegisterRateLimiterHandlerServer(context.Background(), h.gw, grpcfront.NewRateLimiterServer(svc)); err != nil {
		return nil, fmt.Errorf("httpfront: %w", err)
	}
	return h, nil
}

// Register mounts the API under APIPrefix and the OpenAPI document at
// OpenAPIPath on mux.
func (h *Handler) Register(mux *http.ServeMux) {
	mux.Handle(APIPrefix, h)
	mux.HandleFunc("GET "+OpenAPIPath, serveOpenAPI)
}

// ServeHTTP serves one call of the API: a path under APIPrefix.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Counted before closing is read, so that Shutdown, which sets closing
	// before it waits for the count, waits for every call that saw it unset.
	h.inflight.Add(1)
	defer h.inflight.Add(-1)
	if r.Method != http.MethodPost {
		// The gateway would answer 501; the method, not the server, is wrong.
		w.Header().Set("Allow", http.MethodPost)
		h.fail(w, r, &runtime.HTTPStatusError{HTTPStatus: http.StatusMethodNotAllowed,
			Err: status.Errorf(codes.Unimplemented, "method %s not allowed: the calls are POST", r.Method)})
		return
	}
	if h.closing.Load() {
		h.fail(w, r, status.Error(codes.Unavailable, "limiterd is shutting down"))
		return
	}
	if r.ContentLength > MaxRequestBytes {
		h.fail(w, r, tooLarge())
		return
	}
	if h.authz != nil {
		if p := h.authz.Request(r); p != nil {
			r = r.WithContext(auth.WithPrincipal(r.Context(), p))
		}
	}
	r.Body = &body{ReadCloser: http.MaxBytesReader(w, r.Body, MaxRequestBytes)}
	h.gw.ServeHTTP(w, r)
}

// fail answers err as the gateway answers errors.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	runtime.DefaultHTTPErrorHandler(r.Context(), h.gw, h.marshal, w, r, err)
}

// Shutdown makes new calls fail with UNAVAILABLE (503) and waits until the
// running ones have returned, or until ctx ends. Run it before the final
// pushes, with the other fronts' shutdowns, so that they see every hit.
func (h *Handler) Shutdown(ctx context.Context) {
	h.closing.Store(true)
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for h.inflight.Load() > 0 {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// tooLarge is the error of a request body over MaxRequestBytes.
func tooLarge() error {
	return &runtime.HTTPStatusError{HTTPStatus: http.StatusRequestEntityTooLarge,
		Err: status.Errorf(codes.ResourceExhausted, "request body larger than %d bytes", MaxRequestBytes)}
}

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(limiterv1gw.OpenAPI)
}
