package resp

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// dial connects to addr, failing the test on error; the test's end closes
// the connection.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readLine reads one reply line within 5 s.
func readLine(t *testing.T, c net.Conn, r *bufio.Reader) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading a reply: %v (got %q)", err, line)
	}
	return line
}

// closedSoon reports whether the server closes c within d (reading and
// dropping whatever it still sends).
func closedSoon(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return err == nil || !(errors.As(err, &ne) && ne.Timeout())
}

// TestBadCommands: unknown commands, wrong arity and non-numbers are
// error replies; the connection goes on serving.
func TestBadCommands(t *testing.T) {
	_, addr := serveFront(t, newService(t, nil), Config{})
	c := dial(t, addr)
	r := bufio.NewReader(c)
	io.WriteString(c, "*1\r\n$6\r\nNOSUCH\r\n*1\r\n$9\r\nRL.REDUCE\r\n*4\r\n$9\r\nRL.REDUCE\r\n$1\r\nk\r\n$1\r\nx\r\n$2\r\n60\r\nPING\r\n")
	for _, want := range []string{
		"-ERR unknown command 'NOSUCH', with args beginning with: \r\n",
		"-ERR wrong number of arguments for 'rl.reduce' command\r\n",
		"-ERR max: value is not an integer or out of range\r\n",
		"+PONG\r\n",
	} {
		if got := readLine(t, c, r); got != want {
			t.Errorf("got %q; want %q", got, want)
		}
	}
}

// TestOversized: a bulk string, an array or an inline command over the
// cap is refused with a protocol error before its bytes arrive, and the
// connection is closed; commands before it in the pipeline are answered.
func TestOversized(t *testing.T) {
	_, addr := serveFront(t, newService(t, nil), Config{MaxCommandSize: 1 << 16})
	for _, c := range []struct {
		name, send, want string
	}{
		{"bulk", "PING\r\n*2\r\n$4\r\nECHO\r\n$70000\r\n", "-ERR Protocol error: a bulk string of 70000 bytes exceeds the command size limit of 65536 bytes\r\n"},
		{"array", "PING\r\n*100000000\r\n", "-ERR Protocol error: an array of 100000000 elements exceeds the command size limit of 65536 bytes\r\n"},
		{"huge count", "PING\r\n*9223372036854775807\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"inline", "PING\r\n" + strings.Repeat("a", 70000), "-ERR Protocol error: command longer than the limit of 65536 bytes\r\n"},
		{"many bulks", "PING\r\n*40\r\n" + strings.Repeat("$2000\r\n"+strings.Repeat("x", 2000)+"\r\n", 40), "-ERR Protocol error: command longer than the limit of 65536 bytes\r\n"},
		{"not a bulk", "PING\r\n*1\r\n:1\r\n", "-ERR Protocol error: expected '$', got ':'\r\n"},
		{"bad length", "PING\r\n*1\r\n$-5\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn := dial(t, addr)
			r := bufio.NewReader(conn)
			go io.WriteString(conn, c.send)
			if got := readLine(t, conn, r); got != "+PONG\r\n" {
				t.Errorf("first reply %q; want +PONG", got)
			}
			if got := readLine(t, conn, r); got != c.want {
				t.Errorf("got %q; want %q", got, c.want)
			}
			if !closedSoon(conn, 5*time.Second) {
				t.Error("the connection stayed open")
			}
		})
	}
}

// TestHalfSentCommand: a command whose bytes stop arriving is dropped
// with its connection after CommandTimeout; one cut by the client's
// close is simply dropped.
func TestHalfSentCommand(t *testing.T) {
	s, addr := serveFront(t, newService(t, nil), Config{CommandTimeout: 200 * time.Millisecond})
	c := dial(t, addr)
	io.WriteString(c, "*2\r\n$4\r\nECHO\r\n$5\r\nab")
	if !closedSoon(c, 5*time.Second) {
		t.Error("a half-sent command kept its connection open")
	}
	c2 := dial(t, addr)
	io.WriteString(c2, "*2\r\n$4\r\nECHO\r\n")
	c2.Close()
	waitConns(t, s, 0)
	// An idle connection (between commands) is not timed out.
	c3 := dial(t, addr)
	r := bufio.NewReader(c3)
	io.WriteString(c3, "PING\r\n")
	readLine(t, c3, r)
	time.Sleep(400 * time.Millisecond)
	io.WriteString(c3, "PING\r\n")
	if got := readLine(t, c3, r); got != "+PONG\r\n" {
		t.Errorf("idle connection: %q", got)
	}
}

