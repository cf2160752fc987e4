package client_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/client"
)

// fakeLeases is the lease part of fakeLimiter: leases live until released
// (the stand-in keeps no clock); a refusal's retry_after is the shortest
// ttl held. The *Fails counters make that many calls fail with
// UNAVAILABLE.
type fakeLeases struct {
	leases                                 map[string]fakeLease
	serial                                 int
	acquireFails, releaseFails, renewFails atomic.Int64
	leaseCalls                             atomic.Int64
}

type fakeLease struct {
	key string
	ttl time.Duration
}

func unavailable(n *atomic.Int64) error {
	if n.Add(-1) >= 0 {
		return status.Error(codes.Unavailable, "try again")
	}
	return nil
}

func (f *fakeLimiter) Acquire(ctx context.Context, req *limiterv1.AcquireRequest) (*limiterv1.AcquireResponse, error) {
	f.leaseCalls.Add(1)
	if err := f.wait(ctx); err != nil {
		return nil, err
	}
	if err := unavailable(&f.acquireFails); err != nil {
		return nil, err
	}
	ttl := req.GetTtl().AsDuration()
	if ttl <= 0 {
		return nil, status.Error(codes.InvalidArgument, "ttl: must be positive")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var held int64
	var next time.Duration
	for _, l := range f.leases {
		if l.key == req.GetKey() {
			held++
			if next == 0 || l.ttl < next {
				next = l.ttl
			}
		}
	}
	if held >= req.GetLimit() {
		return &limiterv1.AcquireResponse{Held: held, RetryAfter: durationpb.New(next)}, nil
	}
	if f.leases == nil {
		f.leases = map[string]fakeLease{}
	}
	f.serial++
	id := req.GetKey() + "#" + strconv.Itoa(f.serial)
	f.leases[id] = fakeLease{req.GetKey(), ttl}
	return &limiterv1.AcquireResponse{Acquired: true, Lease: id, Held: held + 1, ExpiresAt: timestamppb.New(time.Now().Add(ttl))}, nil
}

func (f *fakeLimiter) Release(ctx context.Context, req *limiterv1.ReleaseRequest) (*limiterv1.ReleaseResponse, error) {
	f.leaseCalls.Add(1)
	if err := unavailable(&f.releaseFails); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.leases[req.GetLease()]
	delete(f.leases, req.GetLease())
	return &limiterv1.ReleaseResponse{Released: ok}, nil
}

func (f *fakeLimiter) Renew(ctx context.Context, req *limiterv1.RenewRequest) (*limiterv1.RenewResponse, error) {
	f.leaseCalls.Add(1)
	if err := unavailable(&f.renewFails); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.leases[req.GetLease()]
	if !ok {
		return &limiterv1.RenewResponse{}, nil
	}
	l.ttl = req.GetTtl().AsDuration()
	f.leases[req.GetLease()] = l
	return &limiterv1.RenewResponse{Renewed: true, ExpiresAt: timestamppb.New(time.Now().Add(l.ttl))}, nil
}

func TestLeases(t *testing.T) {
	c := serve(t, &fakeLimiter{})
	ctx := context.Background()
	var leases []string
	for i := range 3 {
		resp, err := c.Acquire(ctx, client.Lease("db", 2, 10*time.Second))
		if err != nil {
			t.Fatalf("Acquire %d: %v", i, err)
		}
		if got, want := resp.GetAcquired(), i < 2; got != want {
			t.Fatalf("Acquire %d: %v, want acquired %v", i, resp, want)
		}
		if !resp.GetAcquired() && (resp.GetHeld() != 2 || resp.GetRetryAfter().AsDuration() != 10*time.Second) {
			t.Errorf("refusal %v, want held 2, retry_after 10s", resp)
		}
		if resp.GetAcquired() {
			leases = append(leases, resp.GetLease())
		}
	}
	if r, err := c.Renew(ctx, leases[0], time.Minute); err != nil || !r.GetRenewed() || r.GetExpiresAt() == nil {
		t.Errorf("Renew: %v, %v; want renewed with an expiry", r, err)
	}
	if r, err := c.Release(ctx, leases[0]); err != nil || !r.GetReleased() {
		t.Errorf("Release: %v, %v; want released", r, err)
	}
	if r, err := c.Release(ctx, leases[0]); err != nil || r.GetReleased() {
		t.Errorf("second Release: %v, %v; want released false", r, err)
	}
	if r, err := c.Renew(ctx, leases[0], time.Minute); err != nil || r.GetRenewed() {
		t.Errorf("Renew of a released lease: %v, %v; want renewed false", r, err)
	}
	if r, err := c.Acquire(ctx, client.Lease("db", 2, 10*time.Second)); err != nil || !r.GetAcquired() {
		t.Errorf("Acquire after a release: %v, %v; want acquired", r, err)
	}
	// The server's refusal of a request comes back as its status.
	if _, err := c.Acquire(ctx, &limiterv1.AcquireRequest{Key: "db", Limit: 1}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Acquire without a ttl: %v, want INVALID_ARGUMENT", err)
	}
}

// TestLeaseRetries: Release and Renew are retried on UNAVAILABLE (as many
// times as WithRetries says), Acquire never.
func TestLeaseRetries(t *testing.T) {
	f := &fakeLimiter{}
	var hooked []string
	c := serve(t, f, client.WithRetries(2), client.WithErrorHook(func(m string, err error) { hooked = append(hooked, m) }))
	ctx := context.Background()
	lease, err := c.Acquire(ctx, client.Lease("k", 5, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	f.renewFails.Store(2)
	if r, err := c.Renew(ctx, lease.GetLease(), time.Minute); err != nil || !r.GetRenewed() {
		t.Errorf("Renew after 2 UNAVAILABLE: %v, %v; want renewed", r, err)
	}
	f.releaseFails.Store(2)
	if r, err := c.Release(ctx, lease.GetLease()); err != nil || !r.GetReleased() {
		t.Errorf("Release after 2 UNAVAILABLE: %v, %v; want released", r, err)
	}
	f.releaseFails.Store(3)
	f.leaseCalls.Store(0)
	if _, err := c.Release(ctx, lease.GetLease()); status.Code(err) != codes.Unavailable || f.leaseCalls.Load() != 3 {
		t.Errorf("Release failing 3 times: %v after %d calls, want UNAVAILABLE after 3", err, f.leaseCalls.Load())
	}
	f.acquireFails.Store(1)
	f.leaseCalls.Store(0)
	if _, err := c.Acquire(ctx, client.Lease("k", 5, time.Minute)); status.Code(err) != codes.Unavailable || f.leaseCalls.Load() != 1 {
		t.Errorf("Acquire failing once: %v after %d calls, want UNAVAILABLE after 1 (no retry)", err, f.leaseCalls.Load())
	}
	if want := []string{"Release", "Acquire"}; len(hooked) != 2 || hooked[0] != want[0] || hooked[1] != want[1] {
		t.Errorf("error hook got %v, want %v", hooked, want)
	}
}

// TestAcquireDeadline: an Acquire the server does not answer fails at the
// client's timeout.
func TestAcquireDeadline(t *testing.T) {
	f := &fakeLimiter{block: make(chan struct{})}
	c := serve(t, f, client.WithTimeout(20*time.Millisecond))
	start := time.Now()
	_, err := c.Acquire(context.Background(), client.Lease("k", 1, time.Minute))
	if status.Code(err) != codes.DeadlineExceeded && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire of a hanging server: %v, want DEADLINE_EXCEEDED", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Acquire took %v with a 20ms timeout", took)
	}
}
