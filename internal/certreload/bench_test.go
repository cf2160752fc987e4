package certreload_test

import (
	"crypto/tls"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/internal/testcerts"
)

// BenchmarkHandshake is one full TLS 1.3 handshake (client and server, both
// in this process, over loopback TCP, no session resumption), with and
// without a client certificate: what a new connection costs; a long-lived
// connection pays it once.
func BenchmarkHandshake(b *testing.B) {
	ca := testcerts.NewCA(b, "ca")
	f := write(b, b.TempDir(), ca.Server(b, "s"))
	f.ca = testcerts.WriteFile(b, f.dir, "ca.crt", ca.PEM)
	client := ca.Client(b, "c", "", "").TLS(b)
	for _, mode := range []struct {
		name string
		auth tls.ClientAuthType
		cert []tls.Certificate
	}{{"TLS", tls.NoClientCert, nil}, {"mTLS", tls.RequireAndVerifyClientCert, []tls.Certificate{client}}} {
		b.Run(mode.name, func(b *testing.B) {
			r := newReloader(b, f, fakeclock.New(time.Unix(1000, 0)), mode.auth)
			scfg := r.ServerConfig()
			ccfg := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", Certificates: mode.cert, SessionTicketsDisabled: true}
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := handshake(b, scfg, ccfg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
