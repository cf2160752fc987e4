// Command cluster runs a limiterd cluster on loopback, for machines without
// Docker: one store, started as the integration harness starts it
// (harness.StartRedis, StartPostgres, StartCassandra), and -nodes limiterd
// processes, each with the config deploy/<store>.yaml of the compose
// cluster in which only the store's address is rewritten. It prints where
// everything listens and runs until SIGINT (Ctrl-C) or SIGTERM; then it
// stops the nodes (each pushes its last counts), then the store, and
// removes their directories. A second signal kills everything at once.
//
//	make cluster STORE=redis
//	go run ./integration/harness/cmd/cluster -store postgres -base-port 8000
//
// Node i (from 1) listens for gRPC on 127.0.0.1:base+10(i-1) and for HTTP
// on the port after it: 7070/7071, 7080/7081, 7090/7091 by default. A node
// whose ports are taken gets free ones instead (all do with -free-ports).
// A node that exits, for example after `kill PID`, is started again after
// -restart, on the same ports.
//
// With -shared the store is the one named by LIMITERD_TEST_REDIS,
// LIMITERD_TEST_POSTGRES or LIMITERD_TEST_CASSANDRA when it is set (as the
// harness's Shared functions take it; scripts/test.sh sets them), with a
// key prefix, database or keyspace of the cluster's own, so that tests do
// not start a second server.
//
// Exit status: 0 after a signal, 1 when something could not be started.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/limiterd/limiterd/integration/harness"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		// From now on a second signal has its default effect and ends this
		// process at once; its children die with it (parent-death signal).
		stop()
	}()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	store     string
	nodes     int
	basePort  int
	freePorts bool
	deploy    string
	restart   time.Duration
	shared    bool
}

// run is the command: it returns nil once ctx is done and everything it
// started has stopped, or an error when the cluster could not be started.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o options
	fs := flag.NewFlagSet("cluster", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.store, "store", "redis", "the store the nodes sync through: redis, postgres or cassandra")
	fs.IntVar(&o.nodes, "nodes", 3, "number of limiterd nodes")
	fs.IntVar(&o.basePort, "base-port", 7070, "node i listens for gRPC on base+10(i-1) and for HTTP on the next port")
	fs.BoolVar(&o.freePorts, "free-ports", false, "listen on free ports instead of base-port's")
	fs.StringVar(&o.deploy, "deploy", "deploy", "folder of the compose cluster's configs (<store>.yaml)")
	fs.DurationVar(&o.restart, "restart", 5*time.Second, "start a node that exits again after this long (0: leave it down)")
	fs.BoolVar(&o.shared, "shared", false, "use the store of LIMITERD_TEST_<STORE> when set, with a key prefix, database or keyspace of its own")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.store != "redis" && o.store != "postgres" && o.store != "cassandra":
		return fmt.Errorf("-store must be redis, postgres or cassandra, not %q", o.store)
	case o.nodes < 1:
		return fmt.Errorf("-nodes must be at least 1")
	case !o.freePorts && (o.basePort < 1 || o.basePort+10*(o.nodes-1)+1 > 65535):
		return fmt.Errorf("-base-port %d leaves no room for %d nodes", o.basePort, o.nodes)
	}
	deployFile := filepath.Join(o.deploy, o.store+".yaml")
	deployed, err := os.ReadFile(deployFile)
	if err != nil {
		return err
	}

	t := &tb{name: "cluster", log: stderr}
	defer t.runCleanups()
	var c *cluster
	started := t.do(func() { c = start(t, o, deployFile, deployed) })
	select {
	case <-started:
	case <-ctx.Done():
		t.Logf("stopping once start-up ends (a second signal kills everything at once)")
		<-started
	}
	if err := t.err(); err != nil {
		return err
	}
	if ctx.Err() == nil {
		c.print(stdout, o)
		c.watch(ctx, t, o.restart)
	}
	t.Logf("stopping the nodes, then %s", o.store)
	t.runCleanups()
	if err := t.err(); err != nil {
		return err
	}
	t.Logf("stopped")
	return nil
}

// cluster is what run started.
type cluster struct {
	store      string // name of the store
	storeAddr  string // host:port, or the DSN for postgres
	deployFile string
	namespace  string // the config's first namespace and one of its windows, for the examples
	window     string
	nodes      []*harness.Limiterd
}

