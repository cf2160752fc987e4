//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/integration/harness"
)

// A node's lifecycle as operators see it: health during a store outage,
// and a stop under load.

type healthzBody struct {
	Status string `json:"status"`
	Stores []struct {
		Store     string `json:"store"`
		Up        bool   `json:"up"`
		LastError string `json:"last_error"`
	} `json:"stores"`
}

func getHealthz(t *testing.T, n *harness.Limiterd) (int, healthzBody) {
	t.Helper()
	resp, err := n.HTTPClient().Get(n.URL(n.HTTPAddr, "/healthz"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h healthzBody
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, h
}

// storeUp waits until /healthz reports the store up (or down), and
// returns how long that took.
func storeUp(t *testing.T, n *harness.Limiterd, up bool, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		code, h := getHealthz(t, n)
		if code != http.StatusOK {
			t.Fatalf("/healthz answered %d: it must answer 200 whatever the store", code)
		}
		if len(h.Stores) == 1 && h.Stores[0].Up == up {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("/healthz after %s: %+v, want the store up=%v", within, h, up)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestStoreOutageUnderAnIdleNode: nothing is counted, so no tick has
// anything to push, yet /healthz reports the Redis stop within 5 s, still
// with 200; over a 62 s outage the log has one line at its start, one
// reminder at most, and one at its end.
func TestStoreOutageUnderAnIdleNode(t *testing.T) {
	t.Parallel() // a minute of waiting, beside the other tests
	r := harness.StartRedis(t)
	n := harness.StartLimiterd(t, "idle", clusterConfig(redisStore(r.Addr(), harness.UniqueName("idle")), 0.1))
	storeUp(t, n, true, 10*time.Second)
	r.Stop()
	took := storeUp(t, n, false, 5*time.Second)
	t.Logf("/healthz reported the store down %s after it stopped", took.Round(time.Millisecond))
	time.Sleep(62*time.Second - took)
	r.Start()
	storeUp(t, n, true, 10*time.Second)
	log := n.LogTail(1000)
	count := func(line string) int { return strings.Count(log, `msg="`+line) }
	if count("store unreachable") != 1 || count("store reachable again") != 1 || count("store still unreachable") > 1 {
		t.Errorf("over a 62 s outage the log has %d lines at its start, %d reminders and %d at its end; want 1, at most 1 and 1:\n%s",
			count("store unreachable"), count("store still unreachable"), count("store reachable again"), log)
	}
	if got := strings.Count(log, "level=WARN") + strings.Count(log, "level=ERROR"); got > 2 {
		t.Errorf("%d warnings and errors over the outage, want at most 2 (its start and one reminder):\n%s", got, log)
	}
}

// TestStopUnderLoad: on SIGTERM /readyz fails at once while calls go on
// being answered for the drain delay; then the node stops. With its store
// gone and counts not pushed, the exit status says they are lost.
func TestStopUnderLoad(t *testing.T) {
	r := harness.StartRedis(t)
	const drain = 1500 * time.Millisecond
	cfg := fmt.Sprintf("drain_delay: %s\n%s", drain, clusterConfig(redisStore(r.Addr(), harness.UniqueName("stop")), 60))
	n := harness.StartLimiterd(t, "stop", cfg)
	ctx := context.Background()
	var answered atomic.Int64
	var lastAnswer atomic.Int64 // unix ns
	go func() {
		for {
			if _, err := n.Client.Increment(ctx, &limiterv1.IncrementRequest{Namespace: "api", Key: "k", At: timestamppb.Now()}); err != nil {
				return
			}
			answered.Add(1)
			lastAnswer.Store(time.Now().UnixNano())
		}
	}()
	for answered.Load() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	// The namespace syncs once a minute: every hit is still to push, and
	// its store is gone.
	r.Stop()
	term := time.Now()
	if err := syscall.Kill(n.PID(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var unready time.Duration
	for {
		resp, err := n.HTTPClient().Get(n.URL(n.HTTPAddr, "/readyz"))
		if err != nil {
			t.Fatalf("/readyz unreachable before it reported not ready: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			unready = time.Since(term)
			break
		}
		if time.Since(term) > drain/2 {
			t.Fatalf("/readyz still %d %s after SIGTERM", resp.StatusCode, time.Since(term))
		}
		time.Sleep(10 * time.Millisecond)
	}
	n.Stop() // waits for the exit
	served := time.Duration(lastAnswer.Load() - term.UnixNano())
	if served < drain-100*time.Millisecond {
		t.Errorf("calls answered until %s after SIGTERM, want through the drain delay %s", served, drain)
	}
	if got := n.ExitCode(); got != 1 {
		t.Errorf("exit status %d, want 1: the final push failed", got)
	}
	if !strings.Contains(n.LogTail(20), "final push failed") {
		t.Errorf("no log of the failed final push:\n%s", n.LogTail(20))
	}
	t.Logf("not ready %s after SIGTERM; calls answered until %s; exit status %d", unready.Round(time.Millisecond), served.Round(time.Millisecond), n.ExitCode())
}
