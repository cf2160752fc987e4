package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	adminv1 "github.com/limiterd/limiterd/api/proto/limiter/admin/v1"
	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
)

// The tokens of the authorization tests.
const (
	writerToken    = "writer-token-0123456789abcdef"
	readerToken    = "reader-token-0123456789abcdef"
	elsewhereToken = "elsewhere-token-0123456789abc"
	wrongToken     = "wrong-token-0123456789abcdefg"
)

// authCred is one caller of the table: its token and what each kind of
// operation answers it.
type authCred struct {
	name, token string
	read, write codes.Code
}

var authCreds = []authCred{
	{"no token", "", codes.Unauthenticated, codes.Unauthenticated},
	{"wrong token", wrongToken, codes.Unauthenticated, codes.Unauthenticated},
	{"token for another namespace", elsewhereToken, codes.PermissionDenied, codes.PermissionDenied},
	{"read-only token", readerToken, codes.OK, codes.PermissionDenied},
	{"right token", writerToken, codes.OK, codes.OK},
}

// startAuthDaemon runs limiterd with an auth section: writer (read and
// write in api, its token in a file), reader (read in api, its token in
// the environment), elsewhere (read and write in other).
func startAuthDaemon(t *testing.T) (d *daemonRun, grpcAddr, httpAddr, respAddr string) {
	t.Helper()
	grpcAddr, httpAddr, respAddr = freeAddr(t), freeAddr(t), freeAddr(t)
	writer := writeFile(t, "writer.token", writerToken+"\n")
	elsewhere := writeFile(t, "elsewhere.token", elsewhereToken)
	cfg := fmt.Sprintf(`grpc_addr: %s
http_addr: %s
resp_addr: %s
namespaces:
  - {name: api, window_sizes: ["1s", "60s"], sync_rate: -1}
  - {name: other, window_sizes: ["1s", "60s"], sync_rate: -1}
auth:
  tokens:
    - {name: writer, token_file: %s, namespaces: [api], operations: [read, write]}
    - {name: reader, token_env: LIMITERD_TEST_READER, namespaces: [api], operations: [read]}
    - {name: elsewhere, token_file: %s, namespaces: [other], operations: [read, write]}
`, grpcAddr, httpAddr, respAddr, writer, elsewhere)
	path := writeFile(t, "limiterd.yaml", cfg)
	d = startRun(t, []string{"--config", path}, map[string]string{"LIMITERD_TEST_READER": readerToken})
	return d, grpcAddr, httpAddr, respAddr
}

// authOp is one RPC of the table; key and lease make its request.
type authOp struct {
	method string
	read   bool
	req    func(key, lease string) proto.Message
	resp   func() proto.Message
	// item is a batch response's first item error (nil: not a batch).
	item func(proto.Message) codes.Code
	// counted reads back, with the writer, what a refused call of key
	// would have counted: zero if nothing.
	counted func(t *testing.T, c limiterv1.RateLimiterClient, key, lease string) float64
}

func ctxToken(token string) context.Context {
	ctx := context.Background()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	return ctx
}

func windowCount(t *testing.T, c limiterv1.RateLimiterClient, key, _ string) float64 {
	t.Helper()
	r, err := c.SlidingWindow(ctxToken(writerToken), &limiterv1.SlidingWindowRequest{Namespace: "api", Key: key})
	if err != nil {
		t.Fatalf("SlidingWindow by the writer: %v", err)
	}
	var sum float64
	for _, w := range r.GetRates() {
		sum += w.GetRate()
	}
	return sum
}

// leasesHeld is how many leases of key are held, by the writer's Acquire
// of a limit of 1 (released at once).
func leasesHeld(t *testing.T, c limiterv1.RateLimiterClient, key, _ string) float64 {
	t.Helper()
	r, err := c.Acquire(ctxToken(writerToken), &limiterv1.AcquireRequest{Namespace: "api", Key: key, Limit: 1, Ttl: durationpb.New(time.Minute)})
	if err != nil {
		t.Fatalf("Acquire by the writer: %v", err)
	}
	if r.GetAcquired() {
		c.Release(ctxToken(writerToken), &limiterv1.ReleaseRequest{Lease: r.GetLease()})
		return 0
	}
	return float64(r.GetHeld())
}