// start starts the store and the nodes; it ends through t.Fatal (or
// t.Skip when the store is not installed) when one cannot be started.
func start(t *tb, o options, deployFile string, deployed []byte) *cluster {
	c := &cluster{store: o.store, deployFile: deployFile}
	var set map[string]any
	switch o.store {
	case "redis":
		r := pick(o.shared, harness.SharedRedis, harness.StartRedis)(t)
		c.storeAddr = r.Addr()
		set = map[string]any{"addrs": []string{r.Addr()}}
		if o.shared {
			set["key_prefix"] = harness.UniqueName("cluster")
		}
	case "postgres":
		// SharedPostgres makes a fresh database.
		p := pick(o.shared, harness.SharedPostgres, harness.StartPostgres)(t)
		c.storeAddr = p.DSN()
		set = map[string]any{"dsn": p.DSN()}
	case "cassandra":
		cs := pick(o.shared, harness.SharedCassandra, harness.StartCassandra)(t)
		c.storeAddr = fmt.Sprintf("%s:%d", cs.Host(), cs.Port())
		set = map[string]any{"hosts": []string{cs.Host()}, "port": cs.Port()}
		if o.shared {
			set["keyspace"] = harness.UniqueName("cluster")
		}
	}
	config, err := rewriteStores(deployed, o.store, set)
	if err != nil {
		t.Fatalf("%s: %v", deployFile, err)
	}
	config = fmt.Sprintf("# %s with the %s store's address rewritten to the loopback server.\n%s", deployFile, o.store, config)
	c.namespace, c.window = firstWindow(deployed)
	for i := range o.nodes {
		grpcAddr, httpAddr := addrs(t, o, i)
		c.nodes = append(c.nodes, harness.StartLimiterdAt(t, fmt.Sprintf("limiterd-%d", i+1), config, grpcAddr, httpAddr))
	}
	return c
}

// pick returns shared when -shared is set, else start.
func pick[S any](shared bool, sharedFn, start func(testing.TB) S) func(testing.TB) S {
	if shared {
		return sharedFn
	}
	return start
}

// addrs returns node i's gRPC and HTTP addresses: base-port's when both are
// free (so that they are the same from one run to the next), free ports
// otherwise.
func addrs(t *tb, o options, i int) (grpcAddr, httpAddr string) {
	port := o.basePort + 10*i
	if !o.freePorts {
		if free(port) && free(port+1) {
			return fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("127.0.0.1:%d", port+1)
		}
		t.Logf("port %d or %d is taken: limiterd-%d gets free ports", port, port+1, i+1)
	}
	return fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t)), fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
}

// free reports whether one can listen on 127.0.0.1:port.
func free(port int) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// rewriteStores sets fields of every store of type typ in a limiterd config
// to the values in set, keeping the rest of the file (comments, order,
// flow style) as it is, so that the nodes run the deploy config itself.
func rewriteStores(config []byte, typ string, set map[string]any) (string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(config, &doc); err != nil {
		return "", err
	}
	if len(doc.Content) == 0 {
		return "", errors.New("empty config")
	}
	stores := mappingValue(doc.Content[0], "stores")
	if stores == nil || stores.Kind != yaml.MappingNode {
		return "", errors.New("no stores")
	}
	found := false
	for i := 1; i < len(stores.Content); i += 2 {
		s := stores.Content[i]
		if t := mappingValue(s, "type"); t == nil || t.Value != typ {
			continue
		}
		found = true
		for key, v := range set {
			var n yaml.Node
			if err := n.Encode(v); err != nil {
				return "", err
			}
			if old := mappingValue(s, key); old != nil {
				// Keep the file's quoting and ["a"] flow sequences.
				n.Style = old.Style
				if len(old.Content) > 0 {
					for _, item := range n.Content {
						item.Style = old.Content[0].Style
					}
				}
				*old = n
			} else {
				s.Content = append(s.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, &n)
			}
		}
	}
	if !found {
		return "", fmt.Errorf("no store of type %s", typ)
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return "", err
	}
	return b.String(), enc.Close()
}

