package httpfront

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limiterd/limiterd/auth"
	"github.com/limiterd/limiterd/internal/reqmetrics"
)

// Timeouts are the net/http server's, which the Listener keeps on the
// connections it serves itself.
type Timeouts struct {
	ReadHeader, Read, Write, Idle time.Duration
}

// ServerTimeouts are srv's timeouts.
func ServerTimeouts(srv *http.Server) Timeouts {
	return Timeouts{ReadHeader: srv.ReadHeaderTimeout, Read: srv.ReadTimeout, Write: srv.WriteTimeout, Idle: srv.IdleTimeout}
}

// Listener answers the Allow calls of the fast path's shape (an HTTP/1.1
// POST of a small body, fastallow.go) on the connections it accepts,
// without net/http's server, whose cost per call is that of the call
// itself. At a connection's first other request, or anything unusual
// (another method or path, a Connection, Expect or Transfer-Encoding
// header, a call without credentials, a body not arrived in time, the
// bytes in flight full), the connection, with every byte not yet
// answered, is handed to the net/http server serving the Listener (as
// its net.Listener), which answers that request and every later one as
// it always has. Serve a plain (not TLS) listener with it: net/http
// keeps HTTP/2 for TLS.
type Listener struct {
	net.Listener // the one accepted from
	h            *Handler
	t            Timeouts
	allow        *reqmetrics.Method // nil: no metrics

	start  sync.Once
	handed chan net.Conn
	done   chan struct{} // closed when accepting ends, err set
	err    error

	date atomic.Pointer[dateLine] // the Date of this second's answers

	closing atomic.Bool
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	serving sync.WaitGroup
}

// connBufSize holds a request of the fast path: its header (at most
// half) and a body of at most fastAllowMax.
const connBufSize = 2 * fastAllowMax

// Listen returns ln with h's Allow calls of the fast path's shape answered
// on its connections, recorded in m (nil: not recorded) as Metrics
// records them; serve it with a net/http server whose timeouts are t, and
// stop it with Shutdown after that server's.
func (h *Handler) Listen(ln net.Listener, m *reqmetrics.Metrics, t Timeouts) *Listener {
	l := &Listener{Listener: ln, h: h, t: t, handed: make(chan net.Conn), done: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	if m != nil {
		l.allow = m.Method(APIPrefix[1:] + "Allow")
	}
	return l
}

// Accept returns the next connection handed to net/http.
func (l *Listener) Accept() (net.Conn, error) {
	l.start.Do(func() { go l.accept() })
	select {
	case c := <-l.handed:
		return c, nil
	case <-l.done:
		return nil, l.err
	}
}

func (l *Listener) accept() {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && !l.closing.Load() {
				// As net/http: out of descriptors and the like pass.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			l.err = err
			close(l.done)
			return
		}
		delay = 0
		l.mu.Lock()
		if l.closing.Load() {
			l.mu.Unlock()
			c.Close()
			continue
		}
		l.conns[c] = struct{}{}
		l.serving.Add(1)
		l.mu.Unlock()
		go l.serve(c)
	}
}

// Close stops accepting, and ends the connections it serves once their
// call in progress is answered.
func (l *Listener) Close() error {
	err := l.Listener.Close()
	l.mu.Lock()
	l.closing.Store(true)
	for c := range l.conns {
		c.SetReadDeadline(time.Now()) // wakes the ones waiting for a request
	}
	l.mu.Unlock()
	return err
}

// Shutdown closes the Listener and waits for its connections to end, or
// until ctx ends, when it closes them.
func (l *Listener) Shutdown(ctx context.Context) {
	l.Close()
	ended := make(chan struct{})
	go func() {
		l.serving.Wait()
		close(ended)
	}()
	select {
	case <-ended:
	case <-ctx.Done():
		l.mu.Lock()
		for c := range l.conns {
			c.Close()
		}
		l.mu.Unlock()
	}
}

// serve answers c's requests while they are of the fast path's shape.
func (l *Listener) serve(c net.Conn) {
	defer l.serving.Done()
	cs := connState{br: bufio.NewReaderSize(c, connBufSize)}
	handOff := false
	for first := true; ; first = false {
		next, h := l.serveOne(c, &cs, first)
		if !next {
			handOff = h
			break
		}
	}
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
	if !handOff || l.closing.Load() {
		c.Close()
		return
	}
	c.SetDeadline(time.Time{})
	hc := &handedConn{Conn: c, br: cs.br}
	select {
	case l.handed <- hc:
	case <-l.done:
		c.Close()
	}
}

// connState is a connection's buffers, kept from one request to the next.
type connState struct {
	br  *bufio.Reader
	out []byte
}

