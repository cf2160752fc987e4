//go:build integration

package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/integration/harness"
)

// The client addresses of the hostile tests: every attacker connects
// from attackerIP, the real clients from loopback's usual 127.0.0.1.
const (
	attackerIP  = "127.0.0.2"
	hostileTok  = "hostile-test-token-0123456789"
	nofileLimit = 2048
)

// startUnderNofile starts a limiterd with config (and a token granted
// every namespace) under prlimit --nofile=2048:2048, or skips when
// prlimit or a second loopback address is missing, or when this process
// cannot hold the connections the test opens.
func startUnderNofile(t *testing.T, name, config string, conns int) *harness.Limiterd {
	t.Helper()
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skip("prlimit (util-linux) is not installed")
	}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur < uint64(conns+1024) {
		t.Skipf("this process may hold %d descriptors; the test opens %d connections", rl.Cur, conns)
	}
	c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(attackerIP)}}).Dial("tcp", "127.0.0.1:1")
	if c != nil {
		c.Close()
	}
	if err != nil && strings.Contains(err.Error(), "assign requested address") {
		t.Skipf("cannot connect from %s: %v", attackerIP, err)
	}
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "app.token")
	if err := os.WriteFile(tokenFile, []byte(hostileTok), 0o600); err != nil {
		t.Fatal(err)
	}
	config += fmt.Sprintf(`auth:
  tokens:
    - {name: app, token_file: %s, namespaces: ["*"], operations: [read, write]}
`, tokenFile)
	return harness.StartLimiterdUnder(t, name, config, "prlimit", fmt.Sprintf("--nofile=%d:%d", nofileLimit, nofileLimit))
}

// dialFrom connects to addr from the local address ip.
func dialFrom(ip, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return d.Dial("tcp", addr)
}

// procStatus returns a field of /proc/PID/status in bytes (VmRSS,
// VmHWM).
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// openFDs is how many descriptors process pid holds.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	es, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// h2Preface is what an HTTP/2 client sends first: the preface and an
// empty SETTINGS frame.
var h2Preface = append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0)

