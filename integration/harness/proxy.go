package harness

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy on a free loopback port in front of a server: the
// clients that connect to it instead of the server can be cut off from the
// server and healed again, as by a network partition.
//
// While cut (Cut), every connection stays open but no byte passes in
// either direction: what the clients send waits in the proxy (and behind
// it in the kernel's buffers), and connections made during the cut are
// accepted but not yet dialled through. Clients see time-outs, as across
// a partition where packets are dropped. Heal lets the held bytes through
// in order, as TCP's retransmissions would, and dials the waiting
// connections. Drop closes every connection (the clients see a reset) and,
// until Heal, closes new ones at once, as a stopped server would.
//
// A Proxy is safe for concurrent use. It is closed at the test's cleanup.
type Proxy struct {
	tb     testing.TB
	ln     net.Listener
	target string

	mu      sync.Mutex
	open    chan struct{} // closed while the proxy is healed
	refuse  bool          // Drop: close connections at once
	delay   time.Duration // Slow: each chunk waits this long
	conns   map[*proxyConn]struct{}
	closed  bool
	done    chan struct{}
	accepts sync.WaitGroup
}

type proxyConn struct {
	client net.Conn

	mu     sync.Mutex
	server net.Conn
	closed bool
}

// setServer attaches the connection to the server; false if c was closed.
func (c *proxyConn) setServer(s net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.server = s
	return true
}

func (c *proxyConn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	c.client.Close()
	if c.server != nil {
		c.server.Close()
	}
}

// StartProxy listens on a free loopback port and forwards each connection
// to target (host:port), dialled when the client connects.
func StartProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("harness: proxy listen: %v", err)
	}
	p := &Proxy{tb: tb, ln: ln, target: target, open: make(chan struct{}), conns: map[*proxyConn]struct{}{}, done: make(chan struct{})}
	close(p.open)
	p.accepts.Add(1)
	go p.accept()
	tb.Cleanup(p.Close)
	return p
}

// Addr returns the proxy's host:port, which clients use instead of the
// server's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port returns the proxy's port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Cut stops every byte between the clients and the server until Heal.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default: // already cut
	}
}

// Drop closes every connection and, until Heal, every new one at once.
func (p *Proxy) Drop() {
	p.mu.Lock()
	p.refuse = true
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

// Slow holds every chunk of bytes d before passing it on (each way), as a
// slow network or server would; 0 ends it.
func (p *Proxy) Slow(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

func (p *Proxy) slowness() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delay
}

// Heal ends a Cut or a Drop: held bytes and connections go through.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = false
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

// Close stops listening and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.done)
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	p.ln.Close()
	for _, c := range conns {
		c.close()
	}
	p.accepts.Wait()
}

// gate returns the channel that is closed while the proxy is healed, and
// whether new connections are to be closed at once.
func (p *Proxy) gate() (<-chan struct{}, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open, p.refuse
}

// wait blocks until the proxy is healed or closed; false means closed.
func (p *Proxy) wait() bool {
	for {
		open, _ := p.gate()
		select {
		case <-open:
			// Cut may have run between gate and here: look again.
			if o, _ := p.gate(); o == open {
				return true
			}
		case <-p.done:
			return false
		}
	}
}

func (p *Proxy) accept() {
	defer p.accepts.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		c := &proxyConn{client: client}
		p.mu.Lock()
		if p.closed || p.refuse {
			p.mu.Unlock()
			client.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		go p.serve(c)
	}
}

func (p *Proxy) serve(c *proxyConn) {
	defer func() {
		c.close()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	if !p.wait() {
		return
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !c.setServer(server) {
		server.Close()
		return
	}
	errc := make(chan error, 2)
	go func() { errc <- p.copy(server, c.client) }()
	go func() { errc <- p.copy(c.client, server) }()
	<-errc // either direction ending ends the connection
}

// copy forwards src to dst, holding each chunk while the proxy is cut.
func (p *Proxy) copy(dst, src net.Conn) error {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.wait() {
				return errors.New("proxy closed")
			}
			if d := p.slowness(); d > 0 {
				time.Sleep(d)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// String describes the proxy for failure messages.
func (p *Proxy) String() string { return fmt.Sprintf("proxy %s -> %s", p.Addr(), p.target) }
