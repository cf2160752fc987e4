package service_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/limiterd/limiterd/service"
)

// TestBucketAllowAtBeforeTheWindows: an Allow whose limits are all
// buckets takes a time further back than the namespace's largest window
// (the buckets' range, not a sliding window's).
func TestBucketAllowAtBeforeTheWindows(t *testing.T) {
	s, _ := newService(t, -1)
	at := now.Add(-2 * time.Minute)
	for _, l := range []service.Limit{token(1, sec), leaky(1, sec, 0), fixed(sec, 1)} {
		d, err := s.Allow(context.Background(), service.AllowRequest{Key: "k" + l.Kind.String(), At: at, Limits: []service.Limit{l}}, nil)
		if err != nil || !d.Allowed {
			t.Errorf("Allow of a %s at now-2m: %+v, %v; want allowed", l.Kind, d, err)
		}
	}
}

// TestLeaseTTLUpToMax: a lease may ask for the namespace's max_lease_ttl
// exactly, on Acquire and on Renew; a nanosecond more is refused.
func TestLeaseTTLUpToMax(t *testing.T) {
	s, ns := newService(t, -1)
	ctx := context.Background()
	max := ns.Config().MaxLeaseTTL
	if max == 0 {
		t.Fatal("namespace with no max_lease_ttl")
	}
	a, err := s.Acquire(ctx, service.AcquireRequest{Key: "k", Limit: 2, TTL: max})
	if err != nil || !a.OK || !a.ExpiresAt.Equal(now.Add(max)) {
		t.Fatalf("Acquire with the max TTL: %+v, %v; want a lease to %v", a, err, now.Add(max))
	}
	if r, err := s.Renew(ctx, a.Lease, max); err != nil || !r.OK {
		t.Errorf("Renew with the max TTL: %+v, %v", r, err)
	}
	var fe *service.FieldError
	if _, err := s.Acquire(ctx, service.AcquireRequest{Key: "k", Limit: 2, TTL: max + 1}); !errors.As(err, &fe) || fe.Field != "ttl" {
		t.Errorf("Acquire with the max TTL + 1ns: %v; want an error on ttl", err)
	}
	if _, err := s.Renew(ctx, a.Lease, max+1); !errors.As(err, &fe) || fe.Field != "ttl" {
		t.Errorf("Renew with the max TTL + 1ns: %v; want an error on ttl", err)
	}
}

// TestDecisionAt: an Allow's answer says when it was decided: the
// request's at, or without one the namespace's clock, in every mode.
func TestDecisionAt(t *testing.T) {
	for _, m := range modes {
		s, _ := newService(t, m.syncRate)
		at := now.Add(-time.Second)
		for _, l := range []service.Limit{{Size: sec, Limit: 10}, token(10, sec)} {
			for _, given := range []time.Time{at, {}} {
				d, err := s.Allow(context.Background(), service.AllowRequest{Key: "k" + l.Kind.String(), At: given, Limits: []service.Limit{l}}, nil)
				want := given
				if given.IsZero() {
					want = now
				}
				if err != nil || !d.At.Equal(want) {
					t.Errorf("%s: a %s Allow with at %v: decided at %v, %v; want %v", m.name, l.Kind, given, d.At, err, want)
				}
			}
		}
	}
}
