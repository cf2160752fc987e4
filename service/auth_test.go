package service_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/limiterd/limiterd/auth"
	"github.com/limiterd/limiterd/ratelimit"
	"github.com/limiterd/limiterd/service"
)

func newAuthorizer(tb testing.TB) *auth.Authorizer {
	tb.Helper()
	a, err := auth.New(auth.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	return a
}

// TestAuthorization: with an authorizer, every call is refused before it
// counts anything unless ctx's principal is granted its operation in its
// namespace; a lease's namespace is its id's.
func TestAuthorization(t *testing.T) {
	base, _ := newService(t, -1)
	s := base.WithAuthorizer(newAuthorizer(t))
	bg := context.Background()
	as := func(ns string, ops auth.Op) context.Context {
		return auth.WithPrincipal(bg, auth.NewPrincipal("p", []string{ns}, ops))
	}
	writer, reader, elsewhere := as("default", auth.Read|auth.Write), as("default", auth.Read), as("other", auth.Read|auth.Write)
	limits := []service.Limit{lim(time.Minute, 100)}
	lease, err := base.Acquire(bg, service.AcquireRequest{Key: "l", Limit: 10, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	zero := 0.0
	calls := map[string]struct {
		read bool
		call func(ctx context.Context, key string) error
	}{
		"Increment": {false, func(ctx context.Context, k string) error {
			_, err := s.Increment(ctx, service.IncrementRequest{Key: k}, nil)
			return err
		}},
		"SlidingWindow": {true, func(ctx context.Context, k string) error {
			_, err := s.SlidingWindow(ctx, service.RateRequest{Key: k}, nil)
			return err
		}},
		"Allow": {false, func(ctx context.Context, k string) error {
			_, err := s.Allow(ctx, service.AllowRequest{Key: k, Limits: limits}, nil)
			return err
		}},
		"Allow cost 0": {false, func(ctx context.Context, k string) error {
			_, err := s.Allow(ctx, service.AllowRequest{Key: k, Limits: limits, Cost: &zero}, nil)
			return err
		}},
		"Batch.Increment": {false, func(ctx context.Context, k string) error {
			b, _ := s.Batch(1)
			_, err := b.Increment(ctx, service.IncrementRequest{Key: k}, nil)
			return err
		}},
		"Batch.Allow": {false, func(ctx context.Context, k string) error {
			b, _ := s.Batch(1)
			_, err := b.Allow(ctx, service.AllowRequest{Key: k, Limits: limits}, nil)
			return err
		}},
		"Acquire": {false, func(ctx context.Context, k string) error {
			_, err := s.Acquire(ctx, service.AcquireRequest{Key: k, Limit: 10, TTL: time.Minute})
			return err
		}},
		"Renew": {false, func(ctx context.Context, _ string) error {
			_, err := s.Renew(ctx, lease.Lease, time.Minute)
			return err
		}},
		"Batch.Release": {false, func(ctx context.Context, _ string) error {
			b, _ := s.Batch(1)
			_, err := b.Release(ctx, lease.Lease)
			return err
		}},
	}
	for name, c := range calls {
		for _, who := range []struct {
			name        string
			ctx         context.Context
			read, write error
		}{
			{"nobody", bg, service.ErrUnauthenticated, service.ErrUnauthenticated},
			{"elsewhere", elsewhere, service.ErrPermissionDenied, service.ErrPermissionDenied},
			{"reader", reader, nil, service.ErrPermissionDenied},
			{"writer", writer, nil, nil},
		} {
			want := who.write
			if c.read {
				want = who.read
			}
			key := name + "/" + who.name
			err := c.call(who.ctx, key)
			if !errors.Is(err, want) || (want == nil) != (err == nil) {
				t.Errorf("%s by %s: %v; want %v", name, who.name, err, want)
			}
			if err == nil {
				continue
			}
			if rs, _ := base.SlidingWindow(bg, service.RateRequest{Key: key}, nil); rs[1].Rate != 0 {
				t.Errorf("a refused %s by %s counted %g", name, who.name, rs[1].Rate)
			}
			if a, _ := base.Acquire(bg, service.AcquireRequest{Key: key, Limit: 1, TTL: time.Minute}); !a.OK {
				t.Errorf("a refused %s by %s holds a lease", name, who.name)
			}
		}
	}
	// A caller without credentials learns nothing of a lease, not even
	// that it is malformed; one with them does.
	if _, err := s.Release(bg, "not-a-lease"); !errors.Is(err, service.ErrUnauthenticated) {
		t.Errorf("Release of a malformed lease by nobody: %v", err)
	}
	if _, err := s.Release(writer, "not-a-lease"); !errors.Is(err, service.ErrInvalidLease) {
		t.Errorf("Release of a malformed lease by the writer: %v", err)
	}
	// The base service still serves everybody.
	if _, err := base.Increment(bg, service.IncrementRequest{Key: "k"}, nil); err != nil {
		t.Errorf("the service without an authorizer: %v", err)
	}
}

// TestReadOnlyAddsNoKey: a token granted only reading cannot add a key to
// a namespace, so it cannot fill it up to its key cap: an Allow, of cost 0
// too, needs write (it makes the key's windows or buckets), and so does a
// SlidingWindow in a syncing namespace (it adds the key to the node's
// table); a local namespace's SlidingWindow reads without adding.
func TestReadOnlyAddsNoKey(t *testing.T) {
	bg := context.Background()
	reader := auth.WithPrincipal(bg, auth.NewPrincipal("reader", []string{"default"}, auth.Read))
	writer := auth.WithPrincipal(bg, auth.NewPrincipal("writer", []string{"default"}, auth.Read|auth.Write))
	zero := 0.0
	bucket := service.Limit{Kind: service.TokenKind, Token: service.TokenBucket{Max: 10, RefillTime: time.Second}}
	for _, c := range []struct {
		mode     string
		syncRate float64
		readOK   bool // the reader's SlidingWindow
	}{{"local", -1, true}, {"periodic", 1, false}, {"synchronous", 0, false}} {
		base, ns := newService(t, c.syncRate)
		s := base.WithAuthorizer(newAuthorizer(t))
		for i := range 3 {
			key := fmt.Sprint("reader-", i)
			for name, limits := range map[string][]service.Limit{"window": {lim(time.Minute, 100)}, "bucket": {bucket}} {
				if c.mode == "synchronous" && name == "bucket" {
					continue
				}
				_, err := s.Allow(reader, service.AllowRequest{Key: key, Cost: &zero, Limits: limits}, nil)
				if !errors.Is(err, service.ErrPermissionDenied) {
					t.Errorf("%s: the reader's Allow of cost 0 on a %s: %v; want permission denied", c.mode, name, err)
				}
			}
			_, err := s.SlidingWindow(reader, service.RateRequest{Key: key}, nil)
			if c.readOK != (err == nil) || (err != nil && !errors.Is(err, service.ErrPermissionDenied)) {
				t.Errorf("%s: the reader's SlidingWindow: %v; want served: %v", c.mode, err, c.readOK)
			}
		}
		if k, b := ns.Stats().ActiveKeys, ns.Stats().ActiveBuckets; k != 0 || b != 0 {
			t.Errorf("%s: after the reader's calls the namespace holds %d keys and %d buckets; want none", c.mode, k, b)
		}
		// The writer may do both, and its read of a syncing namespace adds
		// the key.
		if _, err := s.Allow(writer, service.AllowRequest{Key: "w", Cost: &zero, Limits: []service.Limit{lim(time.Minute, 100)}}, nil); err != nil {
			t.Errorf("%s: the writer's Allow of cost 0: %v", c.mode, err)
		}
		if _, err := s.SlidingWindow(writer, service.RateRequest{Key: "w2"}, nil); err != nil {
			t.Errorf("%s: the writer's SlidingWindow: %v", c.mode, err)
		}
	}
}

// TestAuthorizationBeforeNamespace: a call naming a namespace the node
// does not serve is refused as unauthenticated without credentials, and
// as denied with credentials for other namespaces, before its namespace is
// looked up: a caller learns which namespaces exist only where it may
// call. Granted that namespace, it is told the namespace is unknown.
func TestAuthorizationBeforeNamespace(t *testing.T) {
	base, _ := newService(t, -1)
	s := base.WithAuthorizer(newAuthorizer(t))
	bg := context.Background()
	const unknown = "nope"
	elsewhere := auth.WithPrincipal(bg, auth.NewPrincipal("p", []string{"default"}, auth.Read|auth.Write))
	granted := auth.WithPrincipal(bg, auth.NewPrincipal("p", []string{unknown}, auth.Read|auth.Write))
	limits := []service.Limit{lim(time.Minute, 100)}
	lease := ratelimit.LeaseID{Namespace: unknown, Key: "k", Holder: 1, Serial: 1}.String()
	calls := map[string]func(ctx context.Context) error{
		"Increment": func(ctx context.Context) error {
			_, err := s.Increment(ctx, service.IncrementRequest{Namespace: unknown, Key: "k"}, nil)
			return err
		},
		"SlidingWindow": func(ctx context.Context) error {
			_, err := s.SlidingWindow(ctx, service.RateRequest{Namespace: unknown, Key: "k"}, nil)
			return err
		},
		"Allow": func(ctx context.Context) error {
			_, err := s.Allow(ctx, service.AllowRequest{Namespace: unknown, Key: "k", Limits: limits}, nil)
			return err
		},
		"Batch.Allow": func(ctx context.Context) error {
			b, _ := s.Batch(1)
			_, err := b.Allow(ctx, service.AllowRequest{Namespace: unknown, Key: "k", Limits: limits}, nil)
			return err
		},
		"Acquire": func(ctx context.Context) error {
			_, err := s.Acquire(ctx, service.AcquireRequest{Namespace: unknown, Key: "k", Limit: 10, TTL: time.Minute})
			return err
		},
		"Release": func(ctx context.Context) error {
			_, err := s.Release(ctx, lease)
			return err
		},
	}
	for name, call := range calls {
		for _, who := range []struct {
			name string
			ctx  context.Context
			want error
		}{
			{"nobody", bg, service.ErrUnauthenticated},
			{"elsewhere", elsewhere, service.ErrPermissionDenied},
			{"granted", granted, service.ErrUnknownNamespace},
		} {
			if err := call(who.ctx); !errors.Is(err, who.want) {
				t.Errorf("%s in an unknown namespace by %s: %v; want %v", name, who.name, err, who.want)
			}
		}
	}
}

// TestAuthorizationNoAllocation: authorizing a granted call allocates
// nothing.
func TestAuthorizationNoAllocation(t *testing.T) {
	base, _ := newService(t, -1)
	s := base.WithAuthorizer(newAuthorizer(t))
	ctx := auth.WithPrincipal(context.Background(), auth.NewPrincipal("p", []string{"default"}, auth.Write))
	var statuses [service.MaxLimits]service.LimitStatus
	limits := []service.Limit{lim(time.Second, 1e9), lim(time.Minute, 1e9)}
	f := func() {
		if _, err := s.Allow(ctx, service.AllowRequest{Key: "k", Limits: limits}, statuses[:0]); err != nil {
			t.Fatal(err)
		}
	}
	f()
	if n := testing.AllocsPerRun(100, f); n != 0 {
		t.Errorf("%v allocations per call, want 0", n)
	}
}

// BenchmarkAuthorization: Allow without an authorizer, with one, and
// refused.
func BenchmarkAuthorization(b *testing.B) {
	base, _ := newService(b, -1)
	var statuses [service.MaxLimits]service.LimitStatus
	limits := []service.Limit{lim(time.Second, 1e9), lim(time.Minute, 1e9)}
	granted := auth.WithPrincipal(context.Background(), auth.NewPrincipal("p", []string{"default"}, auth.Write))
	for _, c := range []struct {
		name string
		s    *service.Service
		ctx  context.Context
	}{
		{"off", base, context.Background()},
		{"on", base.WithAuthorizer(newAuthorizer(b)), granted},
		{"refused", base.WithAuthorizer(newAuthorizer(b)), context.Background()},
	} {
		b.Run("Allow/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.s.Allow(c.ctx, service.AllowRequest{Key: "some-client-key", Limits: limits}, statuses[:0])
			}
		})
	}
}
