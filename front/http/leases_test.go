package httpfront

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
	"github.com/limiterd/limiterd/service"
	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

// newLeaseAPI serves the JSON API over "default" (local only) and
// "strict", synchronous over a memory store that fails on demand.
func newLeaseAPI(t *testing.T) (*httptest.Server, *memory.Faulty) {
	t.Helper()
	n, err := node.New([]node.Config{node.DefaultConfig(),
		{Name: "strict", WindowSizes: []time.Duration{time.Second}, Shared: true}}, node.SystemClock{})
	if err != nil {
		t.Fatal(err)
	}
	store := memory.NewFaulty(memory.New())
	ns, _ := n.Namespace("strict")
	sy, err := clustersync.NewSyncer(ns, clustersync.Synchronous{}, store, "test/1", clustersync.NewVersions(time.Now), clustersync.Config{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(n, sy)
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
	return srv, store
}

// badField is the field the google.rpc.BadRequest detail of an error
// answer names, or "".
func badField(out map[string]any) string {
	ds, _ := out["details"].([]any)
	if len(ds) != 1 {
		return ""
	}
	d, _ := ds[0].(map[string]any)
	vs, _ := d["fieldViolations"].([]any)
	if d["@type"] != "type.googleapis.com/google.rpc.BadRequest" || len(vs) != 1 {
		return ""
	}
	f, _ := vs[0].(map[string]any)["field"].(string)
	return f
}

func jsonTime(t *testing.T, v any) time.Time {
	t.Helper()
	s, _ := v.(string)
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Errorf("%v is not an RFC 3339 time: %v", v, err)
	}
	return tm
}

func TestLeasesJSON(t *testing.T) {
	srv, _ := newLeaseAPI(t)
	before := time.Now()
	code, out := call(t, srv, "Acquire", `{"key": "db", "limit": 1, "ttl": "60s"}`)
	lease, _ := out["lease"].(string)
	// int64 fields are strings in the proto3 JSON mapping.
	if code != 200 || out["acquired"] != true || lease == "" || out["held"] != "1" || out["retryAfter"] != nil {
		t.Fatalf("Acquire: %d %v; want 200, acquired, a lease, held \"1\", no retryAfter", code, out)
	}
	exp := jsonTime(t, out["expiresAt"])
	if exp.Before(before.Add(time.Minute)) || exp.After(time.Now().Add(time.Minute)) {
		t.Errorf("expiresAt %v, want a minute from the call", exp)
	}

	// A refusal is an answer, not an error.
	code, out = call(t, srv, "Acquire", `{"key": "db", "limit": 1, "ttl": "60s"}`)
	if got, _ := json.Marshal(out); code != 200 || out["acquired"] != false || out["lease"] != "" || out["held"] != "1" || out["retryAfter"] == nil {
		t.Errorf("Acquire at the limit: %d %s; want 200 with acquired false, held \"1\", a retryAfter", code, got)
	}

	code, out = call(t, srv, "Renew", `{"lease": "`+lease+`", "ttl": "120s"}`)
	if code != 200 || out["renewed"] != true || !jsonTime(t, out["expiresAt"]).After(exp) {
		t.Errorf("Renew: %d %v; want 200, renewed, a later expiresAt than %v", code, out, exp)
	}
	if code, out = call(t, srv, "Release", `{"lease": "`+lease+`"}`); code != 200 || out["released"] != true || out["pending"] != false {
		t.Errorf("Release: %d %v; want 200, released true, pending false", code, out)
	}
	if code, out = call(t, srv, "Release", `{"lease": "`+lease+`"}`); code != 200 || out["released"] != false {
		t.Errorf("second Release: %d %v; want 200, released false", code, out)
	}
	if code, out = call(t, srv, "Renew", `{"lease": "`+lease+`", "ttl": "1s"}`); code != 200 || out["renewed"] != false {
		t.Errorf("Renew of a released lease: %d %v; want 200, renewed false", code, out)
	}

	// Batches: an item's error is in its result.
	code, out = call(t, srv, "AcquireBatch", `{"items": [{"key": "b", "limit": 1, "ttl": "1s"}, {"key": "b", "limit": 0, "ttl": "1s"}]}`)
	rs, _ := out["results"].([]any)
	if code != 200 || len(rs) != 2 {
		t.Fatalf("AcquireBatch: %d %v; want 200 with 2 results", code, out)
	}
	first, _ := rs[0].(map[string]any)["response"].(map[string]any)
	second, _ := rs[1].(map[string]any)["error"].(map[string]any)
	if first["acquired"] != true || second["code"] != float64(3) || badField(second) != "limit" {
		t.Errorf("AcquireBatch results %v; want the first acquired, the second INVALID_ARGUMENT on limit", rs)
	}
}

func TestLeaseErrorsJSON(t *testing.T) {
	srv, store := newLeaseAPI(t)
	for _, tc := range []struct {
		method, body string
		code         int
		field        string
	}{
		{"Release", `{"lease": "not-a-lease"}`, 400, "lease"},
		{"Release", `{"lease": ""}`, 400, "lease"},
		{"Release", `{"lease": 7}`, 400, "lease"},
		{"Renew", `{"lease": "x", "ttl": "1s"}`, 400, "lease"},
		{"Acquire", `{"key": "k", "limit": 1}`, 400, "ttl"},
		{"Acquire", `{"key": "k", "limit": 1, "ttl": "soon"}`, 400, "ttl"},
		{"Acquire", `{"key": "k", "limit": 1, "ttl": "2h"}`, 400, "ttl"},
		{"Acquire", `{"key": "k", "limit": 0, "ttl": "1s"}`, 400, "limit"},
		{"Acquire", `{"namespace": "nope", "key": "k", "limit": 1, "ttl": "1s"}`, 404, ""},
		// Another node's lease of a local-only namespace: FAILED_PRECONDITION.
		{"Release", `{"lease": "` + ratelimit.LeaseID{Namespace: "default", Key: "k", Holder: 1, Serial: 1}.String() + `"}`, 400, ""},
	} {
		code, out := call(t, srv, tc.method, tc.body)
		if code != tc.code || badField(out) != tc.field || out["message"] == "" {
			t.Errorf("%s %s: %d %v; want %d naming the field %q", tc.method, tc.body, code, out, tc.code, tc.field)
		}
	}
	// A synchronous namespace whose store is down refuses: UNAVAILABLE, 503.
	store.Fail(nil)
	if code, out := call(t, srv, "Acquire", `{"namespace": "strict", "key": "k", "limit": 1, "ttl": "1s"}`); code != http.StatusServiceUnavailable || out["code"] != float64(14) {
		t.Errorf("Acquire with the store down: %d %v; want 503 with code 14 (UNAVAILABLE)", code, out)
	}
}
