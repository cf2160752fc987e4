//go:build integration

package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/integration/harness"
	"github.com/limiterd/limiterd/internal/testcerts"
)

// tlsNode is a limiterd serving TLS with certificates made by the test.
type tlsNode struct {
	*harness.Limiterd
	respAddr string
	ca       *testcerts.CA
	dir      string
	// client presents a client certificate; anon presents none.
	client, anon *tls.Config
}

// startTLS starts a limiterd with a server certificate for 127.0.0.1 and
// the tls: lines extra (client_auth...), on gRPC, HTTP and RESP.
func startTLS(t *testing.T, name, extra string) *tlsNode {
	t.Helper()
	n := &tlsNode{ca: testcerts.NewCA(t, "limiterd test CA"), dir: t.TempDir(),
		respAddr: fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))}
	srv := n.ca.Server(t, "limiterd")
	certFile := testcerts.WriteFile(t, n.dir, "server.crt", srv.CertPEM)
	keyFile := testcerts.WriteFile(t, n.dir, "server.key", srv.KeyPEM)
	caFile := testcerts.WriteFile(t, n.dir, "ca.crt", n.ca.PEM)
	n.anon = &tls.Config{RootCAs: n.ca.Pool(), ServerName: "127.0.0.1"}
	n.client = n.anon.Clone()
	n.client.Certificates = []tls.Certificate{n.ca.Client(t, "tester", "tester.example", "spiffe://limiterd.test/tester").TLS(t)}
	cfg := fmt.Sprintf("resp_addr: %s\ntls:\n  cert_file: %s\n  key_file: %s\n  client_ca_file: %s\n%s", n.respAddr, certFile, keyFile, caFile, extra)
	n.Limiterd = harness.StartLimiterdTLS(t, name, cfg, n.client)
	return n
}

