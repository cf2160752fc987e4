package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/limiterd/limiterd/internal/config"
)

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
	sc := config.StoreConfig{Type: typ}
	if *configPath != "" {
		data, err := os.ReadFile(*configPath)
		if err != nil {
			return &config.Error{File: *configPath, Reason: err.Error()}
		}
		cfg, err := config.ParseConfig(*configPath, data)
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
	if typ != "postgres" && typ != "cassandra" {
		return fmt.Errorf("no schema to print for %q (redis needs none); %s", typ, usage)
	}
	out, err := config.Schema(typ, sc)
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, out)
	return err
}
