package middleware

import (
	"context"
	"math"
	"strconv"
	"strings"
	"time"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/client"
)

// Allower decides whether a request is admitted; *client.Client is one. It
// is called concurrently and must honour ctx.
type Allower interface {
	Allow(ctx context.Context, req *limiterv1.AllowRequest) client.Decision
}

// Option configures the middleware or the interceptor.
type Option func(*limiter)

// WithNamespace sets the limiterd namespace (default: limiterd's default).
func WithNamespace(ns string) Option { return func(l *limiter) { l.namespace = ns } }

// WithLimits sets the limits every request is checked against (default:
// 100 per minute, a sliding window).
func WithLimits(limits ...*limiterv1.Limit) Option {
	return func(l *limiter) { l.limits = limits }
}

// WithCost sets what one request takes (default 1).
func WithCost(cost float64) Option { return func(l *limiter) { l.cost = &cost } }

// WithPolicyName names the limits in the rate-limit headers: the first is
// name, the others name-1, name-2, ... (default "default").
func WithPolicyName(name string) Option { return func(l *limiter) { l.name = name } }

// WithRateLimitedFor adds Sidekiq's X-Rate-Limited-For to refusals.
func WithRateLimitedFor() Option { return func(l *limiter) { l.limitedFor = true } }

// limiter is what the middleware and the interceptor share: the request to
// limiterd and the headers of its answer.
type limiter struct {
	a          Allower
	namespace  string
	limits     []*limiterv1.Limit
	cost       *float64
	name       string
	limitedFor bool

	names  []string // the policy name of each limit
	policy string   // the RateLimit-Policy value
}

func newLimiter(a Allower, opts []Option) *limiter {
	l := &limiter{a: a, name: "default", limits: []*limiterv1.Limit{client.Window(100, time.Minute)}}
	for _, o := range opts {
		o(l)
	}
	var policy []string
	for i, lim := range l.limits {
		name := l.name
		if i > 0 {
			name += "-" + strconv.Itoa(i)
		}
		name = strconv.Quote(name)
		l.names = append(l.names, name)
		q, w := quota(lim)
		policy = append(policy, name+";q="+strconv.FormatInt(int64(q), 10)+";w="+seconds(w))
	}
	l.policy = strings.Join(policy, ", ")
	return l
}

// quota is a limit's capacity and the time it refers to.
func quota(l *limiterv1.Limit) (float64, time.Duration) {
	switch {
	case l.GetToken() != nil:
		return l.GetToken().GetMax(), l.GetToken().GetRefillTime().AsDuration()
	case l.GetLeaky() != nil:
		return l.GetLeaky().GetSize(), l.GetLeaky().GetInterval().AsDuration()
	case l.GetFixed() != nil:
		return l.GetFixed().GetLimit(), l.GetFixed().GetPeriod().AsDuration()
	}
	return l.GetLimit(), l.GetWindowSize().AsDuration()
}

// seconds is d in whole seconds, rounded up.
func seconds(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
}

func (l *limiter) allow(ctx context.Context, key string) client.Decision {
	return l.a.Allow(ctx, &limiterv1.AllowRequest{Namespace: l.namespace, Key: key, Cost: l.cost, Limits: l.limits})
}

// Header names, as net/http canonicalizes them.
const (
	HeaderPolicy     = "Ratelimit-Policy"
	HeaderRateLimit  = "Ratelimit"
	HeaderRetryAfter = "Retry-After"
	HeaderLimitedFor = "X-Rate-Limited-For"
)

// headers calls set with every rate-limit header of d: the one place they
// are made, for HTTP and gRPC alike. A failed call has none.
func (l *limiter) headers(d *client.Decision, set func(name, value string)) {
	if d.Err != nil || l.policy == "" {
		return
	}
	set(HeaderPolicy, l.policy)
	var b strings.Builder
	for i, st := range d.Limits {
		if i >= len(l.names) {
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(l.names[i])
		b.WriteString(";r=")
		b.WriteString(strconv.FormatInt(int64(math.Max(0, math.Floor(st.GetRemaining()))), 10))
		b.WriteString(";t=")
		b.WriteString(seconds(st.GetResetAfter().AsDuration()))
	}
	set(HeaderRateLimit, b.String())
	if d.Allowed || d.Never {
		return
	}
	set(HeaderRetryAfter, seconds(d.RetryAfter))
	if l.limitedFor {
		set(HeaderLimitedFor, strconv.FormatFloat(d.RetryAfter.Seconds(), 'f', -1, 64))
	}
}

// joinKeys joins parts into one key, injectively: each part is preceded
// by its length.
func joinKeys(parts []string) string {
	if len(parts) == 1 {
		return parts[0]
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(strconv.Itoa(len(p)))
		b.WriteByte(':')
		b.WriteString(p)
	}
	return b.String()
}

// keys joins the keys of fns (see joinKeys).
func keys[R any](fns []func(R) (string, error)) func(R) (string, error) {
	return func(r R) (string, error) {
		parts := make([]string, len(fns))
		for i, fn := range fns {
			k, err := fn(r)
			if err != nil {
				return "", err
			}
			parts[i] = k
		}
		return joinKeys(parts), nil
	}
}
