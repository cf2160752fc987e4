package httpfront

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
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
// front names it), HTTP status and latency, and the decisions of Allow,
// Acquire and their batches (each item counts) by namespace and kind.
// Wrap the Handler when mounting it:
//
//	mux.Handle(httpfront.APIPrefix, httpfront.Metrics(m)(h))
//
// The decisions are read back from the request and response bodies of
// those four methods (kept while the call runs), so their calls cost a
// second decoding; other calls cost two clock reads and two counter adds.
func Metrics(m *reqmetrics.Metrics) func(http.Handler) http.Handler {
	var pool sync.Pool // of *capture
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			name := strings.TrimPrefix(r.URL.Path, "/")
			rw := &statusWriter{ResponseWriter: w}
			newReq, newResp := decisionMessages(name)
			var c *capture
			if newReq != nil && r.Body != nil {
				c, _ = pool.Get().(*capture)
				if c == nil {
					c = new(capture)
				}
				c.req.Reset()
				c.resp.Reset()
				r.Body = &teeBody{ReadCloser: r.Body, buf: &c.req}
				rw.body = &c.resp
			}
			next.ServeHTTP(rw, r)
			if rw.status == 0 {
				rw.status = http.StatusOK
			}
			if c != nil {
				if rw.status == http.StatusOK {
					req, resp := newReq(), newResp()
					opts := protojson.UnmarshalOptions{DiscardUnknown: true}
					if opts.Unmarshal(c.req.Bytes(), req) == nil && opts.Unmarshal(c.resp.Bytes(), resp) == nil {
						m.LimiterDecisions(req, resp)
					}
				}
				if c.req.Cap() <= maxPooled && c.resp.Cap() <= maxPooled {
					pool.Put(c)
				}
			}
			m.Method(name).Observe(time.Since(start), statusCode(rw.status))
		})
	}
}

// maxPooled is the largest buffer kept for another call, so one large
// batch does not pin its memory.
const maxPooled = 64 << 10

// capture holds one call's request and response bodies.
type capture struct{ req, resp bytes.Buffer }

// decisionMessages returns makers of the request and response messages of
// a method that decides (nil for the others).
func decisionMessages(name string) (req, resp func() proto.Message) {
	method, ok := strings.CutPrefix(name, strings.TrimPrefix(APIPrefix, "/"))
	if !ok {
		return nil, nil
	}
	switch method {
	case "Allow":
		return func() proto.Message { return new(limiterv1.AllowRequest) }, func() proto.Message { return new(limiterv1.AllowResponse) }
	case "AllowBatch":
		return func() proto.Message { return new(limiterv1.AllowBatchRequest) }, func() proto.Message { return new(limiterv1.AllowBatchResponse) }
	case "Acquire":
		return func() proto.Message { return new(limiterv1.AcquireRequest) }, func() proto.Message { return new(limiterv1.AcquireResponse) }
	case "AcquireBatch":
		return func() proto.Message { return new(limiterv1.AcquireBatchRequest) }, func() proto.Message { return new(limiterv1.AcquireBatchResponse) }
	}
	return nil, nil
}

// teeBody keeps a copy of what is read of a request body.
type teeBody struct {
	io.ReadCloser
	buf *bytes.Buffer
}

func (b *teeBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.buf.Write(p[:n])
	return n, err
}

// statusWriter notes the status written and, when body is set, keeps a
// copy of the body.
type statusWriter struct {
	http.ResponseWriter
	status int
	body   *bytes.Buffer
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
	if w.body != nil {
		w.body.Write(p)
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
