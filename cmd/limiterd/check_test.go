package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/config"
)

// runCheck runs limiterd check on a file holding yaml, with env as the
// environment, and returns what it printed.
func runCheck(t *testing.T, yaml string, env map[string]string) (path, stdout string, err error) {
	t.Helper()
	path = writeFile(t, "limiterd.yaml", yaml)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out, errOut lockedBuffer
	err = run(ctx, []string{"check", "--config", path}, envFunc(env), &out, &errOut)
	return path, out.String(), err
}

// TestCheckThreeErrors: a file with errors in three sections gets all
// three, each as file:line: field: reason, and a non-zero exit status.
func TestCheckThreeErrors(t *testing.T) {
	yaml := `log_level: loud
stores:
  main:
    type: redis
    adrs: ["127.0.0.1:6379"]
namespaces:
  - name: api
    window_sizes: [1s, 0s]
    sync_rate: -1
`
	path, stdout, err := runCheck(t, yaml, nil)
	if err == nil || exitCode(err) == 0 {
		t.Fatalf("check = %v (exit %d), want a failure", err, exitCode(err))
	}
	want := []string{
		path + `:1: log_level: must be debug, info, warn or error, got "loud"`,
		path + `:5: stores.main.adrs: unknown field "adrs"`,
		path + ":8: namespaces[0].window_sizes[1]: must be between 1ms and",
	}
	got := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("check printed %d lines, want %d:\n%s", len(got), len(want), stdout)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("line %d: got %q, want it to start with %q", i+1, got[i], want[i])
		}
	}
	if !strings.Contains(err.Error(), "3 error") {
		t.Errorf("error %q does not count the errors", err)
	}
}

func TestCheckOK(t *testing.T) {
	_, stdout, err := runCheck(t, "namespaces:\n  - {name: a, window_sizes: [1s], sync_rate: -1}\n", nil)
	if err != nil || exitCode(err) != 0 {
		t.Fatalf("check = %v, want nil", err)
	}
	if !strings.HasSuffix(stdout, ": ok\n") || strings.Count(stdout, "\n") != 1 {
		t.Errorf("check printed %q, want one line ending in ok", stdout)
	}
	// Without a file, check loads the embedded default, as serving would.
	if stdout, _, err := runCLI(t, "check"); err != nil || stdout != "the embedded default config: ok\n" {
		t.Errorf("check without a file: %v, %q; want the embedded default ok", err, stdout)
	}
	if _, _, err := runCLI(t, "check", "x.yaml"); err == nil || exitCode(err) != 2 {
		t.Errorf("check x.yaml: %v, want a usage error (the file is given with --config)", err)
	}
}