// waitConns waits until s serves n connections. The wait is long: the
// server's own timeouts decide when a connection goes, and on a loaded
// machine dropping dozens of them takes a while.
func waitConns(t *testing.T, s *Server, n int) {
	t.Helper()
	began := time.Now()
	defer func() { t.Logf("%d connections after %v", n, time.Since(began).Round(time.Millisecond)) }()
	for deadline := began.Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		s.mu.Lock()
		got := len(s.conns)
		s.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections; want %d", got, n)
		}
	}
}

// TestMaxClients: a connection beyond MaxClients is told and closed.
func TestMaxClients(t *testing.T) {
	s, addr := serveFront(t, newService(t, nil), Config{MaxClients: 2})
	dial(t, addr)
	dial(t, addr)
	waitConns(t, s, 2)
	c := dial(t, addr)
	if got := readLine(t, c, bufio.NewReader(c)); got != "-ERR max number of clients reached\r\n" {
		t.Errorf("third connection: %q", got)
	}
}

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestHostileBounded: many clients at once send what costs the server
// most — commands just under the cap left half-sent, oversized headers,
// pipelines of large replies they never read — and the heap and the
// goroutines stay bounded while they do and return to where they were
// when they are gone.
func TestHostileBounded(t *testing.T) {
	const (
		capBytes = 256 << 10
		clients  = 32
	)
	s, addr := serveFront(t, newService(t, nil), Config{MaxCommandSize: capBytes, MaxClients: 3 * clients,
		CommandTimeout: time.Second, WriteTimeout: 500 * time.Millisecond, MaxPendingReplies: 4 << 10})
	heap0, gr0 := heapInUse(), runtime.NumGoroutine()

	var conns []net.Conn
	var wg sync.WaitGroup
	for i := range clients {
		c1 := dial(t, addr) // a command just under the cap, never finished
		c2 := dial(t, addr) // a pipeline of COMMAND DOCS, replies never read
		// A small receive buffer: the replies to one pipeline (2,000 of
		// 12 KB) must not fit in the kernel's buffers, or a client whose
		// writes a starved server read too slowly stops early, and the
		// server, its replies all buffered, sees an idle connection.
		if err := c2.(*net.TCPConn).SetReadBuffer(4 << 10); err != nil {
			t.Fatal(err)
		}
		c3 := dial(t, addr) // headers announcing more than the cap
		conns = append(conns, c1, c2, c3)
		wg.Go(func() {
			io.WriteString(c1, "*2\r\n$4\r\nECHO\r\n$262000\r\n"+strings.Repeat("x", 261000))
			pipe := strings.Repeat("*2\r\n$7\r\nCOMMAND\r\n$4\r\nDOCS\r\n", 2000)
			for range 20 {
				c2.SetWriteDeadline(time.Now().Add(2 * time.Second))
				if _, err := io.WriteString(c2, pipe); err != nil {
					break
				}
			}
			io.WriteString(c3, []string{"*999999999999\r\n", "*1\r\n$999999999999\r\n", "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$262144\r\n"}[i%3])
		})
	}
	wg.Wait()
	during, grDuring := heapInUse(), runtime.NumGoroutine()
	// Each connection may hold its read buffer (at most about twice the
	// cap), its pending replies and a write buffer.
	if limit := heap0 + uint64(3*clients)*(2*capBytes+64<<10) + 32<<20; during > limit {
		t.Errorf("heap with %d hostile clients: %d MiB; want at most %d MiB", 3*clients, during>>20, limit>>20)
	}
	if grDuring > gr0+3*clients+16 {
		t.Errorf("%d goroutines with %d clients; want at most %d", grDuring, 3*clients, gr0+3*clients+16)
	}
	// The server drops them all: half-sent ones after CommandTimeout,
	// non-readers after WriteTimeout, oversized ones at once.
	waitConns(t, s, 0)
	for _, c := range conns {
		c.Close()
	}
	time.Sleep(100 * time.Millisecond)
	if after := heapInUse(); after > heap0+16<<20 {
		t.Errorf("heap after the hostile clients left: %d MiB (before: %d MiB)", after>>20, heap0>>20)
	}
	if gr := runtime.NumGoroutine(); gr > gr0+4 {
		t.Errorf("%d goroutines after the hostile clients left; were %d", gr, gr0)
	}
	t.Logf("heap: %d MiB before, %d MiB with %d hostile clients; goroutines %d, %d", heap0>>20, during>>20, 3*clients, gr0, grDuring)
}