// leaseGone is 1 when the writer's lease was released by the refused
// call.
func leaseGone(t *testing.T, c limiterv1.RateLimiterClient, _, lease string) float64 {
	t.Helper()
	r, err := c.Renew(ctxToken(writerToken), &limiterv1.RenewRequest{Lease: lease, Ttl: durationpb.New(time.Minute)})
	if err != nil {
		t.Fatalf("Renew by the writer: %v", err)
	}
	if r.GetRenewed() {
		return 0
	}
	return 1
}

func statusCode(s interface{ GetCode() int32 }) codes.Code { return codes.Code(s.GetCode()) }

func authOps() []authOp {
	win := []*limiterv1.Limit{{WindowSize: durationpb.New(time.Minute), Limit: 100}}
	zero, ttl := 0.0, durationpb.New(time.Minute)
	return []authOp{
		{method: "Increment", req: func(k, _ string) proto.Message { return &limiterv1.IncrementRequest{Namespace: "api", Key: k} },
			resp: func() proto.Message { return &limiterv1.IncrementResponse{} }, counted: windowCount},
		{method: "SlidingWindow", read: true, req: func(k, _ string) proto.Message { return &limiterv1.SlidingWindowRequest{Namespace: "api", Key: k} },
			resp: func() proto.Message { return &limiterv1.SlidingWindowResponse{} }},
		{method: "Allow", req: func(k, _ string) proto.Message { return &limiterv1.AllowRequest{Namespace: "api", Key: k, Limits: win} },
			resp: func() proto.Message { return &limiterv1.AllowResponse{} }, counted: windowCount},
		// An Allow of cost 0 counts nothing but makes the key: a write.
		{method: "Allow", req: func(k, _ string) proto.Message {
			return &limiterv1.AllowRequest{Namespace: "api", Key: k, Limits: win, Cost: &zero}
		}, resp: func() proto.Message { return &limiterv1.AllowResponse{} }},
		{method: "IncrementBatch", req: func(k, _ string) proto.Message {
			return &limiterv1.IncrementBatchRequest{Items: []*limiterv1.IncrementRequest{{Namespace: "api", Key: k}}}
		}, resp: func() proto.Message { return &limiterv1.IncrementBatchResponse{} },
			item: func(m proto.Message) codes.Code {
				return statusCode(m.(*limiterv1.IncrementBatchResponse).GetResults()[0].GetError())
			}, counted: windowCount},
		{method: "AllowBatch", req: func(k, _ string) proto.Message {
			return &limiterv1.AllowBatchRequest{Items: []*limiterv1.AllowRequest{{Namespace: "api", Key: k, Limits: win}}}
		}, resp: func() proto.Message { return &limiterv1.AllowBatchResponse{} },
			item: func(m proto.Message) codes.Code {
				return statusCode(m.(*limiterv1.AllowBatchResponse).GetResults()[0].GetError())
			}, counted: windowCount},
		{method: "Acquire", req: func(k, _ string) proto.Message {
			return &limiterv1.AcquireRequest{Namespace: "api", Key: k, Limit: 5, Ttl: ttl}
		}, resp: func() proto.Message { return &limiterv1.AcquireResponse{} }, counted: leasesHeld},
		{method: "Release", req: func(_, l string) proto.Message { return &limiterv1.ReleaseRequest{Lease: l} },
			resp: func() proto.Message { return &limiterv1.ReleaseResponse{} }, counted: leaseGone},
		{method: "Renew", req: func(_, l string) proto.Message { return &limiterv1.RenewRequest{Lease: l, Ttl: ttl} },
			resp: func() proto.Message { return &limiterv1.RenewResponse{} }},
		{method: "AcquireBatch", req: func(k, _ string) proto.Message {
			return &limiterv1.AcquireBatchRequest{Items: []*limiterv1.AcquireRequest{{Namespace: "api", Key: k, Limit: 5, Ttl: ttl}}}
		}, resp: func() proto.Message { return &limiterv1.AcquireBatchResponse{} },
			item: func(m proto.Message) codes.Code {
				return statusCode(m.(*limiterv1.AcquireBatchResponse).GetResults()[0].GetError())
			}, counted: leasesHeld},
		{method: "ReleaseBatch", req: func(_, l string) proto.Message {
			return &limiterv1.ReleaseBatchRequest{Items: []*limiterv1.ReleaseRequest{{Lease: l}}}
		}, resp: func() proto.Message { return &limiterv1.ReleaseBatchResponse{} },
			item: func(m proto.Message) codes.Code {
				return statusCode(m.(*limiterv1.ReleaseBatchResponse).GetResults()[0].GetError())
			}, counted: leaseGone},
		{method: "RenewBatch", req: func(_, l string) proto.Message {
			return &limiterv1.RenewBatchRequest{Items: []*limiterv1.RenewRequest{{Lease: l, Ttl: ttl}}}
		}, resp: func() proto.Message { return &limiterv1.RenewBatchResponse{} },
			item: func(m proto.Message) codes.Code {
				return statusCode(m.(*limiterv1.RenewBatchResponse).GetResults()[0].GetError())
			}},
	}
}

