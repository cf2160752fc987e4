// Package admin serves the admin API of a node, over HTTP/JSON and gRPC
// on the admin listener: the namespaces' configuration, changed through
// the owner of the running configuration (internal/live), and a
// namespace's sync now.
package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	adminv1 "github.com/limiterd/limiterd/api/proto/limiter/admin/v1"
	"github.com/limiterd/limiterd/ratelimit"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"gopkg.in/yaml.v3"

	"github.com/limiterd/limiterd/internal/config"
	"github.com/limiterd/limiterd/internal/live"
	"github.com/limiterd/limiterd/node"
	clustersync "github.com/limiterd/limiterd/sync"
)

// Owner is the running configuration the admin API changes.
type Owner interface {
	Put(ctx context.Context, nc config.NamespaceConfig) (string, error)
	Delete(ctx context.Context, name string) (string, error)
	Reload(ctx context.Context) (string, error)
	// Syncer is the namespace's syncer, nil when it is local only.
	Syncer(name string) *clustersync.Syncer
	// Namespace is the running config's entry of the namespace.
	Namespace(name string) (config.NamespaceConfig, bool)
}

// API is the admin API of one node.
type API struct {
	owner Owner
	node  *node.Node
	log   *slog.Logger
	// timeout bounds a sync or fetch now; a change waits for it too,
	// after the calls still running on a replaced namespace.
	timeout time.Duration
}

// changeTimeout bounds the wait for the calls still running on a replaced
// namespace: longer than any call.
const changeTimeout = 30 * time.Second

// New returns the admin API of the node n, whose namespaces owner
// changes; timeout bounds a sync or fetch now.
func New(owner Owner, n *node.Node, log *slog.Logger, timeout time.Duration) *API {
	return &API{owner: owner, node: n, log: log, timeout: timeout}
}

// Register serves the API on mux (HTTP/JSON) and gs (gRPC).
func (a *API) Register(mux *http.ServeMux, gs grpc.ServiceRegistrar) {
	a.registerHTTP(mux)
	adminv1.RegisterAdminServer(gs, &rpc{a: a})
}

// registerHTTP serves the namespaces' admin operations; Kong's library offers the same as calls (new, sync, fetch):
//
//	GET    /v1/namespaces              every namespace's configuration
//	PUT    /v1/namespaces/{name}       add or change one (body: its config entry, JSON or YAML)
//	DELETE /v1/namespaces/{name}       remove one
//	POST   /v1/namespaces/{name}/sync  push what this node counted, now
//	POST   /v1/namespaces/{name}/fetch read what the other nodes counted, now
//	POST   /v1/reload                  read the config file again
//
// Changes are this node's, in memory: the config file stays the source of
// truth, and the next reload or restart returns to it. A change answers
// 200 with a summary, 400 naming every invalid field, 404 for an unknown
// namespace; sync and fetch answer 409 for a local-only namespace and 503
// when the store fails.
func (a *API) registerHTTP(mux *http.ServeMux) {
	type nsInfo struct {
		Name        string   `json:"name"`
		Mode        string   `json:"mode"`
		SyncRate    float64  `json:"sync_rate"`
		Store       string   `json:"store,omitempty"`
		WindowSizes []string `json:"window_sizes"`
		ActiveKeys  int64    `json:"active_keys"`
		// Policies names the namespace's policies; Shadow is set when
		// every Allow of it is a dry run.
		Policies []string `json:"policies,omitempty"`
		Shadow   bool     `json:"shadow,omitempty"`
	}
	mux.HandleFunc("GET /v1/namespaces", func(w http.ResponseWriter, _ *http.Request) {
		out := []nsInfo{}
		for _, ns := range a.node.Namespaces() {
			c := ns.Config()
			info := nsInfo{Name: c.Name, Mode: "local", SyncRate: -1, ActiveKeys: ns.Stats().ActiveKeys,
				Policies: slices.Sorted(maps.Keys(c.Policies)), Shadow: c.Shadow}
			if nc, ok := a.owner.Namespace(c.Name); ok && nc.SyncRate != nil {
				info.SyncRate, info.Store = *nc.SyncRate, nc.Store
				if m, err := config.DecodeSyncRate(nc.SyncRate); err == nil {
					info.Mode = m.String()
				}
			}
			for _, s := range c.WindowSizes {
				info.WindowSizes = append(info.WindowSizes, ratelimit.FormatDuration(s))
			}
			out = append(out, info)
		}
		writeJSON(w, http.StatusOK, out)
	})
	change := func(w http.ResponseWriter, r *http.Request, do func(context.Context) (string, error)) {
		ctx, cancel := context.WithTimeout(r.Context(), changeTimeout+a.timeout)
		defer cancel()
		summary, err := do(ctx)
		a.answerChange(w, summary, err)
	}
	mux.HandleFunc("PUT /v1/namespaces/{name}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		nc, err := decodeNamespace(name, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		change(w, r, func(ctx context.Context) (string, error) { return a.owner.Put(ctx, nc) })
	})
	mux.HandleFunc("DELETE /v1/namespaces/{name}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		change(w, r, func(ctx context.Context) (string, error) { return a.owner.Delete(ctx, name) })
	})
	mux.HandleFunc("POST /v1/reload", func(w http.ResponseWriter, r *http.Request) {
		summary, err := a.owner.Reload(r.Context())
		a.answerChange(w, summary, err)
	})
	run := func(op func(*clustersync.Syncer, context.Context) error) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			name := r.PathValue("name")
			if _, err := a.node.Namespace(name); err != nil {
				http.Error(w, err.Error(), http.StatusNotFound)
				return
			}
			sy := a.owner.Syncer(name)
			if sy == nil {
				http.Error(w, "namespace "+name+" is local only: nothing to sync", http.StatusConflict)
				return
			}
			ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
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

