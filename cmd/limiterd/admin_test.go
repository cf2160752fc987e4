package main

import (
	"testing"

	"github.com/limiterd/limiterd/internal/config"
)

func TestAdminAddr(t *testing.T) {
	for in, want := range map[string]string{
		"": "", "off": "", "6060": "127.0.0.1:6060", ":6060": "127.0.0.1:6060",
		"0.0.0.0:6060": "0.0.0.0:6060", "[::1]:6060": "[::1]:6060", "admin.internal:6060": "admin.internal:6060",
	} {
		if got, err := config.AdminAddr(in); got != want || err != nil {
			t.Errorf("config.AdminAddr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"localhost", "99999", "a:b:c"} {
		if got, err := config.AdminAddr(bad); err == nil {
			t.Errorf("config.AdminAddr(%q) = %q, want an error", bad, got)
		}
	}
}

func TestProbeFlags(t *testing.T) {
	for _, bad := range [][]string{
		nil,
		{"a", "b"},
		{"--cert-file", "c.crt", "https://127.0.0.1/readyz"},
		{"--ca-file", "/nonexistent/ca.crt", "https://127.0.0.1/readyz"},
	} {
		if _, _, err := probeClient(bad); err == nil {
			t.Errorf("probeClient(%q): no error", bad)
		}
	}
	if _, url, err := probeClient([]string{"http://127.0.0.1:7071/readyz"}); err != nil || url != "http://127.0.0.1:7071/readyz" {
		t.Errorf("probeClient(URL) = %q, %v", url, err)
	}
}
