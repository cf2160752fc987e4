package admin

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/config"
	"github.com/limiterd/limiterd/internal/live"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/service"
	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
	"google.golang.org/grpc"
)

// serveAdmin serves the admin API of a node running the config yaml, its
// stores all store, over HTTP/JSON.
func serveAdmin(t *testing.T, name string, store clustersync.Store, yaml string) (*node.Node, *httptest.Server) {
	t.Helper()
	cfg, err := config.ParseConfig("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(n)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	o := live.New(live.Options{Log: log, Node: n, Service: svc, Incarnation: clustersync.NewIncarnation(name),
		Versions: clustersync.NewVersions(time.Now),
		Open: func(context.Context, string, config.StoreConfig, func(string) string, *slog.Logger) (clustersync.Store, error) {
			return store, nil
		}})
	t.Cleanup(o.Stop)
	if _, err := o.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	New(o, n, log, 5*time.Second).Register(mux, grpc.NewServer())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return n, srv
}

// TestAdminNamespaces: the list, and sync and fetch now: a push makes a
// node's hits the store's at once, a fetch brings the others' to a node
// before its tick.
func TestAdminNamespaces(t *testing.T) {
	store := memory.New()
	newNode := func(name string) (*node.Node, *httptest.Server) {
		n, srv := serveAdmin(t, name, store, `
stores:
  main: {type: redis}
namespaces:
  - {name: api, window_sizes: [1m], sync_rate: 60, store: main}
  - {name: local, window_sizes: [1s], sync_rate: -1}
`)
		return n, srv
	}
	a, srvA := newNode("a")
	b, srvB := newNode("b")
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
		rs, err := ns.RateAt(ns.Now(), "k", time.Minute, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		return rs[0].Rate
	}
	nsA, _ := a.Namespace("api")
	if _, err := nsA.IncrementAt(nsA.Now(), "k", 0, 5, nil); err != nil {
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
	if len(list) != 2 || list[0].Name != "api" || list[0].Mode != "periodic" || list[1].Mode != "local" || list[0].WindowSizes[0] != "60s" {
		t.Fatalf("list: %+v", list)
	}
}
