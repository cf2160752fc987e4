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

	"github.com/limiterd/limiterd/internal/certreload"
	"github.com/limiterd/limiterd/internal/config"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// openTLS loads the TLS files, or returns nil when TLS is off; authOn
// when the config has an auth section (a sha256 pin then needs the
// client's certificate even without a client CA).
func openTLS(c config.TLSConfig, authOn bool, log *slog.Logger) (*certreload.Reloader, error) {
	if !c.Enabled() {
		return nil, nil
	}
	rc, err := c.Reloader(authOn)
	if err != nil {
		return nil, err
	}
	r, err := certreload.New(rc, log)
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
