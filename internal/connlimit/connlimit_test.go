package connlimit

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

func TestDefaults(t *testing.T) {
	for _, c := range []struct {
		nofile, listeners int
		want              Limits
	}{
		{2048, 4, Limits{Total: 384, PerAddress: 192}},
		{2048, 1, Limits{Total: 1536, PerAddress: 768}},
		{1024, 3, Limits{Total: 256, PerAddress: 128}},
		{1 << 20, 4, Limits{Total: 196608, PerAddress: 98304}},
		{0, 2, Limits{Total: 384, PerAddress: 192}},
		{100, 4, Limits{Total: 16, PerAddress: 8}},
	} {
		if got := Defaults(c.nofile, c.listeners); got != c.want {
			t.Errorf("Defaults(%d, %d) = %+v, want %+v", c.nofile, c.listeners, got, c.want)
		}
	}
}

// dialFrom connects to addr from the local address from.
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByServer reports whether the server closed c (a read ends with
// EOF or a reset) rather than keeping it open for 200ms.
func closedByServer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

func TestPerAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var refused atomic.Int64
	l := Listen(ln, Limits{Total: 10, PerAddress: 2}, func() { refused.Add(1) })
	defer l.Close()
	accepted := make(chan net.Conn, 20)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	addr := ln.Addr().String()
	a1, a2 := dialFrom(t, "127.0.0.2", addr), dialFrom(t, "127.0.0.2", addr)
	s1, s2 := <-accepted, <-accepted
	// A third from the same address is closed; another address gets in.
	if a3 := dialFrom(t, "127.0.0.2", addr); !closedByServer(a3) {
		t.Error("a third connection from 127.0.0.2 stayed open at a cap of 2 per address")
	}
	if n := refused.Load(); n != 1 {
		t.Errorf("%d refusals counted; want 1", n)
	}
	dialFrom(t, "127.0.0.3", addr)
	<-accepted
	// The exempt loopback address is held only to the total.
	for range 3 {
		dialFrom(t, "127.0.0.1", addr)
		<-accepted
	}
	// A closed connection gives its slot back.
	s1.Close()
	if _, err := a1.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("read after the server closed: %v", err)
	}
	dialFrom(t, "127.0.0.2", addr)
	select {
	case <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("a connection from 127.0.0.2 was not accepted after one of its two closed")
	}
	_, _ = s2, a2
}

func TestTotal(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Listen(ln, Limits{Total: 2, PerAddress: 2}, nil)
	defer l.Close()
	accepted := make(chan net.Conn, 20)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	addr := ln.Addr().String()
	dialFrom(t, "127.0.0.2", addr)
	dialFrom(t, "127.0.0.3", addr)
	s := <-accepted
	<-accepted
	dialFrom(t, "127.0.0.4", addr)
	select {
	case <-accepted:
		t.Fatal("a third connection was accepted at a total of 2")
	case <-time.After(100 * time.Millisecond):
	}
	s.Close()
	select {
	case <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting connection was not accepted once one closed")
	}
}
