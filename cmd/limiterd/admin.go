package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"google.golang.org/grpc"

	adminv1 "github.com/limiterd/limiterd/api/proto/limiter/admin/v1"
	"github.com/limiterd/limiterd/auth"
)

// envAdminAddr is the admin listener's address, overridden by
// --admin-addr.
const envAdminAddr = "LIMITERD_ADMIN_ADDR"

// adminAddr is the admin listener's address: "" or "off" turns it off; a
// bare port ("6060" or ":6060") binds loopback, so that exposing the
// profiles beyond the host takes an explicit host.
func adminAddr(s string) (string, error) {
	if s == "" || s == "off" {
		return "", nil
	}
	if _, err := strconv.ParseUint(s, 10, 16); err == nil {
		return net.JoinHostPort("127.0.0.1", s), nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", fmt.Errorf("must be host:port, a port or \"off\", got %q", s)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// listenAdmin opens the admin listener: Go's profiles under
// /debug/pprof/, kept off the HTTP listener (whose /metrics and health
// checks are scraped by others) because a profile shows the process's
// internals and a CPU profile costs CPU. The admin API is here too, over
// HTTP/JSON (adminns.go) and gRPC (adminrpc.go) on the same port. TLS
// applies as on every listener.
func listenAdmin(d *daemon) (*listener, error) {
	addr, err := adminAddr(d.cfg.AdminAddr)
	if err != nil || addr == "" {
		return nil, err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	d.adminNamespaces(mux, 10*time.Second)
	gs := grpc.NewServer()
	adminv1.RegisterAdminServer(gs, &adminRPC{d: d, timeout: 10 * time.Second})
	var h http.Handler = grpcOrHTTP(gs, mux)
	if d.authz != nil {
		// With authorization on, the admin listener needs the admin grant
		// in every namespace.
		h = auth.Middleware(d.authz, auth.Admin, h)
	}
	// gRPC without TLS is HTTP/2 with prior knowledge (h2c).
	return d.httpListener("admin", lis, h, func(srv *http.Server) {
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetHTTP2(true)
		srv.Protocols.SetUnencryptedHTTP2(true)
	}), nil
}