// httpCode is the gRPC code of an HTTP status the gateway answers.
var httpCode = map[int]codes.Code{http.StatusOK: codes.OK, http.StatusUnauthorized: codes.Unauthenticated, http.StatusForbidden: codes.PermissionDenied}

// TestAuthorizationTable: every operation × every caller over gRPC and
// HTTP answers the code of the caller's grants, and a refused call counts
// nothing.
func TestAuthorizationTable(t *testing.T) {
	d, grpcAddr, httpAddr, _ := startAuthDaemon(t)
	conn := d.dial(t, grpcAddr)
	c := limiterv1.NewRateLimiterClient(conn)
	newLease := func(t *testing.T, key string) string {
		r, err := c.Acquire(ctxToken(writerToken), &limiterv1.AcquireRequest{Namespace: "api", Key: key, Limit: 100, Ttl: durationpb.New(time.Minute)})
		if err != nil || !r.GetAcquired() {
			t.Fatalf("Acquire by the writer: %v, %v", r, err)
		}
		return r.GetLease()
	}
	for _, front := range []string{"grpc", "http"} {
		for i, op := range authOps() {
			for j, cr := range authCreds {
				t.Run(fmt.Sprintf("%s/%d-%s/%s", front, i, op.method, cr.name), func(t *testing.T) {
					key := fmt.Sprintf("%s-%d-%d", front, i, j)
					lease := newLease(t, key+"-lease")
					want := cr.write
					if op.read {
						want = cr.read
					}
					req, resp := op.req(key, lease), op.resp()
					var got codes.Code
					if front == "grpc" {
						err := conn.Invoke(ctxToken(cr.token), "/limiter.v1.RateLimiter/"+op.method, req, resp)
						got = status.Code(err)
						if got == codes.PermissionDenied && !strings.Contains(status.Convert(err).Message(), `namespace "api"`) {
							t.Errorf("%v does not name the namespace", err)
						}
					} else {
						got = httpInvoke(t, httpAddr, op.method, cr.token, req, resp)
					}
					if got == codes.OK && op.item != nil {
						got = op.item(resp)
					}
					if got != want {
						t.Fatalf("code %s; want %s", got, want)
					}
					if op.counted != nil {
						// A granted call counts: the read-back can tell.
						if n := op.counted(t, c, key, lease); (n != 0) != (want == codes.OK) {
							t.Errorf("%s answered %s and counted %g", op.method, want, n)
						}
					}
				})
			}
		}
	}
}

// httpInvoke calls method over the JSON API with token, decoding the
// answer into resp when it is 200; it returns the answer's code.
func httpInvoke(t *testing.T, addr, method, token string, req, resp proto.Message) codes.Code {
	t.Helper()
	body, err := protojson.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	hr, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/limiter.v1.RateLimiter/"+method, bytes.NewReader(body))
	if token != "" {
		hr.Header.Set("Authorization", "Bearer "+token)
	}
	r, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	code, ok := httpCode[r.StatusCode]
	if !ok {
		t.Fatalf("HTTP %d: %s", r.StatusCode, b)
	}
	if r.StatusCode == http.StatusUnauthorized && r.Header.Get("WWW-Authenticate") == "" {
		t.Error("a 401 without WWW-Authenticate")
	}
	if code == codes.OK {
		if err := protojson.Unmarshal(b, resp); err != nil {
			t.Fatalf("%v: %s", err, b)
		}
	}
	return code
}

