package envoyfront

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/limiterd/limiterd/auth"
	"github.com/limiterd/limiterd/service"
)

// Config configures the front. The zero value of every field but Dir has a
// default (DefaultConfig).
type Config struct {
	// Dir holds the domain files (*.yaml, *.yml) of envoyproxy/ratelimit.
	Dir string
	// Namespace is the limiterd namespace the limits count in; its window
	// sizes must include every unit used (1s, 1m, 1h, 24h, 168h, 720h,
	// 8760h). Default
	// "default".
	Namespace string
	// StopIncrementWhenOverLimit stops counting a descriptor's hits while
	// it is over its limit (envoyproxy/ratelimit's
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT); by default refused hits
	// count too, as in envoyproxy/ratelimit.
	StopIncrementWhenOverLimit bool
	// ResponseHeaders adds LimitHeader, RemainingHeader and ResetHeader
	// to the response, from the descriptor with the least remaining
	// (envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED).
	ResponseHeaders                           bool
	LimitHeader, RemainingHeader, ResetHeader string
	// NearLimitRatio is where the near_limit metric starts (default 0.8).
	NearLimitRatio float64
	// MergeDomainConfig merges the files that define one domain, their
	// descriptors side by side (envoyproxy/ratelimit's
	// MERGE_DOMAIN_CONFIG); off, a domain in two files does not load.
	MergeDomainConfig bool
}

// DefaultConfig is the configuration without a directory.
func DefaultConfig() Config {
	return Config{Namespace: "default", LimitHeader: "x-ratelimit-limit", RemainingHeader: "x-ratelimit-remaining",
		ResetHeader: "x-ratelimit-reset", NearLimitRatio: 0.8}
}

// withDefaults fills the unset fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	for _, f := range []struct{ dst, def *string }{{&c.Namespace, &d.Namespace}, {&c.LimitHeader, &d.LimitHeader},
		{&c.RemainingHeader, &d.RemainingHeader}, {&c.ResetHeader, &d.ResetHeader}} {
		if *f.dst == "" {
			*f.dst = *f.def
		}
	}
	if c.NearLimitRatio == 0 {
		c.NearLimitRatio = d.NearLimitRatio
	}
	return c
}

// Validate checks c without reading the directory.
func (c Config) Validate() error {
	if c.Dir == "" {
		return errors.New("envoy: config_dir is required")
	}
	if c.NearLimitRatio < 0 || c.NearLimitRatio > 1 {
		return fmt.Errorf("envoy: near_limit_ratio must be in [0, 1], got %g", c.NearLimitRatio)
	}
	return nil
}

// Server serves RateLimitService over a service.Service. It is safe for
// concurrent use; Reload may run while calls are served.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer
	// svc serves the calls: reporting its decisions once
	// ObserveDecisions is called.
	svc   atomic.Pointer[service.Service]
	cfg   Config
	sizes []time.Duration
	log   *slog.Logger
	m     *metrics
	det   detailed

	rules    atomic.Pointer[rules]
	reloadMu sync.Mutex
	seen     string // the directory's signature at the last load
}

// New loads cfg.Dir and serves it over svc. A directory that does not
// load is an error. Metrics are registered with reg (nil: none).
func New(svc *service.Service, cfg Config, log *slog.Logger, reg prometheus.Registerer) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ns, err := svc.Namespace(cfg.Namespace)
	if err != nil {
		return nil, fmt.Errorf("envoy: namespace: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, sizes: ns.WindowSizes, log: log, m: newMetrics(reg)}
	s.svc.Store(svc)
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Namespace is the namespace the service counts in.
func (s *Server) Namespace() string { return s.cfg.Namespace }

// Register registers the service on a gRPC server.
func (s *Server) Register(r grpc.ServiceRegistrar) { rlsv3.RegisterRateLimitServiceServer(r, s) }

// Reload reads the directory again. When it does not load, the rules in
// force stay, the reason is logged and returned; counts are never touched.
func (s *Server) Reload() error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	sig := signature(s.cfg.Dir)
	rs, err := loadDir(s.cfg, s.sizes)
	s.seen = sig
	if err != nil {
		s.m.reloads.WithLabelValues("error").Inc()
		s.m.loaded.Set(0)
		if s.rules.Load() != nil {
			s.log.Error("envoy rules not reloaded: keeping the previous rules", "dir", s.cfg.Dir, "err", err)
		}
		return err
	}
	for _, w := range rs.warnings {
		s.log.Warn("envoy rules: a field out of place", "field", w)
	}
	s.m.install(rs)
	s.rules.Store(rs)
	s.m.reloads.WithLabelValues("ok").Inc()
	s.m.loaded.Set(1)
	s.log.Info("envoy rules loaded", "dir", s.cfg.Dir, "files", rs.files, "domains", len(rs.domains))
	return nil
}

// Watch reloads the rules whenever a rules file of the directory changes
// (its name, size or modification time, symbolic links followed), checking
// every period, until ctx ends.
func (s *Server) Watch(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.reloadMu.Lock()
		changed := signature(s.cfg.Dir) != s.seen
		s.reloadMu.Unlock()
		if changed {
			_ = s.Reload() // logged
		}
	}
}

