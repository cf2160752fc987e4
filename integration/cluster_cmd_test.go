//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
)

// TestClusterCommand runs the command behind `make cluster` as a user does:
// it waits for the table of nodes, calls every node, sees the counts
// converge, takes a node down and sees it come back with the counts, then
// sends SIGINT to the command's process group (what Ctrl-C does) and sees
// it exit 0 with every process it started gone.
//
// The command runs with -shared: under scripts/test.sh it uses the shared
// stores (LIMITERD_TEST_*) rather than start a second server, and starts
// its own otherwise. With -short Cassandra is left out: starting one costs
// 15 to 20 s on an idle machine, minutes on a loaded one.
func TestClusterCommand(t *testing.T) {
	stores := []string{"redis", "postgres", "cassandra"}
	if testing.Short() {
		stores = stores[:2]
	}

	// `make cluster` runs this command; check that it still does.
	out, err := exec.Command("make", "-s", "-n", "-C", "..", "cluster", "STORE=postgres").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n cluster: %v\n%s", err, out)
	}
	for _, want := range []string{"go build -o bin/limiterd-cluster ./integration/harness/cmd/cluster", "bin/limiterd-cluster -store postgres"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("make -n cluster STORE=postgres does not run %s:\n%s", want, out)
		}
	}

	bin := filepath.Join(t.TempDir(), "cluster")
	build := exec.Command("go", "build", "-o", bin, "./integration/harness/cmd/cluster")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, store := range stores {
		t.Run(store, func(t *testing.T) { testClusterCommand(t, bin, store) })
	}
}

// clusterNode is one row of the command's table.
type clusterNode struct {
	name, grpcAddr, httpAddr string
	pid                      int
	logPath                  string
	client                   limiterv1.RateLimiterClient
}

func testClusterCommand(t *testing.T, bin, store string) {
	start := time.Now()
	cmd := exec.Command(bin, "-store", store, "-free-ports", "-shared", "-restart", "1s", "-deploy", "../deploy")
	// A process group of its own, as a shell gives a foreground job: the
	// SIGINT below goes to the group, as Ctrl-C does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderrR, stderrW := io.Pipe()
	cmd.Stderr = stderrW
	var logMu sync.Mutex
	var stderrLog bytes.Buffer
	back := make(chan string, 8) // "limiterd-N is back" lines
	go func() {
		sc := bufio.NewScanner(stderrR)
		for sc.Scan() {
			logMu.Lock()
			stderrLog.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			if strings.Contains(sc.Text(), " is back: ") {
				back <- sc.Text()
			}
		}
	}()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); stderrW.Close() }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if t.Failed() {
			logMu.Lock()
			t.Logf("the command's stderr:\n%s", stderrLog.String())
			logMu.Unlock()
		}
	})

	// Read the table until "Ready.". A node's row: NODE GRPC HTTP PID LOG.
	clusterRow := regexp.MustCompile(`^\s+(limiterd-\d+)\s+(\S+)\s+(\S+)\s+(\d+)\s+(\S+)\s*$`)
	var nodes []*clusterNode
	var table strings.Builder
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			table.WriteString(line + "\n")
			if m := clusterRow.FindStringSubmatch(line); m != nil {
				pid, _ := strconv.Atoi(m[4])
				nodes = append(nodes, &clusterNode{name: m[1], grpcAddr: m[2], httpAddr: m[3], pid: pid, logPath: m[5]})
			}
			if strings.HasPrefix(line, "Ready.") {
				ready <- nil
				io.Copy(io.Discard, stdout)
				return
			}
		}
		ready <- fmt.Errorf("stdout ended before Ready. (%v)", sc.Err())
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatal(err)
		}
	case err := <-exited:
		t.Fatalf("the command exited during start-up: %v", err)
	case <-time.After(4 * time.Minute):
		t.Fatal("no Ready. line after 4 minutes")
	}
	t.Logf("%s cluster ready in %v:\n%s", store, time.Since(start).Round(time.Millisecond), table.String())
	if len(nodes) != 3 {
		t.Fatalf("%d nodes in the table, want 3", len(nodes))
	}
	for _, n := range nodes {
		conn, err := grpc.NewClient(n.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		n.client = limiterv1.NewRateLimiterClient(conn)
	}

	// Increments round-robin over the nodes, all at one instant so that the
	// 60s window's rate is exactly their number.
	ctx := context.Background()
	at := time.Now()
	keys := []string{"user-1", "user-2", "user-3", "user-4"}
	want := map[string]float64{}
	send := func(rounds int) {
		t.Helper()
		i := 0
		for range rounds {
			for _, k := range keys {
				n := nodes[i%len(nodes)]
				i++
				if _, err := n.client.Increment(ctx, &limiterv1.IncrementRequest{Namespace: "default", Key: k, At: timestamppb.New(at)}); err != nil {
					t.Fatalf("%s Increment: %v", n.name, err)
				}
				want[k]++
			}
		}
	}
	converge := func(what string) {
		t.Helper()
		t0 := time.Now()
		for _, k := range keys {
			waitNodesAt(t, nodes, k, at, want[k], time.Now().Add(30*time.Second))
		}
		t.Logf("%s: every node has the exact totals after %v", what, time.Since(t0).Round(time.Millisecond))
	}
	send(25)
	converge("round-robin increments")

	// limiterd-2 down (a graceful stop pushes its counts) and back: the new
	// incarnation answers the same totals, and counts again.
	down := nodes[1]
	if err := syscall.Kill(down.pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case line := <-back:
		m := regexp.MustCompile(`pid (\d+)`).FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("no pid in %q", line)
		}
		down.pid, _ = strconv.Atoi(m[1])
	case <-time.After(60 * time.Second):
		t.Fatalf("%s not back 60s after SIGTERM", down.name)
	}
	converge(down.name + " back")
	send(10)
	converge("more increments")

	// Every process the command started, with its start time (against pid
	// reuse), before the stop.
	procs := descendants(t, cmd.Process.Pid)
	if len(procs) < 3 { // the nodes, and the store unless it is shared
		t.Fatalf("%d processes under the command, want 3 nodes at least: %v", len(procs), procs)
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	stopStart := time.Now()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("after SIGINT the command exited with %v, want 0", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the command still runs 2 minutes after SIGINT")
	}
	stopped := time.Since(stopStart)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var alive []string
		for pid, st := range procs {
			if procStart(pid) == st {
				alive = append(alive, fmt.Sprint(pid))
			}
		}
		if len(alive) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes left 10s after the command's exit: %s", strings.Join(alive, " "))
		}
	}
	for _, n := range nodes {
		if _, err := os.Stat(filepath.Dir(n.logPath)); !os.IsNotExist(err) {
			t.Errorf("%s's directory %s not removed (%v)", n.name, filepath.Dir(n.logPath), err)
		}
	}
	t.Logf("SIGINT: exit 0 after %v, %d processes gone; whole run %v", stopped.Round(time.Millisecond), len(procs), time.Since(start).Round(time.Millisecond))
}

