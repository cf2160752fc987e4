package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestReadableByAll: the secret files every user may read are listed —
// a token file and a store's password file of mode 0644 — and those of
// mode 0600 or 0640 are not.
func TestReadableByAll(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}
	open := write("open.token", "open-token-0123456789", 0o644)
	closed := write("closed.token", "closed-token-0123456789", 0o600)
	group := write("group.token", "group-token-0123456789", 0o640)
	password := write("redis.password", "secret", 0o644)
	cfg := write("limiterd.yaml", `stores:
  main: {type: redis, addrs: ["127.0.0.1:6379"], password_file: `+password+`}
namespaces:
  - {name: default, window_sizes: [1s], sync_rate: -1}
auth:
  tokens:
    - {name: open, token_file: `+open+`, namespaces: ["*"], operations: [read]}
    - {name: closed, token_file: `+closed+`, namespaces: ["*"], operations: [read]}
    - {name: group, token_file: `+group+`, namespaces: ["*"], operations: [read]}
`, 0o600)
	c, err := Load(Source{Path: cfg})
	if err != nil {
		t.Fatal(err)
	}
	got := c.ReadableByAll()
	want := []string{"auth.tokens[0].token_file: " + open + " (mode -rw-r--r--)", "stores.main.password_file: " + password + " (mode -rw-r--r--)"}
	if !slices.Equal(got, want) {
		t.Errorf("ReadableByAll() = %q; want %q", got, want)
	}
	for _, f := range got {
		if strings.Contains(f, closed) || strings.Contains(f, group) {
			t.Errorf("%s is listed", f)
		}
	}
}
