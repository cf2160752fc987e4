package sync

import (
	"fmt"
	"strings"
)

// Abilities are what a store can do beside Push, Fetch and Close, each
// one an optional interface of this package. A store declares them once,
// in its Abilities method (and its package, as a constant, for a config
// to be checked without connecting); NewSyncer takes each declared
// ability's interface once, so no call asks the store's type again, and
// refuses a mode the store cannot serve.
type Abilities uint8

const (
	// PushFetch: PushFetcher, a push and a read back in one round trip.
	PushFetch Abilities = 1 << iota
	// Decide: GroupAllower, an Allow decided atomically in the store, which
	// synchronous mode and escalation near a limit need.
	Decide
	// Buckets: BucketStore, token, leaky and fixed buckets held across
	// nodes.
	Buckets
	// Leases: LeaseStore, concurrency limits held across nodes.
	Leases
	// Changes: ChangeReader, a tick that reads only what changed.
	Changes
	// Window: Windower, the read of one window's sum, for tests and tools.
	Window
)

// abilityNames are the abilities' names in messages, by bit.
var abilityNames = [...]string{"push and fetch in one call", "atomic decision", "buckets", "leases", "change reads", "window reads"}

// Has reports whether a holds every ability of b.
func (a Abilities) Has(b Abilities) bool { return a&b == b }

// String names a's abilities, as a config error names a missing one.
func (a Abilities) String() string {
	var names []string
	for i, name := range abilityNames {
		if a&(1<<i) != 0 {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// Needs is what a namespace in mode needs of its store; escalate is
// whether a periodic namespace escalates near a limit.
func Needs(mode Mode, escalate bool) Abilities {
	switch mode.(type) {
	case Synchronous:
		return Decide
	case Periodic:
		if escalate {
			return Decide
		}
	}
	return 0
}

// abilities are a store's declared abilities, each interface nil when it
// is not declared.
type abilities struct {
	declared Abilities
	pf       PushFetcher
	ga       GroupAllower
	bs       BucketStore
	ls       LeaseStore
	cr       ChangeReader
}

// abilitiesOf takes the interfaces of the abilities store declares. A
// declared ability the store does not implement is an error: a store
// that loses a method must not silently change how exact its answers are.
func abilitiesOf(store Store) (abilities, error) {
	d := store.Abilities()
	var missing Abilities
	a := abilities{
		declared: d,
		pf:       takeAbility[PushFetcher](store, d, PushFetch, &missing),
		ga:       takeAbility[GroupAllower](store, d, Decide, &missing),
		bs:       takeAbility[BucketStore](store, d, Buckets, &missing),
		ls:       takeAbility[LeaseStore](store, d, Leases, &missing),
		cr:       takeAbility[ChangeReader](store, d, Changes, &missing),
	}
	takeAbility[Windower](store, d, Window, &missing)
	if missing != 0 {
		return abilities{}, fmt.Errorf("store %T declares %s but does not implement it", store, missing)
	}
	return a, nil
}

// takeAbility returns store as I when declared holds b (the zero I
// otherwise), adding b to missing when store is no I.
func takeAbility[I any](store Store, declared, b Abilities, missing *Abilities) I {
	var i I
	if !declared.Has(b) {
		return i
	}
	i, ok := store.(I)
	if !ok {
		*missing |= b
	}
	return i
}
