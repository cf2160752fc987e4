package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/limiterd/limiterd/internal/certreload"
)

// TLSConfig turns on TLS on every listener: gRPC, HTTP, the Redis
// protocol and the admin listener. It is all or none: with cert_file set
// no listener speaks plaintext, so a forgotten listener cannot leak what
// the others protect.
type TLSConfig struct {
	// CertFile and KeyFile are the server's PEM certificate (chain) and
	// key; both or neither. They are read again when they change on disk
	// (checked at most once a second, on a handshake); a new pair that
	// does not load is logged and the old one kept.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ClientCAFile is a PEM bundle of the CAs client certificates must
	// chain to (mTLS); reloaded like the pair.
	ClientCAFile string `yaml:"client_ca_file"`
	// ClientAuth is "none", "request" (a client certificate is verified
	// when one is sent) or "require" (mTLS: a client without a verified
	// certificate is refused). Default: "require" when client_ca_file is
	// set, else "none".
	ClientAuth string `yaml:"client_auth"`
	// MinVersion is "1.2" (default) or "1.3"; nothing older is offered.
	MinVersion string `yaml:"min_version"`
}

// Enabled reports whether the listeners serve TLS.
func (c TLSConfig) Enabled() bool { return c.CertFile != "" || c.KeyFile != "" }

func (c TLSConfig) clientAuth() (tls.ClientAuthType, error) {
	switch c.ClientAuth {
	case "":
		if c.ClientCAFile != "" {
			return tls.RequireAndVerifyClientCert, nil
		}
		return tls.NoClientCert, nil
	case "none":
		return tls.NoClientCert, nil
	case "request":
		return tls.VerifyClientCertIfGiven, nil
	case "require":
		return tls.RequireAndVerifyClientCert, nil
	}
	return 0, fmt.Errorf("must be none, request or require, got %q", c.ClientAuth)
}

func (c TLSConfig) minVersion() (uint16, error) {
	switch c.MinVersion {
	case "", "1.2":
		return tls.VersionTLS12, nil
	case "1.3":
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("must be \"1.2\" or \"1.3\", got %q", c.MinVersion)
}

// validate checks the section without reading the files.
func (c TLSConfig) validate() error {
	var errs []error
	bad := func(field, reason string) { errs = append(errs, &ConfigError{Field: "tls." + field, Reason: reason}) }
	if !c.Enabled() {
		if c.ClientCAFile != "" || c.ClientAuth != "" || c.MinVersion != "" {
			bad("cert_file", "is required with the other tls fields")
		}
		return errors.Join(errs...)
	}
	switch {
	case c.CertFile == "":
		bad("cert_file", "is required with key_file")
	case c.KeyFile == "":
		bad("key_file", "is required with cert_file")
	}
	if auth, err := c.clientAuth(); err != nil {
		bad("client_auth", err.Error())
	} else if auth != tls.NoClientCert && c.ClientCAFile == "" {
		bad("client_ca_file", "is required with client_auth "+c.ClientAuth)
	}
	if _, err := c.minVersion(); err != nil {
		bad("min_version", err.Error())
	}
	return errors.Join(errs...)
}

// openTLS loads the TLS files, or returns nil when TLS is off.
func openTLS(c TLSConfig, log *slog.Logger) (*certreload.Reloader, error) {
	if !c.Enabled() {
		return nil, nil
	}
	auth, err := c.clientAuth()
	if err != nil {
		return nil, err
	}
	v, err := c.minVersion()
	if err != nil {
		return nil, err
	}
	r, err := certreload.New(certreload.Config{
		CertFile: c.CertFile, KeyFile: c.KeyFile, ClientCAFile: c.ClientCAFile, ClientAuth: auth, MinVersion: v,
	}, log)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	return r, nil
}

// tlsListener is lis speaking TLS when TLS is configured, offering
// nextProtos by ALPN.
func (d *daemon) tlsListener(lis net.Listener, nextProtos ...string) net.Listener {
	if d.tls == nil {
		return lis
	}
	return tls.NewListener(lis, d.tls.ServerConfig(nextProtos...))
}

// httpErrorLog is an HTTP server's error log (failed TLS handshakes with
// the client's address, among others) in the daemon's log, at warn, instead
// of net/http's default of the standard logger.
func (d *daemon) httpErrorLog(server string) *log.Logger {
	return slog.NewLogLogger(d.log.Handler().WithAttrs([]slog.Attr{slog.String("server", server)}), slog.LevelWarn)
}

// grpcCreds is the gRPC server's transport security: TLS when configured,
// so that handlers find the client's certificate in credentials.TLSInfo.
func (d *daemon) grpcCreds() []grpc.ServerOption {
	if d.tls == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(d.tls.ServerConfig("h2")))}
}

// probeClient parses probe's flags: --ca-file to verify an https server
// with a private CA, --cert-file and --key-file to present a client
// certificate (client_auth: require).
func probeClient(args []string) (*http.Client, string, error) {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	caFile := fs.String("ca-file", "", "PEM CA bundle the server's certificate must chain to")
	certFile := fs.String("cert-file", "", "PEM client certificate")
	keyFile := fs.String("key-file", "", "PEM client key")
	usage := errors.New("usage: limiterd probe [--ca-file F] [--cert-file F --key-file F] URL")
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 || (*certFile == "") != (*keyFile == "") {
		return nil, "", usage
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if *caFile != "" {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			return nil, "", err
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, "", fmt.Errorf("%s holds no PEM certificate", *caFile)
		}
	}
	if *certFile != "" {
		cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			return nil, "", err
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 2 * time.Second}, fs.Arg(0), nil
}
