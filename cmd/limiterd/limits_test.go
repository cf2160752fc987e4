package main

import (
	"testing"

	"github.com/limiterd/limiterd/internal/config"
	"github.com/limiterd/limiterd/internal/connlimit"
)

// TestConnectionCaps: the caps derive from the descriptor limit, shared
// among the listeners the config opens, unless the config sets them.
func TestConnectionCaps(t *testing.T) {
	nofile := connlimit.DescriptorLimit()
	for _, c := range []struct {
		name string
		cfg  config.Config
		want connlimit.Limits
	}{
		{"gRPC and HTTP", config.Config{HTTPAddr: "127.0.0.1:0"}, connlimit.Defaults(nofile, 2)},
		{"every listener", config.Config{HTTPAddr: "127.0.0.1:0", RESPAddr: "127.0.0.1:0", AdminAddr: "6060"}, connlimit.Defaults(nofile, 4)},
		{"HTTP off", config.Config{HTTPAddr: "off", RESPAddr: "off"}, connlimit.Defaults(nofile, 1)},
		{"max set", config.Config{Connections: config.ConnectionsConfig{Max: 100}}, connlimit.Limits{Total: 100, PerAddress: 50}},
		{"both set", config.Config{Connections: config.ConnectionsConfig{Max: 100, MaxPerAddress: 90}}, connlimit.Limits{Total: 100, PerAddress: 90}},
		{"per address set", config.Config{HTTPAddr: "off", Connections: config.ConnectionsConfig{MaxPerAddress: 7}}, connlimit.Limits{Total: connlimit.Defaults(nofile, 1).Total, PerAddress: 7}},
	} {
		d := &daemon{cfg: c.cfg}
		cc, got := d.connections()
		if got != c.want {
			t.Errorf("%s: %+v; want %+v", c.name, got, c.want)
		}
		if cc.IdleTimeout != config.Duration(config.DefaultIdleTimeout) || cc.MaxInflightBytes != config.DefaultMaxInflightBytes {
			t.Errorf("%s: the defaults are not applied: %+v", c.name, cc)
		}
	}
}
