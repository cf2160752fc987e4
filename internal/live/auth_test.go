package live_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limiterd/limiterd/auth"
	"github.com/limiterd/limiterd/internal/config"
	"github.com/limiterd/limiterd/internal/live"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/service"
)

// TestApplyCredentials: each Apply replaces the running Authorizer's
// credentials with its config's (token files read again), from the next
// call on; a file that does not load changes nothing; turning
// authorization on or off is refused.
func TestApplyCredentials(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "app.token")
	cfgFile := filepath.Join(dir, "limiterd.yaml")
	write := func(path, data string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	withAuth := "namespaces:\n  - {name: default, window_sizes: [1s], sync_rate: -1}\nauth:\n  tokens:\n    - {name: app, token_file: " + tokenFile + ", namespaces: [default], operations: [read, write]}\n"
	write(cfgFile, withAuth)
	write(tokenFile, "first-token-0123456789")
	load := func() (config.Config, error) { return config.Load(config.Source{Path: cfgFile}) }
	cfg, err := load()
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(nil, node.SystemClock{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(n)
	if err != nil {
		t.Fatal(err)
	}
	running := new(auth.Authorizer)
	o := live.New(live.Options{Log: slog.New(slog.DiscardHandler), Node: n, Service: svc, Load: load, Authorizer: running})
	defer o.Stop()
	ctx := context.Background()
	if _, err := o.Apply(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if running.Token("first-token-0123456789") == nil {
		t.Fatal("the first token is not running after the start")
	}
	held := auth.WithPrincipal(ctx, running.Token("first-token-0123456789"))

	write(tokenFile, "second-token-0123456789")
	summary, err := o.Reload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(summary, "credentials: 1 tokens, 0 identities") {
		t.Errorf("reload summary %q does not count the credentials", summary)
	}
	if running.Token("first-token-0123456789") != nil || running.Token("second-token-0123456789") == nil {
		t.Error("after the reload the first token still authenticates, or the second does not")
	}
	if err := running.Authorize(held, "default", auth.Write); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("a principal of the first token after the reload: %v; want unauthenticated", err)
	}

	// A token file that does not load: the reload is refused, the running
	// token stays.
	write(tokenFile, "")
	if _, err := o.Reload(ctx); err == nil {
		t.Error("a reload with an empty token file was applied")
	}
	if running.Token("second-token-0123456789") == nil {
		t.Error("a refused reload changed the credentials")
	}

	// Turning authorization off is refused.
	write(tokenFile, "second-token-0123456789")
	write(cfgFile, "namespaces:\n  - {name: default, window_sizes: [1s], sync_rate: -1}\n")
	if _, err := o.Reload(ctx); err == nil || !strings.Contains(err.Error(), "takes a restart") {
		t.Errorf("a reload without the auth section: %v; want refused", err)
	}
	if running.Token("second-token-0123456789") == nil {
		t.Error("a refused reload changed the credentials")
	}
}

// TestApplyCredentialsOn: an Owner running without authorization refuses
// a config that turns it on.
func TestApplyCredentialsOn(t *testing.T) {
	n, err := node.New(nil, node.SystemClock{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(n)
	if err != nil {
		t.Fatal(err)
	}
	o := live.New(live.Options{Log: slog.New(slog.DiscardHandler), Node: n, Service: svc, Getenv: func(string) string { return "env-token-0123456789" }})
	defer o.Stop()
	cfg := config.Config{Namespaces: []config.NamespaceConfig{config.DefaultNamespace()},
		Auth: &config.AuthConfig{Tokens: []config.TokenConfig{{Name: "t", TokenEnv: "T", Namespaces: []string{"*"}, Operations: []string{"read"}}}}}
	if _, err := o.Apply(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "takes a restart") {
		t.Errorf("turning authorization on: %v; want refused", err)
	}
}
