package certreload

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Config says where the files are and how clients are verified.
type Config struct {
	// CertFile and KeyFile are the server's PEM certificate (chain) and
	// private key.
	CertFile, KeyFile string
	// ClientCAFile is a PEM bundle of the CAs that client certificates
	// must chain to; required unless ClientAuth is tls.NoClientCert.
	ClientCAFile string
	// ClientAuth is tls.NoClientCert, tls.RequestClientCert (a client
	// certificate is asked for and, when sent, handed on unverified: a
	// SHA-256 pin matches it, which needs no CA), tls.VerifyClientCertIfGiven
	// or tls.RequireAndVerifyClientCert.
	ClientAuth tls.ClientAuthType
	// MinVersion is the lowest TLS version accepted; below TLS 1.2 (or 0)
	// means TLS 1.2.
	MinVersion uint16
	// CheckInterval is the least time between two looks at the files
	// (default 1s).
	CheckInterval time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Errors of New.
var (
	ErrNoCertificate = errors.New("certreload: cert_file and key_file are required")
	ErrNoClientCA    = errors.New("certreload: client certificate verification needs a client CA file")
	ErrClientAuth    = errors.New("certreload: client auth must be none, request, verify-if-given or require-and-verify")
)

// CipherSuites are the TLS 1.2 suites offered: ECDHE with AES-GCM or
// ChaCha20-Poly1305 only. Go's defaults also accept the CBC suites with
// SHA-1 (TLS_ECDHE_*_WITH_AES_*_CBC_SHA), whose MAC-then-encrypt design
// is the root of the Lucky13 family of attacks; every client that speaks
// TLS 1.2 has an AEAD suite. TLS 1.3's suites are all AEAD and not
// configurable.
var CipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// state is one loaded generation of the files; never modified once
// published.
type state struct {
	gen  uint64
	cert *tls.Certificate
	pool *x509.CertPool
}

// stamp identifies one version of a file on disk.
type stamp struct {
	info os.FileInfo
	err  error
}

func (a stamp) same(b stamp) bool {
	if a.err != nil || b.err != nil || a.info == nil || b.info == nil {
		// Unreadable or not configured (no CA file): the same while it
		// stays so.
		return (a.err == nil) == (b.err == nil) && (a.info == nil) == (b.info == nil)
	}
	return os.SameFile(a.info, b.info) && a.info.ModTime().Equal(b.info.ModTime()) && a.info.Size() == b.info.Size()
}

// Reloader is the current certificate and client CA pool of a server. It
// is safe for concurrent use.
type Reloader struct {
	cfg Config
	log *slog.Logger
	cur atomic.Pointer[state]
	// next is when the files may be looked at again (Unix ns).
	next atomic.Int64

	mu     sync.Mutex // serialises reloads
	stamps [3]stamp   // cert, key, CA as last read (or tried)
}

// New reads the files once; an error here is fatal to the caller (there
// is no old pair to keep).
func New(cfg Config, log *slog.Logger) (*Reloader, error) {
	if cfg.CertFile == "" || cfg.KeyFile == "" {
		return nil, ErrNoCertificate
	}
	switch cfg.ClientAuth {
	case tls.NoClientCert, tls.RequestClientCert:
	case tls.VerifyClientCertIfGiven, tls.RequireAndVerifyClientCert:
		if cfg.ClientCAFile == "" {
			return nil, ErrNoClientCA
		}
	default:
		return nil, ErrClientAuth
	}
	if cfg.MinVersion < tls.VersionTLS12 {
		cfg.MinVersion = tls.VersionTLS12
	}
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r := &Reloader{cfg: cfg, log: log}
	r.stamps = r.stat()
	st, err := r.load(1)
	if err != nil {
		return nil, err
	}
	r.cur.Store(st)
	r.next.Store(cfg.Now().Add(cfg.CheckInterval).UnixNano())
	return r, nil
}

func (r *Reloader) files() [3]string {
	return [3]string{r.cfg.CertFile, r.cfg.KeyFile, r.cfg.ClientCAFile}
}

func (r *Reloader) stat() [3]stamp {
	var s [3]stamp
	for i, f := range r.files() {
		if f != "" {
			s[i].info, s[i].err = os.Stat(f)
		}
	}
	return s
}

// load reads the files as generation gen.
func (r *Reloader) load(gen uint64) (*state, error) {
	cert, err := tls.LoadX509KeyPair(r.cfg.CertFile, r.cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("certreload: %s, %s: %w", r.cfg.CertFile, r.cfg.KeyFile, err)
	}
	if cert.Leaf == nil && len(cert.Certificate) > 0 {
		cert.Leaf, _ = x509.ParseCertificate(cert.Certificate[0])
	}
	st := &state{gen: gen, cert: &cert}
	if r.cfg.ClientCAFile != "" {
		pem, err := os.ReadFile(r.cfg.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("certreload: %w", err)
		}
		st.pool = x509.NewCertPool()
		if !st.pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("certreload: %s holds no PEM certificate", r.cfg.ClientCAFile)
		}
	}
	return st, nil
}

