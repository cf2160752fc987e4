//go:build integration

package integration

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/integration/harness"
)

// TestRESPTransactionsAsRedis sends the same commands to a real Redis
// and to limiterd's Redis protocol and compares the replies byte for
// byte: MULTI, EXEC, DISCARD and WATCH in and out of a transaction, a
// command that cannot be queued (unknown, or a wrong number of
// arguments), and the error texts of an unknown command and of a wrong
// count, with commands both serve (PING, ECHO, SELECT).
func TestRESPTransactionsAsRedis(t *testing.T) {
	redisAddr := harness.SharedRedis(t).Addr()
	resp := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	harness.StartLimiterd(t, "resp-parity", "resp_addr: "+resp+"\n")
	for _, seq := range [][]string{
		{"EXEC", "DISCARD", "echo", "ECHO a b", "NOSUCH x y", "ping a b"},
		{"MULTI", "PING", "ECHO hi", "SELECT 0", "EXEC", "EXEC"},
		{"MULTI", "EXEC"},
		{"MULTI", "MULTI", "WATCH k", "PING", "EXEC"},
		{"MULTI", "PING", "NOSUCH x", "PING", "EXEC", "EXEC"},
		{"MULTI", "PING", "ECHO", "PING", "EXEC"},
		{"MULTI", "EXEC x", "EXEC", "EXEC x y"},
		{"MULTI", "PING", "DISCARD x", "PING", "EXEC"},
		{"MULTI", "PING", "DISCARD", "DISCARD", "EXEC"},
		{"MULTI", "UNWATCH", "PING", "EXEC"},
	} {
		want := transcript(t, redisAddr, seq)
		got := transcript(t, resp, seq)
		if got != want {
			t.Errorf("%q:\nlimiterd %q\nRedis    %q", seq, got, want)
		}
	}
}

// transcript sends lines (inline commands) to addr on one connection and
// returns every reply, up to that of a last ECHO.
func transcript(t *testing.T, addr string, lines []string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	const end = "$15\r\nend-of-sequence\r\n"
	if _, err := io.WriteString(c, strings.Join(lines, "\r\n")+"\r\nECHO end-of-sequence\r\n"); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	r := bufio.NewReader(c)
	for !strings.HasSuffix(b.String(), end) {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("%s: %q: %v after %q", addr, lines, err, b.String())
		}
		b.WriteString(line)
	}
	return strings.TrimSuffix(b.String(), end)
}
