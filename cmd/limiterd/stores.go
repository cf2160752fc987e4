package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/limiterd/limiterd/node"
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
		for _, e := range flatten(err) {
			if ce, ok := e.(*ConfigError); ok {
				ce.Line = 0
			}
		}
		return err
	}
	return nil
}

// decodeStoreOptions decodes and validates a store's options over the
// store's defaults; the one switch over store types is here and in
// openStoreConfig.
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
		var fe *node.FieldError
		if errors.As(err, &fe) {
			return nil, fe
		}
		return nil, err
	}
	return opts, nil
}

// openStoreConfig opens a configured store without waiting for it to be
// reachable: a node must start during a store outage.
func openStoreConfig(ctx context.Context, name string, s StoreConfig, getenv func(string) string, log *slog.Logger) (clustersync.Store, error) {
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

// printSchema prints a store's schema for teams that run migrations
// themselves: limiterd schema postgres|cassandra [--config file --store name].
// Without a config it prints the schema of the store's defaults.
func printSchema(args []string, w io.Writer) error {
	const usage = "usage: limiterd schema postgres|cassandra [--config file] [--store name]"
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return errors.New(usage)
	}
	typ := args[0]
	fs := flag.NewFlagSet("limiterd schema", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	configPath := fs.String("config", "", "config file whose store options (schema, table, keyspace, replication) apply")
	storeName := fs.String("store", "", "name of the store under stores (default: the only one of this type)")
	if err := fs.Parse(args[1:]); err != nil {
		return fmt.Errorf("%v; %s", err, usage)
	}
	if fs.NArg() > 0 {
		return errors.New(usage)
	}
	sc := StoreConfig{Type: typ}
	if *configPath != "" {
		cfg, err := LoadConfig(*configPath)
		if err != nil {
			return err
		}
		var found []string
		for name, s := range cfg.Stores {
			if s.Type == typ && (*storeName == "" || *storeName == name) {
				found = append(found, name)
				sc = s
			}
		}
		switch {
		case len(found) == 0 && *storeName != "":
			return fmt.Errorf("%s: stores.%s: no %s store of that name", *configPath, *storeName, typ)
		case len(found) == 0:
			return fmt.Errorf("%s: stores: no %s store", *configPath, typ)
		case len(found) > 1:
			return fmt.Errorf("%s: stores: several %s stores (%s); choose one with --store", *configPath, typ, strings.Join(found, ", "))
		}
	} else if *storeName != "" {
		return errors.New("--store needs --config")
	}
	// A schema needs no secret: placeholders stand in for them.
	sc, err := resolveStoreSecrets(sc, nil)
	if err != nil {
		return err
	}
	var out string
	switch typ {
	case "postgres":
		c := pgstore.DefaultConfig()
		if err := storeOptions(sc, &c); err != nil {
			return err
		}
		out = pgstore.SchemaSQL(c)
	case "cassandra":
		c := cassandrastore.DefaultConfig()
		if err := storeOptions(sc, &c); err != nil {
			return err
		}
		out = cassandrastore.SchemaCQL(c)
	default:
		return fmt.Errorf("no schema to print for %q (redis needs none); %s", typ, usage)
	}
	_, err = io.WriteString(w, out)
	return err
}
