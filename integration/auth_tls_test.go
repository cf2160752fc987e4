//go:build integration

package integration

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
