package resp

import (
	"context"
	"net"
	"testing"
	"time"
)

// TestShutdownEndsServe: Shutdown of a serving server closes its
// listener and its idle connection, so Serve returns.
func TestShutdownEndsServe(t *testing.T) {
	s := newTestServer(t, newService(t, nil), Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ln) }()
	dial(t, ln.Addr().String()) // Serve is accepting once it is counted
	waitConns(t, s, 1)
	done := make(chan struct{})
	go func() {
		s.Shutdown(context.Background())
		close(done)
	}()
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second): // a bound on a hang, not a timing
		t.Fatal("Serve did not return in 10 s after Shutdown")
	}
	<-done
}
