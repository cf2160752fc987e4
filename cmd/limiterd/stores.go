package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"

	"gopkg.in/yaml.v3"

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
	raw, err := yaml.Marshal(&n)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(dst); err != nil && err != io.EOF {
		return fmt.Errorf("%s", bytes.TrimPrefix([]byte(err.Error()), []byte("yaml: ")))
	}
	return nil
}

// decodeStoreOptions decodes and validates a store's options; the one
// switch over store types is here and in openStore.
func decodeStoreOptions(s StoreConfig) (any, error) {
	switch s.Type {
	default:
		return nil, fmt.Errorf("store type %q is not available", s.Type)
	}
}

// openStore opens a configured store without waiting for it to be
// reachable: a node must start during a store outage.
func openStore(ctx context.Context, name string, s StoreConfig, log *slog.Logger) (clustersync.Store, error) {
	opts, err := decodeStoreOptions(s)
	if err != nil {
		return nil, err
	}
	switch opts.(type) {
	default:
		return nil, fmt.Errorf("store type %q is not available", s.Type)
	}
}

// printSchema prints a store's schema for teams that run migrations
// themselves: limiterd schema postgres|cassandra [--config file --store name].
func printSchema(args []string, w io.Writer) error {
	return fmt.Errorf("usage: limiterd schema postgres|cassandra")
}
