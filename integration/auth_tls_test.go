//go:build integration

package integration

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/limiterd/limiterd/integration/harness"
	"github.com/limiterd/limiterd/internal/testcerts"
)

// TestAuthorizationByClientCertificate: with client_auth request and an
// identity granted by URI SAN, a client certificate authenticates calls on
// gRPC, HTTP and RESP; a client without one is refused on each.
func TestAuthorizationByClientCertificate(t *testing.T) {
	n := startTLS(t, "authtls", "  client_auth: request\nauth:\n  identities:\n    - {uri_san: \"spiffe://limiterd.test/tester\", namespaces: [default], operations: [read, write]}\n")
	for name, err := range n.calls(t, n.client) {
		if err != nil {
			t.Errorf("with the client certificate, %s: %v", name, err)
		}
	}
	errs := n.calls(t, n.anon)
	if status.Code(errs["grpc"]) != codes.Unauthenticated {
		t.Errorf("grpc without a certificate: %v", errs["grpc"])
	}
	if errs["http"] == nil || !strings.Contains(errs["http"].Error(), "401") {
		t.Errorf("http without a certificate: %v", errs["http"])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, c := range []struct {
		cfg  *tls.Config
		want string
	}{{n.client, ""}, {n.anon, "NOAUTH"}} {
		rc := redis.NewClient(&redis.Options{Addr: n.respAddr, TLSConfig: c.cfg, MaxRetries: -1})
		err := rc.Do(ctx, "RL.INCR", "k").Err()
		rc.Close()
		if (c.want == "" && err != nil) || (c.want != "" && (err == nil || !strings.HasPrefix(err.Error(), c.want))) {
			t.Errorf("resp: %v; want %q", err, c.want)
		}
	}
}

// TestAuthorizationBySelfSignedPin: with no client CA and an identity
// that pins a self-signed client certificate by its sha256 (a pin needs no
// CA), the handshake asks for the certificate without verifying it, and
// the pinned certificate authenticates calls on gRPC, HTTP and RESP; a
// client without it, or with another certificate, is refused.
func TestAuthorizationBySelfSignedPin(t *testing.T) {
	ca := testcerts.NewCA(t, "limiterd test CA")
	dir := t.TempDir()
	srv := ca.Server(t, "limiterd")
	pinned := testcerts.NewCA(t, "self-signed").Client(t, "pinned", "", "")
	other := testcerts.NewCA(t, "another").Client(t, "other", "", "")
	n := &tlsNode{ca: ca, dir: dir, respAddr: fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))}
	n.anon = &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}
	n.client = n.anon.Clone()
	n.client.Certificates = []tls.Certificate{pinned.TLS(t)}
	cfg := fmt.Sprintf(`resp_addr: %s
tls:
  cert_file: %s
  key_file: %s
auth:
  identities:
    - {name: pinned, sha256: "%x", namespaces: [default], operations: [read, write]}
`, n.respAddr, testcerts.WriteFile(t, dir, "server.crt", srv.CertPEM), testcerts.WriteFile(t, dir, "server.key", srv.KeyPEM),
		sha256.Sum256(pinned.Cert.Raw))
	n.Limiterd = harness.StartLimiterdTLS(t, "pin", cfg, n.client)
	for name, err := range n.calls(t, n.client) {
		if err != nil {
			t.Errorf("with the pinned certificate, %s: %v", name, err)
		}
	}
	otherCfg := n.anon.Clone()
	otherCfg.Certificates = []tls.Certificate{other.TLS(t)}
	for who, c := range map[string]*tls.Config{"no certificate": n.anon, "another certificate": otherCfg} {
		errs := n.calls(t, c)
		if status.Code(errs["grpc"]) != codes.Unauthenticated {
			t.Errorf("grpc with %s: %v; want Unauthenticated", who, errs["grpc"])
		}
		if errs["http"] == nil || !strings.Contains(errs["http"].Error(), "401") {
			t.Errorf("http with %s: %v; want 401", who, errs["http"])
		}
	}
}