// TestAuthorizationRESP: every RL.* command × every caller over the Redis
// protocol answers NOAUTH, NOPERM or a reply, and a refused command counts
// nothing.
func TestAuthorizationRESP(t *testing.T) {
	d, grpcAddr, _, respAddr := startAuthDaemon(t)
	c := limiterv1.NewRateLimiterClient(d.dial(t, grpcAddr))
	redisClient(t, d, respAddr) // waits until it serves
	ctx := context.Background()
	// conn is a connection of its own: a connection's AUTH lasts as long
	// as it does.
	conn := func(t *testing.T) *redis.Conn {
		rdb := redis.NewClient(&redis.Options{Addr: respAddr, MaxRetries: -1, PoolSize: 1})
		c := rdb.Conn()
		t.Cleanup(func() { c.Close(); rdb.Close() })
		return c
	}
	type cmd struct {
		args    func(key, lease string) []any
		read    bool
		counted func(t *testing.T, key, lease string) float64
	}
	window := func(t *testing.T, key, lease string) float64 { return windowCount(t, c, key, lease) }
	tokens := func(t *testing.T, key, _ string) float64 {
		conn := conn(t)
		if err := conn.Do(ctx, "AUTH", writerToken).Err(); err != nil {
			t.Fatal(err)
		}
		left, err := conn.Do(ctx, "RL.GET", key, 10, 1, "NS", "api").Int64()
		if err != nil {
			t.Fatal(err)
		}
		return float64(10 - left)
	}
	// taken is what a bucket command's refused take left taken: its
	// limit less what remains, read by the writer with TAKE 0. The
	// buckets span an hour: a fixed window's end or a leaky bucket's
	// drip between the take and its read-back would hide the take.
	const hourMs = 3600000
	taken := func(cmd string) func(t *testing.T, key, _ string) float64 {
		return func(t *testing.T, key, _ string) float64 {
			conn := conn(t)
			if err := conn.Do(ctx, "AUTH", writerToken).Err(); err != nil {
				t.Fatal(err)
			}
			v, err := conn.Do(ctx, cmd, key, 10, hourMs, "TAKE", 0, "NS", "api").Result()
			if err != nil {
				t.Fatal(err)
			}
			m, ok := v.(map[any]any)
			if !ok {
				t.Fatalf("%s answered %#v", cmd, v)
			}
			remaining, _ := m["remaining"].(float64)
			return 10 - remaining
		}
	}
	cmds := []cmd{
		{args: func(k, _ string) []any { return []any{"RL.INCR", k, "NS", "api"} }, counted: window},
		{args: func(k, _ string) []any { return []any{"RL.RATE", k, "NS", "api"} }, read: true},
		{args: func(k, _ string) []any { return []any{"RL.ALLOW", k, 60000, 100, "NS", "api"} }, counted: window},
		{args: func(k, _ string) []any { return []any{"RL.GET", k, 10, 1, "NS", "api"} }}, // makes the bucket: a write
		{args: func(k, _ string) []any { return []any{"RL.REDUCE", k, 10, 1, "NS", "api"} }, counted: tokens},
		{args: func(k, _ string) []any { return []any{"RL.LEAKY", k, 10, hourMs, "NS", "api"} }, counted: taken("RL.LEAKY")},
		{args: func(k, _ string) []any { return []any{"RL.FIXED", k, 10, hourMs, "NS", "api"} }, counted: taken("RL.FIXED")},
		{args: func(k, _ string) []any { return []any{"RL.ACQUIRE", k, 5, 60000, "NS", "api"} },
			counted: func(t *testing.T, k, l string) float64 { return leasesHeld(t, c, k, l) }},
		{args: func(_, l string) []any { return []any{"RL.RELEASE", l} },
			counted: func(t *testing.T, k, l string) float64 { return leaseGone(t, c, k, l) }},
		{args: func(_, l string) []any { return []any{"RL.RENEW", l, 60000} }},
	}
	wantPrefix := map[codes.Code]string{codes.OK: "", codes.Unauthenticated: "NOAUTH", codes.PermissionDenied: "NOPERM"}
	for i, cm := range cmds {
		for j, cr := range authCreds {
			key := fmt.Sprintf("resp-%d-%d", i, j)
			name := fmt.Sprint(cm.args(key, "lease")[0])
			t.Run(fmt.Sprintf("%d-%s/%s", i, name, cr.name), func(t *testing.T) {
				r, err := c.Acquire(ctxToken(writerToken), &limiterv1.AcquireRequest{Namespace: "api", Key: key + "-lease", Limit: 100, Ttl: durationpb.New(time.Minute)})
				if err != nil {
					t.Fatal(err)
				}
				lease := r.GetLease()
				conn := conn(t)
				if cr.token != "" {
					err := conn.Do(ctx, "AUTH", cr.token).Err()
					if (err == nil) != (cr.token != wrongToken) {
						t.Fatalf("AUTH: %v", err)
					}
					if err != nil && !strings.HasPrefix(err.Error(), "WRONGPASS") {
						t.Errorf("AUTH with a wrong token: %v; want WRONGPASS", err)
					}
				}
				want := cr.write
				if cm.read {
					want = cr.read
				}
				err = conn.Do(ctx, cm.args(key, lease)...).Err()
				switch p := wantPrefix[want]; {
				case p == "" && err != nil && err != redis.Nil:
					t.Fatalf("%v; want a reply", err)
				case p != "" && (err == nil || !strings.HasPrefix(err.Error(), p)):
					t.Fatalf("%v; want %s", err, p)
				}
				if cm.counted != nil {
					// A granted command counts: the read-back can tell.
					if n := cm.counted(t, key, lease); (n != 0) != (want == codes.OK) {
						t.Errorf("%s answered %s and counted %g", name, want, n)
					}
				}
			})
		}
	}
}

