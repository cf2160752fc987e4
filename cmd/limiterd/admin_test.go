package main

import (
	"fmt"
	"net"
	"os"
	"strings"
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

// TestAdminLoopback: the admin listener warns at start unless it is bound
// to loopback (an unspecified address listens on every interface).
func TestAdminLoopback(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:1": true, "127.0.0.2:1": true, "[::1]:1": true,
		"0.0.0.0:1": false, "[::]:1": false, "10.0.0.1:1": false, "[2001:db8::1]:1": false} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := loopback(a); got != want {
			t.Errorf("loopback(%s) = %v; want %v", addr, got, want)
		}
	}
}

// TestStartWarnings: limiterd warns at start of an admin listener bound
// off loopback without an auth section, and of a token file every user
// may read; it serves all the same.
func TestStartWarnings(t *testing.T) {
	const adminWarning, fileWarning = "the admin listener is bound to an address other hosts may reach", "a secret file is readable by every user"
	_, port, _ := net.SplitHostPort(freeAddr(t))
	grpcAddr := freeAddr(t)
	open := startRun(t, []string{"--config", writeFile(t, "open.yaml", fmt.Sprintf("grpc_addr: %s\nhttp_addr: %s\nadmin_addr: 0.0.0.0:%s\n",
		grpcAddr, freeAddr(t), port))}, nil)
	open.dial(t, grpcAddr)
	if log := open.stderr.String(); !strings.Contains(log, adminWarning) || strings.Contains(log, fileWarning) {
		t.Errorf("admin on 0.0.0.0 without auth: the log has the admin warning %v, the file warning %v; want only the first:\n%s",
			strings.Contains(log, adminWarning), strings.Contains(log, fileWarning), log)
	}

	token := writeFile(t, "app.token", "app-token-0123456789")
	if err := os.Chmod(token, 0o644); err != nil {
		t.Fatal(err)
	}
	grpcAddr = freeAddr(t)
	guarded := startRun(t, []string{"--config", writeFile(t, "guarded.yaml", fmt.Sprintf(`grpc_addr: %s
http_addr: %s
admin_addr: %s
auth:
  tokens:
    - {name: app, token_file: %s, namespaces: ["*"], operations: [admin]}
`, grpcAddr, freeAddr(t), freeAddr(t), token))}, nil)
	guarded.dial(t, grpcAddr)
	if log := guarded.stderr.String(); strings.Contains(log, adminWarning) || !strings.Contains(log, fileWarning) || !strings.Contains(log, token) {
		t.Errorf("admin on loopback with auth, a token file of mode 0644: the log has the admin warning %v, the file warning %v; want only the second, naming the file:\n%s",
			strings.Contains(log, adminWarning), strings.Contains(log, fileWarning), log)
	}
}
