package main

import (
	"fmt"
	"slices"

	envoyfront "github.com/limiterd/limiterd/front/envoy"

	"github.com/limiterd/limiterd/internal/config"
	"github.com/limiterd/limiterd/internal/reqmetrics"
	"github.com/limiterd/limiterd/node"
)

// openEnvoy loads the Envoy rules when configured (nil otherwise).
func openEnvoy(d *daemon) (*envoyfront.Server, error) {
	if d.cfg.Envoy.ConfigDir == "" {
		return nil, nil
	}
	es, err := envoyfront.New(d.svc, d.cfg.Envoy.FrontConfig(), d.log, d.reg)
	if err != nil {
		return nil, err
	}
	es.ObserveDecisions(reqmetrics.New(d.reg, reqmetrics.Config{Front: "envoy", Configured: d.configured}))
	d.owner.Guard(envoyKeeps(es.Namespace()))
	return es, nil
}

// envoyKeeps refuses a change that removes the namespace Envoy's rate
// limit service counts in, or changes its window sizes: its rules were
// checked against them when they loaded.
func envoyKeeps(name string) func(*node.Change) error {
	return func(c *node.Change) error {
		for _, ns := range c.Removed {
			if ns.Name() == name {
				return &config.Error{Field: "namespaces", Reason: fmt.Sprintf("namespace %q serves Envoy's rate limit service (envoy.namespace): it stays while limiterd runs", name)}
			}
		}
		for _, r := range c.Replaced {
			if r.Old.Name() == name && !slices.Equal(r.Old.Sizes(), r.New.Sizes()) {
				return &config.Error{Field: "namespaces", Reason: fmt.Sprintf("namespace %q serves Envoy's rate limit service (envoy.namespace): its window sizes stay while limiterd runs", name)}
			}
		}
		return nil
	}
}
