package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	adminv1 "github.com/limiterd/limiterd/api/proto/limiter/admin/v1"
	clustersync "github.com/limiterd/limiterd/sync"
)

// adminRPC serves the admin API over gRPC on the admin listener: the same
// operations as adminNamespaces, through the same daemon methods.
type adminRPC struct {
	adminv1.UnimplementedAdminServer
	d       *daemon
	timeout time.Duration
}

// grpcOrHTTP sends gRPC requests to gs and the others to h: one listener
// serves both, gRPC over HTTP/2 (h2c without TLS).
func grpcOrHTTP(gs *grpc.Server, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			gs.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (a *adminRPC) ListNamespaces(context.Context, *adminv1.ListNamespacesRequest) (*adminv1.ListNamespacesResponse, error) {
	out := &adminv1.ListNamespacesResponse{}
	for _, ns := range a.d.node.Namespaces() {
		c := ns.Config()
		p := &adminv1.Namespace{Name: c.Name, SyncRate: &c.SyncRate, Store: c.Store, MaxKeys: int64(c.MaxKeys),
			OnFull: string(c.OnFull), MaxLeaseTtl: durationpb.New(c.MaxLeaseTTL), OnStoreDown: string(c.OnStoreDown), ActiveKeys: ns.ActiveKeys()}
		for _, s := range c.WindowSizes {
			p.WindowSizes = append(p.WindowSizes, durationpb.New(s))
		}
		if c.Estimator != nil {
			p.Estimator = &adminv1.Estimator{Hashes: int32(c.Estimator.Hashes), Slots: int32(c.Estimator.Slots)}
		}
		if sy := a.d.syncer(c.Name); sy != nil && !sy.Escalates() && c.SyncRate > 0 {
			p.Escalate = "never"
		}
		out.Namespaces = append(out.Namespaces, p)
	}
	return out, nil
}

// namespaceConfig is p as a config file entry.
func namespaceConfig(p *adminv1.Namespace) NamespaceConfig {
	nc := NamespaceConfig{Name: p.GetName(), SyncRate: p.SyncRate, Store: p.GetStore(), MaxKeys: int(p.GetMaxKeys()),
		OnFull: p.GetOnFull(), Escalate: p.GetEscalate(), OnStoreDown: p.GetOnStoreDown()}
	for _, d := range p.GetWindowSizes() {
		nc.WindowSizes = append(nc.WindowSizes, Duration(d.AsDuration()))
	}
	if p.MaxLeaseTtl != nil {
		nc.MaxLeaseTTL = Duration(p.GetMaxLeaseTtl().AsDuration())
	}
	if e := p.GetEstimator(); e != nil {
		nc.Estimator = &EstimatorConfig{Hashes: int(e.GetHashes()), Slots: int(e.GetSlots())}
	}
	return nc
}

func (a *adminRPC) PutNamespace(ctx context.Context, req *adminv1.PutNamespaceRequest) (*adminv1.ChangeResponse, error) {
	nc := namespaceConfig(req.GetNamespace())
	return a.change(ctx, func(cfg *Config) error {
		if i := slices.IndexFunc(cfg.Namespaces, func(n NamespaceConfig) bool { return n.Name == nc.Name }); i >= 0 {
			cfg.Namespaces[i] = nc
		} else {
			cfg.Namespaces = append(cfg.Namespaces, nc)
		}
		return nil
	})
}

func (a *adminRPC) DeleteNamespace(ctx context.Context, req *adminv1.DeleteNamespaceRequest) (*adminv1.ChangeResponse, error) {
	return a.change(ctx, func(cfg *Config) error {
		i := slices.IndexFunc(cfg.Namespaces, func(n NamespaceConfig) bool { return n.Name == req.GetName() })
		if i < 0 {
			return errNotFound{fmt.Sprintf("namespace %q is not configured", req.GetName())}
		}
		cfg.Namespaces = slices.Delete(cfg.Namespaces, i, i+1)
		return nil
	})
}

func (a *adminRPC) Reload(ctx context.Context, _ *adminv1.ReloadRequest) (*adminv1.ChangeResponse, error) {
	summary, err := a.d.reload(ctx)
	return a.answer(summary, err)
}

func (a *adminRPC) change(ctx context.Context, edit func(*Config) error) (*adminv1.ChangeResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, rerouteTimeout+a.timeout)
	defer cancel()
	summary, err := a.d.update(ctx, edit)
	return a.answer(summary, err)
}

// answer is a change's outcome as gRPC's (classifyChange).
func (a *adminRPC) answer(summary string, err error) (*adminv1.ChangeResponse, error) {
	if err == nil {
		a.d.log.Info("namespaces changed", "how", "admin", "summary", summary)
		return &adminv1.ChangeResponse{Summary: summary}, nil
	}
	f := classifyChange(err)
	return nil, status.Error(f.grpc, f.msg)
}

func (a *adminRPC) Sync(ctx context.Context, req *adminv1.NamespaceRequest) (*adminv1.SyncResponse, error) {
	return a.run(ctx, req.GetName(), (*clustersync.Syncer).Flush)
}

func (a *adminRPC) Fetch(ctx context.Context, req *adminv1.NamespaceRequest) (*adminv1.SyncResponse, error) {
	return a.run(ctx, req.GetName(), (*clustersync.Syncer).Fetch)
}

func (a *adminRPC) run(ctx context.Context, name string, op func(*clustersync.Syncer, context.Context) error) (*adminv1.SyncResponse, error) {
	if _, err := a.d.node.Namespace(name); err != nil {
		return nil, status.Error(codes.NotFound, err.Error())
	}
	sy := a.d.syncer(name)
	if sy == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "namespace %q is local only: nothing to sync", name)
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	if err := op(sy, ctx); err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return &adminv1.SyncResponse{}, nil
}
