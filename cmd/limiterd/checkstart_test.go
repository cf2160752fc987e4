package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/config"
	"github.com/limiterd/limiterd/internal/testcerts"
)

// TestCheckAgreesWithStart: limiterd check's verdict and messages are
// those of starting the server, for configs good and bad: stores, TLS
// files, token files, Envoy's domain files, the samples in the repository
// and in docs/.
func TestCheckAgreesWithStart(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "check-ca")
	leaf := ca.Server(t, "localhost")
	certFile := testcerts.WriteFile(t, dir, "server.crt", leaf.CertPEM)
	keyFile := testcerts.WriteFile(t, dir, "server.key", leaf.KeyPEM)
	caFile := testcerts.WriteFile(t, dir, "ca.crt", ca.PEM)
	notPEM := testcerts.WriteFile(t, dir, "not.pem", []byte("not a certificate\n"))
	token := testcerts.WriteFile(t, dir, "app.token", []byte("a-token-of-twenty-four-b\n"))
	envoyGood := filepath.Join(dir, "envoy-good")
	envoyBad := filepath.Join(dir, "envoy-bad")
	for d, domain := range map[string]string{
		envoyGood: "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 2}\n",
		envoyBad:  "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unti: 2}\n",
	} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		testcerts.WriteFile(t, d, "edge.yaml", []byte(domain))
	}
	const ns = "namespaces:\n  - {name: default, window_sizes: [1s, 60s], sync_rate: -1}\n"
	const periodic = "stores:\n  main: {type: redis, addrs: [\"127.0.0.1:1\"]}\nnamespaces:\n  - {name: default, window_sizes: [1s, 1m, 1h, 24h], sync_rate: 1, store: main}\n"
	cases := []struct {
		name, yaml, file string // file: a sample in the repository, instead of yaml
		ok               bool
	}{
		{name: "empty", yaml: "", ok: true},
		{name: "local namespaces", yaml: ns, ok: true},
		{name: "a store", yaml: periodic, ok: true},
		{name: "a store's secret from a file", yaml: "stores:\n  main: {type: redis, addrs: [\"127.0.0.1:1\"], password_file: " + token + "}\n" + ns, ok: true},
		{name: "a store's secret file missing", yaml: "stores:\n  main: {type: redis, password_file: " + filepath.Join(dir, "none") + "}\n" + ns},
		{name: "a store's secret variable unset", yaml: "stores:\n  main: {type: postgres, dsn_env: LIMITERD_TEST_UNSET}\n" + ns},
		{name: "an undeclared store", yaml: "namespaces:\n  - {name: a, window_sizes: [1s], sync_rate: 1, store: nope}\n"},
		{name: "TLS", yaml: "tls: {cert_file: " + certFile + ", key_file: " + keyFile + ", client_ca_file: " + caFile + "}\n" + ns, ok: true},
		{name: "TLS files missing", yaml: "tls: {cert_file: " + filepath.Join(dir, "no.crt") + ", key_file: " + keyFile + "}\n" + ns},
		{name: "TLS key not PEM", yaml: "tls: {cert_file: " + certFile + ", key_file: " + notPEM + "}\n" + ns},
		{name: "TLS client CA not PEM", yaml: "tls: {cert_file: " + certFile + ", key_file: " + keyFile + ", client_ca_file: " + notPEM + "}\n" + ns},
		{name: "a token file", yaml: ns + "auth:\n  tokens:\n    - {name: app, token_file: " + token + ", namespaces: [default], operations: [read, write]}\n", ok: true},
		{name: "a token file missing", yaml: ns + "auth:\n  tokens:\n    - {name: app, token_file: " + filepath.Join(dir, "none.token") + ", namespaces: [default], operations: [read]}\n"},
		{name: "a token variable unset", yaml: ns + "auth:\n  tokens:\n    - {name: app, token_env: LIMITERD_TEST_UNSET, namespaces: [default], operations: [read]}\n"},
		{name: "Envoy's domain files", yaml: periodic + "envoy: {config_dir: " + envoyGood + "}\n", ok: true},
		{name: "an Envoy domain file with a misspelled field", yaml: periodic + "envoy: {config_dir: " + envoyBad + "}\n"},
		{name: "Envoy's directory missing", yaml: periodic + "envoy: {config_dir: " + filepath.Join(dir, "none") + "}\n"},
		{name: "Envoy's unit without its window size", yaml: "namespaces:\n  - {name: default, window_sizes: [1s], sync_rate: -1}\nenvoy: {config_dir: " + envoyGood + "}\n"},
		{name: "an unknown field", yaml: "grpc_adr: x\n" + ns},
		{name: "a YAML syntax error", yaml: "namespaces:\n  - name: a\n    window_sizes: [1s]\n   sync_rate: 1\n"},
		{name: "docs/getting-started.yaml", file: "../../docs/getting-started.yaml", ok: true},
		{name: "the configuration page's sample (TLS files absent)", file: "../../internal/config/testdata/config/readme.yaml"},
	}
	samples, err := filepath.Glob("../../internal/config/testdata/config/*.yaml")
	if err != nil || len(samples) < 10 {
		t.Fatalf("testdata samples: %v, %d", err, len(samples))
	}
	for _, s := range samples {
		if filepath.Base(s) != "readme.yaml" {
			cases = append(cases, struct {
				name, yaml, file string
				ok               bool
			}{name: "sample " + filepath.Base(s), file: s, ok: filepath.Base(s) == "local.yaml" || filepath.Base(s) == "empty.yaml"})
		}
	}
	// Each rule of envoyproxy/ratelimit's loader: its fixture loads or is
	// refused as front/envoy's tests say (loads-*, refused-*; merge-*
	// loads only with merge_domain_config, merge-domain then), in a
	// namespace with every unit's window size.
	const allUnits = "namespaces:\n  - {name: default, window_sizes: [1s, 1m, 1h, 24h, 168h, 720h, 8760h], sync_rate: -1}\n"
	fixtures, err := filepath.Glob("../../front/envoy/testdata/upstream/*")
	if err != nil || len(fixtures) < 25 {
		t.Fatalf("front/envoy/testdata/upstream: %v, %d fixtures", err, len(fixtures))
	}
	for _, dir := range fixtures {
		name := filepath.Base(dir)
		for _, merge := range []bool{false, true} {
			if merge && !strings.HasPrefix(name, "merge-") {
				continue
			}
			cases = append(cases, struct {
				name, yaml, file string
				ok               bool
			}{
				name: fmt.Sprintf("envoy fixture %s, merge_domain_config %v", name, merge),
				yaml: allUnits + fmt.Sprintf("envoy: {config_dir: %s, merge_domain_config: %v}\n", dir, merge),
				ok:   strings.HasPrefix(name, "loads-") || (name == "merge-domain" && merge),
			})
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := c.file
			if path == "" {
				path = writeFile(t, "limiterd.yaml", c.yaml)
			}
			// The listeners are the test's own, on both sides.
			grpcAddr := freeAddr(t)
			flags := []string{"--config", path, "--grpc-addr", grpcAddr, "--http-addr", "off", "--resp-addr", "off", "--admin-addr", "off"}
			stdout, _, checkErr := runCLI(t, append([]string{"check"}, flags...)...)
			startErr := startOrFail(t, flags, grpcAddr)
			if (checkErr == nil) != c.ok || (startErr == nil) != c.ok {
				t.Fatalf("check: %v (%s); start: %v; want ok %v", checkErr, stdout, startErr, c.ok)
			}
			if c.ok {
				return
			}
			var started []string
			for _, e := range config.Flatten(startErr) {
				line := e.Error()
				if ce, ok := errors.AsType[*config.Error](e); ok {
					line = ce.Position()
				}
				started = append(started, line)
			}
			if got, want := strings.TrimSuffix(stdout, "\n"), strings.Join(started, "\n"); got != want {
				t.Errorf("check said\n%s\nstarting said\n%s", got, want)
			}
			if !positioned.MatchString(started[0]) {
				t.Errorf("%q does not name the file, line and field", started[0])
			}
		})
	}
	if len(cases) < 15 {
		t.Errorf("%d configs; want 15 at least", len(cases))
	}
}

// positioned is an error naming a file, a line and a field.
var positioned = regexp.MustCompile(`^[^:]+:\d+: `)

// startOrFail starts limiterd with args and returns its error when it
// stops before its gRPC listener at grpcAddr answers, or nil once it does
// (then stops it).
func startOrFail(t *testing.T, args []string, grpcAddr string) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	var stdout, stderr lockedBuffer
	go func() { done <- run(ctx, args, envFunc(nil), &stdout, &stderr) }()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("run returned nil before its context ended")
			}
			return err
		case <-deadline:
			t.Fatalf("neither listening on %s nor stopped after 10s; stderr:\n%s", grpcAddr, stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if c, err := net.Dial("tcp", grpcAddr); err == nil {
			c.Close()
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("run after a start: %v", err)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("run did not return 15 s after cancel")
			}
			return nil
		}
	}
}