// TestHostileConnections (issue 54, acceptance 1): from one address, 3000
// connections that go silent (idle HTTP keep-alives after one GET, gRPC
// connections after the HTTP/2 preface, Redis protocol connections that
// send nothing) and slow unauthenticated bodies, against a limiterd
// under a limit of 2048 descriptors: /healthz answers within 5 s, and a
// fresh authorized client from another address is served on every front.
func TestHostileConnections(t *testing.T) {
	respAddr := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	l := startUnderNofile(t, "hostile-conns", fmt.Sprintf("resp_addr: %s\n", respAddr), 3200)
	pid := l.PID()

	var (
		mu    sync.Mutex
		held  []net.Conn
		wg    sync.WaitGroup
		fails atomic.Int64
	)
	keep := func(c net.Conn) {
		mu.Lock()
		held = append(held, c)
		mu.Unlock()
	}
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	attack := func(n int, addr string, first []byte) {
		for range n {
			wg.Go(func() {
				c, err := dialFrom(attackerIP, addr)
				if err != nil {
					fails.Add(1) // the kernel's queue is full: refused
					return
				}
				keep(c)
				if first != nil {
					c.Write(first)
				}
			})
		}
	}
	get := fmt.Appendf(nil, "GET /readyz HTTP/1.1\r\nHost: %s\r\n\r\n", l.HTTPAddr)
	attack(1000, l.HTTPAddr, get)
	attack(1000, l.GRPCAddr, h2Preface)
	attack(950, respAddr, nil)
	// Slow bodies: a byte every 2 s, without a token.
	slow := fmt.Appendf(nil, "POST /limiter.v1.RateLimiter/Allow HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", l.HTTPAddr)
	slowCtx, stopSlow := context.WithCancel(context.Background())
	defer stopSlow()
	var slowWG sync.WaitGroup
	for range 50 {
		slowWG.Go(func() {
			c, err := dialFrom(attackerIP, l.HTTPAddr)
			if err != nil {
				return
			}
			keep(c)
			if _, err := c.Write(slow); err != nil {
				return
			}
			tick := time.NewTicker(2 * time.Second)
			defer tick.Stop()
			for {
				select {
				case <-slowCtx.Done():
					return
				case <-tick.C:
					if _, err := c.Write([]byte(" ")); err != nil {
						return
					}
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d connections from %s (%d dials failed); limiterd holds %d descriptors", len(held), attackerIP, fails.Load(), openFDs(t, pid))

	// A fresh client, from 127.0.0.1, on every front.
	start := time.Now()
	web := &http.Client{Timeout: 5 * time.Second}
	resp, err := web.Get(l.URL(l.HTTPAddr, "/healthz"))
	if err != nil {
		t.Fatalf("/healthz under attack: %v (after %s)", err, time.Since(start))
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz under attack: %s", resp.Status)
	}
	t.Logf("/healthz answered in %s", time.Since(start))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+hostileTok)
	conn, err := grpc.NewClient(l.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := limiterv1.NewRateLimiterClient(conn).Increment(authed, &limiterv1.IncrementRequest{Key: "fresh"}); err != nil {
		t.Errorf("gRPC under attack: %v", err)
	}
	hr, _ := http.NewRequestWithContext(ctx, http.MethodPost, l.URL(l.HTTPAddr, "/limiter.v1.RateLimiter/Increment"), strings.NewReader(`{"key":"fresh"}`))
	hr.Header.Set("Authorization", "Bearer "+hostileTok)
	if resp, err := web.Do(hr); err != nil {
		t.Errorf("HTTP API under attack: %v", err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("HTTP API under attack: %s", resp.Status)
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: respAddr, Username: "app", Password: hostileTok, MaxRetries: -1,
		DialTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second})
	defer rdb.Close()
	if err := rdb.Do(ctx, "RL.INCR", "fresh").Err(); err != nil {
		t.Errorf("Redis protocol under attack: %v", err)
	}
	if n := openFDs(t, pid); n >= nofileLimit {
		t.Errorf("limiterd holds %d descriptors, its limit", n)
	}
	// The connections closed at the per-address cap are counted.
	metrics, err := l.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, front := range []string{"grpc", "http", "resp"} {
		m := regexp.MustCompile(`(?m)^limiterd_connections_refused_total\{listener="` + front + `"\} (\d+)$`).FindStringSubmatch(metrics)
		if m == nil || m[1] == "0" {
			t.Errorf("no connection of %s counted as refused at the per-address cap: %v", front, m)
		}
	}
	stopSlow()
	slowWG.Wait()
	if log := l.LogTail(2000); strings.Contains(log, "too many open files") {
		t.Error("limiterd ran out of descriptors")
	}
}

// TestRESPAuthDeadline (issue 54, acceptance 1): 150 Redis protocol
// connections that never authenticate, at max_clients 100, are closed at
// the authentication deadline (2 s here), and a real client gets in.
func TestRESPAuthDeadline(t *testing.T) {
	respAddr := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	const deadline = 2 * time.Second
	startUnderNofile(t, "resp-auth-deadline", fmt.Sprintf(`resp_addr: %s
resp:
  max_clients: 100
connections:
  auth_timeout: %s
`, respAddr, deadline), 200)
	opened := time.Now()
	type idle struct {
		c     net.Conn
		first chan string // what the server sent, at the close
	}
	var conns []idle
	for range 150 {
		c, err := dialFrom(attackerIP, respAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ic := idle{c: c, first: make(chan string, 1)}
		go func() {
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			b, _ := io.ReadAll(c)
			ic.first <- string(b)
		}()
		conns = append(conns, ic)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Every slot is held: a real client is turned away.
	if c, err := dialFrom("127.0.0.1", respAddr); err != nil {
		t.Fatal(err)
	} else {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, _ := io.ReadAll(c)
		c.Close()
		if !strings.HasPrefix(string(got), "-ERR max number of clients reached") {
			t.Errorf("a client while 100 idle connections are held got %q; want max number of clients reached", got)
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: respAddr, Username: "app", Password: hostileTok, MaxRetries: -1, PoolSize: 1})
	defer rdb.Close()
	var refused, noauth int
	for _, ic := range conns {
		got := <-ic.first
		switch {
		case strings.HasPrefix(got, "-ERR max number of clients reached"):
			refused++
		case strings.HasPrefix(got, "-NOAUTH"):
			noauth++
		default:
			t.Errorf("an idle connection got %q at its close", got)
		}
	}
	took := time.Since(opened)
	if refused != 50 || noauth != 100 {
		t.Errorf("%d connections refused at max_clients and %d closed by the deadline; want 50 and 100", refused, noauth)
	}
	if took < deadline || took > deadline+5*time.Second {
		t.Errorf("the idle connections were closed after %s; want about %s", took, deadline)
	}
	if err := rdb.Do(ctx, "RL.INCR", "real").Err(); err != nil {
		t.Errorf("a real client after the deadline: %v", err)
	}
}

// sharedCodec sends a message already encoded (a *sharedMessage, shared by
// every call without a copy) and decodes replies as protobuf.
type sharedCodec struct{}

type sharedMessage struct{ b []byte }

func (sharedCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.(*sharedMessage).b)}, nil
}

func (sharedCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}

func (sharedCodec) Name() string { return "proto" }

// bigBatch is an AllowBatch request of 10 000 valid items of 1.5 KB each
// (a 1 KiB key, a window, and an unknown field as padding): 15 MB.
func bigBatch() []byte {
	var b []byte
	key := strings.Repeat("k", 1000)
	for i := range 10_000 {
		item, _ := proto.Marshal(&limiterv1.AllowRequest{Key: fmt.Sprintf("%s%05d", key, i),
			Limits: []*limiterv1.Limit{{WindowSize: durationpb.New(time.Minute), Limit: 100}}})
		item = protowire.AppendTag(item, 1000, protowire.BytesType)
		item = protowire.AppendBytes(item, make([]byte, 1500-len(item)-5))
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, item)
	}
	return b
}

// countingConn counts the bytes written to it.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// bodySender sends an HTTP request of a 15 MB body to addr, in 64 KiB
// chunks every pace (none: as fast as the socket takes them), and
// returns the status line of the answer and how many body bytes were
// sent when it came.
func bodySender(addr, auth string, pace time.Duration) (string, int64, error) {
	const size = 15_000_000
	c, err := dialFrom(attackerIP, addr)
	if err != nil {
		return "", 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	head := fmt.Sprintf("POST /limiter.v1.RateLimiter/AllowBatch HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n", addr, size, auth)
	if _, err := io.WriteString(c, head); err != nil {
		return "", 0, err
	}
	var sent atomic.Int64
	go func() {
		chunk := make([]byte, 64<<10)
		for i := range chunk {
			chunk[i] = ' '
		}
		for sent.Load() < size {
			n, err := c.Write(chunk[:min(len(chunk), size-int(sent.Load()))])
			sent.Add(int64(n))
			if err != nil {
				return
			}
			if pace > 0 {
				time.Sleep(pace)
			}
		}
	}()
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), sent.Load(), err
}

// TestUnauthenticatedLargeRequests (issue 54, acceptance 2): 60
// unauthenticated 15 MB gRPC batches and 20 unauthenticated 15 MB HTTP
// bodies, all in flight at once, raise limiterd's peak RSS by less than
// 200 MB; an unauthenticated 15 MB call is refused before its client has
// sent 1 MB, on both fronts; an authorized 15 MB batch is served.
func TestUnauthenticatedLargeRequests(t *testing.T) {
	l := startUnderNofile(t, "large-requests", "", 200)
	pid := l.PID()
	batch := &sharedMessage{b: bigBatch()}
	if len(batch.b) < 15_000_000 || len(batch.b) > 16<<20 {
		t.Fatalf("the batch is %d bytes", len(batch.b))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var sent atomic.Int64
	conn, err := grpc.NewClient(l.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(sharedCodec{}), grpc.MaxCallSendMsgSize(64<<20)),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(attackerIP)}}).DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return countingConn{Conn: c, n: &sent}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	call := func(ctx context.Context) (*limiterv1.AllowBatchResponse, error) {
		out := new(limiterv1.AllowBatchResponse)
		err := conn.Invoke(ctx, limiterv1.RateLimiter_AllowBatch_FullMethodName, batch, out)
		return out, err
	}
	// One call alone: refused before its client sent 1 MB.
	if err := conn.Invoke(ctx, "/grpc.health.v1.Health/Check", &sharedMessage{}, new(healthpb.HealthCheckResponse)); err != nil {
		t.Fatalf("health check: %v", err)
	}
	before := sent.Load()
	if _, err := call(ctx); status.Code(err) != codes.Unauthenticated {
		t.Errorf("an unauthenticated batch: %v; want UNAUTHENTICATED", err)
	}
	if n := sent.Load() - before; n >= 1<<20 {
		t.Errorf("the client had sent %d bytes of an unauthenticated gRPC call when it was refused; want < 1 MiB", n)
	} else {
		t.Logf("gRPC: refused after %d bytes", n)
	}
	line, n, err := bodySender(l.HTTPAddr, "", 10*time.Millisecond)
	if err != nil || !strings.Contains(line, " 401 ") {
		t.Errorf("an unauthenticated 15 MB body: %q, %v; want 401", line, err)
	}
	if n >= 1<<20 {
		t.Errorf("the client had sent %d bytes of an unauthenticated HTTP body when it was refused; want < 1 MiB", n)
	} else {
		t.Logf("HTTP: refused after %d bytes", n)
	}

	// All at once.
	idle := procStatus(t, pid, "VmRSS")
	var wg sync.WaitGroup
	var grpcRefused, httpRefused atomic.Int64
	for range 60 {
		wg.Go(func() {
			if _, err := call(ctx); status.Code(err) == codes.Unauthenticated {
				grpcRefused.Add(1)
			}
		})
	}
	for range 20 {
		wg.Go(func() {
			if st, _, _ := bodySender(l.HTTPAddr, "", 0); strings.Contains(st, " 401 ") {
				httpRefused.Add(1)
			}
		})
	}
	wg.Wait()
	peak := procStatus(t, pid, "VmHWM")
	if grpcRefused.Load() != 60 || httpRefused.Load() != 20 {
		t.Errorf("%d gRPC batches and %d HTTP bodies refused UNAUTHENTICATED; want 60 and 20", grpcRefused.Load(), httpRefused.Load())
	}
	t.Logf("RSS idle %d MB, peak %d MB", idle>>20, peak>>20)
	if peak-idle >= 200<<20 {
		t.Errorf("peak RSS %d MB is %d MB above the idle %d MB; want < 200 MB", peak>>20, (peak-idle)>>20, idle>>20)
	}

	// An authorized batch of the same size is served.
	out, err := call(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+hostileTok))
	if err != nil {
		t.Fatalf("an authorized 15 MB batch: %v", err)
	}
	if len(out.GetResults()) != 10_000 {
		t.Fatalf("%d results; want 10000", len(out.GetResults()))
	}
	for i, r := range out.GetResults() {
		if !r.GetResponse().GetAllowed() {
			t.Fatalf("item %d: %v; want allowed", i, r)
		}
	}
}