// answerChange writes a change's outcome: its summary, or every error one
// a line.
func (a *API) answerChange(w http.ResponseWriter, summary string, err error) {
	if err == nil {
		a.log.Info("namespaces changed", "how", "admin", "summary", summary)
		writeJSON(w, http.StatusOK, map[string]string{"summary": summary})
		return
	}
	f := classifyChange(err)
	http.Error(w, f.msg, f.http)
}

// changeFailure is why an admin change failed, as both of its fronts say
// it: an HTTP status, a gRPC code and every error one a line.
type changeFailure struct {
	http int
	grpc codes.Code
	msg  string
}

func classifyChange(err error) changeFailure {
	f := changeFailure{http: http.StatusBadRequest, grpc: codes.InvalidArgument}
	switch {
	case isNotFound(err):
		f.http, f.grpc = http.StatusNotFound, codes.NotFound
	case errors.Is(err, live.ErrNoReload):
		f.http, f.grpc = http.StatusConflict, codes.FailedPrecondition
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		f.http, f.grpc = http.StatusServiceUnavailable, codes.Unavailable
	}
	var lines []string
	for _, e := range config.Flatten(err) {
		lines = append(lines, e.Error())
	}
	f.msg = strings.Join(lines, "\n")
	return f
}

// maxNamespaceBody bounds an admin change's body.
const maxNamespaceBody = 64 << 10

// decodeNamespace reads one namespace entry, as in the config file's
// namespaces list; JSON is YAML too. Its name, when given, must be the
// path's.
func decodeNamespace(name string, body io.Reader) (config.NamespaceConfig, error) {
	data, err := io.ReadAll(io.LimitReader(body, maxNamespaceBody+1))
	if err != nil {
		return config.NamespaceConfig{}, err
	}
	if len(data) > maxNamespaceBody {
		return config.NamespaceConfig{}, fmt.Errorf("body: at most %d bytes", maxNamespaceBody)
	}
	var nc config.NamespaceConfig
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&nc); err != nil && err != io.EOF {
		return nc, fmt.Errorf("body: %w", err)
	}
	switch nc.Name {
	case "":
		nc.Name = name
	case name:
	default:
		return nc, fmt.Errorf("name: the body names %q, the path %q", nc.Name, name)
	}
	return nc, nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func isNotFound(err error) bool {
	_, ok := errors.AsType[*live.NotFoundError](err)
	return ok
}
