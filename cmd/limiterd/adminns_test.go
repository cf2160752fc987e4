package main

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

// TestAdminNamespaces: the list, and sync and fetch now: a push makes a
// node's hits the store's at once, a fetch brings the others' to a node
// before its tick.
func TestAdminNamespaces(t *testing.T) {
	store := memory.New()
	newNode := func(name string) (*node.Node, map[string]*clustersync.Syncer, *httptest.Server) {
		n, err := node.New([]node.Config{
			{Name: "api", WindowSizes: []time.Duration{time.Minute}, SyncRate: 60, Store: "main"},
			{Name: "local", WindowSizes: []time.Duration{time.Second}, SyncRate: -1},
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ns, _ := n.Namespace("api")
		sy, err := clustersync.NewSyncer(ns, store, clustersync.NewIncarnation(name), clustersync.NewVersions(time.Now), clustersync.Config{}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		syncers := map[string]*clustersync.Syncer{"api": sy}
		d := &daemon{node: n, log: slog.New(slog.DiscardHandler), syncers: map[string]*liveSyncer{"api": {s: sy}}}
		mux := http.NewServeMux()
		d.adminNamespaces(mux, 5*time.Second)
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		return n, syncers, srv
	}
	a, _, srvA := newNode("a")
	b, _, srvB := newNode("b")
	post := func(srv *httptest.Server, path string) int {
		t.Helper()
		resp, err := http.Post(srv.URL+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	rate := func(n *node.Node) float64 {
		t.Helper()
		ns, _ := n.Namespace("api")
		rs, err := ns.Rate("k", time.Minute, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		return rs[0].Rate
	}
	nsA, _ := a.Namespace("api")
	if _, err := nsA.Increment("k", 0, 5, nil); err != nil {
		t.Fatal(err)
	}
	// b reads k once, so that k is in its interest set.
	if got := rate(b); got != 0 {
		t.Fatalf("b before any sync: %v", got)
	}
	for path, want := range map[string]int{
		"/v1/namespaces/api/sync":   http.StatusOK,
		"/v1/namespaces/local/sync": http.StatusConflict,
		"/v1/namespaces/nope/sync":  http.StatusNotFound,
	} {
		if got := post(srvA, path); got != want {
			t.Errorf("POST %s: %d, want %d", path, got, want)
		}
	}
	if got := post(srvB, "/v1/namespaces/api/fetch"); got != http.StatusOK {
		t.Fatalf("fetch: %d", got)
	}
	if got := rate(b); got < 4.9 || got > 5 {
		t.Fatalf("b after a's sync and its own fetch: rate %v, want about 5", got)
	}
	resp, err := http.Get(srvA.URL + "/v1/namespaces")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list []struct {
		Name, Mode  string
		WindowSizes []string `json:"window_sizes"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "api" || list[0].Mode != "periodic" || list[1].Mode != "local" || list[0].WindowSizes[0] != "1m0s" {
		t.Fatalf("list: %+v", list)
	}
}
