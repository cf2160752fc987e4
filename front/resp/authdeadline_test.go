package resp

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestAuthDeadline: a connection that has not authenticated by
// AuthTimeout is told NOAUTH and closed, one that sent commands but no
// AUTH too; one that authenticated stays past it, also mid-command.
func TestAuthDeadline(t *testing.T) {
	cfg := authConfig(t)
	const deadline = 300 * time.Millisecond
	cfg.AuthTimeout = deadline
	_, addr := serveFront(t, newService(t, nil).WithAuthorizer(cfg.Authorizer), cfg)
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(3 * time.Second))
		return c
	}
	// The authenticated connection first: its deadline has passed when
	// the others' have.
	authed := dial()
	ar := bufio.NewReader(authed)
	io.WriteString(authed, "AUTH "+testToken+"\r\n")
	if line, _ := ar.ReadString('\n'); line != "+OK\r\n" {
		t.Fatalf("AUTH: %q", line)
	}
	// Half a command, finished after the deadline.
	io.WriteString(authed, "*2\r\n$7\r\nRL.INCR\r\n")
	start := time.Now()
	silent, pinging := dial(), dial()
	r := bufio.NewReader(pinging)
	if _, err := io.WriteString(pinging, "PING\r\n"); err != nil {
		t.Fatal(err)
	}
	if line, _ := r.ReadString('\n'); line != "+PONG\r\n" {
		t.Fatalf("PING: %q", line)
	}
	for name, got := range map[string]string{"silent": readAll(t, silent), "pinging": readAll(t, r)} {
		if !strings.HasPrefix(got, "-NOAUTH") {
			t.Errorf("the %s connection got %q at its close; want NOAUTH", name, got)
		}
	}
	if took := time.Since(start); took < deadline {
		t.Errorf("closed after %s, before the deadline of %s", took, deadline)
	}
	io.WriteString(authed, "$1\r\nk\r\n")
	// RL.INCR's reply is an array.
	if line, err := ar.ReadString('\n'); !strings.HasPrefix(line, "*") {
		t.Errorf("the authenticated connection after the deadline: %q, %v", line, err)
	}
	// The deadline has certainly passed by now (the others' came later
	// and are over), whenever the server's timer fired: a further command
	// is answered too.
	io.WriteString(authed, "PING\r\n")
	for {
		line, err := ar.ReadString('\n')
		if err != nil || strings.HasPrefix(line, "-") {
			t.Fatalf("the authenticated connection after the deadline, PING: %q, %v", line, err)
		}
		if line == "+PONG\r\n" {
			break
		}
	}
}

// readAll reads r to its close.
func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Errorf("reading to the close: %v", err)
	}
	return string(b)
}
