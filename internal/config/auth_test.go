package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// authChecks are TestConfigFullExample's checks of the auth section.
func authChecks(cfg Config) map[string][]struct{ got, want any } {
	a := cfg.Auth
	if a == nil || len(a.Tokens) != 2 || len(a.Identities) != 3 {
		return map[string][]struct{ got, want any }{"auth.tokens[].name": {{a, "two tokens and three identities"}}}
	}
	t, id := a.Tokens, a.Identities
	return map[string][]struct{ got, want any }{
		"auth.tokens[].name":           {{t[0].Name, "edge"}, {t[1].Name, "dashboards"}},
		"auth.tokens[].token_file":     {{t[0].TokenFile, "/etc/limiterd/edge.token"}, {t[1].TokenFile, ""}},
		"auth.tokens[].token_env":      {{t[0].TokenEnv, ""}, {t[1].TokenEnv, "LIMITERD_DASHBOARD_TOKEN"}},
		"auth.tokens[].namespaces":     {{t[0].Namespaces, []string{"api", "billing"}}, {t[1].Namespaces, []string{"*"}}},
		"auth.tokens[].operations":     {{t[0].Operations, []string{"read", "write"}}, {t[1].Operations, []string{"read"}}},
		"auth.identities[].name":       {{id[0].Name, "envoy"}, {id[1].Name, ""}},
		"auth.identities[].subject_cn": {{id[1].SubjectCN, "ops"}},
		"auth.identities[].uri_san":    {{id[0].URISAN, "spiffe://example.org/envoy"}},
		"auth.identities[].sha256":     {{id[2].SHA256, "AB:CD:EF:01:23:45:67:89:ab:cd:ef:01:23:45:67:89:ab:cd:ef:01:23:45:67:89:ab:cd:ef:01:23:45:67:89"}},
		"auth.identities[].namespaces": {{id[0].Namespaces, []string{"api"}}, {id[2].Namespaces, []string{"default"}}},
		"auth.identities[].operations": {{id[1].Operations, []string{"read", "write", "admin"}}},
	}
}

// authCases are TestConfigValidation's cases of the auth section; ns
// configures the namespace "default".
func authCases(ns string) []struct {
	name, yaml, field string
	reason            []string
} {
	tok := func(fields string) string {
		return ns + "auth:\n  tokens:\n    - {name: a, token_env: T, namespaces: [default], operations: [read]}\n    - {" + fields + "}\n"
	}
	id := func(fields string) string {
		return ns + "auth:\n  identities:\n    - {subject_cn: a, namespaces: [default], operations: [read]}\n    - {" + fields + "}\n"
	}
	return []struct {
		name, yaml, field string
		reason            []string
	}{
		{"auth empty", ns + "auth: {}\n", "auth.tokens", []string{"at least one token or identity"}},
		{"auth token name", tok("token_env: U, namespaces: [default], operations: [read]"), "auth.tokens[1].name", []string{"must not be empty"}},
		{"auth token name twice", tok("name: a, token_env: U, namespaces: [default], operations: [read]"), "auth.tokens[1].name", []string{`"a" names another credential`}},
		{"auth token file and env", tok("name: b, token_env: U, token_file: f, namespaces: [default], operations: [read]"), "auth.tokens[1]", []string{"exactly one of token_file and token_env"}},
		{"auth token_file not a string", tok("name: b, namespaces: [default], operations: [read],\n       token_file: [f]"), "auth.tokens[1].token_file", []string{"cannot unmarshal"}},
		{"auth token_env not a string", tok("name: b, namespaces: [default], operations: [read],\n       token_env: {a: b}"), "auth.tokens[1].token_env", []string{"cannot unmarshal"}},
		{"auth token namespace", tok("name: b, token_env: U, namespaces: [default, api], operations: [read]"), "auth.tokens[1].namespaces[1]", []string{`namespace "api" is not configured`}},
		{"auth token operation", tok("name: b, token_env: U, namespaces: [default], operations: [read, delete]"), "auth.tokens[1].operations[1]", []string{`unknown operation "delete"`}},
		{"auth token no operation", tok("name: b, token_env: U, namespaces: [default]"), "auth.tokens[1].operations", []string{"at least one of read, write and admin"}},
		{"auth identity name twice", id("name: cn:a, sha256: 00, namespaces: [default], operations: [read]"), "auth.identities[1].name", []string{"names another credential"}},
		{"auth identity subject_cn not a string", id("namespaces: [default], operations: [read],\n       subject_cn: [a]"), "auth.identities[1].subject_cn", []string{"cannot unmarshal"}},
		{"auth identity cn and uri", id("subject_cn: b, uri_san: spiffe://x, namespaces: [default], operations: [read]"), "auth.identities[1].uri_san", []string{"exactly one of"}},
		{"auth identity nothing", id("namespaces: [default], operations: [read]"), "auth.identities[1]", []string{"one of subject_cn, uri_san and sha256"}},
		{"auth identity sha256", id("sha256: abc, namespaces: [default], operations: [read]"), "auth.identities[1].sha256", []string{"64 hex digits"}},
		{"auth identity namespace", id("subject_cn: b, namespaces: [], operations: [read]"), "auth.identities[1].namespaces", []string{"at least one namespace"}},
		{"auth identity operation", id("subject_cn: b, namespaces: [default], operations: [READ]"), "auth.identities[1].operations[0]", []string{`unknown operation "READ"`}},
	}
}