// serveOne answers one request; next says whether to read another, else
// handOff whether net/http is to answer it (or close the connection).
func (l *Listener) serveOne(c net.Conn, cs *connState, first bool) (next, handOff bool) {
	br := cs.br
	if br.Buffered() == 0 {
		// As net/http: the first request's header within ReadHeader, a
		// later request's first byte within Idle.
		wait := l.t.Idle
		if first || wait == 0 {
			wait = l.t.ReadHeader
		}
		if wait == 0 {
			wait = l.t.Read
		}
		setDeadline(c.SetReadDeadline, wait)
		if l.closing.Load() { // Close may have woken it before the deadline was set
			return false, false
		}
		if _, err := br.Peek(1); err != nil {
			return false, false // gone, idle or shut down: net/http closes it too
		}
	}
	t0 := time.Now()
	end := -1
	for timed := first; ; timed = true {
		buf, _ := br.Peek(br.Buffered())
		if end = bytes.Index(buf, []byte("\r\n\r\n")); end >= 0 {
			break
		}
		if len(buf) >= connBufSize/2 {
			return false, true
		}
		if !timed {
			setDeadline(c.SetReadDeadline, l.t.ReadHeader)
		}
		if _, err := br.Peek(len(buf) + 1); err != nil {
			return false, !isTimeout(err)
		}
	}
	hdr, _ := br.Peek(end + 4)
	req, ok := parseFastHeader(hdr[:end+2])
	if !ok || l.closing.Load() {
		return false, true
	}
	h := l.h
	h.inflight.Add(1)
	defer h.inflight.Add(-1)
	if h.closing.Load() {
		return false, true
	}
	ctx := context.Background()
	if h.authz != nil {
		if req.authzCount > 1 || len(req.authz) > auth.MaxAuthorizationBytes {
			return false, true
		}
		token := ""
		if req.authzCount == 1 {
			if token = auth.Bearer(string(req.authz)); token == "" {
				return false, true
			}
		}
		p := h.authz.Authenticate(token, nil)
		if p == nil {
			return false, true
		}
		ctx = auth.WithPrincipal(ctx, p)
	}
	if h.held != nil {
		if !h.held.TryAcquire(req.length) {
			return false, true
		}
		defer h.held.Release(req.length)
	}
	size := end + 4 + int(req.length)
	if br.Buffered() < size {
		setDeadline(c.SetReadDeadline, l.t.Read)
		if _, err := br.Peek(size); err != nil {
			return false, true
		}
	}
	all, _ := br.Peek(size)
	resp, ok, err := h.callAllow(ctx, all[end+4:])
	if !ok {
		return false, true
	}
	closing := l.closing.Load()
	var code int
	if err == nil {
		code = http.StatusOK
		cs.out = appendResponseHead(cs.out[:0], code, nil, l.dateHeader(), closing)
		mark := len(cs.out)
		cs.out = appendAllowResponse(cs.out, resp)
		cs.out = appendContentLength(cs.out, mark)
	} else {
		code, cs.out = l.appendError(cs.out[:0], ctx, int64(req.length), err, closing)
	}
	br.Discard(size)
	setDeadline(c.SetWriteDeadline, l.t.Write)
	_, werr := c.Write(cs.out)
	if l.allow != nil {
		l.allow.Observe(time.Since(t0), statusCode(code))
	}
	return werr == nil && !closing, false
}

// dateLine is a Date header line, formatted once a second.
type dateLine struct {
	sec  int64
	line []byte
}

// dateHeader is the Date header line of an answer now.
func (l *Listener) dateHeader() []byte {
	now := time.Now()
	if d := l.date.Load(); d != nil && d.sec == now.Unix() {
		return d.line
	}
	d := &dateLine{sec: now.Unix()}
	d.line = append(now.UTC().AppendFormat([]byte("Date: "), http.TimeFormat), "\r\n"...)
	l.date.Store(d)
	return d.line
}

