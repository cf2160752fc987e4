package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	respfront "github.com/limiterd/limiterd/front/resp"
)

// RESPConfig tunes the Redis protocol front (resp_addr turns it on).
type RESPConfig struct {
	// MaxCommandSize caps one command's size in bytes: a longer bulk
	// string, array or inline command closes its connection with an
	// error (default 1 MiB).
	MaxCommandSize int `yaml:"max_command_size"`
	// MaxClients is the most connections served at once (default 10000).
	MaxClients int `yaml:"max_clients"`
	// IdleTimeout closes a connection idle that long (default 0: never).
	IdleTimeout Duration `yaml:"idle_timeout"`
}

func (c RESPConfig) validate() error {
	var errs []error
	bad := func(field, reason string) { errs = append(errs, &ConfigError{Field: "resp." + field, Reason: reason}) }
	if c.MaxCommandSize < 0 {
		bad("max_command_size", "must not be negative")
	}
	if c.MaxClients < 0 {
		bad("max_clients", "must not be negative")
	}
	if c.IdleTimeout < 0 {
		bad("idle_timeout", "must not be negative")
	}
	return errors.Join(errs...)
}

// listenRESP opens the Redis protocol front on cfg.RESPAddr, unless it is
// empty or "off".
func listenRESP(d *daemon) (*listener, error) {
	if d.cfg.RESPAddr == "" || d.cfg.RESPAddr == "off" {
		return nil, nil
	}
	c := d.cfg.RESP
	fc := respfront.DefaultConfig()
	if c.MaxCommandSize > 0 {
		fc.MaxCommandSize = c.MaxCommandSize
	}
	if c.MaxClients > 0 {
		fc.MaxClients = c.MaxClients
	}
	fc.IdleTimeout = time.Duration(c.IdleTimeout)
	fc.Version = version()
	fc.Authorizer = d.authz
	srv, err := respfront.New(d.svc, fc, d.log, d.reg)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", d.cfg.RESPAddr)
	if err != nil {
		return nil, fmt.Errorf("resp listen: %w", err)
	}
	return &listener{
		name:     "resp",
		lis:      d.tlsListener(lis),
		serve:    srv.Serve,
		shutdown: func(ctx context.Context) { srv.Shutdown(ctx) },
	}, nil
}
