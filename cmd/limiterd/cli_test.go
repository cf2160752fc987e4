package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// runCLI runs limiterd with args, which must return before its context
// ends (that is, not serve).
func runCLI(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out, errOut lockedBuffer
	err = run(ctx, args, envFunc(map[string]string{envGRPCAddr: holdAddr(t), envHTTPAddr: "off"}), &out, &errOut)
	if ctx.Err() != nil {
		t.Fatalf("run(%q) returned %v only when its context ended", args, err)
	}
	return out.String(), errOut.String(), err
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"-help"}, {"help"}} {
		stdout, _, err := runCLI(t, args...)
		if err != nil || exitCode(err) != 0 {
			t.Errorf("%q: error %v, want none (exit 0)", args, err)
		}
		for _, want := range []string{"Usage:", "limiterd schema", "limiterd version", "-config", "-grpc-addr", "LIMITERD_CONFIG",
			"limiterd check [flags]", "admin listen address: the admin API (namespaces, reload, sync) and /debug/pprof/"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("%q: usage lacks %q:\n%s", args, want, stdout)
			}
		}
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		stdout, _, err := runCLI(t, args...)
		if err != nil {
			t.Errorf("%q: %v", args, err)
		}
		if !strings.HasPrefix(stdout, "limiterd ") || !strings.Contains(stdout, "revision ") || strings.Count(stdout, "\n") != 1 {
			t.Errorf("%q printed %q, want one line: limiterd VERSION revision REV ...", args, stdout)
		}
	}
}

// TestUsageErrors: a command line limiterd does not understand is a usage
// error (exit 2, the usage on stderr), never a start on the default
// config.
func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--config", "x.yaml"},
		{"x.yaml"},
		{"--config", "x.yaml", "extra"},
		{"--log-level", "debug", "serve"},
		{"--no-such-flag"},
		{"--grpc-addr"},
		{"version", "now"},
		{"help", "me"},
		{"Schema"},
	} {
		_, _, err := runCLI(t, args...)
		var ue *usageError
		if !errors.As(err, &ue) {
			t.Errorf("%q: error %v (%T), want a *usageError", args, err, err)
			continue
		}
		if !strings.Contains(ue.usage, "Usage:") {
			t.Errorf("%q: the usage error carries no usage: %q", args, ue.usage)
		}
		if got := exitCode(err); got != 2 {
			t.Errorf("%q: exit code %d, want 2", args, got)
		}
	}
}

func TestExitCodes(t *testing.T) {
	if got := exitCode(nil); got != 0 {
		t.Errorf("exitCode(nil) = %d, want 0", got)
	}
	if got := exitCode(errors.New("store down")); got != 1 {
		t.Errorf("exitCode(an error) = %d, want 1", got)
	}
}

func TestSubcommandErrors(t *testing.T) {
	for _, args := range [][]string{{"probe"}, {"probe", "a", "b"}, {"schema"}, {"schema", "redis"}} {
		if _, _, err := runCLI(t, args...); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
	stdout, _, err := runCLI(t, "schema", "postgres")
	if err != nil || !strings.Contains(stdout, "CREATE") {
		t.Errorf("schema postgres: %v, %.100q", err, stdout)
	}
}
