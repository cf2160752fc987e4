package admin

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	adminv1 "github.com/limiterd/limiterd/api/proto/limiter/admin/v1"
	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/internal/config"
	"github.com/limiterd/limiterd/ratelimit"
	clustersync "github.com/limiterd/limiterd/sync"
)

// rpc serves the admin API over gRPC: the same operations as over
// HTTP/JSON, through the same owner.
type rpc struct {
	adminv1.UnimplementedAdminServer
	a *API
}

func (r *rpc) ListNamespaces(context.Context, *adminv1.ListNamespacesRequest) (*adminv1.ListNamespacesResponse, error) {
	out := &adminv1.ListNamespacesResponse{}
	for _, ns := range r.a.node.Namespaces() {
		c := ns.Config()
		p := &adminv1.Namespace{Name: c.Name, MaxKeys: int64(c.MaxKeys),
			OnFull: string(c.OnFull), MaxLeaseTtl: durationpb.New(c.MaxLeaseTTL), OnStoreDown: string(clustersync.StoreDownRefuse), ActiveKeys: ns.Stats().ActiveKeys}
		if nc, ok := r.a.owner.Namespace(c.Name); ok {
			p.SyncRate, p.Store = nc.SyncRate, nc.Store
			if nc.OnStoreDown != "" {
				p.OnStoreDown = nc.OnStoreDown
			}
		}
		for _, s := range c.WindowSizes {
			p.WindowSizes = append(p.WindowSizes, durationpb.New(s))
		}
		if c.Estimator != nil {
			p.Estimator = &adminv1.Estimator{Hashes: int32(c.Estimator.Hashes), Slots: int32(c.Estimator.Slots)}
		}
		p.Shadow = c.Shadow
		if len(c.Policies) > 0 {
			p.Policies = make(map[string]*adminv1.Policy, len(c.Policies))
			for name, pol := range c.Policies {
				ap := &adminv1.Policy{Shadow: pol.Shadow}
				for _, l := range pol.Limits {
					ap.Limits = append(ap.Limits, apiLimit(l))
				}
				p.Policies[name] = ap
			}
		}
		if sy := r.a.owner.Syncer(c.Name); sy != nil && !sy.Escalates() && sy.Mode() != (clustersync.Synchronous{}) {
			p.Escalate = "never"
		}
		out.Namespaces = append(out.Namespaces, p)
	}
	return out, nil
}

// namespaceConfig is p as a config file entry.
func namespaceConfig(p *adminv1.Namespace) config.NamespaceConfig {
	nc := config.NamespaceConfig{Name: p.GetName(), SyncRate: p.SyncRate, Store: p.GetStore(), MaxKeys: int(p.GetMaxKeys()),
		OnFull: p.GetOnFull(), Escalate: p.GetEscalate(), OnStoreDown: p.GetOnStoreDown()}
	for _, d := range p.GetWindowSizes() {
		nc.WindowSizes = append(nc.WindowSizes, config.Duration(d.AsDuration()))
	}
	if p.MaxLeaseTtl != nil {
		nc.MaxLeaseTTL = config.Duration(p.GetMaxLeaseTtl().AsDuration())
	}
	if e := p.GetEstimator(); e != nil {
		nc.Estimator = &config.EstimatorConfig{Hashes: int(e.GetHashes()), Slots: int(e.GetSlots())}
	}
	nc.Shadow = p.GetShadow()
	if len(p.GetPolicies()) > 0 {
		nc.Policies = make(map[string]config.PolicyConfig, len(p.GetPolicies()))
		for name, ap := range p.GetPolicies() {
			pc := config.PolicyConfig{Shadow: ap.GetShadow()}
			for _, l := range ap.GetLimits() {
				pc.Limits = append(pc.Limits, limitConfig(l))
			}
			nc.Policies[name] = pc
		}
	}
	return nc
}

// limitConfig is an API limit as a policy's config entry.
func limitConfig(l *limiterv1.Limit) config.LimitConfig {
	lc := config.LimitConfig{Limit: l.GetLimit()}
	if l.WindowSize != nil {
		lc.WindowSize = config.Duration(l.GetWindowSize().AsDuration())
	}
	switch k := l.GetKind().(type) {
	case *limiterv1.Limit_Token:
		lc.Token = &config.TokenBucketConfig{Max: k.Token.GetMax(), RefillTime: config.Duration(k.Token.GetRefillTime().AsDuration()),
			RefillAmount: k.Token.GetRefillAmount(), Strict: k.Token.GetStrict()}
	case *limiterv1.Limit_Leaky:
		lc.Leaky = &config.LeakyBucketConfig{Size: k.Leaky.GetSize(), Interval: config.Duration(k.Leaky.GetInterval().AsDuration()),
			WaitTimeout: config.Duration(k.Leaky.GetWaitTimeout().AsDuration())}
	case *limiterv1.Limit_Fixed:
		lc.Fixed = &config.FixedBucketConfig{Period: config.Duration(k.Fixed.GetPeriod().AsDuration()), Limit: k.Fixed.GetLimit()}
	}
	return lc
}

