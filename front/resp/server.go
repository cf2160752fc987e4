package resp

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limiterd/limiterd/auth"
	"github.com/limiterd/limiterd/service"
)

// Config tunes the front. The zero value of a field means its default.
type Config struct {
	// MaxCommandSize caps one command's encoded size in bytes: a longer
	// bulk string, array or inline command is answered with a protocol
	// error and the connection is closed (default 1 MiB).
	MaxCommandSize int
	// MaxClients is the most connections served at once; more are told so
	// and closed (default 10000).
	MaxClients int
	// MaxPendingReplies is how many bytes of replies to one pipeline are
	// buffered before they are written, so a pipeline of many large
	// replies holds no more (default 64 KiB).
	MaxPendingReplies int
	// WriteTimeout bounds one write of replies: a client that stops
	// reading its replies is disconnected after it (default 10s).
	WriteTimeout time.Duration
	// CommandTimeout is how long a command may take to arrive once its
	// first byte has: a half-sent command is dropped with its connection
	// after it (default 10s).
	CommandTimeout time.Duration
	// IdleTimeout closes a connection that sends nothing for that long;
	// 0 (the default, as Redis's timeout 0) never does.
	IdleTimeout time.Duration
	// AuthTimeout, with an Authorizer, closes a connection that has no
	// principal that long after it was accepted: one that has not
	// authenticated (AUTH, HELLO ... AUTH, or a command over a TLS
	// client certificate) is told NOAUTH and closed. 0 never does.
	AuthTimeout time.Duration
	// MaxQueuedCommands caps the commands a transaction (MULTI ...
	// EXEC) queues, and MaxQueuedBytes their arguments' bytes: past
	// either, the transaction is discarded (defaults 10000 and 1 MiB).
	MaxQueuedCommands int
	MaxQueuedBytes    int
	// Version is the server version HELLO and INFO report.
	Version string
	// Authorizer, when set, gives each connection its principal: the
	// token of its last successful AUTH (or HELLO ... AUTH), else its TLS
	// client certificate. The service, given the same authorizer, refuses
	// the RL.* commands of a connection without one (NOAUTH) or not
	// granted them (NOPERM).
	Authorizer *auth.Authorizer
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{MaxCommandSize: 1 << 20, MaxClients: 10000, MaxPendingReplies: 64 << 10,
		WriteTimeout: 10 * time.Second, CommandTimeout: 10 * time.Second,
		MaxQueuedCommands: 10000, MaxQueuedBytes: 1 << 20}
}

// withDefaults fills c's zero fields with the defaults.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MaxCommandSize == 0 {
		c.MaxCommandSize = d.MaxCommandSize
	}
	if c.MaxClients == 0 {
		c.MaxClients = d.MaxClients
	}
	if c.MaxPendingReplies == 0 {
		c.MaxPendingReplies = d.MaxPendingReplies
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = d.WriteTimeout
	}
	if c.CommandTimeout == 0 {
		c.CommandTimeout = d.CommandTimeout
	}
	if c.MaxQueuedCommands == 0 {
		c.MaxQueuedCommands = d.MaxQueuedCommands
	}
	if c.MaxQueuedBytes == 0 {
		c.MaxQueuedBytes = d.MaxQueuedBytes
	}
	if c.Version == "" {
		c.Version = "0.0.0"
	}
	return c
}

// Validate reports the first bad field.
func (c Config) Validate() error {
	switch {
	case c.MaxCommandSize < 0:
		return errors.New("resp: MaxCommandSize must not be negative")
	case c.MaxClients < 0:
		return errors.New("resp: MaxClients must not be negative")
	case c.MaxPendingReplies < 0:
		return errors.New("resp: MaxPendingReplies must not be negative")
	case c.MaxQueuedCommands < 0, c.MaxQueuedBytes < 0:
		return errors.New("resp: MaxQueuedCommands and MaxQueuedBytes must not be negative")
	case c.WriteTimeout < 0, c.CommandTimeout < 0, c.IdleTimeout < 0, c.AuthTimeout < 0:
		return errors.New("resp: timeouts must not be negative")
	}
	return nil
}

