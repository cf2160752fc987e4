package config

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/limiterd/limiterd/auth"
)

// AuthConfig turns authorization on: every call of the API, on every
// listener, must carry a configured token or client certificate granted
// its namespace and operation. Absent, every call is served as before.
type AuthConfig struct {
	// Tokens are bearer tokens: gRPC metadata and HTTP header
	// "authorization: Bearer <token>", RESP AUTH <token>.
	Tokens []TokenConfig `yaml:"tokens"`
	// Identities are client certificates (mTLS).
	Identities []IdentityConfig `yaml:"identities"`

	// authz is the authorizer built by load.
	authz *auth.Authorizer
}

// TokenConfig is one bearer token. The token itself is read at start
// from a file or an environment variable, never from this file.
type TokenConfig struct {
	// Name identifies the token in errors and logs.
	Name string `yaml:"name"`
	// TokenFile holds the token (surrounding white space is dropped).
	TokenFile string `yaml:"token_file"`
	// TokenEnv names the environment variable holding the token.
	TokenEnv string `yaml:"token_env"`
	// Namespaces granted; "*" grants all.
	Namespaces []string `yaml:"namespaces"`
	// Operations granted: read, write, admin.
	Operations []string `yaml:"operations"`
}

// IdentityConfig is one client certificate identity: exactly one of
// SubjectCN, URISAN (both need a certificate verified against the
// client CA) and SHA256 (the certificate's own hash).
type IdentityConfig struct {
	Name       string   `yaml:"name"`
	SubjectCN  string   `yaml:"subject_cn"`
	URISAN     string   `yaml:"uri_san"`
	SHA256     string   `yaml:"sha256"`
	Namespaces []string `yaml:"namespaces"`
	Operations []string `yaml:"operations"`
}

// validate checks the section without reading a token; namespaces are
// the configured ones.
func (c *AuthConfig) validate(namespaces []string) error {
	if c == nil {
		return nil
	}
	_, err := c.build(namespaces, func(i int, _ TokenConfig) (string, error) {
		return strings.Repeat("x", auth.MinTokenLen) + fmt.Sprint(i), nil // each distinct
	})
	return err
}

// load reads the tokens (files, environment) and builds the authorizer.
func (c *AuthConfig) load(namespaces []string, getenv func(string) string) error {
	if c == nil {
		return nil
	}
	a, err := c.build(namespaces, func(i int, t TokenConfig) (string, error) {
		field := fmt.Sprintf("auth.tokens[%d]", i)
		if t.TokenEnv != "" {
			v := strings.TrimSpace(getenv(t.TokenEnv))
			if v == "" {
				return "", &Error{Field: field + ".token_env", Reason: fmt.Sprintf("environment variable %s is empty or unset", t.TokenEnv)}
			}
			return v, nil
		}
		data, err := os.ReadFile(t.TokenFile)
		if err != nil {
			return "", &Error{Field: field + ".token_file", Reason: err.Error()}
		}
		v := strings.TrimSpace(string(data))
		if v == "" {
			return "", &Error{Field: field + ".token_file", Reason: fmt.Sprintf("%s is empty", t.TokenFile)}
		}
		return v, nil
	})
	if err != nil {
		return err
	}
	c.authz = a
	return nil
}

// build checks the section and makes its authorizer, the tokens read by
// secret.
func (c *AuthConfig) build(namespaces []string, secret func(int, TokenConfig) (string, error)) (*auth.Authorizer, error) {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &Error{Field: "auth." + field, Reason: fmt.Sprintf(format, args...)})
	}
	if len(c.Tokens) == 0 && len(c.Identities) == 0 {
		bad("tokens", "an auth section needs at least one token or identity, or no call could be served")
	}
	grants := func(field string, nss, ops []string) auth.Op {
		for j, ns := range nss {
			if ns != auth.AllNamespaces && !slices.Contains(namespaces, ns) {
				bad(fmt.Sprintf("%s.namespaces[%d]", field, j), "namespace %q is not configured", ns)
			}
		}
		var op auth.Op
		for j, s := range ops {
			o, err := auth.ParseOp(s)
			if err != nil {
				bad(fmt.Sprintf("%s.operations[%d]", field, j), "%v", err)
			}
			op |= o
		}
		return op
	}
	var cfg auth.Config
	for i, t := range c.Tokens {
		field := fmt.Sprintf("tokens[%d]", i)
		if (t.TokenFile == "") == (t.TokenEnv == "") {
			bad(field, "give exactly one of token_file and token_env")
			continue
		}
		op := grants(field, t.Namespaces, t.Operations)
		s, err := secret(i, t)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		cfg.Tokens = append(cfg.Tokens, auth.Token{Name: t.Name, Secret: s, Namespaces: t.Namespaces, Ops: op})
	}
	for i, id := range c.Identities {
		op := grants(fmt.Sprintf("identities[%d]", i), id.Namespaces, id.Operations)
		cfg.Identities = append(cfg.Identities, auth.Identity{Name: id.Name, SubjectCN: id.SubjectCN, URISAN: id.URISAN,
			SHA256: id.SHA256, Namespaces: id.Namespaces, Ops: op})
	}
	if len(errs) > 0 {
		// auth.New checks the credentials together (names, duplicates);
		// with some of them missing it would report errors that are not.
		return nil, errors.Join(errs...)
	}
	a, err := auth.New(cfg)
	var ae *auth.ConfigError
	if errors.As(err, &ae) {
		bad(ae.Field, "%s", ae.Reason)
		return nil, errors.Join(errs...)
	}
	return a, err
}

// Authorizer returns the authorizer of the auth section, nil when there is
// none: the one Load built, or one built now with the tokens read by
// getenv and from their files, for a config that did not come through
// Load.
func (c *Config) Authorizer(getenv func(string) string) (*auth.Authorizer, error) {
	if c.Auth == nil {
		return nil, nil
	}
	if c.Auth.authz == nil {
		if err := c.Auth.load(c.namespaceNames(), getenv); err != nil {
			return nil, err
		}
	}
	return c.Auth.authz, nil
}

// namespaceNames are the configured namespaces' names.
func (c *Config) namespaceNames() []string {
	var names []string
	for _, nc := range c.NodeConfigs() {
		names = append(names, nc.Name)
	}
	return names
}
