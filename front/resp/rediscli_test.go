package resp

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// tool finds a Redis tool: under CI=true a missing one fails the test,
// else it skips it (Debian's redis-tools, which scripts/test.sh installs
// with redis-server).
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not found (Debian package redis-tools): %v", name, err)
		}
		t.Skipf("%s not found (Debian package redis-tools)", name)
	}
	return p
}

// cli runs redis-cli against addr with args and returns its output.
func cli(t *testing.T, bin, addr string, args ...string) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, append([]string{"-h", host, "-p", port}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestRedisCLISmyte: Smyte's transcript with the real redis-cli, as the
// blog and smyte/ratelimit's README show it.
func TestRedisCLISmyte(t *testing.T) {
	bin := tool(t, "redis-cli")
	_, addr := serveFront(t, newService(t, nil), Config{})
	for i, want := range []string{"(integer) 2", "(integer) 1", "(integer) 0"} {
		if got := strings.TrimSpace(cli(t, bin, addr, "--no-raw", "RL.REDUCE", "TwoPerMin", "2", "60")); got != want {
			t.Errorf("call %d: redis-cli RL.REDUCE TwoPerMin 2 60 = %q; want %q", i+1, got, want)
		}
	}
	// RESP3, and an error as redis-cli shows it.
	if got := cli(t, bin, addr, "-3", "--no-raw", "RL.INCR", "k", "WINDOW", "1000"); !strings.Contains(got, `1# "1s" => (double) 1`) {
		t.Errorf("redis-cli -3 RL.INCR = %q; want a map of 1s to a double", got)
	}
	if got := cli(t, bin, addr, "--no-raw", "RL.REDUCE", "x", "abc", "60"); !strings.Contains(got, "(error) ERR max: value is not an integer or out of range") {
		t.Errorf("redis-cli bad max = %q", got)
	}
	if got := cli(t, bin, addr, "--no-raw", "COMMAND", "COUNT"); !strings.Contains(got, "(integer) 29") {
		t.Errorf("redis-cli COMMAND COUNT = %q", got)
	}
	// Commands on stdin: redis-cli first reads COMMAND DOCS for its help
	// (a reply it cannot read crashes it), then runs them on one
	// connection.
	host, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-h", host, "-p", port)
	cmd.Stdin = strings.NewReader("RL.REDUCE piped 2 60\nRL.REDUCE piped 2 60\nRL.REDUCE piped 2 60\n")
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "2\n1\n0\n" {
		t.Errorf("redis-cli with commands on stdin: %v, %q; want 2, 1, 0", err, out)
	}
}
