package config

import (
	"errors"
	"time"
)

// ConnectionsConfig bounds what every listener holds for its clients
// before and while they are served. The zero value of a field means its
// default.
type ConnectionsConfig struct {
	// Max is the most connections one listener holds at once; past it,
	// new ones wait in the kernel's queue. Default: the process's
	// descriptor limit, less a reserve (256, or a quarter of the limit
	// when more), divided among the listeners.
	Max int `yaml:"max"`
	// MaxPerAddress is the most connections one client address holds on
	// one listener; past it, its new connections are closed at once. The
	// loopback addresses a sidecar proxy connects from (127.0.0.1, ::1)
	// are held only to Max. Default: half of Max.
	MaxPerAddress int `yaml:"max_per_address"`
	// IdleTimeout closes a connection without a call in flight for that
	// long: HTTP keep-alives, gRPC connections without a stream (a GOAWAY)
	// and, unless resp.idle_timeout says otherwise, Redis protocol
	// connections (default 2m).
	IdleTimeout Duration `yaml:"idle_timeout"`
	// ReadTimeout bounds the reading of one HTTP request, its body
	// included (default 30s).
	ReadTimeout Duration `yaml:"read_timeout"`
	// WriteTimeout bounds one HTTP response, from the end of its
	// request's headers (default 60s: longer than a 30 s CPU profile).
	WriteTimeout Duration `yaml:"write_timeout"`
	// MaxInflightBytes caps the request bytes one listener holds at once
	// (the HTTP bodies being read and served, the gRPC messages being
	// served); a request past it is refused with RESOURCE_EXHAUSTED
	// (default 128 MiB).
	MaxInflightBytes int64 `yaml:"max_inflight_bytes"`
	// GRPCMaxStreams is the most calls one gRPC connection runs at once
	// (default 100).
	GRPCMaxStreams int `yaml:"grpc_max_streams"`
	// AuthTimeout is how long a Redis protocol connection may stay
	// unauthenticated when auth is configured: past it, it is closed
	// (default 10s).
	AuthTimeout Duration `yaml:"auth_timeout"`
}

// The connections' defaults.
const (
	DefaultIdleTimeout      = 2 * time.Minute
	DefaultReadTimeout      = 30 * time.Second
	DefaultWriteTimeout     = 60 * time.Second
	DefaultMaxInflightBytes = 128 << 20
	DefaultGRPCMaxStreams   = 100
	DefaultAuthTimeout      = 10 * time.Second
)

// WithDefaults returns c with its zero fields set to their defaults, but
// Max and MaxPerAddress, which depend on the process (connlimit).
func (c ConnectionsConfig) WithDefaults() ConnectionsConfig {
	set := func(d *Duration, v time.Duration) {
		if *d == 0 {
			*d = Duration(v)
		}
	}
	set(&c.IdleTimeout, DefaultIdleTimeout)
	set(&c.ReadTimeout, DefaultReadTimeout)
	set(&c.WriteTimeout, DefaultWriteTimeout)
	set(&c.AuthTimeout, DefaultAuthTimeout)
	if c.MaxInflightBytes == 0 {
		c.MaxInflightBytes = DefaultMaxInflightBytes
	}
	if c.GRPCMaxStreams == 0 {
		c.GRPCMaxStreams = DefaultGRPCMaxStreams
	}
	return c
}

func (c ConnectionsConfig) validate() error {
	var errs []error
	bad := func(field, reason string) {
		errs = append(errs, &Error{Field: "connections." + field, Reason: reason})
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"max", int64(c.Max)}, {"max_per_address", int64(c.MaxPerAddress)}, {"max_inflight_bytes", c.MaxInflightBytes},
		{"grpc_max_streams", int64(c.GRPCMaxStreams)}, {"idle_timeout", int64(c.IdleTimeout)}, {"read_timeout", int64(c.ReadTimeout)},
		{"write_timeout", int64(c.WriteTimeout)}, {"auth_timeout", int64(c.AuthTimeout)}} {
		if f.v < 0 {
			bad(f.name, "must not be negative")
		}
	}
	if c.Max > 0 && c.MaxPerAddress > c.Max {
		bad("max_per_address", "must not be more than connections.max")
	}
	if c.MaxInflightBytes > 0 && c.MaxInflightBytes < 16<<20 {
		bad("max_inflight_bytes", "must be at least 16777216 (16 MiB), the largest request, or one large request could never be served")
	}
	return errors.Join(errs...)
}
