package httpfront

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limiterd/limiterd/internal/reqmetrics"
)

// NewMetrics makes the HTTP front's request metrics (front="http") on
// reg: a series per limiter.v1 method, every other path counted as
// "other"; configured tells which namespace names get their own
// limiter_namespace label (nil: none, all are "other"). Serve them with
// Metrics.
func NewMetrics(reg prometheus.Registerer, configured func(namespace string) bool) *reqmetrics.Metrics {
	return reqmetrics.New(reg, reqmetrics.Config{Front: "http", Methods: reqmetrics.LimiterMethods(), Configured: configured})
}

// Metrics returns middleware that records every call of the handler it
// wraps in m: its method (the path without its leading slash, as the gRPC
// front names it), HTTP status and latency. Wrap the Handler when
// mounting it (as RegisterWithMetrics does):
//
//	mux.Handle(httpfront.APIPrefix, httpfront.Metrics(m)(h))
//
// The decisions are the service's to report: make the Handler over a
// service that reports them to m (New(svc.Observe(service.FrontHTTP, m))).
func Metrics(m *reqmetrics.Metrics) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			rw := &statusWriter{ResponseWriter: w}
			next.ServeHTTP(rw, r)
			if rw.status == 0 {
				rw.status = http.StatusOK
			}
			m.Method(strings.TrimPrefix(r.URL.Path, "/")).Observe(time.Since(start), statusCode(rw.status))
		})
	}
}

// RegisterWithMetrics is Register with the calls recorded in m: it mounts
// the API under APIPrefix wrapped in Metrics(m), and the OpenAPI document
// at OpenAPIPath.
func (h *Handler) RegisterWithMetrics(mux *http.ServeMux, m *reqmetrics.Metrics) {
	mux.Handle(APIPrefix, Metrics(m)(h))
	mux.HandleFunc("GET "+OpenAPIPath, serveOpenAPI)
}

// statusWriter notes the status written.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// statusCode is a status's label value; the statuses the front answers
// are spelled out so that recording them does not allocate.
func statusCode(code int) string {
	switch code {
	case http.StatusOK:
		return "200"
	case http.StatusBadRequest:
		return "400"
	case http.StatusUnauthorized:
		return "401"
	case http.StatusForbidden:
		return "403"
	case http.StatusNotFound:
		return "404"
	case http.StatusMethodNotAllowed:
		return "405"
	case http.StatusRequestEntityTooLarge:
		return "413"
	case http.StatusTooManyRequests:
		return "429"
	case http.StatusInternalServerError:
		return "500"
	case http.StatusNotImplemented:
		return "501"
	case http.StatusServiceUnavailable:
		return "503"
	case http.StatusGatewayTimeout:
		return "504"
	}
	if code < 100 || code > 599 {
		return "other"
	}
	return strconv.Itoa(code)
}
