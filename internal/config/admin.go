package config

import (
	"fmt"
	"net"
	"strconv"
)

// AdminAddr is the admin listener's address: "" or "off" turns it off; a
// bare port ("6060" or ":6060") binds loopback, so that exposing the
// profiles beyond the host takes an explicit host.
func AdminAddr(s string) (string, error) {
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