// TestCheckEveryError: each section's errors, all of them, with their
// lines ("line field" per error, in the file's order).
func TestCheckEveryError(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "password")
	if err := os.WriteFile(secret, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const ns = "namespaces:\n  - {name: a, window_sizes: [1s], sync_rate: -1}\n"
	for _, c := range []struct {
		name, yaml string
		env        map[string]string
		want       []string
	}{
		{"syntax error", "log_level: info\nnamespaces: [\n", nil, []string{"2"}},
		{"tab indentation", "sync:\n\tbatch_size: 1\n", nil, []string{"2 "}},
		{"unknown fields, all of them", "grpc_adr: x\nsync:\n  batchsize: 1\n" + ns + "tls: {cert: c}\nresp: {max: 1}\n",
			nil, []string{"1 grpc_adr", "3 sync.batchsize", "6 tls.cert", "7 resp.max"}},
		{"a typo and the field it leaves out", "namespaces:\n  - name: a\n    window_sizes: [1s]\n    sync_rat: -1\n",
			nil, []string{"2 namespaces[0].sync_rate", "4 namespaces[0].sync_rat"}},
		{"type errors", "shutdown_timeout: soon\nsync: {batch_size: many}\nenvoy:\n  config_dir: [a]\n" + ns,
			nil, []string{"1 shutdown_timeout", "2 sync.batch_size", "4 envoy.config_dir"}},
		{"addresses", "grpc_addr: x\nhttp_addr: y\nresp_addr: z\nadmin_addr: a:b:c\nnode_name: \"\\0\"\n" + ns,
			nil, []string{"1 grpc_addr", "2 http_addr", "3 resp_addr", "4 admin_addr", "5 node_name"}},
		{"namespaces", "namespaces:\n  - name: a\n    window_sizes: [0s]\n    escalate: always\n  - name: \"b c\"\n    window_sizes: [1s]\n    sync_rate: 1\n    store: nope\n",
			nil, []string{"2 namespaces[0].sync_rate", "3 namespaces[0].window_sizes[0]", "4 namespaces[0].escalate", "5 namespaces[1].name", "8 namespaces[1].store"}},
		{"duplicate names", "namespaces:\n  - {name: a, window_sizes: [1s], sync_rate: -1}\n  - {name: a, window_sizes: [1s], sync_rate: -1}\n  - {name: a, window_sizes: [1s], sync_rate: -1}\n",
			nil, []string{"3 namespaces[1].name", "4 namespaces[2].name"}},
		{"stores", "stores:\n  r:\n    type: redis\n    db: -1\n  p:\n    type: postgres\n  m:\n    type: memcached\n" + ns,
			nil, []string{"4 stores.r.db", "5 stores.p.dsn", "8 stores.m.type"}},
		{"sync and resp", "sync: {tick_timeout: -1s, batch_size: -1}\nresp:\n  max_clients: -1\n  idle_timeout: -1s\n" + ns,
			nil, []string{"1 sync.tick_timeout", "1 sync.batch_size", "3 resp.max_clients", "4 resp.idle_timeout"}},
		{"tls", "tls:\n  cert_file: c\n  client_auth: maybe\n  min_version: \"1.1\"\n" + ns,
			nil, []string{"1 tls.key_file", "3 tls.client_auth", "4 tls.min_version"}},
		{"envoy", "envoy:\n  config_dir: d\n  namespace: nope\n  poll_interval: -1s\n  near_limit_ratio: 2\n" + ns,
			nil, []string{"3 envoy.namespace", "4 envoy.poll_interval", "5 envoy.near_limit_ratio"}},
		{"auth", ns + "auth:\n  tokens:\n    - {name: t, namespaces: [nope], operations: [read]}\n    - {name: u, token_env: T, namespaces: [\"*\"], operations: [fly]}\n",
			nil, []string{"5 auth.tokens[0]", "6 auth.tokens[1].operations[0]", "6 auth.tokens[1].token_env"}},
		{"auth duplicate names", ns + "auth:\n  tokens:\n    - {name: t, token_env: A, namespaces: [a], operations: [read]}\n    - {name: t, token_env: B, namespaces: [a], operations: [read]}\n",
			map[string]string{"A": "0123456789abcdef-a", "B": "0123456789abcdef-b"}, []string{"6 auth.tokens[1].name"}},
		{"secrets", "stores:\n  r:\n    type: redis\n    password: x\n    password_env: P\n    username_file: /nonexistent/user\n  p:\n    type: postgres\n    dsn_env: DSN\n" + ns,
			nil, []string{"5 stores.r.password_env", "6 stores.r.username_file", "9 stores.p.dsn_env"}},
		{"secrets read", "stores:\n  r:\n    type: redis\n    password_file: " + secret + "\n    addrs_env: ADDRS\n  p:\n    type: postgres\n    dsn_env: DSN\n" + ns,
			map[string]string{"ADDRS": "127.0.0.1:1 nohost", "DSN": "postgres://u:hunter2@db:port/x"}, []string{"5 stores.r.addrs[1]", "8 stores.p.dsn"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path, stdout, err := runCheck(t, c.yaml, c.env)
			if err == nil {
				t.Fatalf("check = nil, want %d errors", len(c.want))
			}
			line := regexp.MustCompile(`^` + regexp.QuoteMeta(path) + `:(\d+): (?:([^ ]+): )?`)
			var got []string
			for _, l := range strings.Split(strings.TrimSuffix(stdout, "\n"), "\n") {
				m := line.FindStringSubmatch(l)
				if m == nil {
					t.Errorf("line %q is not file:line: field: reason", l)
					continue
				}
				got = append(got, strings.TrimSpace(m[1]+" "+m[2]))
				if strings.Contains(l, "s3cret") || strings.Contains(l, "hunter2") {
					t.Errorf("line %q holds a secret", l)
				}
			}
			if strings.Join(got, ", ") != strings.TrimSpace(strings.Join(c.want, ", ")) {
				t.Errorf("errors at %q, want %q\n%s", got, c.want, stdout)
			}
		})
	}
}

// TestRunPrintsEveryConfigError: serving refuses a bad file with all of
// its errors.
func TestRunPrintsEveryConfigError(t *testing.T) {
	path := writeFile(t, "limiterd.yaml", "log_level: loud\ngrpc_adr: x\n")
	err := wantRunError(t, []string{"--config", path, "--grpc-addr", holdAddr(t)}, nil)
	var got []string
	for _, e := range config.Flatten(err) {
		ce, ok := e.(*config.Error)
		if !ok {
			t.Fatalf("error %v is a %T, want *config.Error", e, e)
		}
		got = append(got, ce.Position())
	}
	want := []string{path + ":1: log_level: must be debug, info, warn or error, got \"loud\"",
		path + `:2: grpc_adr: unknown field "grpc_adr"`}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if exitCode(err) != 1 {
		t.Errorf("exit status %d, want 1", exitCode(err))
	}
}

// TestSchemaWithSecretFields: printing a schema needs no secret, so a
// dsn from an unset variable does not stop it.
func TestSchemaWithSecretFields(t *testing.T) {
	path := writeFile(t, "limiterd.yaml", "stores:\n  pg:\n    type: postgres\n    dsn_env: UNSET_DSN\n    table: rates\n")
	stdout, _, err := runCLI(t, "schema", "postgres", "--config", path)
	if err != nil || !strings.Contains(stdout, "rates") {
		t.Errorf("schema = %v, output %q; want the schema of table rates", err, stdout)
	}
}
