package httpfront

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/service"
)

// newTestAPI serves the JSON API over the default namespace (windows 1s
// and 60s, local only) on a test server.
func newTestAPI(t *testing.T) (*Handler, *httptest.Server) {
	t.Helper()
	return newTestAPIAt(t, node.SystemClock{})
}

// newTestAPIAt is newTestAPI on the clock clk.
func newTestAPIAt(t *testing.T, clk node.Clock) (*Handler, *httptest.Server) {
	t.Helper()
	n, err := node.New([]node.Config{node.DefaultConfig()}, clk)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(n)
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(svc)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	h.Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return h, srv
}

// call POSTs body to method and returns the status and the decoded answer.
func call(t *testing.T, srv *httptest.Server, method, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(srv.URL+APIPrefix+method, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q, want application/json", method, body, ct)
	}
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("%s %s: answer not JSON: %v", method, body, err)
	}
	return resp.StatusCode, out
}

func TestOpenAPIListsEveryRPC(t *testing.T) {
	_, srv := newTestAPI(t)
	resp, err := http.Get(srv.URL + OpenAPIPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Swagger string                                `json:"swagger"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || doc.Swagger != "2.0" {
		t.Fatalf("GET %s: %d, swagger %q; want 200, 2.0", OpenAPIPath, resp.StatusCode, doc.Swagger)
	}
	desc := limiterv1.RateLimiter_ServiceDesc
	if want := "/" + desc.ServiceName + "/"; APIPrefix != want {
		t.Errorf("APIPrefix = %q, want %q", APIPrefix, want)
	}
	for _, m := range desc.Methods {
		path := "/" + desc.ServiceName + "/" + m.MethodName
		if _, ok := doc.Paths[path]["post"]; !ok {
			t.Errorf("the OpenAPI document has no POST %s", path)
		}
		// And it is served.
		if code, out := call(t, srv, m.MethodName, `{}`); code == http.StatusNotFound && out["message"] == "Not Found" {
			t.Errorf("POST %s: not routed", path)
		}
	}
	if len(doc.Paths) != len(desc.Methods) {
		t.Errorf("the OpenAPI document has %d paths, want one per RPC (%d)", len(doc.Paths), len(desc.Methods))
	}
}

func TestAnswers(t *testing.T) {
	// A clock that stands still: bob's two calls fall in one second.
	_, srv := newTestAPIAt(t, fakeclock.New(time.Unix(1_700_000_000, 0)))
	code, out := call(t, srv, "Increment", `{"key": "bob"}`)
	if got, _ := json.Marshal(out); code != 200 || string(got) != `{"rates":[{"rate":1,"windowSize":"1s"},{"rate":1,"windowSize":"60s"}]}` {
		t.Errorf("Increment: %d %s", code, got)
	}
	code, out = call(t, srv, "SlidingWindow", `{"key": "bob", "curDiff": 2}`)
	if got, _ := json.Marshal(out); code != 200 || string(got) != `{"rates":[{"rate":3,"windowSize":"1s"},{"rate":3,"windowSize":"60s"}]}` {
		t.Errorf("SlidingWindow: %d %s", code, got)
	}
	allow := `{"key": "carol", "limits": [{"window_size": "60s", "limit": 1}]}`
	if code, out = call(t, srv, "Allow", allow); code != 200 || out["allowed"] != true {
		t.Errorf("Allow: %d %v, want 200 allowed", code, out)
	}
	// A refusal is an answer: 200, allowed false, a retry-after.
	if code, out = call(t, srv, "Allow", allow); code != 200 || out["allowed"] != false || out["retryAfter"] == nil {
		t.Errorf("Allow over the limit: %d %v, want 200 with allowed false and retryAfter", code, out)
	}
	// A reset of a bucket (JSON names as the API's) answers no rates, and
	// the bucket admits again.
	fixed := `{"key": "dave", "limits": [{"fixed": {"limit": 1, "period": "3600s"}}]}`
	call(t, srv, "Allow", fixed)
	if code, out = call(t, srv, "Reset", `{"key": "dave", "buckets": [{"fixed": {"limit": 1, "period": "3600s"}}], "leases": true}`); code != 200 || len(func() []any { rs, _ := out["rates"].([]any); return rs }()) != 0 || out["rates"] == nil {
		t.Errorf("Reset of a bucket and leases: %d %v, want 200 with no rates", code, out)
	}
	if code, out = call(t, srv, "Allow", fixed); code != 200 || out["allowed"] != true {
		t.Errorf("Allow after the reset: %d %v, want 200 allowed", code, out)
	}
}

func TestErrors(t *testing.T) {
	_, srv := newTestAPI(t)
	for _, tc := range []struct {
		method, body string
		code         int
		field        string // of the BadRequest detail; "" for none
	}{
		{"Increment", `{"key": ""}`, 400, "key"},
		{"Increment", `{"key": 5}`, 400, "key"},
		{"Increment", `{"key": "k", "kee": 1}`, 400, "kee"},
		{"Increment", `{"key": "k", "window_size": "soon"}`, 400, "window_size"},
		{"Allow", `{"key": "k", "limits": [{"window_size": "1s", "limit": 1}, {"windowSize": "x"}]}`, 400, "limits[1].window_size"},
		{"IncrementBatch", `{"items": [{"key": "k"}, {"key": "k", "at": "yesterday"}]}`, 400, "items[1].at"},
		{"Reset", `{"key": "k", "buckets": [{"windowSize": "1s", "limit": 1}]}`, 400, "buckets[0]"},
		{"Reset", `{"key": "k", "buckets": [{"fixed": {"limit": 1, "period": "0s"}}]}`, 400, "buckets[0].fixed.period"},
		{"Increment", `{"key": `, 400, ""},
		{"Increment", ``, 400, ""},
		{"Increment", `{"namespace": "nope", "key": "k"}`, 404, ""},
		{"Nope", `{}`, 404, ""},
	} {
		code, out := call(t, srv, tc.method, tc.body)
		field := ""
		if ds, _ := out["details"].([]any); len(ds) == 1 {
			d, _ := ds[0].(map[string]any)
			if vs, _ := d["fieldViolations"].([]any); d["@type"] == "type.googleapis.com/google.rpc.BadRequest" && len(vs) == 1 {
				field, _ = vs[0].(map[string]any)["field"].(string)
			}
		}
		if code != tc.code || field != tc.field || out["message"] == "" {
			t.Errorf("%s %s: %d %v; want %d with the field %q named", tc.method, tc.body, code, out, tc.code, tc.field)
		}
	}
}

func TestRequestLimits(t *testing.T) {
	_, srv := newTestAPI(t)
	big := bytes.Repeat([]byte(" "), MaxRequestBytes+1)
	// With a Content-Length, and chunked (the size known only by reading).
	for _, r := range []*http.Request{
		httptest.NewRequest(http.MethodPost, srv.URL+APIPrefix+"Increment", bytes.NewReader(big)),
		httptest.NewRequest(http.MethodPost, srv.URL+APIPrefix+"Increment", struct{ *bytes.Reader }{bytes.NewReader(big)}),
	} {
		r.RequestURI = ""
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("a body of %d bytes (Content-Length %d): %d, want 413", len(big), r.ContentLength, resp.StatusCode)
		}
	}
	resp, err := http.Get(srv.URL + APIPrefix + "Increment")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
		t.Errorf("GET: %d, Allow %q; want 405, POST", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

func TestShutdown(t *testing.T) {
	h, srv := newTestAPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	h.Shutdown(ctx)
	if ctx.Err() != nil {
		t.Fatal("Shutdown with no call running did not return at once")
	}
	if code, out := call(t, srv, "Increment", `{"key": "k"}`); code != http.StatusServiceUnavailable {
		t.Errorf("a call after Shutdown: %d %v, want 503", code, out)
	}
}
