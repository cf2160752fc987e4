package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	redisstore "github.com/limiterd/limiterd/strategy/redis"
)

// writeFile writes content to a file called name in a new temporary
// directory and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// envFunc is an environment holding only env.
func envFunc(env map[string]string) func(string) string {
	return func(k string) string { return env[k] }
}

// TestStoreSecrets: a store's secret fields come from a literal, a file
// (trailing newline trimmed) or a variable, exactly one of them.
func TestStoreSecrets(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("pa ss\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"ADDRS": "10.0.0.1:6379, 10.0.0.2:6379", "USER": "lim"}
	const ns = "namespaces:\n  - {name: a, window_sizes: [1s], sync_rate: 1, store: r}\n"
	for _, c := range []struct {
		name, store string
		want        redisstore.Config // Addrs, Username, Password
		field       string            // of the error, when one
		line        int
		reason      string
	}{
		{"literals", "addrs: [\"h:1\"]\n    username: u\n    password: p\n",
			redisstore.Config{Addrs: []string{"h:1"}, Username: "u", Password: "p"}, "", 0, ""},
		{"file and variables", "addrs_env: ADDRS\n    username_env: USER\n    password_file: " + pw + "\n",
			redisstore.Config{Addrs: []string{"10.0.0.1:6379", "10.0.0.2:6379"}, Username: "lim", Password: "pa ss"}, "", 0, ""},
		{"unset variable", "password_env: NOPE\n", redisstore.Config{}, "stores.r.password_env", 4, "environment variable NOPE is empty or unset"},
		{"unreadable file", "password_file: " + filepath.Join(dir, "none") + "\n", redisstore.Config{}, "stores.r.password_file", 4, "no such file"},
		{"empty file", "password_file: " + empty + "\n", redisstore.Config{}, "stores.r.password_file", 4, "is empty"},
		{"literal and file", "password: p\n    password_file: " + pw + "\n", redisstore.Config{}, "stores.r.password_file", 5, "give only one of password, password_file and password_env"},
		{"file and variable", "addrs_env: ADDRS\n    addrs_file: " + pw + "\n", redisstore.Config{}, "stores.r.addrs_file", 5, "give only one of addrs"},
		{"two suffixes", "password_env_file: x\n", redisstore.Config{}, "stores.r.password_env_file", 4, `unknown field "password_env_file"`},
		{"not a name", "password_env: [A]\n", redisstore.Config{}, "stores.r.password_env", 4, "must be a file name or an environment variable's name"},
		{"bad address from a variable", "addrs_env: USER\n", redisstore.Config{}, "stores.r.addrs[0]", 4, `"lim" is not host:port`},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := writeFile(t, "limiterd.yaml", "stores:\n  r:\n    type: redis\n    "+c.store+ns)
			cfg, err := Load(Source{Path: path, Getenv: envFunc(env)})
			if c.field != "" {
				ce, ok := errors.AsType[*Error](err)
				if !ok || ce.File != path || ce.Field != c.field || ce.Line != c.line || !strings.Contains(ce.Reason, c.reason) {
					t.Fatalf("error %v, want %s:%d: %s: ...%s", err, path, c.line, c.field, c.reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			opts, err := decodeStoreOptions(cfg.Stores["r"])
			if err != nil {
				t.Fatal(err)
			}
			got := opts.(*redisstore.Config)
			if strings.Join(got.Addrs, " ") != strings.Join(c.want.Addrs, " ") || got.Username != c.want.Username || got.Password != c.want.Password {
				t.Errorf("addrs %q username %q password %q, want %q %q %q", got.Addrs, got.Username, got.Password, c.want.Addrs, c.want.Username, c.want.Password)
			}
		})
	}
}

// TestStoreSecretFields: postgres's dsn and cassandra's hosts and
// credentials come from variables too; the other fields do not.
func TestStoreSecretFields(t *testing.T) {
	env := envFunc(map[string]string{"DSN": "postgres://u:pw@db:5432/x", "HOSTS": "c1,c2", "P": "pw"})
	for _, c := range []struct{ typ, yaml, want string }{
		{"postgres", "type: postgres\ndsn_env: DSN\n", "dsn: postgres://u:pw@db:5432/x"},
		{"cassandra", "type: cassandra\nhosts_env: HOSTS\npassword_env: P\n", "hosts:\n    - c1\n    - c2\npassword: pw"},
	} {
		var sc StoreConfig
		if err := yaml3Decode(c.yaml, &sc); err != nil {
			t.Fatal(err)
		}
		got, err := resolveStoreSecrets(sc, env)
		if err != nil {
			t.Fatalf("%s: %v", c.typ, err)
		}
		if s := yaml3Encode(t, &got.Options); !strings.Contains(s, c.want) {
			t.Errorf("%s: resolved to\n%s\nwant it to hold\n%s", c.typ, s, c.want)
		}
	}
	var sc StoreConfig
	if err := yaml3Decode("type: postgres\nschema_env: S\n", &sc); err != nil {
		t.Fatal(err)
	}
	if _, err := validateStore("p", sc, env); err == nil || !strings.Contains(err.Error(), "schema_env") {
		t.Errorf("schema_env: %v, want an unknown field", err)
	}
}

func yaml3Decode(s string, v any) error { return yaml.Unmarshal([]byte(s), v) }

func yaml3Encode(t *testing.T, n *yaml.Node) string {
	t.Helper()
	b, err := yaml.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
