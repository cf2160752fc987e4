package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"

	envoyfront "github.com/limiterd/limiterd/front/envoy"
	"github.com/limiterd/limiterd/node"
)

// Source is where a running config comes from: a file (or the embedded
// default), the environment and the command line's flags.
type Source struct {
	// Path is the config file; empty runs the embedded default
	// (DefaultConfig).
	Path string
	// Getenv reads the environment for store secrets and tokens.
	Getenv func(string) string
	// Overrides are set by flags and environment variables, over the
	// file's values.
	Overrides Overrides
}

// Overrides are the fields the command line may set; empty ones leave the
// file's value.
type Overrides struct {
	GRPCAddr, HTTPAddr, RESPAddr, AdminAddr, NodeName, LogLevel, LogFormat, EnvoyDir string
}

func (o Overrides) apply(c *Config) {
	for dst, v := range map[*string]string{&c.GRPCAddr: o.GRPCAddr, &c.HTTPAddr: o.HTTPAddr, &c.RESPAddr: o.RESPAddr,
		&c.AdminAddr: o.AdminAddr, &c.NodeName: o.NodeName, &c.LogLevel: o.LogLevel, &c.LogFormat: o.LogFormat,
		&c.Envoy.ConfigDir: o.EnvoyDir} {
		if v != "" {
			*dst = v
		}
	}
}

// Load is the one load path, used alike to serve, to reload and by
// limiterd check: the file (or the default) with the overrides over it,
// validated, every secret and token read, the TLS files and Envoy's domain
// files loaded. A config Load accepts starts; the error of one it refuses
// joins every *Error found, in the file's order, each naming the file,
// line, field and reason.
func Load(src Source) (Config, error) {
	var data []byte
	if src.Path != "" {
		var err error
		if data, err = os.ReadFile(src.Path); err != nil {
			return Config{}, &Error{File: src.Path, Reason: err.Error()}
		}
	}
	cfg, fatal, decodeErr := decodeConfig(src.Path, data)
	if fatal {
		return Config{}, decodeErr
	}
	src.Overrides.apply(&cfg)
	errs := validateDecoded(&cfg, Flatten(decodeErr))
	// Secrets and files are read even when the file has errors, so that
	// one run shows them all; those of a field already reported are
	// dropped.
	var reported []string
	for _, e := range errs {
		if ce, ok := e.(*Error); ok {
			reported = append(reported, ce.Field)
		}
	}
	clear := func(field string) bool {
		return !slices.ContainsFunc(reported, func(f string) bool { return underAny(field, []string{f}) || underAny(f, []string{field}) })
	}
	getenv := src.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	for _, e := range Flatten(joinErrors(cfg.Auth.load(cfg.namespaceNames(), getenv), cfg.loadStoreSecrets(getenv))) {
		if ce, ok := e.(*Error); !ok || clear(ce.Field) {
			errs = append(errs, e)
		}
	}
	if clear("tls") {
		errs = append(errs, Flatten(cfg.TLS.checkFiles())...)
	}
	if clear("envoy") && clear("namespaces") {
		errs = append(errs, Flatten(cfg.checkEnvoyFiles())...)
	}
	if len(errs) > 0 {
		return cfg, placeErrors(src.Path, data, errs)
	}
	if cfg.NodeName == "" {
		cfg.NodeName, _ = os.Hostname()
	}
	return cfg, nil
}

// checkFiles loads the certificate, its key and the client CA bundle as
// serving would.
func (c TLSConfig) checkFiles() error {
	if !c.Enabled() {
		return nil
	}
	var errs []error
	bad := func(field string, err error) { errs = append(errs, &Error{Field: "tls." + field, Reason: err.Error()}) }
	cert, certErr := os.ReadFile(c.CertFile)
	key, keyErr := os.ReadFile(c.KeyFile)
	switch {
	case certErr != nil:
		bad("cert_file", certErr)
	case keyErr != nil:
		bad("key_file", keyErr)
	default:
		if _, err := tls.X509KeyPair(cert, key); err != nil {
			bad("cert_file", fmt.Errorf("%s and %s do not load as a certificate and its key: %w", c.CertFile, c.KeyFile, err))
		}
	}
	if c.ClientCAFile != "" {
		pem, err := os.ReadFile(c.ClientCAFile)
		if err == nil && !x509.NewCertPool().AppendCertsFromPEM(pem) {
			err = fmt.Errorf("%s holds no PEM certificate", c.ClientCAFile)
		}
		if err != nil {
			bad("client_ca_file", err)
		}
	}
	return errors.Join(errs...)
}

// checkEnvoyFiles loads Envoy's domain files as the service would: an
// error of a file names that file, and the field in it.
func (c *Config) checkEnvoyFiles() error {
	e := c.Envoy
	if e.ConfigDir == "" {
		return nil
	}
	ns := e.Namespace
	if ns == "" {
		ns = node.DefaultNamespace
	}
	for _, nc := range c.NodeConfigs() {
		if nc.Name == ns {
			fc := e.FrontConfig()
			fc.Namespace = ns
			err := envoyfront.CheckDir(fc, nc.WindowSizes)
			if re, ok := errors.AsType[*envoyfront.RulesError](err); ok {
				data, _ := os.ReadFile(re.File)
				if re.Err != nil { // the decoder's: each message with its line and field
					return placeErrors(re.File, data, Flatten(decodeError(re.File, data, re.Err)))
				}
				return placeErrors(re.File, data, []error{&Error{Field: re.Field, Line: re.Line, Reason: re.Reason}})
			}
			if err != nil {
				return &Error{Field: "envoy.config_dir", Reason: err.Error()}
			}
		}
	}
	return nil
}
