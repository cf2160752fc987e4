package config

import (
	"fmt"
	"strings"
	"testing"

	clustersync "github.com/limiterd/limiterd/sync"
)

// TestModesStoresCanServe: every mode on every store type is loaded or
// refused by what the store declares it can do. A synchronous namespace
// and escalate: auto need an atomic decision, which cassandra does not
// have: the error names the namespace, the store and the missing
// ability, on the field that asks for it. escalate left out asks only
// for what the store can do.
func TestModesStoresCanServe(t *testing.T) {
	stores := map[string]string{
		"redis":     `{type: redis, addrs: ["127.0.0.1:6379"]}`,
		"postgres":  `{type: postgres, dsn: "postgres://u@127.0.0.1/db"}`,
		"cassandra": `{type: cassandra, hosts: ["127.0.0.1"]}`,
	}
	modes := []struct {
		name, lines string
		needs       clustersync.Abilities
		field       string
	}{
		{"local", "sync_rate: -1", 0, ""},
		{"periodic", "sync_rate: 0.1", 0, ""},
		{"periodic escalate never", "sync_rate: 0.1\n    escalate: never", 0, ""},
		{"periodic escalate auto", "sync_rate: 0.1\n    escalate: auto", clustersync.Decide, "escalate"},
		{"synchronous", "sync_rate: 0", clustersync.Decide, "sync_rate"},
		{"synchronous escalate never", "sync_rate: 0\n    escalate: never", clustersync.Decide, "sync_rate"},
	}
	for typ, yaml := range stores {
		for _, m := range modes {
			t.Run(typ+"/"+m.name, func(t *testing.T) {
				doc := fmt.Sprintf("stores:\n  main: %s\nnamespaces:\n  - name: api\n    window_sizes: [1s]\n    store: main\n    %s\n", yaml, m.lines)
				_, err := ParseConfig("conf.yaml", []byte(doc))
				refused := !storeAbilities[typ].Has(m.needs)
				if !refused {
					if err != nil {
						t.Fatalf("refused: %v", err)
					}
					return
				}
				errs := Flatten(err)
				if len(errs) != 1 {
					t.Fatalf("errors %v, want one refusal", errs)
				}
				ce, ok := errs[0].(*Error)
				if !ok || ce.Field != "namespaces[0]."+m.field {
					t.Fatalf("error %v, want one on namespaces[0].%s", errs[0], m.field)
				}
				for _, want := range []string{`namespace "api"`, `store "main" (` + typ + `)`, "has no atomic decision"} {
					if !strings.Contains(ce.Reason, want) {
						t.Errorf("reason %q lacks %q", ce.Reason, want)
					}
				}
			})
		}
	}
	// The verdicts above are cassandra's alone.
	for typ, has := range storeAbilities {
		if can := has.Has(clustersync.Decide); can != (typ != "cassandra") {
			t.Errorf("%s decides atomically: %v", typ, can)
		}
	}
}
