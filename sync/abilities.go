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
	a := abilities{declared: store.Abilities()}
	var missing Abilities
	take := func(b Abilities, ok bool) {
		if a.declared.Has(b) && !ok {
			missing |= b
		}
	}
	var ok bool
	if a.declared.Has(PushFetch) {
		a.pf, ok = store.(PushFetcher)
		take(PushFetch, ok)
	}
	if a.declared.Has(Decide) {
		a.ga, ok = store.(GroupAllower)
		take(Decide, ok)
	}
	if a.declared.Has(Buckets) {
		a.bs, ok = store.(BucketStore)
		take(Buckets, ok)
	}
	if a.declared.Has(Leases) {
		a.ls, ok = store.(LeaseStore)
		take(Leases, ok)
	}
	if a.declared.Has(Changes) {
		a.cr, ok = store.(ChangeReader)
		take(Changes, ok)
	}
	if a.declared.Has(Window) {
		_, ok = store.(Windower)
		take(Window, ok)
	}
	if missing != 0 {
		return abilities{}, fmt.Errorf("store %T declares %s but does not implement it", store, missing)
	}
	return a, nil
}
