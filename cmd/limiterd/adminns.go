package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"gopkg.in/yaml.v3"

	clustersync "github.com/limiterd/limiterd/sync"
)

// adminNamespaces serves the namespaces' admin operations on the admin
// listener; Kong's library offers the same as calls (new, sync, fetch):
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
func (d *daemon) adminNamespaces(mux *http.ServeMux, timeout time.Duration) {
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
		for _, ns := range d.node.Namespaces() {
			c := ns.Config()
			info := nsInfo{Name: c.Name, Mode: c.Mode().String(), SyncRate: c.SyncRate, Store: c.Store, ActiveKeys: ns.ActiveKeys()}
			for _, s := range c.WindowSizes {
				info.WindowSizes = append(info.WindowSizes, s.String())
			}
			out = append(out, info)
		}
		writeJSON(w, http.StatusOK, out)
	})
	change := func(w http.ResponseWriter, r *http.Request, edit func(*Config) error) {
		ctx, cancel := context.WithTimeout(r.Context(), rerouteTimeout+timeout)
		defer cancel()
		summary, err := d.update(ctx, edit)
		d.answerChange(w, summary, err)
	}
	mux.HandleFunc("PUT /v1/namespaces/{name}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		nc, err := decodeNamespace(name, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		change(w, r, func(cfg *Config) error {
			if i := slices.IndexFunc(cfg.Namespaces, func(n NamespaceConfig) bool { return n.Name == name }); i >= 0 {
				cfg.Namespaces[i] = nc
			} else {
				cfg.Namespaces = append(cfg.Namespaces, nc)
			}
			return nil
		})
	})
	mux.HandleFunc("DELETE /v1/namespaces/{name}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		change(w, r, func(cfg *Config) error {
			i := slices.IndexFunc(cfg.Namespaces, func(n NamespaceConfig) bool { return n.Name == name })
			if i < 0 {
				return errNotFound{fmt.Sprintf("namespace %q is not configured", name)}
			}
			cfg.Namespaces = slices.Delete(cfg.Namespaces, i, i+1)
			return nil
		})
	})
	mux.HandleFunc("POST /v1/reload", func(w http.ResponseWriter, r *http.Request) {
		summary, err := d.reload(r.Context())
		d.answerChange(w, summary, err)
	})
	run := func(op func(*clustersync.Syncer, context.Context) error) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			name := r.PathValue("name")
			if _, err := d.node.Namespace(name); err != nil {
				http.Error(w, err.Error(), http.StatusNotFound)
				return
			}
			sy := d.syncer(name)
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

// errNotFound is an admin change naming what does not exist.
type errNotFound struct{ msg string }

func (e errNotFound) Error() string { return e.msg }

// answerChange writes a change's outcome: its summary, or every error one
// a line.
func (d *daemon) answerChange(w http.ResponseWriter, summary string, err error) {
	if err == nil {
		d.log.Info("namespaces changed", "how", "admin", "summary", summary)
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
	var nf errNotFound
	switch {
	case errors.As(err, &nf):
		f.http, f.grpc = http.StatusNotFound, codes.NotFound
	case errors.Is(err, errNoReload):
		f.http, f.grpc = http.StatusConflict, codes.FailedPrecondition
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		f.http, f.grpc = http.StatusServiceUnavailable, codes.Unavailable
	}
	var lines []string
	for _, e := range flatten(err) {
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
func decodeNamespace(name string, body io.Reader) (NamespaceConfig, error) {
	data, err := io.ReadAll(io.LimitReader(body, maxNamespaceBody+1))
	if err != nil {
		return NamespaceConfig{}, err
	}
	if len(data) > maxNamespaceBody {
		return NamespaceConfig{}, fmt.Errorf("body: at most %d bytes", maxNamespaceBody)
	}
	var nc NamespaceConfig
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