// Server serves the Redis protocol over a service.Service. It is safe for
// concurrent use; each connection is served by its own goroutine, one
// command after the other.
type Server struct {
	svc  *service.Service
	cfg  Config
	log  *slog.Logger
	m    *metrics
	cmds map[string]*command
	byID []*command // cmds by command.id

	// ctx is the calls' context, canceled when a shutdown runs out of
	// time.
	ctx    context.Context
	cancel context.CancelFunc

	started  time.Time
	ids      atomic.Int64
	commands atomic.Uint64

	// stopping mirrors closing for the reads, without the lock.
	stopping atomic.Bool

	mu      sync.Mutex
	conns   map[*frameConn]struct{}
	ln      *frameListener
	closing bool
	drained chan struct{} // closed when closing and no connection is left
	release chan struct{} // closed to let Serve return
	served  chan struct{} // closed when Serve has returned
}

// New returns a front over svc; reg, when not nil, gets its metrics.
func New(svc *service.Service, cfg Config, log *slog.Logger, reg prometheus.Registerer) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{svc: svc, cfg: cfg.withDefaults(), log: log, started: time.Now(),
		conns: map[*frameConn]struct{}{}, drained: make(chan struct{}), release: make(chan struct{}), served: make(chan struct{})}
	s.cmds = commandTable()
	s.byID = sortedCommands(s.cmds)
	for i, c := range s.byID {
		c.id = i
	}
	s.m = newMetrics(reg, s.cmds, svc)
	// The service reports each decision to the front's request metrics.
	s.svc = svc.Observe(service.FrontRESP, s.m.req)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Serve serves connections from ln until Shutdown; it returns nil then.
func (s *Server) Serve(ln net.Listener) error {
	fl := &frameListener{Listener: ln, s: s}
	s.mu.Lock()
	if s.ln != nil || s.closing {
		s.mu.Unlock()
		return errors.New("resp: Serve called twice or after Shutdown")
	}
	s.ln = fl
	s.mu.Unlock()
	defer close(s.served)
	return s.serve(fl)
}

// Shutdown stops accepting connections, lets every connection finish the
// commands it has sent (their replies are written) and closes it; when
// ctx ends first, the calls still running are canceled and the
// connections closed.
func (s *Server) Shutdown(ctx context.Context) {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return
	}
	s.closing = true
	s.stopping.Store(true)
	ln := s.ln
	if len(s.conns) == 0 {
		close(s.drained)
	}
	// Wake the readers waiting for a command: a read that gets nothing
	// within drainGrace fails, closing its connection.
	for c := range s.conns {
		c.Conn.SetReadDeadline(time.Now().Add(drainGrace))
	}
	s.mu.Unlock()
	if ln == nil {
		close(s.release)
		return
	}
	ln.Listener.Close()
	select {
	case <-s.drained:
	case <-ctx.Done():
		s.cancel()
	}
	close(s.release)
	<-s.served
	s.cancel()
}

// session is one connection's state.
type session struct {
	id      int64
	resp3   bool
	name    string
	libName string
	libVer  string
	w       reply
	// pending is the bytes of replies written since the last flush.
	pending int
	// ctx is the calls' context once the connection has a principal
	// (nil: the server's).
	ctx context.Context
	// tlsChecked: the TLS client certificate was looked at.
	tlsChecked bool
	// authed: the connection has had a principal (its authentication
	// deadline is lifted).
	authed bool
	// dead: the connection failed; the rest of its pipeline is skipped.
	dead bool
	// quit: close once this reply is written.
	quit bool
	// tx is the transaction MULTI began (nil: none).
	tx *transaction
	// counts are the commands run since the last flush to the metrics,
	// by command.id.
	counts []uint64
	// scratch is what a command works in: the service keeps none of it,
	// and one connection runs one command at a time, so it is reused
	// rather than allocated per command.
	scratch scratch
}

