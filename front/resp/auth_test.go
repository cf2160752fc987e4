package resp

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limiterd/limiterd/auth"
	"github.com/limiterd/limiterd/internal/testcerts"
)

const testToken = "test-token-0123456789abcdef"

// authConfig grants the token "t" and the client certificate of CN
// "svc-a" read and write in "default".
func authConfig(t *testing.T) Config {
	t.Helper()
	a, err := auth.New(auth.Config{
		Tokens:     []auth.Token{{Name: "t", Secret: testToken, Namespaces: []string{"default"}, Ops: auth.Read | auth.Write}},
		Identities: []auth.Identity{{SubjectCN: "svc-a", Namespaces: []string{"default"}, Ops: auth.Read | auth.Write}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return Config{Authorizer: a}
}

// TestAuthCommands: AUTH and HELLO AUTH authenticate a connection, for
// as long as it lives; without them an RL.* command answers NOAUTH, and
// one outside the grants NOPERM.
func TestAuthCommands(t *testing.T) {
	cfg := authConfig(t)
	_, addr := serveFront(t, newService(t, nil).WithAuthorizer(cfg.Authorizer), cfg)
	ctx := context.Background()
	newConn := func() *redis.Conn {
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 1, Protocol: 2})
		c := rdb.Conn()
		t.Cleanup(func() { c.Close(); rdb.Close() })
		return c
	}
	prefix := func(err error) string {
		if err == nil {
			return ""
		}
		return strings.Fields(err.Error())[0]
	}
	c := newConn()
	for _, step := range []struct {
		args []any
		want string // the error's code, "" for a reply
	}{
		{[]any{"PING"}, ""},
		{[]any{"INFO"}, "NOAUTH"},
		{[]any{"RL.INCR", "k"}, "NOAUTH"},
		{[]any{"AUTH", "wrong-wrong-wrong-wrong"}, "WRONGPASS"},
		{[]any{"RL.INCR", "k"}, "NOAUTH"},
		{[]any{"AUTH", "someone", testToken}, "WRONGPASS"},
		{[]any{"AUTH", strings.Repeat("x", 512<<10)}, "WRONGPASS"}, // not hashed: longer than any token
		{[]any{"AUTH", testToken}, ""},
		{[]any{"INFO"}, ""},
		{[]any{"RL.INCR", "k"}, ""},
		{[]any{"RL.INCR", "k", "NS", "api"}, "NOPERM"},
		{[]any{"AUTH", "wrong-wrong-wrong-wrong"}, "WRONGPASS"},
		{[]any{"RL.INCR", "k"}, ""}, // a failed AUTH keeps what the connection had
	} {
		if err := c.Do(ctx, step.args...).Err(); prefix(err) != step.want {
			t.Errorf("%v: %v; want %q", step.args, err, step.want)
		}
	}
	if err := c.Do(ctx, "RL.INCR", "k", "NS", "api").Err(); err == nil || !strings.Contains(err.Error(), `namespace "api"`) {
		t.Errorf("NOPERM does not name the namespace: %v", err)
	}
	for _, user := range []string{"t", "default"} {
		c := newConn()
		if err := c.Do(ctx, "AUTH", user, testToken).Err(); err != nil {
			t.Errorf("AUTH %s: %v", user, err)
		}
		if err := c.Do(ctx, "RL.RATE", "k").Err(); err != nil {
			t.Errorf("AUTH %s, then RL.RATE: %v", user, err)
		}
	}
	c = newConn()
	if err := c.Do(ctx, "HELLO", 3, "AUTH", "t", "wrong-wrong-wrong-wrong").Err(); prefix(err) != "WRONGPASS" {
		t.Errorf("HELLO 3 AUTH with a wrong token: %v", err)
	}
	if err := c.Do(ctx, "HELLO", 3, "AUTH", "t", testToken, "SETNAME", "me").Err(); err != nil {
		t.Errorf("HELLO 3 AUTH: %v", err)
	}
	if err := c.Do(ctx, "RL.INCR", "k").Err(); err != nil {
		t.Errorf("after HELLO 3 AUTH: %v", err)
	}
	// go-redis's own login, as applications use it.
	rdb := redis.NewClient(&redis.Options{Addr: addr, Username: "t", Password: testToken, MaxRetries: -1})
	defer rdb.Close()
	if err := rdb.Do(ctx, "RL.INCR", "k").Err(); err != nil {
		t.Errorf("go-redis with Username and Password: %v", err)
	}
}

// TestAuthClientCertificate: over TLS, a connection with a configured
// client certificate needs no AUTH.
func TestAuthClientCertificate(t *testing.T) {
	ca := testcerts.NewCA(t, "limiterd test CA")
	cfg := authConfig(t)
	s := newTestServer(t, newService(t, nil).WithAuthorizer(cfg.Authorizer), cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(tls.NewListener(ln, ca.ServerConfig(t, false)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		certs []tls.Certificate
		want  string
	}{
		{"configured", []tls.Certificate{ca.Client(t, "svc-a", "", "").TLS(t)}, ""},
		{"other", []tls.Certificate{ca.Client(t, "svc-b", "", "").TLS(t)}, "NOAUTH"},
		{"none", nil, "NOAUTH"},
	} {
		rdb := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), TLSConfig: ca.ClientConfig(c.certs...), MaxRetries: -1})
		err := rdb.Do(ctx, "RL.INCR", "k").Err()
		rdb.Close()
		if got := ""; err != nil {
			got = strings.Fields(err.Error())[0]
			if got != c.want {
				t.Errorf("%s: %v; want %q", c.name, err, c.want)
			}
		} else if c.want != "" {
			t.Errorf("%s: served; want %s", c.name, c.want)
		}
	}
}
