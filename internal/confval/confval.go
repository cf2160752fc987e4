// Package confval holds the value types that limiterd's YAML config and
// its stores' options share: durations and TLS settings, decoded and
// checked in one way everywhere.
package confval

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
	"gopkg.in/yaml.v3"
)

// Duration is a time.Duration written in config as a Go duration string
// ("250ms", "1s") or a bare number of seconds (1, 0.5).
type Duration time.Duration

// maxSeconds bounds a bare number of seconds (about 31 years): far past
// any sensible setting, well inside time.Duration.
const maxSeconds = 1e9

// String returns the duration as a config writes it ("60s", "250ms").
func (d Duration) String() string { return ratelimit.FormatDuration(time.Duration(d)) }

// MarshalText writes the duration in Go syntax.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads a Go duration string or a number of seconds.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// UnmarshalYAML reads a YAML scalar, naming its line when it is not a
// duration. The error is a *yaml.TypeError, so the decoder goes on and
// reports the document's other errors too.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: want a duration such as \"1s\" or a number of seconds", n.Line)}}
	}
	if err := d.UnmarshalText([]byte(n.Value)); err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	return nil
}

// ParseDuration reads a Go duration string or a number of seconds.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > maxSeconds {
			return 0, fmt.Errorf("invalid duration %q: a number of seconds must be finite and at most %g", s, maxSeconds)
		}
		return time.Duration(math.Round(f * float64(time.Second))), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: want a Go duration such as \"1s\" or \"250ms\", or a number of seconds", s)
	}
	return d, nil
}

// TLS configures encrypted connections to a store.
type TLS struct {
	// Enabled turns TLS on.
	Enabled bool `yaml:"enabled"`
	// CAFile is a PEM file of the certificate authorities to trust instead
	// of the system's.
	CAFile string `yaml:"ca_file"`
	// ServerName overrides the name the server's certificate must carry
	// (default: the host dialled).
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify accepts any server certificate. For tests only.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// Config returns the crypto/tls configuration, nil when TLS is off. Its
// errors name the field (tls.ca_file).
func (t TLS) Config() (*tls.Config, error) {
	if !t.Enabled {
		return nil, nil
	}
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify, //nolint:gosec // opt-in, documented as tests only
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls.ca_file: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls.ca_file: no PEM certificate in %s", t.CAFile)
		}
	}
	return tc, nil
}