type scratch struct {
	call   call
	limits [service.MaxLimits + 1]service.Limit
	status [service.MaxLimits]service.LimitStatus
	rates  [service.MaxWindowSizes]service.Rate
	cost   float64
}

// accept admits fc, returning its session, or refuses it (nil).
func (s *Server) accept(fc *frameConn) *session {
	s.mu.Lock()
	refuse := ""
	switch {
	case s.closing:
		refuse = "ERR server is shutting down"
	case len(s.conns) >= s.cfg.MaxClients:
		refuse = "ERR max number of clients reached"
	}
	if refuse == "" {
		s.conns[fc] = struct{}{}
	}
	s.mu.Unlock()
	if refuse != "" {
		s.m.refused.Inc()
		fc.Write([]byte("-" + refuse + "\r\n"))
		return nil
	}
	s.m.conns.Inc()
	return &session{id: s.ids.Add(1)}
}

func (s *Server) closed(c *conn, err error) {
	s.flush(c.sess) // what a dead connection's pipeline ran
	fc := c.fc
	s.mu.Lock()
	if _, ok := s.conns[fc]; ok {
		delete(s.conns, fc)
		s.m.conns.Dec()
		if s.closing && len(s.conns) == 0 {
			close(s.drained)
		}
	}
	s.mu.Unlock()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		s.log.Debug("resp connection closed", "remote", fc.RemoteAddr().String(), "err", err)
	}
}

// handle runs one command of a pipeline (last: the last one the
// connection has sent) and queues its reply.
func (s *Server) handle(c *conn, args [][]byte, last bool) {
	sess := c.sess
	if sess.dead {
		return
	}
	sess.w.b = sess.w.b[:0]
	if s.cfg.Authorizer != nil && !sess.tlsChecked {
		// After the first read, so a TLS handshake is done.
		sess.tlsChecked = true
		if sess.ctx == nil {
			s.tlsPrincipal(sess, c)
		}
	}
	ctx := s.ctx
	if sess.ctx != nil {
		ctx = sess.ctx
	}
	s.exec(ctx, sess, args)
	if sess.ctx != nil && !sess.authed {
		// The authentication deadline no longer applies.
		sess.authed = true
		c.fc.authed.Store(true)
	}
	c.write(sess.w.b)
	sess.pending += len(sess.w.b)
	if cap(sess.w.b) > s.cfg.MaxPendingReplies {
		sess.w.b = nil // a large reply's buffer is not kept
	}
	switch {
	case sess.quit:
		s.flush(sess)
		sess.dead = true
		c.close()
	case last:
		s.flush(sess)
		sess.pending = 0 // the loop writes the replies now
	case sess.pending > s.cfg.MaxPendingReplies:
		sess.pending = 0
		if err := c.flush(); err != nil {
			sess.dead = true
			c.close()
		}
	}
}

// tlsPrincipal gives sess the principal of its TLS client certificate,
// if any.
func (s *Server) tlsPrincipal(sess *session, c *conn) {
	tc, ok := c.fc.Conn.(interface{ ConnectionState() tls.ConnectionState })
	if !ok {
		return
	}
	cs := tc.ConnectionState()
	if p := s.cfg.Authorizer.TLS(&cs); p != nil {
		sess.ctx = auth.WithPrincipal(s.ctx, p)
	}
}

// drainGrace is how long a read waits for a client's bytes once a
// shutdown has begun: what a client sent before it is still read and
// answered, and a connection with nothing more to say is closed.
const drainGrace = 50 * time.Millisecond

// frameListener hands out frameConns, and keeps Serve from returning
// (it then closes every connection at once) until Shutdown lets it.
type frameListener struct {
	net.Listener
	s *Server
}

