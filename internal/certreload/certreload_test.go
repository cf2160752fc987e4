package certreload_test

import (
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/certreload"
	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/internal/testcerts"
)

type files struct{ dir, cert, key, ca string }

func write(t testing.TB, dir string, l *testcerts.Leaf) files {
	t.Helper()
	return files{dir: dir,
		cert: testcerts.WriteFile(t, dir, "server.crt", l.CertPEM),
		key:  testcerts.WriteFile(t, dir, "server.key", l.KeyPEM)}
}

func newReloader(t testing.TB, f files, clock *fakeclock.Clock, auth tls.ClientAuthType) *certreload.Reloader {
	t.Helper()
	return newReloaderLog(t, f, clock, auth, io.Discard)
}

func newReloaderLog(t testing.TB, f files, clock *fakeclock.Clock, auth tls.ClientAuthType, log io.Writer) *certreload.Reloader {
	t.Helper()
	r, err := certreload.New(certreload.Config{CertFile: f.cert, KeyFile: f.key, ClientCAFile: f.ca, ClientAuth: auth, Now: clock.Now},
		slog.New(slog.NewTextHandler(log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func serialOf(r *certreload.Reloader) string { return r.Certificate().Leaf.SerialNumber.String() }

func TestReloadPicksUpChangeAfterInterval(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	first, second := ca.Server(t, "first"), ca.Server(t, "second")
	f := write(t, t.TempDir(), first)
	clock := fakeclock.New(time.Unix(1000, 0))
	var log strings.Builder
	r := newReloaderLog(t, f, clock, tls.NoClientCert, &log)
	if got, want := serialOf(r), first.Cert.SerialNumber.String(); got != want {
		t.Fatalf("serial at start = %s, want %s", got, want)
	}
	clock.Add(2 * time.Second)
	serialOf(r)
	if log.Len() > 0 {
		t.Fatalf("files unchanged, yet logged: %s", log.String())
	}
	write(t, f.dir, second)
	clock.Add(500 * time.Millisecond)
	if got, want := serialOf(r), first.Cert.SerialNumber.String(); got != want {
		t.Errorf("serial before the check interval = %s, want still %s", got, want)
	}
	clock.Add(600 * time.Millisecond)
	if got, want := serialOf(r), second.Cert.SerialNumber.String(); got != want {
		t.Errorf("serial after the check interval = %s, want %s", got, want)
	}
	if n := strings.Count(log.String(), "TLS certificate reloaded"); n != 1 {
		t.Errorf("logged %d reloads, want 1:\n%s", n, log.String())
	}
}

func TestReloadKeepsOldPairWhenNewOneIsBad(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	first, second, third := ca.Server(t, "first"), ca.Server(t, "second"), ca.Server(t, "third")
	f := write(t, t.TempDir(), first)
	clock := fakeclock.New(time.Unix(1000, 0))
	r := newReloader(t, f, clock, tls.NoClientCert)
	want := first.Cert.SerialNumber.String()

	// A certificate whose key is another's: the pair does not match.
	testcerts.WriteFile(t, f.dir, "server.crt", second.CertPEM)
	clock.Add(2 * time.Second)
	if got := serialOf(r); got != want {
		t.Errorf("serial after a mismatched pair = %s, want the old %s", got, want)
	}
	// Garbage.
	testcerts.WriteFile(t, f.dir, "server.key", []byte("not a key"))
	clock.Add(2 * time.Second)
	if got := serialOf(r); got != want {
		t.Errorf("serial after a garbage key = %s, want the old %s", got, want)
	}
	// A removed file.
	testcerts.WriteFile(t, f.dir, "server.key", nil)
	clock.Add(2 * time.Second)
	if got := serialOf(r); got != want {
		t.Errorf("serial after an empty key = %s, want the old %s", got, want)
	}
	// A good pair again is picked up.
	write(t, f.dir, third)
	clock.Add(2 * time.Second)
	if got, want := serialOf(r), third.Cert.SerialNumber.String(); got != want {
		t.Errorf("serial after a good pair = %s, want %s", got, want)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	f := write(t, t.TempDir(), ca.Server(t, "s"))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		name string
		cfg  certreload.Config
		want error
	}{
		{"no files", certreload.Config{}, certreload.ErrNoCertificate},
		{"mTLS without CA", certreload.Config{CertFile: f.cert, KeyFile: f.key, ClientAuth: tls.RequireAndVerifyClientCert}, certreload.ErrNoClientCA},
		{"unsupported client auth", certreload.Config{CertFile: f.cert, KeyFile: f.key, ClientAuth: tls.RequireAnyClientCert, ClientCAFile: f.cert}, certreload.ErrClientAuth},
	} {
		if _, err := certreload.New(tc.cfg, log); !errors.Is(err, tc.want) {
			t.Errorf("%s: New = %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := certreload.New(certreload.Config{CertFile: f.cert, KeyFile: f.cert}, log); err == nil {
		t.Error("New with a certificate as key = nil error, want one")
	}
}

// handshake runs a TLS handshake over loopback TCP and returns both
// sides' states, or the first error of either side.
func handshake(t testing.TB, server *tls.Config, client *tls.Config) (tls.ConnectionState, tls.ConnectionState, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		cs  tls.ConnectionState
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer c.Close()
		srv := tls.Server(c, server)
		srv.SetDeadline(time.Now().Add(5 * time.Second))
		err = srv.Handshake()
		done <- result{srv.ConnectionState(), err}
	}()
	cl, err := tls.Dial("tcp", ln.Addr().String(), client)
	if err != nil {
		<-done
		return tls.ConnectionState{}, tls.ConnectionState{}, err
	}
	defer cl.Close()
	// TLS 1.3: the server's verdict on the client certificate arrives
	// after the client's handshake.
	r := <-done
	return r.cs, cl.ConnectionState(), r.err
}

func TestServerConfigServesCurrentCertificateAndVerifiesClients(t *testing.T) {
	ca, other := testcerts.NewCA(t, "ca"), testcerts.NewCA(t, "other")
	first, second := ca.Server(t, "first"), ca.Server(t, "second")
	f := write(t, t.TempDir(), first)
	f.ca = testcerts.WriteFile(t, f.dir, "ca.crt", ca.PEM)
	clock := fakeclock.New(time.Unix(1000, 0))
	r := newReloader(t, f, clock, tls.RequireAndVerifyClientCert)
	scfg := r.ServerConfig("h2")
	client := ca.Client(t, "alice", "alice.example", "spiffe://example/alice").TLS(t)
	ccfg := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", Certificates: []tls.Certificate{client}, NextProtos: []string{"h2"}}

	ss, cs, err := handshake(t, scfg, ccfg)
	if err != nil {
		t.Fatalf("mTLS handshake: %v", err)
	}
	if got, want := cs.PeerCertificates[0].SerialNumber, first.Cert.SerialNumber; got.Cmp(want) != 0 {
		t.Errorf("served serial %s, want %s", got, want)
	}
	if cs.NegotiatedProtocol != "h2" {
		t.Errorf("ALPN = %q, want h2", cs.NegotiatedProtocol)
	}
	id, ok := certreload.PeerIdentity(&ss)
	if !ok || id.CommonName != "alice" || len(id.DNSNames) != 1 || id.DNSNames[0] != "alice.example" ||
		len(id.URIs) != 1 || id.URIs[0] != "spiffe://example/alice" || len(id.SHA256) != 64 {
		t.Errorf("PeerIdentity = %+v, %v", id, ok)
	}

	for name, c := range map[string][]tls.Certificate{"no certificate": nil, "another CA's": {other.Client(t, "mallory", "", "").TLS(t)}} {
		cc := ccfg.Clone()
		cc.Certificates = c
		if _, _, err := handshake(t, scfg, cc); err == nil {
			t.Errorf("client with %s: handshake succeeded, want refused", name)
		}
	}
	old := ccfg.Clone()
	old.MaxVersion = tls.VersionTLS11
	if _, _, err := handshake(t, scfg, old); err == nil {
		t.Error("TLS 1.1 client: handshake succeeded, want refused")
	}

	write(t, f.dir, second)
	clock.Add(2 * time.Second)
	_, cs, err = handshake(t, scfg, ccfg)
	if err != nil {
		t.Fatalf("handshake after rotation: %v", err)
	}
	if got, want := cs.PeerCertificates[0].SerialNumber, second.Cert.SerialNumber; got.Cmp(want) != 0 {
		t.Errorf("served serial after rotation %s, want %s", got, want)
	}
}

func TestPeerIdentityWithoutVerifiedCertificate(t *testing.T) {
	if _, ok := certreload.PeerIdentity(nil); ok {
		t.Error("PeerIdentity(nil) reports an identity")
	}
	if _, ok := certreload.PeerIdentity(&tls.ConnectionState{}); ok {
		t.Error("PeerIdentity of a state without verified chains reports an identity")
	}
}

// TestRequestClientCertHandsOnASelfSignedCertificate: with
// tls.RequestClientCert and no client CA, a self-signed client certificate
// passes the handshake unverified (for a sha256 pin to match it), and a
// client without one connects too.
func TestRequestClientCertHandsOnASelfSignedCertificate(t *testing.T) {
	ca, self := testcerts.NewCA(t, "ca"), testcerts.NewCA(t, "self-signed")
	f := write(t, t.TempDir(), ca.Server(t, "s"))
	r := newReloader(t, f, fakeclock.New(time.Unix(1000, 0)), tls.RequestClientCert)
	client := self.Client(t, "pinned", "", "").TLS(t)
	ccfg := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", Certificates: []tls.Certificate{client}}
	ss, _, err := handshake(t, r.ServerConfig(), ccfg)
	if err != nil {
		t.Fatalf("handshake with a self-signed client certificate: %v", err)
	}
	if len(ss.PeerCertificates) != 1 || !ss.PeerCertificates[0].Equal(client.Leaf) || len(ss.VerifiedChains) != 0 {
		t.Errorf("the server sees %d certificates (%d verified chains); want the client's, unverified", len(ss.PeerCertificates), len(ss.VerifiedChains))
	}
	ccfg.Certificates = nil
	if _, _, err := handshake(t, r.ServerConfig(), ccfg); err != nil {
		t.Errorf("handshake without a client certificate: %v", err)
	}
}

// TestNoCBCSuites: a TLS 1.2 client offering only CBC suites with SHA-1 is
// refused; one offering an AEAD suite is served.
func TestNoCBCSuites(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	f := write(t, t.TempDir(), ca.Server(t, "s"))
	r := newReloader(t, f, fakeclock.New(time.Unix(1000, 0)), tls.NoClientCert)
	ccfg := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", MaxVersion: tls.VersionTLS12}
	for _, suite := range []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,
		tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA} {
		c := ccfg.Clone()
		c.CipherSuites = []uint16{suite}
		if _, _, err := handshake(t, r.ServerConfig(), c); err == nil {
			t.Errorf("a TLS 1.2 client offering only %s: served; want refused", tls.CipherSuiteName(suite))
		}
	}
	c := ccfg.Clone()
	c.CipherSuites = []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256}
	if _, cs, err := handshake(t, r.ServerConfig(), c); err != nil || cs.Version != tls.VersionTLS12 {
		t.Errorf("a TLS 1.2 client offering AES-GCM: %v (version %x)", err, cs.Version)
	}
}
