package main

import (
	"context"
	"fmt"
	"net"
	"time"

	respfront "github.com/limiterd/limiterd/front/resp"
)

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
	fc.MaxQueuedCommands, fc.MaxQueuedBytes = c.MaxQueuedCommands, c.MaxQueuedBytes // 0: the front's default
	cc, _ := d.connections()
	fc.IdleTimeout = time.Duration(c.IdleTimeout)
	if fc.IdleTimeout == 0 {
		fc.IdleTimeout = duration(cc.IdleTimeout)
	}
	if d.authz != nil {
		fc.AuthTimeout = duration(cc.AuthTimeout)
	}
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
		lis:      d.tlsListener(d.limitListener("resp", lis)),
		serve:    srv.Serve,
		shutdown: func(ctx context.Context) { srv.Shutdown(ctx) },
	}, nil
}