// signature sums up the rules files of dir: names, sizes and times.
func signature(dir string) string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "error: " + err.Error()
	}
	var b strings.Builder
	for _, de := range ents {
		if !ruleFile(de.Name()) {
			continue
		}
		fi, err := os.Stat(filepath.Join(dir, de.Name()))
		if err != nil {
			fmt.Fprintf(&b, "%q:%v\n", de.Name(), err)
			continue
		}
		fmt.Fprintf(&b, "%q:%d:%d\n", de.Name(), fi.Size(), fi.ModTime().UnixNano())
	}
	return b.String()
}

// choice is what applies to one request descriptor.
type choice struct {
	r *rule // nil: none
}

// ShouldRateLimit decides every descriptor of req and answers Envoy.
//
// The caller is authorized first, before the request is looked at: one
// without a credential granted write in the namespace gets
// UNAUTHENTICATED (or PERMISSION_DENIED) whatever its domain, and learns
// nothing of the rules.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if err := s.svc.Load().Authorize(ctx, s.cfg.Namespace, auth.Write); err != nil {
		return nil, toStatus(err)
	}
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "domain: must not be empty")
	}
	ds := req.GetDescriptors()
	if len(ds) == 0 {
		return nil, status.Error(codes.InvalidArgument, "descriptors: must not be empty")
	}
	// The statuses and what they point to, cut from slabs.
	statuses := make([]rlsv3.RateLimitResponse_DescriptorStatus, len(ds))
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(ds))}
	for i := range resp.Statuses {
		statuses[i].Code = rlsv3.RateLimitResponse_OK
		resp.Statuses[i] = &statuses[i]
	}
	rs := s.rules.Load()
	root := rs.domains[req.GetDomain()]
	if root == nil {
		s.m.unknownDomain.Inc()
		return resp, nil
	}
	choices := make([]choice, len(ds))
	var replaced []string
	for i, d := range ds {
		c, err := s.choose(root, req.GetDomain(), d)
		if err != nil {
			return nil, err
		}
		choices[i] = c
		if c.r != nil {
			replaced = append(replaced, c.r.replaces...)
		}
	}
	var least *rlsv3.RateLimitResponse_DescriptorStatus
	// Descriptors over their limit not in quota mode; in quota mode, and
	// those of them over.
	var over, quota, quotaOver int
	limits := make([]rlsv3.RateLimitResponse_RateLimit, len(ds))
	resets := make([]durationpb.Duration, len(ds))
	for i, d := range ds {
		r := choices[i].r
		if r == nil || (r.name != "" && slices.Contains(replaced, r.name)) {
			continue
		}
		cost := hits(req, d)
		st := resp.Statuses[i]
		if err := s.decide(ctx, req.GetDomain(), d, r, cost, st, &limits[i], &resets[i]); err != nil {
			return nil, err
		}
		isOver := st.Code == rlsv3.RateLimitResponse_OVER_LIMIT
		switch {
		case r.quota && !r.unlimited:
			quota++
			if isOver {
				quotaOver++
			}
		case isOver:
			over++
		}
		if st.CurrentLimit != nil && (least == nil || st.LimitRemaining < least.LimitRemaining) {
			least = st
		}
	}
	// As upstream: OVER_LIMIT when a descriptor not in quota mode is, or
	// every one in quota mode is.
	if over > 0 || (quota > 0 && quotaOver == quota) {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if s.cfg.ResponseHeaders && least != nil {
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{
			{Key: s.cfg.LimitHeader, Value: strconv.FormatUint(uint64(least.CurrentLimit.RequestsPerUnit), 10)},
			{Key: s.cfg.RemainingHeader, Value: strconv.FormatUint(uint64(least.LimitRemaining), 10)},
			{Key: s.cfg.ResetHeader, Value: strconv.FormatInt(least.DurationUntilReset.GetSeconds(), 10)},
		}
	}
	return resp, nil
}

// choose finds the rule of one request descriptor: its limit override
// when it carries one, else the rule its entries match (nil for none).
func (s *Server) choose(root *rulesNode, domain string, d *ratelimitv3.RateLimitDescriptor) (choice, error) {
	leaf := root.match(d.GetEntries())
	if o := d.GetLimit(); o != nil {
		size, unit := overrideSize(o.GetUnit())
		mult := uint32(1)
		if m := o.GetUnitMultiplier(); m != nil && m.GetValue() > 1 {
			mult = m.GetValue()
		}
		size *= time.Duration(mult)
		if size == 0 || !slices.Contains(s.sizes, size) {
			return choice{}, status.Errorf(codes.InvalidArgument, "descriptors: limit override of %d × %s needs the window size %s in namespace %q",
				mult, o.GetUnit(), size, s.cfg.Namespace)
		}
		path := "override"
		if leaf != nil && leaf.path != "" {
			path = leaf.path
		}
		r := &rule{domain: domain, path: path, unit: unit, multiplier: mult, perUnit: o.GetRequestsPerUnit(), size: size}
		r.metrics = s.m.forRule(domain, path)
		return choice{r: r}, nil
	}
	if leaf == nil || leaf.limit == nil {
		s.m.unmatched.WithLabelValues(domain).Inc()
		return choice{}, nil
	}
	return choice{r: leaf.limit}, nil
}

