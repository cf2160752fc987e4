package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/config"
	"github.com/redis/go-redis/v9"
)

// redisClient connects to addr and waits until it answers PING.
func redisClient(t *testing.T, d *daemonRun, addr string) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := rdb.Ping(context.Background()).Err()
		if err == nil {
			return rdb
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v; stderr:\n%s", addr, err, d.stderr.String())
		}
	}
}

// TestRunServesRESP: --resp-addr serves the Redis protocol front (Smyte's
// transcript), its metrics are on /metrics, and a shutdown answers a
// pipeline in flight.
func TestRunServesRESP(t *testing.T) {
	grpcAddr, httpAddr, respAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	d := startRun(t, []string{"--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--resp-addr", respAddr}, nil)
	rdb := redisClient(t, d, respAddr)
	ctx := context.Background()
	for i, want := range []int64{2, 1, 0} {
		if got, err := rdb.Do(ctx, "RL.REDUCE", "TwoPerMin", 2, 60).Int64(); err != nil || got != want {
			t.Errorf("call %d: %d, %v; want %d", i+1, got, err, want)
		}
	}
	code, body, _ := httpGet(t, "http://"+httpAddr+"/metrics")
	if code != http.StatusOK || !strings.Contains(body, `limiterd_resp_commands_total{command="rl.reduce",result="ok"} 3`) ||
		!strings.Contains(body, "limiterd_resp_connections 1") {
		t.Errorf("/metrics lacks the front's series: %d %.2000s", code, body)
	}
	pipe := rdb.Pipeline()
	for range 100 {
		pipe.Do(ctx, "RL.INCR", "k")
	}
	done := make(chan error, 1)
	go func() { _, err := pipe.Exec(ctx); done <- err }()
	d.stop(t)
	if err := <-done; err != nil {
		t.Logf("pipeline across the shutdown: %v (sent after it began)", err)
	}
	if c, err := net.DialTimeout("tcp", respAddr, time.Second); err == nil {
		c.Close()
		t.Error("the RESP listener outlived the shutdown")
	}
}

// TestRESPOffByDefault: without resp_addr nothing listens; the config
// file's resp_addr and resp section turn it on and are validated.
func TestRESPOffByDefault(t *testing.T) {
	if got := config.DefaultConfig().RESPAddr; got != "" {
		t.Errorf("default resp_addr %q; want off", got)
	}
	respAddr := freeAddr(t)
	path := writeFile(t, "limiterd.yaml", "resp_addr: "+respAddr+"\nresp: {max_command_size: 4096, max_clients: 5, idle_timeout: 1m}\n")
	cfg, err := config.Load(config.Source{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RESPAddr != respAddr || cfg.RESP.MaxCommandSize != 4096 || cfg.RESP.MaxClients != 5 || time.Duration(cfg.RESP.IdleTimeout) != time.Minute {
		t.Errorf("config %+v", cfg)
	}
	d := startRun(t, []string{"--config", path, "--grpc-addr", freeAddr(t), "--http-addr", "off"}, nil)
	rdb := redisClient(t, d, respAddr)
	// The configured cap: a command over 4 KiB is refused.
	if err := rdb.Do(context.Background(), "ECHO", strings.Repeat("x", 5000)).Err(); err == nil || !strings.Contains(err.Error(), "exceeds the command size limit of 4096 bytes") {
		t.Errorf("oversized ECHO: %v", err)
	}
	for _, bad := range []string{"resp_addr: nope\n", "resp: {max_clients: -1}\n"} {
		if _, err := config.ParseConfig("bad.yaml", []byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestRESPTransactionCapFromConfig: resp.max_queued_commands reaches the
// front: the third command queued under a cap of 2 discards the
// transaction.
func TestRESPTransactionCapFromConfig(t *testing.T) {
	grpcAddr, respAddr := freeAddr(t), freeAddr(t)
	path := writeFile(t, "limiterd.yaml", "resp_addr: "+respAddr+"\nresp: {max_queued_commands: 2}\n")
	d := startRun(t, []string{"--config", path, "--grpc-addr", grpcAddr, "--http-addr", "off"}, nil)
	rdb := redisClient(t, d, respAddr)
	ctx := context.Background()
	conn := rdb.Conn()
	defer conn.Close()
	var replies []string
	for _, cmd := range [][]any{{"MULTI"}, {"RL.INCR", "a"}, {"RL.INCR", "b"}, {"RL.INCR", "c"}, {"EXEC"}} {
		v, err := conn.Do(ctx, cmd...).Result()
		if err != nil {
			replies = append(replies, err.Error())
		} else {
			replies = append(replies, fmt.Sprint(v))
		}
	}
	if !strings.Contains(replies[3], "more than 2 commands queued") || !strings.HasPrefix(replies[4], "EXECABORT") {
		t.Errorf("replies %q: want the third command to discard the transaction and EXEC to abort", replies)
	}
}
