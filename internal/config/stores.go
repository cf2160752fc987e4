package config

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"gopkg.in/yaml.v3"

	"github.com/limiterd/limiterd/ratelimit"
	cassandrastore "github.com/limiterd/limiterd/strategy/cassandra"
	pgstore "github.com/limiterd/limiterd/strategy/postgres"
	redisstore "github.com/limiterd/limiterd/strategy/redis"
	clustersync "github.com/limiterd/limiterd/sync"
)

// storeOptions decodes a store's mapping (less its "type") into dst,
// rejecting unknown fields.
func storeOptions(s StoreConfig, dst any) error {
	n := s.Options
	var kept []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value != "type" {
			kept = append(kept, n.Content[i], n.Content[i+1])
		}
	}
	n.Content = kept
	if len(kept) == 0 {
		return nil
	}
	raw, err := yaml.Marshal(&n)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(dst); err != nil && err != io.EOF {
		err = decodeError("", raw, err)
		// Lines of the re-encoded mapping are not the file's: the
		// caller finds the field's line in the store's own nodes.
		for _, e := range Flatten(err) {
			if ce, ok := e.(*Error); ok {
				ce.Line = 0
			}
		}
		return err
	}
	return nil
}

// StoreOptions decodes and validates a store's options over the store's
// defaults, its secrets read with getenv (see OpenStore); two stores are
// the same when their options are equal (reflect.DeepEqual).
func StoreOptions(s StoreConfig, getenv func(string) string) (any, error) {
	s, err := resolveStoreSecrets(s, getenv)
	if err != nil {
		return nil, err
	}
	return decodeStoreOptions(s)
}

// storeAbilities are what each store type can do, as its package
// declares it.
var storeAbilities = map[string]clustersync.Abilities{
	"redis":     redisstore.Abilities,
	"postgres":  pgstore.Abilities,
	"cassandra": cassandrastore.Abilities,
}

// decodeStoreOptions decodes and validates a store's options over the
// store's defaults; the one switch over store types is here and in
// OpenStore.
func decodeStoreOptions(s StoreConfig) (any, error) {
	var (
		opts     any
		validate func() error
	)
	switch s.Type {
	case "redis":
		c := redisstore.DefaultConfig()
		opts, validate = &c, func() error { return c.Validate() }
	case "postgres":
		c := pgstore.DefaultConfig()
		opts, validate = &c, func() error { return c.Validate() }
	case "cassandra":
		c := cassandrastore.DefaultConfig()
		opts, validate = &c, func() error { return c.Validate() }
	default:
		return nil, fmt.Errorf("store type %q is not available", s.Type)
	}
	if err := storeOptions(s, opts); err != nil {
		return nil, err
	}
	if err := validate(); err != nil {
		// "field: reason", the field as written in YAML: the caller's
		// path already names the store and its type.
		var fe *ratelimit.FieldError
		if errors.As(err, &fe) {
			return nil, fe
		}
		return nil, err
	}
	return opts, nil
}

// OpenStore opens a configured store without waiting for it to be
// reachable: a node must start during a store outage.
func OpenStore(ctx context.Context, name string, s StoreConfig, getenv func(string) string, log *slog.Logger) (clustersync.Store, error) {
	// A config from the command line has its secrets resolved already;
	// this reads those of one that did not come that way.
	s, err := resolveStoreSecrets(s, getenv)
	if err != nil {
		return nil, err
	}
	opts, err := decodeStoreOptions(s)
	if err != nil {
		return nil, err
	}
	log = log.With("store", name)
	switch c := opts.(type) {
	case *redisstore.Config:
		return redisstore.Open(*c)
	case *pgstore.Config:
		c.Logger = log
		return pgstore.Open(ctx, *c)
	case *cassandrastore.Config:
		c.Logger = log
		return cassandrastore.Open(*c)
	default:
		return nil, fmt.Errorf("store type %q is not available", s.Type)
	}
}

// Schema is the schema of a store of type typ ("postgres" or "cassandra")
// with the options of s (the defaults when s has none); secrets are not
// read, as a schema needs none.
func Schema(typ string, s StoreConfig) (string, error) {
	s, err := resolveStoreSecrets(s, nil)
	if err != nil {
		return "", err
	}
	switch typ {
	case "postgres":
		c := pgstore.DefaultConfig()
		if err := storeOptions(s, &c); err != nil {
			return "", err
		}
		return pgstore.SchemaSQL(c), nil
	case "cassandra":
		c := cassandrastore.DefaultConfig()
		if err := storeOptions(s, &c); err != nil {
			return "", err
		}
		return cassandrastore.SchemaCQL(c), nil
	}
	return "", fmt.Errorf("no schema to print for %q (redis needs none)", typ)
}