// calls makes one call on each listener with the client config c and
// returns each one's error.
func (n *tlsNode) calls(t *testing.T, c *tls.Config) map[string]error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out := map[string]error{}

	conn, err := grpc.NewClient(n.GRPCAddr, grpc.WithTransportCredentials(credentials.NewTLS(c)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, out["grpc"] = limiterv1.NewRateLimiterClient(conn).Allow(ctx, &limiterv1.AllowRequest{
		Key: "tls", Limits: []*limiterv1.Limit{{WindowSize: durationpb.New(time.Second), Limit: 1000}}})

	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: c}, Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Post("https://"+n.HTTPAddr+"/limiter.v1.RateLimiter/Allow", "application/json",
		strings.NewReader(`{"key": "tls", "limits": [{"windowSize": "1s", "limit": 1000}]}`))
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"allowed":true`) {
			err = fmt.Errorf("%s %s", resp.Status, body)
		}
	}
	out["http"] = err

	rc := redis.NewClient(&redis.Options{Addr: n.respAddr, TLSConfig: c, MaxRetries: -1, DialTimeout: 5 * time.Second})
	defer rc.Close()
	out["resp"] = rc.Ping(ctx).Err()
	return out
}

// servedSerial returns the serial of the certificate served at addr.
func (n *tlsNode) servedSerial(t *testing.T, addr string) *big.Int {
	t.Helper()
	c := n.client.Clone()
	if addr == n.GRPCAddr {
		c.NextProtos = []string{"h2"}
	}
	conn, err := tls.Dial("tcp", addr, c)
	if err != nil {
		t.Fatalf("TLS dial %s: %v", addr, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}

func TestTLSServesEveryListener(t *testing.T) {
	n := startTLS(t, "tls", "  client_auth: none\n")
	for _, c := range []struct {
		name string
		cfg  *tls.Config
	}{{"without a client certificate", n.anon}, {"with a client certificate", n.client}} {
		for listener, err := range n.calls(t, c.cfg) {
			if err != nil {
				t.Errorf("%s %s: %v", listener, c.name, err)
			}
		}
	}
	// A plaintext client gets nothing.
	conn, err := grpc.NewClient(n.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := limiterv1.NewRateLimiterClient(conn).Allow(ctx, &limiterv1.AllowRequest{Key: "k"}); err == nil {
		t.Error("plaintext gRPC call on the TLS listener succeeded")
	}
	if resp, err := http.Get("http://" + n.HTTPAddr + "/readyz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plaintext GET /readyz on the TLS listener succeeded")
		}
	}
	// TLS 1.1 is refused.
	old := n.client.Clone()
	old.MaxVersion = tls.VersionTLS11
	if c, err := tls.Dial("tcp", n.HTTPAddr, old); err == nil {
		c.Close()
		t.Error("a TLS 1.1 handshake succeeded")
	}
	// The admin listener serves TLS too.
	resp, err := n.HTTPClient().Get(n.URL(n.AdminAddr, "/debug/pprof/cmdline"))
	if err != nil {
		t.Fatalf("admin over TLS: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("admin over TLS: %s", resp.Status)
	}
}

func TestMTLSRefusesClientWithoutCertificate(t *testing.T) {
	n := startTLS(t, "mtls", "  client_auth: require\n")
	for listener, err := range n.calls(t, n.client) {
		if err != nil {
			t.Errorf("%s with a client certificate: %v", listener, err)
		}
	}
	for listener, err := range n.calls(t, n.anon) {
		if err == nil {
			t.Errorf("%s without a client certificate: served, want refused", listener)
		}
	}
	other := n.client.Clone()
	other.Certificates = []tls.Certificate{testcerts.NewCA(t, "another CA").Client(t, "mallory", "", "").TLS(t)}
	for listener, err := range n.calls(t, other) {
		if err == nil {
			t.Errorf("%s with another CA's client certificate: served, want refused", listener)
		}
	}

	// The container health check: limiterd probe with the CA and a
	// client certificate, and refused without one.
	probe := func(args ...string) error {
		out, err := exec.Command(harness.LimiterdBinary(t), append([]string{"probe"}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	leaf := n.ca.Client(t, "probe", "", "")
	certFile := testcerts.WriteFile(t, n.dir, "probe.crt", leaf.CertPEM)
	keyFile := testcerts.WriteFile(t, n.dir, "probe.key", leaf.KeyPEM)
	caFile := n.dir + "/ca.crt"
	url := "https://" + n.HTTPAddr + "/readyz"
	if err := probe("--ca-file", caFile, "--cert-file", certFile, "--key-file", keyFile, url); err != nil {
		t.Errorf("probe with a client certificate: %v", err)
	}
	if err := probe("--ca-file", caFile, url); err == nil {
		t.Error("probe without a client certificate succeeded under client_auth: require")
	}
}

func TestTLSCertificateRotatedWithoutRestart(t *testing.T) {
	n := startTLS(t, "rotate", "  client_auth: require\n")
	pid := n.PID()
	addrs := map[string]string{"grpc": n.GRPCAddr, "http": n.HTTPAddr, "resp": n.respAddr, "admin": n.AdminAddr}
	first := n.servedSerial(t, n.GRPCAddr)
	for name, addr := range addrs {
		if got := n.servedSerial(t, addr); got.Cmp(first) != 0 {
			t.Errorf("%s serves serial %s, want %s", name, got, first)
		}
	}

	// A half-rotated pair (a new certificate with the old key) is not
	// served: the old pair stays.
	next := n.ca.Server(t, "limiterd rotated")
	testcerts.WriteFile(t, n.dir, "server.crt", next.CertPEM)
	time.Sleep(1500 * time.Millisecond)
	if got := n.servedSerial(t, n.HTTPAddr); got.Cmp(first) != 0 {
		t.Errorf("after a mismatched pair: serial %s, want the old %s", got, first)
	}
	testcerts.WriteFile(t, n.dir, "server.key", next.KeyPEM)

	want := next.Cert.SerialNumber
	deadline := time.Now().Add(5 * time.Second)
	for name, addr := range addrs {
		for {
			got := n.servedSerial(t, addr)
			if got.Cmp(want) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still serves serial %s 5 s after the rotation, want %s", name, got, want)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if n.PID() != pid {
		t.Errorf("pid %d after the rotation, want %d: restarted", n.PID(), pid)
	}
	for listener, err := range n.calls(t, n.client) {
		if err != nil {
			t.Errorf("%s after the rotation: %v", listener, err)
		}
	}
	if log := n.LogTail(200); !strings.Contains(log, "TLS certificate reloaded") || !strings.Contains(log, "do not load") {
		t.Errorf("log lacks the failed and the successful reload:\n%s", log)
	}
}