// TestAuthTokenLoading: tokens are read from their files and variables
// at start, and errors name the file, the field and why, never a token.
func TestAuthTokenLoading(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.token")
	os.WriteFile(good, []byte("  file-token-0123456789abc\n"), 0o600)
	empty := filepath.Join(dir, "empty.token")
	os.WriteFile(empty, []byte("\n"), 0o600)
	short := filepath.Join(dir, "short.token")
	os.WriteFile(short, []byte("short"), 0o600)
	const ns = "namespaces:\n  - {name: default, window_sizes: [1s], sync_rate: -1}\n"
	env := map[string]string{"GOOD": "env-token-0123456789abcdef", "SAME": "file-token-0123456789abc"}
	for _, c := range []struct {
		name, tokens, field, reason string
	}{
		{"file and env", "{name: a, token_file: " + good + ", namespaces: [default], operations: [read]}\n    - {name: b, token_env: GOOD, namespaces: [default], operations: [read]}", "", ""},
		{"missing file", "{name: a, token_file: " + filepath.Join(dir, "none") + ", namespaces: [default], operations: [read]}", "auth.tokens[0].token_file", "no such file"},
		{"empty file", "{name: a, token_file: " + empty + ", namespaces: [default], operations: [read]}", "auth.tokens[0].token_file", "is empty"},
		{"unset variable", "{name: a, token_env: UNSET, namespaces: [default], operations: [read]}", "auth.tokens[0].token_env", "UNSET is empty or unset"},
		{"short token", "{name: a, token_file: " + short + ", namespaces: [default], operations: [read]}", "auth.tokens[0].token", "16 to 4096 bytes"},
		{"the same token twice", "{name: a, token_file: " + good + ", namespaces: [default], operations: [read]}\n    - {name: b, token_env: SAME, namespaces: [default], operations: [read]}", "auth.tokens[1].token", "same token as a's"},
	} {
		path := writeFile(t, "limiterd.yaml", ns+"auth:\n  tokens:\n    - "+c.tokens+"\n")
		cfg, err := Load(Source{Path: path, Getenv: envFunc(env)})
		if c.field == "" {
			if err != nil || cfg.Auth.authz == nil {
				t.Errorf("%s: %v", c.name, err)
			} else if p := cfg.Auth.authz.Token("file-token-0123456789abc"); p == nil || p.Name() != "a" {
				t.Errorf("%s: the file's token (white space dropped) is not a's", c.name)
			}
			continue
		}
		var ce *Error
		if !errors.As(err, &ce) || ce.File != path || ce.Field != c.field || !strings.Contains(ce.Reason, c.reason) {
			t.Errorf("%s: %v; want %s on %s: ...%s", c.name, err, path, c.field, c.reason)
		}
		if err != nil && (strings.Contains(err.Error(), "file-token") || strings.Contains(err.Error(), "short\"")) {
			t.Errorf("%s: %v holds a token", c.name, err)
		}
	}
}
