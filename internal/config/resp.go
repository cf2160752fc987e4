package config

import (
	"errors"
)

// RESPConfig tunes the Redis protocol front (resp_addr turns it on).
type RESPConfig struct {
	// MaxCommandSize caps one command's size in bytes: a longer bulk
	// string, array or inline command closes its connection with an
	// error (default 1 MiB).
	MaxCommandSize int `yaml:"max_command_size"`
	// MaxClients is the most connections served at once (default 10000).
	MaxClients int `yaml:"max_clients"`
	// IdleTimeout closes a connection idle that long (default 0:
	// connections.idle_timeout).
	IdleTimeout Duration `yaml:"idle_timeout"`
	// MaxQueuedCommands and MaxQueuedBytes cap what one transaction
	// (MULTI ... EXEC) queues: past either it is discarded (defaults
	// 10000 commands, 1 MiB of arguments).
	MaxQueuedCommands int `yaml:"max_queued_commands"`
	MaxQueuedBytes    int `yaml:"max_queued_bytes"`
}

func (c RESPConfig) validate() error {
	var errs []error
	bad := func(field, reason string) { errs = append(errs, &Error{Field: "resp." + field, Reason: reason}) }
	if c.MaxCommandSize < 0 {
		bad("max_command_size", "must not be negative")
	}
	if c.MaxClients < 0 {
		bad("max_clients", "must not be negative")
	}
	if c.IdleTimeout < 0 {
		bad("idle_timeout", "must not be negative")
	}
	if c.MaxQueuedCommands < 0 {
		bad("max_queued_commands", "must not be negative")
	}
	if c.MaxQueuedBytes < 0 {
		bad("max_queued_bytes", "must not be negative")
	}
	return errors.Join(errs...)
}
