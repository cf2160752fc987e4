package resp

import (
	"io"
	"net"
	"strings"
	"testing"
)

// TestConnBufferFollowsCommands: a command longer than the read buffer,
// arriving in pieces, grows the buffer until it is whole and parsed; the
// next read, once it is run, starts again from a small buffer.
func TestConnBufferFollowsCommands(t *testing.T) {
	s := newTestServer(t, newService(t, nil), Config{})
	srv, cli := net.Pipe()
	t.Cleanup(func() { srv.Close(); cli.Close() })
	fc := &frameConn{Conn: srv, s: s}
	fc.guard.max = int64(s.cfg.MaxCommandSize)
	c := &conn{fc: fc, sess: &session{}, buf: make([]byte, readBuffer)}

	arg := strings.Repeat("x", 5*readBuffer)
	cmd := "*2\r\n$4\r\nECHO\r\n$20480\r\n" + arg + "\r\n*1\r\n$4\r\nPI"
	go func() {
		for i := 0; i < len(cmd); i += 1000 {
			io.WriteString(cli, cmd[i:min(i+1000, len(cmd))])
		}
	}()
	for len(c.ends) == 0 {
		if err := c.read(); err != nil {
			t.Fatal(err)
		}
		if err := c.parse(); err != nil {
			t.Fatal(err)
		}
	}
	if len(c.ends) != 1 || len(c.argv) != 2 || string(c.argv[0]) != "ECHO" || string(c.argv[1]) != arg {
		t.Fatalf("parsed %d commands, %d arguments", len(c.ends), len(c.argv))
	}
	if len(c.buf) <= len(cmd)-len("*1\r\n$4\r\nPI") {
		t.Fatalf("buffer of %d bytes holds a command of %d", len(c.buf), len(cmd))
	}
	if got := string(c.buf[c.start:c.end]); !strings.HasPrefix("*1\r\n$4\r\nPING\r\n", got) {
		t.Fatalf("left after the command: %q", got)
	}
	c.argv, c.ends = c.argv[:0], c.ends[:0]

	go io.WriteString(cli, "NG\r\n")
	for len(c.ends) == 0 {
		if err := c.read(); err != nil {
			t.Fatal(err)
		}
		if err := c.parse(); err != nil {
			t.Fatal(err)
		}
	}
	if len(c.argv) != 1 || string(c.argv[0]) != "PING" {
		t.Fatalf("parsed %q", c.argv)
	}
	c.argv, c.ends = c.argv[:0], c.ends[:0]
	go io.WriteString(cli, "PING\r\n")
	if err := c.read(); err != nil {
		t.Fatal(err)
	}
	if len(c.buf) != readBuffer {
		t.Fatalf("after the long command, a read buffer of %d bytes", len(c.buf))
	}
}
