package httpfront

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
// Wrap the Handler when mounting it (as RegisterWithMetrics does):
//
//	mux.Handle(httpfront.APIPrefix, httpfront.Metrics(m)(h))
//
// The decisions are read back from the request and response bodies of
// those four methods (kept while the call runs): their calls cost a
// second decoding of the few fields needed; other calls cost two clock
// reads and two counter adds.
func Metrics(m *reqmetrics.Metrics) func(http.Handler) http.Handler {
	var pool sync.Pool // of *capture
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			name := strings.TrimPrefix(r.URL.Path, "/")
			rw := &statusWriter{ResponseWriter: w}
			method := deciding(name)
			var c *capture
			if method != "" && r.Body != nil {
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
					if req, resp, err := decisions(method, c.req.Bytes(), c.resp.Bytes()); err == nil {
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

// RegisterWithMetrics is Register with the calls recorded in m: it mounts
// the API under APIPrefix wrapped in Metrics(m), and the OpenAPI document
// at OpenAPIPath.
func (h *Handler) RegisterWithMetrics(mux *http.ServeMux, m *reqmetrics.Metrics) {
	mux.Handle(APIPrefix, Metrics(m)(h))
	mux.HandleFunc("GET "+OpenAPIPath, serveOpenAPI)
}

// maxPooled is the largest buffer kept for another call, so one large
// batch does not pin its memory.
const maxPooled = 64 << 10

// capture holds one call's request and response bodies.
type capture struct{ req, resp bytes.Buffer }

// deciding returns the method of name when it is one that decides
// (Allow, Acquire and their batches), else "".
func deciding(name string) string {
	method, ok := strings.CutPrefix(name, strings.TrimPrefix(APIPrefix, "/"))
	if !ok {
		return ""
	}
	switch method {
	case "Allow", "Acquire", "AllowBatch", "AcquireBatch":
		return method
	}
	return ""
}

// The fields of the bodies the decisions are read from. Their JSON names
// are the same in lowerCamelCase and as in the .proto, and
// encoding/json matches them in any case, so they read every body the
// gateway accepted; encoding/json reads them several times faster than
// protojson would whole messages.
type (
	limitJSON struct {
		Token, Leaky, Fixed json.RawMessage
	}
	itemJSON struct {
		Namespace string
		Limits    []limitJSON
	}
	batchJSON  struct{ Items []itemJSON }
	answerJSON struct {
		Allowed, Acquired bool
	}
	resultsJSON struct {
		Results []struct{ Response *answerJSON }
	}
)

// decisions decodes the bodies of a call of method into the limiter.v1
// messages that reqmetrics reads, with the fields it reads set.
func decisions(method string, reqBody, respBody []byte) (proto.Message, proto.Message, error) {
	switch method {
	case "Allow":
		var q itemJSON
		var a answerJSON
		if err := decode2(reqBody, &q, respBody, &a); err != nil {
			return nil, nil, err
		}
		return allowRequest(q), &limiterv1.AllowResponse{Allowed: a.Allowed}, nil
	case "Acquire":
		var q itemJSON
		var a answerJSON
		if err := decode2(reqBody, &q, respBody, &a); err != nil {
			return nil, nil, err
		}
		return &limiterv1.AcquireRequest{Namespace: q.Namespace}, &limiterv1.AcquireResponse{Acquired: a.Acquired}, nil
	}
	var q batchJSON
	var a resultsJSON
	if err := decode2(reqBody, &q, respBody, &a); err != nil {
		return nil, nil, err
	}
	if method == "AllowBatch" {
		req := &limiterv1.AllowBatchRequest{Items: make([]*limiterv1.AllowRequest, len(q.Items))}
		for i, it := range q.Items {
			req.Items[i] = allowRequest(it)
		}
		resp := &limiterv1.AllowBatchResponse{Results: make([]*limiterv1.AllowResult, len(a.Results))}
		for i, r := range a.Results {
			resp.Results[i] = &limiterv1.AllowResult{}
			if r.Response != nil {
				resp.Results[i].Response = &limiterv1.AllowResponse{Allowed: r.Response.Allowed}
			}
		}
		return req, resp, nil
	}
	req := &limiterv1.AcquireBatchRequest{Items: make([]*limiterv1.AcquireRequest, len(q.Items))}
	for i, it := range q.Items {
		req.Items[i] = &limiterv1.AcquireRequest{Namespace: it.Namespace}
	}
	resp := &limiterv1.AcquireBatchResponse{Results: make([]*limiterv1.AcquireResult, len(a.Results))}
	for i, r := range a.Results {
		resp.Results[i] = &limiterv1.AcquireResult{}
		if r.Response != nil {
			resp.Results[i].Response = &limiterv1.AcquireResponse{Acquired: r.Response.Acquired}
		}
	}
	return req, resp, nil
}

func decode2(a []byte, va any, b []byte, vb any) error {
	if err := json.Unmarshal(a, va); err != nil {
		return err
	}
	return json.Unmarshal(b, vb)
}

// allowRequest is an Allow item with its namespace and its limits' kinds.
func allowRequest(it itemJSON) *limiterv1.AllowRequest {
	req := &limiterv1.AllowRequest{Namespace: it.Namespace, Limits: make([]*limiterv1.Limit, len(it.Limits))}
	for i, l := range it.Limits {
		req.Limits[i] = &limiterv1.Limit{}
		switch {
		case isSet(l.Token):
			req.Limits[i].Kind = &limiterv1.Limit_Token{Token: &limiterv1.TokenBucket{}}
		case isSet(l.Leaky):
			req.Limits[i].Kind = &limiterv1.Limit_Leaky{Leaky: &limiterv1.LeakyBucket{}}
		case isSet(l.Fixed):
			req.Limits[i].Kind = &limiterv1.Limit_Fixed{Fixed: &limiterv1.FixedBucket{}}
		}
	}
	return req
}

// isSet reports whether a message field was given (null is unset, as
// protojson reads it).
func isSet(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

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