// TestAdminNeedsTheAdminGrant: with authorization on, the admin listener
// serves only a credential granted admin in every namespace.
func TestAdminNeedsTheAdminGrant(t *testing.T) {
	adminAddr, grpcAddr, httpAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	const adminToken = "admin-token-0123456789abcdef"
	cfg := fmt.Sprintf(`grpc_addr: %s
http_addr: %s
admin_addr: %s
namespaces:
  - {name: api, window_sizes: ["1s"], sync_rate: -1}
auth:
  tokens:
    - {name: ops, token_env: LIMITERD_TEST_ADMIN, namespaces: ["*"], operations: [admin]}
    - {name: writer, token_env: LIMITERD_TEST_WRITER, namespaces: [api], operations: [read, write, admin]}
`, grpcAddr, httpAddr, adminAddr)
	startRun(t, []string{"--config", writeFile(t, "limiterd.yaml", cfg)},
		map[string]string{"LIMITERD_TEST_ADMIN": adminToken, "LIMITERD_TEST_WRITER": writerToken})
	get := func(token string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, "http://"+adminAddr+"/debug/pprof/cmdline", nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		var resp *http.Response
		for deadline := time.Now().Add(5 * time.Second); ; {
			if resp, err = http.DefaultClient.Do(req); err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		name, token string
		want        int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"wrong token", wrongToken, http.StatusUnauthorized},
		{"admin in one namespace only", writerToken, http.StatusForbidden},
		{"admin everywhere", adminToken, http.StatusOK},
	} {
		if got := get(c.token); got != c.want {
			t.Errorf("%s: admin listener answered %d, want %d", c.name, got, c.want)
		}
	}
	// The admin API over gRPC, on the same listener, is held to the same
	// grant.
	conn, err := grpc.NewClient(adminAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	admin := adminv1.NewAdminClient(conn)
	for _, c := range []struct {
		name, token string
		want        codes.Code
	}{
		{"gRPC, no token", "", codes.Unauthenticated},
		{"gRPC, admin in one namespace only", writerToken, codes.PermissionDenied},
		{"gRPC, admin everywhere", adminToken, codes.OK},
	} {
		ctx := context.Background()
		if c.token != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.token)
		}
		if _, err := admin.ListNamespaces(ctx, &adminv1.ListNamespacesRequest{}); status.Code(err) != c.want {
			t.Errorf("%s: %v, want %s", c.name, err, c.want)
		}
	}
}
