package sync

import (
	"context"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// periodic serves a periodic namespace's calls: counted in the node,
// which the tick (Syncer.SyncOnce) keeps in step with the store every
// period; an Allow near a limit escalates to the store (escalate.go), one
// with buckets otherwise goes as bucketsync.go says.
type periodic struct {
	shared
	// newKeysUntil (Unix ns) ends the time in which keys never fetched
	// escalate (Config.EscalateNewKeys).
	newKeysUntil int64
}

func (pd *periodic) tick(time.Time) {}

func (pd *periodic) forget(string) {}

func (pd *periodic) IncrementAt(_ context.Context, t time.Time, key string, size time.Duration, value float64, dst []ratelimit.Rate) ([]ratelimit.Rate, error) {
	return pd.s.ns.IncrementAt(t, key, size, value, dst)
}

func (pd *periodic) RateAt(_ context.Context, t time.Time, key string, size time.Duration, curDiff float64, dst []ratelimit.Rate) ([]ratelimit.Rate, error) {
	return pd.s.ns.RateAt(t, key, size, curDiff, dst)
}

// AllowAt decides req at t: with bucket limits as bucketsync.go says,
// of sliding windows alone in the node; either near a limit in the store
// when the namespace escalates (escalate.go).
func (pd *periodic) AllowAt(ctx context.Context, t time.Time, req ratelimit.AllowRequest, dst []ratelimit.LimitStatus) (ratelimit.Decision, error) {
	for _, l := range req.Limits {
		if l.Kind != ratelimit.WindowLimit {
			chk, err := pd.s.ns.CheckAllow(req)
			if err != nil {
				return ratelimit.Decision{Limits: dst}, err
			}
			if pd.s.escalate {
				return pd.allowBucketsNear(ctx, t, req, &chk, dst)
			}
			return bucketSync{pd.s}.allow(ctx, t, req, &chk, dst)
		}
	}
	if pd.s.escalate {
		return pd.allowNear(ctx, t, req, dst)
	}
	return pd.s.ns.AllowAt(t, req, dst)
}