// setDeadline sets a deadline d from now, none for 0.
func setDeadline(set func(time.Time) error, d time.Duration) {
	if d > 0 {
		set(time.Now().Add(d))
	} else {
		set(time.Time{})
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// fastHeader is what the fast path reads of a request's header.
type fastHeader struct {
	length     int64
	authz      []byte
	authzCount int
}

// fastRequestLine is the only request line of the fast path.
const fastRequestLine = "POST " + APIPrefix + "Allow HTTP/1.1\r\n"

// parseFastHeader reads a header block (each line ending in CRLF), when it
// is an Allow of the fast path's shape: the request line above, one Host
// and one Content-Length of 1 to fastAllowMax, fields net/http takes as
// they are and none that changes how the request is read or answered.
// Anything else is net/http's to read (ok false), stricter than net/http
// so that what is read here is read there the same way.
func parseFastHeader(b []byte) (h fastHeader, ok bool) {
	if !bytes.HasPrefix(b, []byte(fastRequestLine)) {
		return h, false
	}
	b = b[len(fastRequestLine):]
	hosts, lengths := 0, 0
	for len(b) > 0 {
		i := bytes.Index(b, []byte("\r\n"))
		line := b[:i]
		b = b[i+2:]
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return h, false
		}
		name, value := line[:colon], trimOWS(line[colon+1:])
		for _, c := range name {
			if !isTokenChar(c) {
				return h, false
			}
		}
		for _, c := range value {
			if c < ' ' && c != '\t' || c == 0x7f {
				return h, false
			}
		}
		switch {
		case asciiEqualFold(name, "host"):
			hosts++
			if len(value) == 0 || !validHost(value) {
				return h, false
			}
		case asciiEqualFold(name, "content-length"):
			lengths++
			n, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || n < 1 || n > fastAllowMax || value[0] < '0' || value[0] > '9' {
				return h, false
			}
			h.length = n
		case asciiEqualFold(name, "authorization"):
			h.authzCount++
			h.authz = value
		case slices.ContainsFunc(framingFields, func(f string) bool { return asciiEqualFold(name, f) }):
			return h, false
		}
	}
	return h, hosts == 1 && lengths == 1
}

// framingFields change how a request is read or its connection kept.
var framingFields = []string{"transfer-encoding", "connection", "expect", "upgrade", "te", "trailer", "keep-alive", "proxy-connection", "http2-settings"}

func trimOWS(b []byte) []byte {
	return bytes.Trim(b, " \t")
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// isTokenChar reports whether c may be in a field name (RFC 9110's tchar).
func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), c) >= 0
}

// validHost is a host[:port] of the plainest characters.
func validHost(b []byte) bool {
	for _, c := range b {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '-', c == ':', c == '[', c == ']', c == '_':
		default:
			return false
		}
	}
	return true
}

// appendResponseHead appends net/http's status line and header for a
// reply of header (plus Content-Type JSON for 200), its Content-Length
// left for appendContentLength to fill.
func appendResponseHead(b []byte, code int, header http.Header, date []byte, closing bool) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(code)...)
	b = append(b, "\r\n"...)
	if header == nil {
		b = append(b, "Content-Type: application/json\r\n"...)
	} else {
		keys := make([]string, 0, len(header))
		for k := range header {
			if k != "Date" && k != "Content-Length" && k != "Connection" {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			for _, v := range header[k] {
				b = append(b, k...)
				b = append(b, ": "...)
				b = append(b, v...)
				b = append(b, "\r\n"...)
			}
		}
	}
	if closing {
		b = append(b, "Connection: close\r\n"...)
	}
	b = append(b, date...)
	return append(b, "Content-Length: "...)
}

// appendContentLength moves the body appended after the head (from mark)
// past its Content-Length and the blank line.
func appendContentLength(b []byte, mark int) []byte {
	n := len(b) - mark
	var num [20]byte
	tail := append(strconv.AppendInt(num[:0], int64(n), 10), "\r\n\r\n"...)
	b = append(b, tail...)
	copy(b[mark+len(tail):], b[mark:mark+n])
	copy(b[mark:], tail)
	return b
}

// appendError appends the answer of a call that failed with err: the
// net/http handler's, written as net/http writes it.
func (l *Listener) appendError(b []byte, ctx context.Context, length int64, err error, closing bool) (int, []byte) {
	r := (&http.Request{Method: http.MethodPost, URL: &url.URL{Path: APIPrefix + "Allow"}, Proto: "HTTP/1.1",
		ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{}, Body: http.NoBody, ContentLength: length}).WithContext(ctx)
	w := &recorder{header: http.Header{}}
	l.h.errorHandler(ctx, l.h.gw, l.h.marshal, w, r, err)
	if w.code == 0 {
		w.code = http.StatusOK
	}
	b = appendResponseHead(b, w.code, w.header, l.dateHeader(), closing)
	mark := len(b)
	b = append(b, w.body...)
	return w.code, appendContentLength(b, mark)
}

// recorder keeps an error's answer.
type recorder struct {
	header http.Header
	code   int
	body   []byte
}

func (w *recorder) Header() http.Header { return w.header }

func (w *recorder) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *recorder) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.body = append(w.body, p...)
	return len(p), nil
}

// handedConn is a connection handed to net/http, the bytes read and not
// answered first.
type handedConn struct {
	net.Conn
	br *bufio.Reader
}

func (c *handedConn) Read(p []byte) (int, error) {
	if c.br != nil {
		if c.br.Buffered() > 0 {
			return c.br.Read(p)
		}
		c.br = nil
	}
	return c.Conn.Read(p)
}
