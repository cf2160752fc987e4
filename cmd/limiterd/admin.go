package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/limiterd/limiterd/auth"
	"github.com/limiterd/limiterd/internal/admin"
	"github.com/limiterd/limiterd/internal/config"
)

// listenAdmin opens the admin listener: Go's profiles under
// /debug/pprof/, kept off the HTTP listener (whose /metrics and health
// checks are scraped by others) because a profile shows the process's
// internals and a CPU profile costs CPU. The admin API is here too, over
// HTTP/JSON and gRPC (internal/admin) on the same port. TLS
// applies as on every listener.
func listenAdmin(d *daemon) (*listener, error) {
	addr, err := config.AdminAddr(d.cfg.AdminAddr)
	if err != nil || addr == "" {
		return nil, err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin listen: %w", err)
	}
	if d.authz == nil && !loopback(lis.Addr()) {
		// It changes namespaces and shows the process's internals: off
		// loopback, whoever reaches the address may.
		d.log.Warn("the admin listener is bound to an address other hosts may reach, and no auth section guards it: "+
			"anyone who reaches it may change the namespaces and read profiles; bind it to loopback or configure auth",
			"addr", lis.Addr().String())
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	gs := grpc.NewServer()
	admin.New(d.owner, d.node, d.log, 10*time.Second).Register(mux, gs)
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

// loopback reports whether addr is a loopback address (an unspecified
// one, 0.0.0.0 or ::, listens on every interface: not loopback).
func loopback(addr net.Addr) bool {
	ta, ok := addr.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// grpcOrHTTP sends gRPC requests to gs and the others to h: one listener
// serves both, gRPC over HTTP/2 (h2c without TLS).
func grpcOrHTTP(gs *grpc.Server, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			gs.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}
