package main

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/limiterd/limiterd/node"
	clustersync "github.com/limiterd/limiterd/sync"
)

// adminNamespaces serves the namespaces' admin operations on the admin
// listener, as Kong's library exposes them:
//
//	GET  /v1/namespaces              every namespace's configuration
//	POST /v1/namespaces/{name}/sync  push what this node counted, now
//	POST /v1/namespaces/{name}/fetch read what the other nodes counted, now
//
// sync and fetch answer 404 for an unknown namespace and 409 for a local
// only one (nothing to sync), 503 when the store fails.
func adminNamespaces(mux *http.ServeMux, n *node.Node, syncers map[string]*clustersync.Syncer, timeout time.Duration) {
	type nsInfo struct {
		Name        string   `json:"name"`
		Mode        string   `json:"mode"`
		SyncRate    float64  `json:"sync_rate"`
		Store       string   `json:"store,omitempty"`
		WindowSizes []string `json:"window_sizes"`
		ActiveKeys  int64    `json:"active_keys"`
	}
	mux.HandleFunc("GET /v1/namespaces", func(w http.ResponseWriter, _ *http.Request) {
		out := []nsInfo{}
		for _, ns := range n.Namespaces() {
			c := ns.Config()
			info := nsInfo{Name: c.Name, Mode: c.Mode().String(), SyncRate: c.SyncRate, Store: c.Store, ActiveKeys: ns.ActiveKeys()}
			for _, s := range c.WindowSizes {
				info.WindowSizes = append(info.WindowSizes, s.String())
			}
			out = append(out, info)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
	run := func(op func(*clustersync.Syncer, context.Context) error) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			name := r.PathValue("name")
			if _, err := n.Namespace(name); err != nil {
				http.Error(w, err.Error(), http.StatusNotFound)
				return
			}
			sy := syncers[name]
			if sy == nil {
				http.Error(w, "namespace "+name+" is local only: nothing to sync", http.StatusConflict)
				return
			}
			ctx, cancel := context.WithTimeout(r.Context(), timeout)
			defer cancel()
			if err := op(sy, ctx); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			w.Write([]byte("ok\n"))
		}
	}
	mux.HandleFunc("POST /v1/namespaces/{name}/sync", run((*clustersync.Syncer).Flush))
	mux.HandleFunc("POST /v1/namespaces/{name}/fetch", run((*clustersync.Syncer).Fetch))
}
