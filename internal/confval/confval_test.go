package confval

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"1s": time.Second, "250ms": 250 * time.Millisecond, " 2m ": 2 * time.Minute,
		"1": time.Second, "0.5": 500 * time.Millisecond, "0.0001": 100 * time.Microsecond, "-1": -time.Second,
	} {
		got, err := ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "soon", "1e12", "NaN", "Inf", "1 s"} {
		if _, err := ParseDuration(in); err == nil || !strings.Contains(err.Error(), "invalid duration") {
			t.Errorf("ParseDuration(%q) error = %v, want invalid duration", in, err)
		}
	}
}

func TestDurationYAML(t *testing.T) {
	var v struct {
		D Duration `yaml:"d"`
	}
	if err := yaml.Unmarshal([]byte("d: 1.5\n"), &v); err != nil || v.D != Duration(1500*time.Millisecond) {
		t.Fatalf("d: 1.5 = %v, %v", v.D, err)
	}
	if err := yaml.Unmarshal([]byte("d: [1]\n"), &v); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("d: [1] error = %v, want one naming line 1", err)
	}
	if err := yaml.Unmarshal([]byte("x: 1\nd: later\n"), &v); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("d: later error = %v, want one naming line 2", err)
	}
	out, err := yaml.Marshal(v)
	if err != nil || string(out) != "d: 1.5s\n" {
		t.Fatalf("Marshal = %q, %v", out, err)
	}
}

func TestTLSConfig(t *testing.T) {
	if tc, err := (TLS{}).Config(); tc != nil || err != nil {
		t.Fatalf("TLS off = %v, %v; want nil, nil", tc, err)
	}
	tc, err := TLS{Enabled: true, ServerName: "db"}.Config()
	if err != nil || tc.ServerName != "db" || tc.RootCAs != nil {
		t.Fatalf("TLS on = %+v, %v", tc, err)
	}
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.pem")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{bad, filepath.Join(dir, "missing.pem")} {
		if _, err := (TLS{Enabled: true, CAFile: f}).Config(); err == nil || !strings.HasPrefix(err.Error(), "tls.ca_file: ") {
			t.Errorf("ca_file %s: error %v, want one naming tls.ca_file", f, err)
		}
	}
}
