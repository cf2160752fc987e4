package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestAdminModeChangeRenewsTheNamespace: a namespace whose sync_rate
// alone changes is changed (a new namespace in the new mode, the old
// one's counts copied), whichever modes it moves between; the same
// sync_rate again changes nothing; the admin API lists each mode as
// decoded. The store is never reached: a node serves while it is down.
func TestAdminModeChangeRenewsTheNamespace(t *testing.T) {
	grpcAddr, adminAddr := freeAddr(t), freeAddr(t)
	path := writeFile(t, "modes.yaml", fmt.Sprintf(`grpc_addr: %s
http_addr: "off"
admin_addr: %s
stores:
  main: {type: redis, addrs: ["127.0.0.1:1"]}
namespaces:
  - {name: api, window_sizes: [1s, 60s], sync_rate: -1}
`, grpcAddr, adminAddr))
	d := startRun(t, []string{"--config", path}, nil)
	d.dial(t, grpcAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mode := func() (string, float64) {
		t.Helper()
		var list []struct {
			Name     string  `json:"name"`
			Mode     string  `json:"mode"`
			SyncRate float64 `json:"sync_rate"`
		}
		if err := json.Unmarshal([]byte(adminCall(ctx, t, adminAddr, "GET", "/v1/namespaces", "")), &list); err != nil || len(list) != 1 {
			t.Fatalf("GET /v1/namespaces: %v, %+v", err, list)
		}
		return list[0].Mode, list[0].SyncRate
	}
	if m, r := mode(); m != "local" || r != -1 {
		t.Fatalf("at start: %s %v, want local -1", m, r)
	}
	for _, step := range []struct {
		rate    string
		changed bool
		mode    string
	}{
		{"0.1", true, "periodic"},
		{"0.1", false, "periodic"},
		{"0.2", true, "periodic"},
		{"0", true, "synchronous"},
		{"-0", false, "synchronous"},
		{"-1", true, "local"},
		{"-5", false, "local"},
	} {
		got := adminCall(ctx, t, adminAddr, "PUT", "/v1/namespaces/api", `{"window_sizes": ["1s", "60s"], "store": "main", "sync_rate": `+step.rate+`}`)
		want := "changed [] removed [] unchanged [api]"
		if step.changed {
			want = "changed [api] removed [] unchanged []"
		}
		if !strings.Contains(got, want) {
			t.Errorf("sync_rate %s: %s; want %q", step.rate, got, want)
		}
		if m, _ := mode(); m != step.mode {
			t.Errorf("sync_rate %s: mode %s, want %s", step.rate, m, step.mode)
		}
	}
}