// waitNodesAt polls SlidingWindow (namespace default, 60s) on every node
// until each reports want for key at at, or fails at the deadline.
func waitNodesAt(t *testing.T, nodes []*clusterNode, key string, at time.Time, want float64, deadline time.Time) {
	t.Helper()
	for {
		var got []string
		all := true
		for _, n := range nodes {
			resp, err := n.client.SlidingWindow(context.Background(), &limiterv1.SlidingWindowRequest{
				Namespace: "default", Key: key, WindowSize: durationpb.New(time.Minute), At: timestamppb.New(at),
			})
			if err != nil {
				all = false
				got = append(got, fmt.Sprintf("%s: %v", n.name, err))
				continue
			}
			r := resp.GetRates()[0].GetRate()
			got = append(got, fmt.Sprintf("%s: %v", n.name, r))
			all = all && math.Abs(r-want) < 1e-9
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("key %s: want %v on every node by the deadline, got %s", key, want, strings.Join(got, ", "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// descendants returns the processes under pid (children, theirs, and so
// on) with their start times, from /proc.
func descendants(t *testing.T, pid int) map[int]string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := procStat(p); f != nil {
			ppid, _ := strconv.Atoi(f[1])
			children[ppid] = append(children[ppid], p)
		}
	}
	out := map[int]string{}
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out[c] = procStart(c)
			queue = append(queue, c)
		}
	}
	return out
}

// procStat returns the fields of /proc/pid/stat after the command name
// (state, ppid, …), or nil when there is no such process.
func procStat(pid int) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// procStart returns a live process's start time (field 22 of stat), or ""
// when it is gone or a zombie (a zombie has exited: only its entry is left).
func procStart(pid int) string {
	f := procStat(pid)
	if len(f) < 20 || f[0] == "Z" {
		return ""
	}
	return f[19]
}
