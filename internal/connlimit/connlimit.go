// Package connlimit caps the connections a listener holds: in total, and
// per client address, so that one client cannot take every descriptor
// of the process, nor every connection of a listener.
package connlimit

import (
	"net"
	"sync"
	"syscall"

	"golang.org/x/net/netutil"
)

// Limits are one listener's caps.
type Limits struct {
	// Total is the most connections the listener holds at once: past
	// it, Accept waits for one to close (the kernel queues the others).
	Total int
	// PerAddress is the most one client address holds: past it, a new
	// connection from that address is closed as soon as it is accepted.
	// The loopback addresses a sidecar proxy connects from (127.0.0.1
	// and ::1) are held only to Total.
	PerAddress int
}

// Reserve is how many descriptors the defaults leave to the rest of the
// process (store connections, files, the connections it dials), at the
// least: a quarter of the limit when that is more.
const Reserve = 256

// DescriptorLimit is the process's descriptor limit (RLIMIT_NOFILE, its
// soft value, which Go raises to the hard one at start), or 0 when it
// cannot be read.
func DescriptorLimit() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	if rl.Cur > 1<<30 {
		return 1 << 30
	}
	return int(rl.Cur)
}

// Defaults derives listeners caps from the descriptor limit nofile,
// shared among listeners listeners: what is left after the reserve
// (Reserve, or a quarter of nofile when more) is divided evenly, and one
// address may hold half of a listener's share. A limit that cannot be
// read (0) counts as 1024.
func Defaults(nofile, listeners int) Limits {
	if nofile <= 0 {
		nofile = 1024
	}
	if listeners < 1 {
		listeners = 1
	}
	reserve := max(Reserve, nofile/4)
	total := max((nofile-reserve)/listeners, 16)
	return Limits{Total: total, PerAddress: max(total/2, 1)}
}

// Listen wraps ln with the caps of l; a cap of 0 or less is none.
// refused, when not nil, is called for each connection closed at the
// PerAddress cap.
func Listen(ln net.Listener, l Limits, refused func()) net.Listener {
	if l.PerAddress > 0 {
		ln = &perAddress{Listener: ln, max: l.PerAddress, held: map[string]int{}, refused: refused}
	}
	if l.Total > 0 {
		ln = netutil.LimitListener(ln, l.Total)
	}
	return ln
}

// perAddress closes a connection from an address that already holds max.
type perAddress struct {
	net.Listener
	max     int
	refused func()
	mu      sync.Mutex
	held    map[string]int
}

// exempt reports whether host is an address a sidecar proxy connects
// from, held only to the total cap.
func exempt(host string) bool { return host == "127.0.0.1" || host == "::1" }

func (l *perAddress) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host := hostOf(c.RemoteAddr())
		if exempt(host) {
			return c, nil
		}
		l.mu.Lock()
		if l.held[host] >= l.max {
			l.mu.Unlock()
			// Counted before the close, so that a client that sees its
			// connection closed finds the refusal counted.
			if l.refused != nil {
				l.refused()
			}
			c.Close()
			continue
		}
		l.held[host]++
		l.mu.Unlock()
		return &addrConn{Conn: c, l: l, host: host}, nil
	}
}

func hostOf(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// addrConn gives its address's slot back when closed, once.
type addrConn struct {
	net.Conn
	l    *perAddress
	host string
	once sync.Once
}

func (c *addrConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		if c.l.held[c.host]--; c.l.held[c.host] <= 0 {
			delete(c.l.held, c.host)
		}
		c.l.mu.Unlock()
	})
	return err
}
