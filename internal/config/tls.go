package config

import (
	"crypto/tls"
	"errors"
	"fmt"

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
	// set; else, with an auth section, a client certificate is asked for
	// and handed on unverified, for its sha256 pin to match (a pin needs no
	// CA); else "none".
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
	bad := func(field, reason string) { errs = append(errs, &Error{Field: "tls." + field, Reason: reason}) }
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

// Reloader is the certificate reloader's config of the section, for a
// config with an auth section when authOn: with client_auth unset and no
// client CA, the handshake then asks for a client certificate without
// verifying it (tls.RequestClientCert), so that a sha256 pin of a
// self-signed certificate matches it, as a pin needs no CA. Whether a
// certificate is asked for is decided at start (the listeners' TLS is).
func (c TLSConfig) Reloader(authOn bool) (certreload.Config, error) {
	auth, err := c.clientAuth()
	if err != nil {
		return certreload.Config{}, err
	}
	if authOn && c.ClientAuth == "" && c.ClientCAFile == "" {
		auth = tls.RequestClientCert
	}
	v, err := c.minVersion()
	if err != nil {
		return certreload.Config{}, err
	}
	return certreload.Config{CertFile: c.CertFile, KeyFile: c.KeyFile, ClientCAFile: c.ClientCAFile, ClientAuth: auth, MinVersion: v}, nil
}