// Check looks at the files if the check interval has passed since the
// last look, and loads them if they changed. Handshakes call it; it is
// exported for tests and for callers that want to force the pace.
func (r *Reloader) Check() {
	now := r.cfg.Now()
	next := r.next.Load()
	if now.UnixNano() < next || !r.next.CompareAndSwap(next, now.Add(r.cfg.CheckInterval).UnixNano()) {
		return // not yet, or another handshake is looking
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	stamps := r.stat()
	changed := false
	for i := range stamps {
		changed = changed || !stamps[i].same(r.stamps[i])
	}
	if !changed {
		return
	}
	r.stamps = stamps
	old := r.cur.Load()
	st, err := r.load(old.gen + 1)
	if err != nil {
		r.log.Error("TLS files changed but do not load; still serving the previous certificate", "err", err)
		return
	}
	r.cur.Store(st)
	attrs := []any{"cert_file", r.cfg.CertFile}
	if leaf := st.cert.Leaf; leaf != nil {
		attrs = append(attrs, "subject", leaf.Subject.String(), "serial", leaf.SerialNumber.String(), "not_after", leaf.NotAfter)
	}
	r.log.Info("TLS certificate reloaded", attrs...)
}

// Certificate returns the current certificate, after Check.
func (r *Reloader) Certificate() *tls.Certificate {
	r.Check()
	return r.cur.Load().cert
}

// ServerConfig returns a server config for one listener, offering
// nextProtos by ALPN (gRPC: "h2"; HTTP: "h2", "http/1.1"; none for a
// plain TCP protocol). Every handshake gets the current certificate and
// client CA pool.
func (r *Reloader) ServerConfig(nextProtos ...string) *tls.Config {
	nextProtos = slices.Clone(nextProtos)
	// built caches the handshake config of the current generation, so a
	// handshake clones nothing unless the files changed.
	type built struct {
		gen uint64
		cfg *tls.Config
	}
	var cache atomic.Pointer[built]
	return &tls.Config{
		MinVersion:   r.cfg.MinVersion,
		CipherSuites: CipherSuites,
		NextProtos:   nextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			r.Check()
			st := r.cur.Load()
			if b := cache.Load(); b != nil && b.gen == st.gen {
				return b.cfg, nil
			}
			c := &tls.Config{
				MinVersion:   r.cfg.MinVersion,
				CipherSuites: CipherSuites,
				NextProtos:   nextProtos,
				Certificates: []tls.Certificate{*st.cert},
				ClientAuth:   r.cfg.ClientAuth,
				ClientCAs:    st.pool,
			}
			cache.Store(&built{gen: st.gen, cfg: c})
			return c, nil
		},
	}
}