// overrideSize maps an override's unit to a window size and unit name.
func overrideSize(u typev3.RateLimitUnit) (time.Duration, string) {
	name := strings.ToLower(u.String())
	return units[name], name
}

// hits is a descriptor's hits_addend, else the request's, else 1.
func hits(req *rlsv3.RateLimitRequest, d *ratelimitv3.RateLimitDescriptor) float64 {
	if h := d.GetHitsAddend(); h != nil {
		return float64(h.GetValue())
	}
	if h := req.GetHitsAddend(); h != 0 {
		return float64(h)
	}
	return 1
}

// decide counts cost hits of one descriptor under r and sets its status
// st, with its limit in lim and its reset in reset when it has a limit.
func (s *Server) decide(ctx context.Context, domain string, d *ratelimitv3.RateLimitDescriptor, r *rule, cost float64,
	st *rlsv3.RateLimitResponse_DescriptorStatus, lim *rlsv3.RateLimitResponse_RateLimit, reset *durationpb.Duration) error {
	m := r.metrics
	if r.detailed || r.toMetric {
		if p := r.valuePath(d.GetEntries()); p != r.path {
			m = s.det.get(s.m, r, p)
		}
	}
	m.hits.Add(cost)
	if r.unlimited {
		st.LimitRemaining = math.MaxUint32
		return nil
	}
	var dst [1]service.LimitStatus
	limits := [1]service.Limit{{Size: r.size, Limit: float64(r.perUnit)}}
	dec, err := s.svc.Load().Allow(ctx, service.AllowRequest{
		Namespace:     s.cfg.Namespace,
		Key:           counterKey(domain, d, r),
		Cost:          &cost,
		Limits:        limits[:],
		CountRejected: !s.cfg.StopIncrementWhenOverLimit,
	}, dst[:0])
	if err != nil {
		return toStatus(err)
	}
	ls := dec.Limits[0]
	lim.Name, lim.RequestsPerUnit, lim.Unit = r.name, r.perUnit, protoUnit(r.unit)
	if r.multiplier > 1 {
		lim.UnitMultiplier = wrapperspb.UInt32(r.multiplier)
	}
	reset.Seconds, reset.Nanos = int64(ls.ResetAfter/time.Second), int32(ls.ResetAfter%time.Second)
	st.CurrentLimit, st.LimitRemaining, st.DurationUntilReset = lim, remaining(ls.Remaining), reset
	switch {
	case !dec.Allowed:
		m.over.Add(cost)
		if r.shadow {
			m.shadow.Add(cost)
		} else {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	case ls.Rate > s.cfg.NearLimitRatio*float64(r.perUnit):
		m.near.Add(cost)
	default:
		m.within.Add(cost)
	}
	return nil
}

// protoUnit is a unit's name in the response.
func protoUnit(unit string) rlsv3.RateLimitResponse_RateLimit_Unit {
	return rlsv3.RateLimitResponse_RateLimit_Unit(rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(unit)])
}

// counterKey is the counter of a request descriptor under r: the domain
// and every entry's key and value, each length-prefixed, so the encoding
// is injective whatever bytes they hold. At a share_threshold level of r,
// the wildcard value, marked "*", stands for the request's: every value it
// matches counts in one counter.
func counterKey(domain string, d *ratelimitv3.RateLimitDescriptor, r *rule) string {
	n := len(domain) + 4
	for _, e := range d.GetEntries() {
		n += len(e.GetKey()) + len(e.GetValue()) + 8
	}
	b := make([]byte, 0, n)
	put := func(s string) {
		b = strconv.AppendInt(b, int64(len(s)), 10)
		b = append(b, ':')
		b = append(b, s...)
	}
	put(domain)
	for i, e := range d.GetEntries() {
		put(e.GetKey())
		if r != nil && r.shared && r.levels[i].share {
			b = append(b, '*')
			put(r.levels[i].value)
			continue
		}
		put(e.GetValue())
	}
	return string(b)
}

// toStatus maps a service error to a gRPC status: the front's one error
// mapping.
func toStatus(err error) error {
	var fe *service.FieldError
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	case errors.Is(err, service.ErrUnauthenticated):
		return status.Error(codes.Unauthenticated, err.Error())
	case errors.Is(err, service.ErrPermissionDenied):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, service.ErrKeyLimit):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, service.ErrUnknownNamespace):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.As(err, &fe):
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return status.Error(codes.Unavailable, err.Error())
}
