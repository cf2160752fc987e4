package service_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
	"github.com/limiterd/limiterd/service"
	"github.com/limiterd/limiterd/strategy/memory"
)

// TestLeasesEveryMode: in each mode a limit of 3 grants 3, refuses the
// 4th with a retry hint, and a release frees one.
func TestLeasesEveryMode(t *testing.T) {
	ctx := context.Background()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			s, _ := newService(t, m.syncRate)
			req := service.AcquireRequest{Key: "k", Limit: 3, TTL: 10 * time.Second}
			var leases []string
			for range 3 {
				a, err := s.Acquire(ctx, req)
				if err != nil || !a.OK || !a.ExpiresAt.Equal(now.Add(10*time.Second)) {
					t.Fatalf("acquire: %+v, %v", a, err)
				}
				leases = append(leases, a.Lease)
			}
			a, err := s.Acquire(ctx, req)
			if err != nil || a.OK || a.Held != 3 || a.RetryAfter != 10*time.Second {
				t.Fatalf("4th acquire: %+v, %v; want refused, held 3, retry after 10s", a, err)
			}
			if r, err := s.Release(ctx, leases[0]); err != nil || !r.OK || r.Pending {
				t.Fatalf("release: %+v, %v", r, err)
			}
			if r, err := s.Release(ctx, leases[0]); err != nil || r.OK {
				t.Fatalf("second release: %+v, %v; want harmless false", r, err)
			}
			if r, err := s.Renew(ctx, leases[1], time.Minute); err != nil || !r.OK || !r.ExpiresAt.Equal(now.Add(time.Minute)) {
				t.Fatalf("renew: %+v, %v", r, err)
			}
			if r, err := s.Renew(ctx, leases[0], time.Minute); err != nil || r.OK {
				t.Fatalf("renew of a released lease: %+v, %v", r, err)
			}
			if a, err := s.Acquire(ctx, req); err != nil || !a.OK {
				t.Fatalf("acquire after release: %+v, %v", a, err)
			}
		})
	}
}

// TestLeaseForgedSerial: in every mode, a lease id changed to carry
// another live lease's serial (the one granted just before, a guess any
// holder can make) is not that lease: its Release and Renew answer false,
// and the lease is still held, also in the store of a synchronous
// namespace.
func TestLeaseForgedSerial(t *testing.T) {
	ctx := context.Background()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			s, _ := newService(t, m.syncRate)
			req := service.AcquireRequest{Key: "k", Limit: 2, TTL: 10 * time.Second}
			var ids []ratelimit.LeaseID
			for range 2 {
				a, err := s.Acquire(ctx, req)
				if err != nil || !a.OK {
					t.Fatalf("acquire: %+v, %v", a, err)
				}
				id, err := ratelimit.ParseLeaseID(a.Lease)
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			victim, forged := ids[0], ids[1]
			forged.Serial = victim.Serial
			if r, err := s.Release(ctx, forged.String()); err != nil || r.OK {
				t.Errorf("release of the forged id: %+v, %v; want false", r, err)
			}
			if r, err := s.Renew(ctx, forged.String(), time.Minute); err != nil || r.OK {
				t.Errorf("renewal of the forged id: %+v, %v; want false", r, err)
			}
			if a, err := s.Acquire(ctx, req); err != nil || a.OK || a.Held != 2 {
				t.Errorf("acquire after the forged release: %+v, %v; want refused, 2 held", a, err)
			}
			if r, err := s.Renew(ctx, victim.String(), time.Minute); err != nil || !r.OK {
				t.Errorf("the victim's renewal: %+v, %v; want renewed", r, err)
			}
		})
	}
}

func TestLeasesBadInput(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, -1)
	other, _ := newService(t, -1)
	foreign, err := other.Acquire(ctx, service.AcquireRequest{Key: "k", Limit: 1, TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	field := func(err error, want string, sentinel error) {
		t.Helper()
		var fe *service.FieldError
		if !errors.As(err, &fe) || fe.Field != want || !errors.Is(err, sentinel) {
			t.Errorf("got %v, want a FieldError on %q wrapping %v", err, want, sentinel)
		}
	}
	_, err = s.Acquire(ctx, service.AcquireRequest{Key: "k", Limit: 0, TTL: time.Second})
	field(err, "limit", service.ErrInvalidLimit)
	_, err = s.Acquire(ctx, service.AcquireRequest{Key: "k", Limit: 1})
	field(err, "ttl", service.ErrInvalidValue)
	_, err = s.Acquire(ctx, service.AcquireRequest{Key: "k", Limit: 1, TTL: node.DefaultMaxLeaseTTL + 1})
	field(err, "ttl", service.ErrInvalidValue)
	_, err = s.Acquire(ctx, service.AcquireRequest{Key: "", Limit: 1, TTL: time.Second})
	field(err, "key", service.ErrInvalidKey)
	_, err = s.Acquire(ctx, service.AcquireRequest{Namespace: "nope", Key: "k", Limit: 1, TTL: time.Second})
	field(err, "namespace", service.ErrUnknownNamespace)
	_, err = s.Release(ctx, "not-a-lease")
	field(err, "lease", service.ErrInvalidLease)
	_, err = s.Renew(ctx, foreign.Lease, 0)
	field(err, "ttl", service.ErrInvalidValue)
	// A local-only namespace cannot release another node's lease.
	_, err = s.Release(ctx, foreign.Lease)
	field(err, "lease", service.ErrFailedPrecondition)
}

func TestLeasesStoreWithoutLeases(t *testing.T) {
	s, _ := newServiceOn(t, 0, windowsOnly{memory.New()})
	_, err := s.Acquire(context.Background(), service.AcquireRequest{Key: "k", Limit: 1, TTL: time.Second})
	var fe *service.FieldError
	if !errors.As(err, &fe) || fe.Field != "namespace" || !errors.Is(err, service.ErrFailedPrecondition) {
		t.Fatalf("acquire on a store without leases: %v", err)
	}
}

func TestLeasesStoreDown(t *testing.T) {
	store := memory.NewFaulty(memory.New())
	s, _ := newServiceOn(t, 0, store)
	store.Fail(nil)
	_, err := s.Acquire(context.Background(), service.AcquireRequest{Key: "k", Limit: 1, TTL: time.Second})
	if !errors.Is(err, service.ErrUnavailable) {
		t.Fatalf("acquire with the store down: %v, want ErrUnavailable", err)
	}
}

func TestLeaseBatch(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, -1)
	b, err := s.Batch(3)
	if err != nil {
		t.Fatal(err)
	}
	a, err := b.Acquire(ctx, service.AcquireRequest{Key: "k", Limit: 1, TTL: time.Second})
	if err != nil || !a.OK {
		t.Fatalf("batch acquire: %+v %v", a, err)
	}
	if r, err := b.Renew(ctx, a.Lease, 2*time.Second); err != nil || !r.OK {
		t.Fatalf("batch renew: %+v %v", r, err)
	}
	if r, err := b.Release(ctx, a.Lease); err != nil || !r.OK {
		t.Fatalf("batch release: %+v %v", r, err)
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	s, _ := newService(b, -1)
	req := service.AcquireRequest{Key: "k", Limit: 1, TTL: time.Minute}
	b.ReportAllocs()
	for b.Loop() {
		a, err := s.Acquire(ctx, req)
		if err != nil || !a.OK {
			b.Fatalf("%+v %v", a, err)
		}
		if r, err := s.Release(ctx, a.Lease); err != nil || !r.OK {
			b.Fatalf("%+v %v", r, err)
		}
	}
}