// apiLimit is a policy's limit as the API writes it.
func apiLimit(l ratelimit.Limit) *limiterv1.Limit {
	switch l.Kind {
	case ratelimit.TokenLimit:
		amount := l.Token.RefillAmount
		return &limiterv1.Limit{Kind: &limiterv1.Limit_Token{Token: &limiterv1.TokenBucket{Max: l.Token.Max,
			RefillTime: durationpb.New(l.Token.RefillTime), RefillAmount: &amount, Strict: l.Strict}}}
	case ratelimit.LeakyLimit:
		lb := &limiterv1.LeakyBucket{Size: l.Leaky.Size, Interval: durationpb.New(l.Leaky.Interval)}
		if l.WaitTimeout > 0 {
			lb.WaitTimeout = durationpb.New(l.WaitTimeout)
		}
		return &limiterv1.Limit{Kind: &limiterv1.Limit_Leaky{Leaky: lb}}
	case ratelimit.FixedLimit:
		return &limiterv1.Limit{Kind: &limiterv1.Limit_Fixed{Fixed: &limiterv1.FixedBucket{Period: durationpb.New(l.Fixed.Period), Limit: l.Fixed.Limit}}}
	}
	return &limiterv1.Limit{WindowSize: durationpb.New(l.Size), Limit: l.Limit}
}

func (r *rpc) PutNamespace(ctx context.Context, req *adminv1.PutNamespaceRequest) (*adminv1.ChangeResponse, error) {
	nc := namespaceConfig(req.GetNamespace())
	return r.change(ctx, func(ctx context.Context) (string, error) { return r.a.owner.Put(ctx, nc) })
}

func (r *rpc) DeleteNamespace(ctx context.Context, req *adminv1.DeleteNamespaceRequest) (*adminv1.ChangeResponse, error) {
	return r.change(ctx, func(ctx context.Context) (string, error) { return r.a.owner.Delete(ctx, req.GetName()) })
}

func (r *rpc) Reload(ctx context.Context, _ *adminv1.ReloadRequest) (*adminv1.ChangeResponse, error) {
	summary, err := r.a.owner.Reload(ctx)
	return r.answer(summary, err)
}

func (r *rpc) change(ctx context.Context, do func(context.Context) (string, error)) (*adminv1.ChangeResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, changeTimeout+r.a.timeout)
	defer cancel()
	summary, err := do(ctx)
	return r.answer(summary, err)
}

// answer is a change's outcome as gRPC's (classifyChange).
func (r *rpc) answer(summary string, err error) (*adminv1.ChangeResponse, error) {
	if err == nil {
		r.a.log.Info("namespaces changed", "how", "admin", "summary", summary)
		return &adminv1.ChangeResponse{Summary: summary}, nil
	}
	f := classifyChange(err)
	return nil, status.Error(f.grpc, f.msg)
}

func (r *rpc) Sync(ctx context.Context, req *adminv1.NamespaceRequest) (*adminv1.SyncResponse, error) {
	return r.run(ctx, req.GetName(), (*clustersync.Syncer).Flush)
}

func (r *rpc) Fetch(ctx context.Context, req *adminv1.NamespaceRequest) (*adminv1.SyncResponse, error) {
	return r.run(ctx, req.GetName(), (*clustersync.Syncer).Fetch)
}

func (r *rpc) run(ctx context.Context, name string, op func(*clustersync.Syncer, context.Context) error) (*adminv1.SyncResponse, error) {
	if _, err := r.a.node.Namespace(name); err != nil {
		return nil, status.Error(codes.NotFound, err.Error())
	}
	sy := r.a.owner.Syncer(name)
	if sy == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "namespace %q is local only: nothing to sync", name)
	}
	ctx, cancel := context.WithTimeout(ctx, r.a.timeout)
	defer cancel()
	if err := op(sy, ctx); err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return &adminv1.SyncResponse{}, nil
}