// TestShutdown: a shutdown answers the commands already sent, closes idle
// connections and makes Serve return nil; new connections are refused.
func TestShutdown(t *testing.T) {
	s := newTestServer(t, newService(t, nil), Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ln) }()
	busy := dial(t, ln.Addr().String())
	idle := dial(t, ln.Addr().String())
	waitConns(t, s, 2)
	io.WriteString(busy, strings.Repeat("RL.INCR k\r\n", 1000))
	s.Shutdown(context.Background())
	if err := <-errc; err != nil {
		t.Errorf("Serve: %v", err)
	}
	r := bufio.NewReader(busy)
	got := 0
	for {
		busy.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := r.ReadString('\n')
		if err != nil {
			break
		}
		if strings.HasPrefix(line, "*4") {
			got++
		}
	}
	// Every command that had reached the server before the shutdown is
	// answered: all of them, as they were sent before it began.
	if got != 1000 {
		t.Errorf("%d replies to 1000 pipelined commands", got)
	}
	if !closedSoon(idle, 5*time.Second) {
		t.Error("an idle connection outlived the shutdown")
	}
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Error("a connection was accepted after the shutdown")
	}
}

// TestShutdownTimeout: a call still running when the shutdown's context
// ends (a leaky bucket's wait) is canceled and its connection closed.
func TestShutdownTimeout(t *testing.T) {
	s := newTestServer(t, newService(t, nil), Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ln) }()
	c := dial(t, ln.Addr().String())
	r := bufio.NewReader(c)
	io.WriteString(c, "RL.LEAKY w 1 60000\r\n")
	readLine(t, c, r)
	io.WriteString(c, "RL.LEAKY w 1 60000 WAIT 60000\r\n") // waits a minute for a drip
	time.Sleep(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	s.Shutdown(ctx)
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Shutdown took %v with a 200ms context", took)
	}
	if err := <-errc; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if !closedSoon(c, 5*time.Second) {
		t.Error("the waiting call's connection outlived the shutdown")
	}
}

// TestLongPipelineNotCut: a client streaming commands for longer than
// CommandTimeout, each write ending inside a command, is not cut off:
// the timer is each command's, not the stream's.
func TestLongPipelineNotCut(t *testing.T) {
	// The timeout is 40 times the pause between writes, so that a loaded
	// machine's late write is not taken for a stalled command.
	_, addr := serveFront(t, newService(t, nil), Config{CommandTimeout: time.Second})
	c := dial(t, addr)
	r := bufio.NewReader(c)
	io.WriteString(c, "*1\r\n$4\r\nPI")
	const writes = 60 // 60 × 25 ms: 1.5 times the timeout
	for range writes {
		time.Sleep(25 * time.Millisecond)
		if _, err := io.WriteString(c, "NG\r\n*1\r\n$4\r\nPI"); err != nil {
			t.Fatalf("the connection was cut: %v", err)
		}
	}
	io.WriteString(c, "NG\r\n")
	for i := range writes + 1 {
		if got := readLine(t, c, r); got != "+PONG\r\n" {
			t.Fatalf("reply %d: %q", i, got)
		}
	}
}
