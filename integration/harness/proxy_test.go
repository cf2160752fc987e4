package harness

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// echoServer answers every line with the same line, until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip writes line and reads the answer within timeout.
func roundTrip(c net.Conn, r *bufio.Reader, line string, timeout time.Duration) (string, error) {
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	got, err := r.ReadString('\n')
	return strings.TrimSuffix(got, "\n"), err
}

func dialProxy(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func TestProxyCutHoldsBytesUntilHeal(t *testing.T) {
	p := StartProxy(t, echoServer(t))
	c, r := dialProxy(t, p)
	if got, err := roundTrip(c, r, "one", 5*time.Second); err != nil || got != "one" {
		t.Fatalf("before the cut: got %q, %v; want \"one\"", got, err)
	}

	p.Cut()
	if got, err := roundTrip(c, r, "two", 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("during the cut: got %q, %v; want a time-out", got, err)
	}
	late, lr := dialProxy(t, p) // a connection made during the cut waits
	if got, err := roundTrip(late, lr, "three", 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("new connection during the cut: got %q, %v; want a time-out", got, err)
	}

	p.Heal()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "two\n" {
		t.Fatalf("after heal: held bytes arrived as %q, %v; want \"two\\n\"", got, err)
	}
	late.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := lr.ReadString('\n'); err != nil || got != "three\n" {
		t.Fatalf("after heal: the waiting connection read %q, %v; want \"three\\n\"", got, err)
	}
	if got, err := roundTrip(c, r, "four", 5*time.Second); err != nil || got != "four" {
		t.Fatalf("after heal: got %q, %v; want \"four\"", got, err)
	}
}

func TestProxyDropClosesConnections(t *testing.T) {
	p := StartProxy(t, echoServer(t))
	c, r := dialProxy(t, p)
	if got, err := roundTrip(c, r, "one", 5*time.Second); err != nil || got != "one" {
		t.Fatalf("before the drop: got %q, %v", got, err)
	}
	p.Drop()
	if got, err := roundTrip(c, r, "two", 5*time.Second); err == nil {
		t.Fatalf("after Drop the old connection answered %q; want it closed", got)
	}
	n, nr := dialProxy(t, p)
	if got, err := roundTrip(n, nr, "three", 5*time.Second); err == nil {
		t.Fatalf("a new connection during the drop answered %q; want it closed", got)
	}
	p.Heal()
	h, hr := dialProxy(t, p)
	if got, err := roundTrip(h, hr, "four", 5*time.Second); err != nil || got != "four" {
		t.Fatalf("after heal: got %q, %v; want \"four\"", got, err)
	}
}

func TestProxyCloseEndsConnections(t *testing.T) {
	p := StartProxy(t, echoServer(t))
	c, r := dialProxy(t, p)
	p.Cut()
	p.Close()
	if _, err := roundTrip(c, r, "x", 5*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("after Close: %v; want the connection closed", err)
	}
}