// mappingValue returns the value of key in the mapping m, or nil.
func mappingValue(m *yaml.Node, key string) *yaml.Node {
	if m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// firstWindow returns the config's first namespace and its largest window
// size as written, for the example commands.
func firstWindow(config []byte) (namespace, window string) {
	var c struct {
		Namespaces []struct {
			Name        string   `yaml:"name"`
			WindowSizes []string `yaml:"window_sizes"`
		} `yaml:"namespaces"`
	}
	if yaml.Unmarshal(config, &c) != nil || len(c.Namespaces) == 0 || len(c.Namespaces[0].WindowSizes) == 0 {
		return "default", "60s"
	}
	ns := c.Namespaces[0]
	return ns.Name, ns.WindowSizes[len(ns.WindowSizes)-1]
}

// print writes where everything listens and how to call it.
func (c *cluster) print(w io.Writer, o options) {
	fmt.Fprintf(w, "limiterd cluster: %d nodes syncing through %s, config %s\n\n", len(c.nodes), c.store, c.deployFile)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  STORE\tADDRESS\n")
	fmt.Fprintf(tw, "  %s\t%s\n", c.store, c.storeAddr)
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  NODE\tGRPC\tHTTP\tPID\tLOG\n")
	for _, n := range c.nodes {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\n", n.Name, n.GRPCAddr, n.HTTPAddr, n.PID(), n.LogPath())
	}
	tw.Flush()
	first, last := c.nodes[0], c.nodes[len(c.nodes)-1]
	fmt.Fprintf(w, "\nTry it (grpcurl: the nodes serve gRPC reflection):\n")
	fmt.Fprintf(w, "  grpcurl -plaintext -d '{\"namespace\":%q,\"key\":\"user-42\"}' %s limiter.v1.RateLimiter/Increment\n", c.namespace, first.GRPCAddr)
	fmt.Fprintf(w, "  grpcurl -plaintext -d '{\"namespace\":%q,\"key\":\"user-42\",\"window_size\":%q}' %s limiter.v1.RateLimiter/SlidingWindow\n", c.namespace, c.window, last.GRPCAddr)
	fmt.Fprintf(w, "  curl -s http://%s/readyz\n", first.HTTPAddr)
	if o.restart > 0 {
		fmt.Fprintf(w, "A node stopped with kill PID is started again after %v.\n", o.restart)
	}
	fmt.Fprintf(w, "Ready. Ctrl-C (SIGINT) or SIGTERM stops the cluster.\n")
}

// watch runs until ctx is done, starting a node that exited again after
// delay (never when delay is 0).
func (c *cluster) watch(ctx context.Context, t *tb, delay time.Duration) {
	down := map[*harness.Limiterd]time.Time{} // node → when to start it again
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			for _, n := range c.nodes {
				if _, ok := down[n]; !ok && !n.Running() {
					if delay == 0 {
						t.Logf("%s (pid %d) exited; it stays down", n.Name, n.PID())
						down[n] = time.Time{}
						continue
					}
					t.Logf("%s (pid %d) exited; starting it again in %v", n.Name, n.PID(), delay)
					down[n] = now.Add(delay)
				}
				if at, ok := down[n]; ok && !at.IsZero() && !now.Before(at) {
					<-t.do(func() {
						n.Stop() // forgets the exited process
						n.Start()
					})
					if t.err() != nil {
						t.Logf("%s could not be started again: stopping the cluster", n.Name)
						return
					}
					t.Logf("%s is back: pid %d, gRPC %s, HTTP %s", n.Name, n.PID(), n.GRPCAddr, n.HTTPAddr)
					delete(down, n)
				}
			}
		}
	}
}

// tb is the testing.TB the harness is given here, as in the stores command:
// it logs to stderr; Fatal and Skip end the goroutine that do started
// (runtime.Goexit, as in a test), and run returns the failure as an error.
// Methods the harness does not call are those of the nil embedded TB and
// would panic.
type tb struct {
	testing.TB
	name string
	log  io.Writer

	mu       sync.Mutex
	cleanups []func()
	failed   bool
	skipped  bool
	msg      string // the last message logged by Error, Fatal or Skip
}

// do runs f in a new goroutine and returns a channel closed when f has
// returned or called FailNow or SkipNow.
func (t *tb) do(f func()) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	return done
}

// err returns the failure (or skip) so far as an error, or nil.
func (t *tb) err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.skipped:
		return fmt.Errorf("not available here: %s", t.msg)
	case t.failed:
		return errors.New(t.msg)
	}
	return nil
}

// runCleanups runs the cleanups registered so far, last first, once.
func (t *tb) runCleanups() {
	t.mu.Lock()
	cs := t.cleanups
	t.cleanups = nil
	t.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

func (t *tb) Helper()      {}
func (t *tb) Name() string { return t.name }
func (t *tb) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}
func (t *tb) Skipped() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.skipped
}
func (t *tb) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

func (t *tb) Log(args ...any) { t.Logf("%s", strings.TrimSuffix(fmt.Sprintln(args...), "\n")) }
func (t *tb) Logf(format string, args ...any) {
	fmt.Fprintf(t.log, "%s %s: %s\n", time.Now().Format("15:04:05.000"), t.name, fmt.Sprintf(format, args...))
}
func (t *tb) Error(args ...any) { t.Errorf("%s", strings.TrimSuffix(fmt.Sprintln(args...), "\n")) }
func (t *tb) Errorf(format string, args ...any) {
	t.mu.Lock()
	t.failed, t.msg = true, fmt.Sprintf(format, args...)
	t.mu.Unlock()
	t.Logf(format, args...)
}
func (t *tb) Fail() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failed = true
}
func (t *tb) FailNow()                          { t.Fail(); runtime.Goexit() }
func (t *tb) Fatal(args ...any)                 { t.Error(args...); runtime.Goexit() }
func (t *tb) Fatalf(format string, args ...any) { t.Errorf(format, args...); runtime.Goexit() }
func (t *tb) SkipNow()                          { t.Skipf("skipped") }
func (t *tb) Skip(args ...any)                  { t.Skipf("%s", strings.TrimSuffix(fmt.Sprintln(args...), "\n")) }
func (t *tb) Skipf(format string, args ...any) {
	t.mu.Lock()
	t.skipped, t.msg = true, fmt.Sprintf(format, args...)
	t.mu.Unlock()
	runtime.Goexit()
}

// TempDir returns a new directory under the system's temporary directory,
// removed at cleanup.
func (t *tb) TempDir() string {
	dir, err := os.MkdirTemp("", "limiterd-cluster-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
