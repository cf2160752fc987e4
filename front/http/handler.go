package httpfront

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
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
	rls      limiterv1.RateLimiterServer // the fast path's
	bufs     sync.Pool                   // its request and reply buffers
	inflight atomic.Int64
	closing  atomic.Bool
	authz    *auth.Authorizer
	log      *slog.Logger
	// inflight bytes: the request bytes held at once (nil: no cap).
	held    *semaphore.Weighted
	maxHeld int64
}

// Option configures a Handler.
type Option func(*Handler)

// WithAuthorizer makes every call carry its principal: the bearer token
// of its Authorization header ("Bearer <token>"), else its TLS client
// certificate. The service (given the authorizer too) refuses a call
// without one with 401, or one not granted the call with 403.
func WithAuthorizer(a *auth.Authorizer) Option { return func(h *Handler) { h.authz = a } }

// WithMaxInflightBytes caps the bytes of the request bodies the handler
// holds at once, from their first byte read until their call has
// returned: a request whose Content-Length does not fit is refused with
// 429 (RESOURCE_EXHAUSTED) before its body is read; one without a
// Content-Length is refused when a read does not fit.
func WithMaxInflightBytes(n int64) Option {
	return func(h *Handler) {
		if n > 0 {
			h.held, h.maxHeld = semaphore.NewWeighted(n), n
		}
	}
}

// WithLogger logs the calls answered INTERNAL (a bug, or a store
// answering what it should not), with their path: the caller sees only
// the status.
func WithLogger(l *slog.Logger) Option { return func(h *Handler) { h.log = l } }

// New returns the JSON API over svc.
func New(svc *service.Service, opts ...Option) (*Handler, error) {
	h := &Handler{marshal: newJSONMarshaler(), bufs: sync.Pool{New: newFastBuf}}
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
	h.rls = grpcfront.NewRateLimiterServer(svc)
	if err := limiterv1gw.RegisterRateLimiterHandlerServer(context.Background(), h.gw, h.rls); err != nil {
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
		// Before a byte of the body is read: what an unauthenticated
		// client sends is neither read nor decoded.
		p := h.authz.Request(r)
		if p == nil {
			if r.ContentLength != 0 {
				// The body stays unread: the connection cannot carry
				// another request.
				w.Header().Set("Connection", "close")
			}
			h.errorHandler(r.Context(), h.gw, h.marshal, w, r, status.Error(codes.Unauthenticated, auth.ErrUnauthenticated.Error()))
			return
		}
		r = r.WithContext(auth.WithPrincipal(r.Context(), p))
	}
	rc := http.MaxBytesReader(w, r.Body, MaxRequestBytes)
	if h.held != nil {
		if r.ContentLength > 0 {
			if !h.held.TryAcquire(r.ContentLength) {
				w.Header().Set("Connection", "close")
				h.fail(w, r, h.busy())
				return
			}
			defer h.held.Release(r.ContentLength)
		} else {
			hr := &heldReader{ReadCloser: rc, h: h}
			defer hr.release()
			rc = hr
		}
	}
	if r.URL.Path == APIPrefix+"Allow" && r.ContentLength > 0 && r.ContentLength <= fastAllowMax {
		h.serveAllowFast(w, r, rc)
		return
	}
	r.Body = &body{ReadCloser: rc}
	h.gw.ServeHTTP(w, r)
}

// heldReader is a body of unknown length, whose bytes are counted in the
// handler's bytes in flight as they are read.
type heldReader struct {
	io.ReadCloser
	h *Handler
	n int64
}

func (r *heldReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if n > 0 {
		if !r.h.held.TryAcquire(int64(n)) {
			return 0, r.h.busy()
		}
		r.n += int64(n)
	}
	return n, err
}

func (r *heldReader) release() {
	if r.n > 0 {
		r.h.held.Release(r.n)
	}
}

// busy is the error of a request that does not fit in the bytes in
// flight.
func (h *Handler) busy() error {
	// RESOURCE_EXHAUSTED is answered 429.
	return status.Errorf(codes.ResourceExhausted, "the listener holds %d bytes of requests already (connections.max_inflight_bytes): retry later", h.maxHeld)
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