func (l *frameListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		l.s.mu.Lock()
		closing := l.s.closing
		l.s.mu.Unlock()
		if closing {
			<-l.s.release
			return nil, net.ErrClosed
		}
		return nil, err
	}
	fc := &frameConn{Conn: c, s: l.s}
	fc.guard.max = int64(l.s.cfg.MaxCommandSize)
	if cfg := &l.s.cfg; cfg.Authorizer != nil && cfg.AuthTimeout > 0 {
		fc.authBy = time.Now().Add(cfg.AuthTimeout)
	}
	return fc, nil
}

// frameConn is a client's connection as the parser sees it: reads pass
// the frame guard and the read deadlines, writes the write deadline.
type frameConn struct {
	net.Conn
	s        *Server
	guard    frameGuard
	deadline bool  // a read deadline is set
	restart  bool  // a new command began: restart the command timer
	err      error // the guard's refusal, reported by the next read
	// authBy is when an unauthenticated connection is closed (zero:
	// never, or authenticated since); authed is set once it has a
	// principal.
	authBy time.Time
	authed atomic.Bool
	// until is the read deadline set (zero: none).
	until time.Time
}

// setReadDeadline sets the read deadline and remembers it.
func (c *frameConn) setReadDeadline(t time.Time) {
	c.Conn.SetReadDeadline(t)
	c.until = t
	c.deadline = !t.IsZero()
}

func (c *frameConn) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.refuse()
	}
	cfg := &c.s.cfg
	if !c.authBy.IsZero() && c.authed.Load() {
		// Authenticated: the deadlines below start afresh.
		c.authBy = time.Time{}
		c.setReadDeadline(time.Time{})
	}
	switch {
	case c.guard.mid():
		if !c.deadline || c.restart {
			// A command's bytes must arrive within CommandTimeout of the
			// read that found it unfinished.
			c.setReadDeadline(time.Now().Add(cfg.CommandTimeout))
			c.restart = false
		}
	case cfg.IdleTimeout > 0:
		c.setReadDeadline(time.Now().Add(cfg.IdleTimeout))
	case c.deadline:
		c.setReadDeadline(time.Time{})
	}
	if !c.authBy.IsZero() && (c.until.IsZero() || c.authBy.Before(c.until)) {
		c.setReadDeadline(c.authBy)
	}
	// Checked after the deadline is set, so that a Shutdown's wake-up
	// is not overwritten unseen. While shutting down, a read takes what
	// the client had sent, waiting no longer than drainGrace for it.
	if c.s.stopping.Load() {
		c.setReadDeadline(time.Now().Add(drainGrace))
	}
	done := c.guard.done
	n, err := c.Conn.Read(p)
	if err != nil && !c.authBy.IsZero() && !c.authed.Load() && !time.Now().Before(c.authBy) {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			c.s.m.authTimeouts.Inc()
			c.Write([]byte("-NOAUTH authentication required within " + cfg.AuthTimeout.String() + ": closing\r\n"))
			return n, err
		}
	}
	if n > 0 {
		ok, gerr := c.guard.scan(p[:n])
		if gerr != nil {
			c.err = gerr
			c.s.m.protocolErrors.Inc()
			if ok == 0 {
				return 0, c.refuse()
			}
			return ok, nil
		}
		// A command ended here and another began: its own timer starts
		// at the next read, so a client streaming a long pipeline is
		// never cut off.
		c.restart = c.guard.done != done
	}
	return n, err
}

// refuse answers the guard's refusal and fails the read, which closes the
// connection: what follows cannot be framed.
func (c *frameConn) refuse() error {
	c.Write([]byte("-ERR " + c.err.Error() + "\r\n"))
	return c.err
}

func (c *frameConn) Write(p []byte) (int, error) {
	c.Conn.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
	return c.Conn.Write(p)
}
