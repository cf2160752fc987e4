package envoyfront

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestReload(t *testing.T) {
	s := newTestServer(t, Config{}, map[string]string{"api.yaml": perMinute})
	var logs bytes.Buffer
	s.srv.log = slog.New(slog.NewTextHandler(&logs, nil))
	client := desc("client", "c1")
	check(t, "8 under 10/min", s.call(t, "api", 8, client), ok, stat{ok, 10, minUnit, 2})

	// A larger limit: the 8 hits already counted still count.
	writeFile(t, s.dir, "api.yaml", strings.Replace(perMinute, "requests_per_unit: 10", "requests_per_unit: 20", 1))
	if err := s.srv.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	check(t, "after raising to 20", s.call(t, "api", 1, client), ok, stat{ok, 20, minUnit, 11})

	// Another unit: the same counter, read in another window size.
	writeFile(t, s.dir, "api.yaml", strings.Replace(perMinute, "unit: minute", "unit: hour", 1))
	if err := s.srv.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	check(t, "after 10/hour: 9 counted, room for 1", s.call(t, "api", 1, client), ok, stat{ok, 10, hour, 0})

	// A broken file keeps the rules in force, and says why.
	writeFile(t, s.dir, "api.yaml", "domain: api\ndescriptors:\n  - key: client\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	err := s.srv.Reload()
	if err == nil || !strings.Contains(err.Error(), "fortnight") {
		t.Fatalf("Reload of a broken file: error %v, want one about the unit", err)
	}
	if !strings.Contains(logs.String(), "keeping the previous rules") || !strings.Contains(logs.String(), "fortnight") {
		t.Errorf("log %q does not say the previous rules stay and why", logs.String())
	}
	check(t, "after the broken file", s.call(t, "api", 0, desc("client", "c2")), ok, stat{ok, 10, hour, 9})
	if got := s.counter(t, "limiterd_envoy_rules_reloads_total", map[string]string{"result": "error"}); got != 1 {
		t.Errorf("failed reloads = %g, want 1", got)
	}
	if got := s.counter(t, "limiterd_envoy_rules_last_reload_ok", nil); got != 0 {
		t.Errorf("last reload ok = %g, want 0", got)
	}

	// A new domain file is picked up beside the others.
	writeFile(t, s.dir, "api.yaml", perMinute)
	writeFile(t, s.dir, "other.yaml", "domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	if err := s.srv.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	check(t, "new domain", s.call(t, "other", 1, desc("k", "v")), ok, stat{ok, 1, second, 0})
	check(t, "api again", s.call(t, "api", 0, desc("client", "c1")), over, stat{over, 10, minUnit, 0})
}

// Watch reloads when a file changes, without being asked.
func TestWatch(t *testing.T) {
	s := newTestServer(t, Config{}, map[string]string{"api.yaml": perMinute})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.srv.Watch(ctx, 5*time.Millisecond); close(done) }()
	defer func() { cancel(); <-done }()

	writeFile(t, s.dir, "api.yaml", strings.Replace(perMinute, "requests_per_unit: 10", "requests_per_unit: 12345", 1))
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp := s.call(t, "api", 0, desc("client", "c1"))
		if resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() == 12345 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Watch did not reload the changed file within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
