//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/integration/harness"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// abilityModes are the modes of TestModeKindStore, each a namespace's
// settings; decides marks those that need a store that decides
// atomically.
var abilityModes = []struct {
	name, settings string
	decides        bool
	field          string // the field a refusal at load names
}{
	{"local", "sync_rate: -1", false, ""},
	{"estimator", "sync_rate: -1, estimator: {hashes: 4, slots: 1024}", false, ""},
	{"periodic", "sync_rate: 0.1, store: main", false, ""},
	{"periodic-never", "sync_rate: 0.1, store: main, escalate: never", false, ""},
	{"periodic-auto", "sync_rate: 0.1, store: main, escalate: auto", true, "escalate"},
	{"synchronous", "sync_rate: 0, store: main", true, "sync_rate"},
}

// abilityKinds are the kinds of limit of TestModeKindStore, each asked
// for one unit of a limit of one; bucket says whether it is a bucket.
var abilityKinds = []struct {
	name   string
	limit  *limiterv1.Limit
	bucket bool
}{
	{"window", &limiterv1.Limit{WindowSize: durationpb.New(time.Hour), Limit: 1}, false},
	{"token", &limiterv1.Limit{Kind: &limiterv1.Limit_Token{Token: &limiterv1.TokenBucket{Max: 1, RefillTime: durationpb.New(time.Hour)}}}, true},
	{"leaky", &limiterv1.Limit{Kind: &limiterv1.Limit_Leaky{Leaky: &limiterv1.LeakyBucket{Size: 1, Interval: durationpb.New(time.Hour)}}}, true},
	{"fixed", &limiterv1.Limit{Kind: &limiterv1.Limit_Fixed{Fixed: &limiterv1.FixedBucket{Period: durationpb.New(time.Hour), Limit: 1}}}, true},
}

// TestModeKindStore: every (mode, kind, store) either works or is
// refused. A mode the store cannot serve (it needs an atomic decision,
// which Cassandra lacks) is refused when the config is loaded, by
// `limiterd check` and by the daemon, naming the namespace, the store and
// the missing ability; a kind the mode cannot serve (a bucket in an
// estimator namespace) is refused per call with FAILED_PRECONDITION;
// everything else admits exactly one unit of a limit of one, and a
// concurrency limit of one grants one lease.
func TestModeKindStore(t *testing.T) {
	stores := []struct {
		name string
		yaml func(t *testing.T) string
	}{
		{"redis", func(t *testing.T) string {
			r := harness.StartRedis(t)
			return redisStore(r.Addr(), harness.UniqueName("mks"))
		}},
		{"postgres", func(t *testing.T) string { return postgresStore(harness.StartPostgres(t).DSN()) }},
		{"cassandra", func(t *testing.T) string { return cassandraStore(harness.SharedCassandra(t), keyspace("mks")) }},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			store := st.yaml(t)
			decides := st.name != "cassandra"
			var served strings.Builder
			for _, m := range abilityModes {
				line := fmt.Sprintf("  - {name: %s, window_sizes: [1h], %s}\n", m.name, m.settings)
				if !m.decides || decides {
					served.WriteString(line)
					continue
				}
				t.Run(m.name+"/refused at load", func(t *testing.T) {
					checkRefusedAtLoad(t, fmt.Sprintf("stores:\n  main: %s\nnamespaces:\n%s", store, line), m.name, m.field, st.name)
				})
			}
			n := harness.StartLimiterd(t, "mks", fmt.Sprintf("sync:\n  call_timeout: 3s\nstores:\n  main: %s\nnamespaces:\n%s", store, served.String()))
			for _, m := range abilityModes {
				if m.decides && !decides {
					continue
				}
				for _, k := range abilityKinds {
					t.Run(m.name+"/"+k.name, func(t *testing.T) {
						checkKindServed(t, n, m.name, k.name, k.limit, k.bucket && m.name == "estimator")
					})
				}
				t.Run(m.name+"/concurrency", func(t *testing.T) {
					checkLeaseServed(t, n, m.name)
				})
			}
		})
	}
}

// checkRefusedAtLoad runs `limiterd check` and the daemon on config, whose
// one namespace ns its store cannot serve: both fail, naming it.
func checkRefusedAtLoad(t *testing.T, config, ns, field, typ string) {
	path := filepath.Join(t.TempDir(), "limiterd.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`namespaces[0].%s: namespace %q: store "main" (%s) has no atomic decision`, field, ns, typ)
	for _, args := range [][]string{{"check", "--config", path}, {"--config", path}} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, harness.LimiterdBinary(t), args...).CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), want) {
			t.Errorf("limiterd %s: %v\n%s\nwant a failure with %q", strings.Join(args, " "), err, out, want)
		}
	}
}

// checkKindServed asks twice for one unit of limit on a fresh key of ns:
// the first is admitted and the second refused, or (refused) both fail
// with FAILED_PRECONDITION.
func checkKindServed(t *testing.T, n *harness.Limiterd, ns, kind string, limit *limiterv1.Limit, refused bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := harness.UniqueName(kind)
	for i, want := range []bool{true, false} {
		r, err := n.Client.Allow(ctx, &limiterv1.AllowRequest{Namespace: ns, Key: key, Limits: []*limiterv1.Limit{limit}})
		if refused {
			if status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("call %d: %v, %v; want FAILED_PRECONDITION", i, r, err)
			}
			continue
		}
		if err != nil || r.GetAllowed() != want {
			t.Fatalf("call %d: allowed %v, %v; want %v", i, r.GetAllowed(), err, want)
		}
	}
}

// checkLeaseServed acquires a concurrency limit of one twice on a fresh
// key of ns: one lease, then none; released, one again.
func checkLeaseServed(t *testing.T, n *harness.Limiterd, ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := harness.UniqueName("lease")
	first, err := acquire(ctx, n, ns, key, 1, time.Minute)
	if err != nil || !first.GetAcquired() {
		t.Fatalf("first acquire: %v, %v; want a lease", first, err)
	}
	if second, err := acquire(ctx, n, ns, key, 1, time.Minute); err != nil || second.GetAcquired() {
		t.Fatalf("second acquire: %v, %v; want none", second, err)
	}
	if _, err := release(ctx, n, first.GetLease()); err != nil {
		t.Fatal(err)
	}
	if third, err := acquire(ctx, n, ns, key, 1, time.Minute); err != nil || !third.GetAcquired() {
		t.Fatalf("acquire after the release: %v, %v; want a lease", third, err)
	}
}
