package node

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// Limits on a namespace's configuration.
const (
	MinWindowSize  = time.Millisecond
	MaxWindowSize  = 366 * 24 * time.Hour
	MaxWindowSizes = 16
	// DefaultMaxKeys is the default cap on active keys per namespace: about
	// 250 MB of counters with two window sizes and short keys.
	DefaultMaxKeys = 1_000_000
	// DefaultMaxBytes is the default byte budget of a namespace's keys
	// (KeyCost each): 256 MiB, which a million short keys fit in, and
	// about 220 000 keys of 1 KiB.
	DefaultMaxBytes = 256 << 20
)

// DefaultNamespace is the namespace a request that names none uses.
const DefaultNamespace = "default"

// Config configures one namespace.
type Config struct {
	// Name is 1–64 characters of [A-Za-z0-9_.-].
	Name string
	// WindowSizes are the window sizes counted, each a whole number of
	// milliseconds between 1 ms and 366 days, without duplicates.
	WindowSizes []time.Duration
	// Shared is set when other nodes count the namespace's keys too: the
	// namespace then keeps what changed since a sync last took it (see
	// TakeTick), and its buckets while their consumption is not
	// stored. An estimator namespace cannot be shared.
	Shared bool
	// LeaseIdle is how long a key of the lease table is kept without a
	// lease of this node, so that a key in use keeps the other nodes'
	// count from one sync to the next; at least (and by default) a
	// minute.
	LeaseIdle time.Duration
	// MaxKeys caps the active keys; 0 means DefaultMaxKeys. The same cap
	// applies, counted separately, to the namespace's buckets (one per
	// kind, key and parameters).
	MaxKeys int
	// MaxBytes is the byte budget of the active keys, each costing
	// KeyCost (its length counts): a new key that does not fit is
	// treated as at MaxKeys (refused, or given an idle key's place). 0
	// means DefaultMaxBytes. The same budget applies, counted
	// separately, to the namespace's buckets (240 bytes and the key's
	// length each).
	MaxBytes int64
	// OnFull is what a new key gets when MaxKeys keys are held: refused
	// (OnFullRefuse, the default when empty) or the place of an idle key
	// (OnFullEvict; evict.go has the policy).
	OnFull KeyCapPolicy
	// Estimator, when set, makes the namespace an estimator namespace:
	// its sliding windows are counted in count-min sketches of a memory
	// fixed at start, whatever the number of keys, instead of exactly per
	// key. Such a namespace is local only and counts no negative values.
	Estimator *EstimatorConfig
	// MaxLeaseTTL is the longest TTL a concurrency lease may ask;
	// 0 means DefaultMaxLeaseTTL, at most MaxLeaseTTLCap.
	MaxLeaseTTL time.Duration
	// Policies are the namespace's named limits, by name (1-64 of
	// [A-Za-z0-9_.-]): an Allow may name one instead of listing its
	// limits. Each is checked as an Allow's limits are.
	Policies map[string]ratelimit.Policy
	// Shadow makes every Allow of the namespace a dry run: decided and
	// counted as it would be, then admitted (the service's concern; the
	// engine decides as always).
	Shadow bool
}

// MaxPolicies is the most policies a namespace holds.
const MaxPolicies = 1024

// KeyCapPolicy is what a namespace does with a new key at its key cap.
type KeyCapPolicy string

// The key cap policies.
const (
	// OnFullRefuse refuses the new key (ErrKeyLimit).
	OnFullRefuse KeyCapPolicy = "refuse"
	// OnFullEvict evicts an idle key in its favour, refusing it only when
	// no held key may be evicted.
	OnFullEvict KeyCapPolicy = "evict"
)

// EstimatorConfig sizes an estimator namespace's count-min sketches: each
// is Hashes rows of Slots counters. An estimate exceeds the truth by more
// than ε·N (N the window's total, ε = e/Slots) with probability at most
// δ = e^-Hashes; it is never below the truth.
type EstimatorConfig struct {
	// Hashes is the number of rows, 1 to MaxEstimatorHashes.
	Hashes int
	// Slots is the number of counters per row, MinEstimatorSlots to
	// MaxEstimatorSlots.
	Slots int
}

// Limits on an estimator's size.
const (
	MaxEstimatorHashes = 16
	MinEstimatorSlots  = 16
	MaxEstimatorSlots  = 1 << 24
)

// DefaultConfig is the namespace limiterd runs with when given no config:
// "default", windows of 1 s and 60 s, local only.
func DefaultConfig() Config {
	return Config{
		Name:        DefaultNamespace,
		WindowSizes: []time.Duration{time.Second, time.Minute},
		MaxKeys:     DefaultMaxKeys,
	}
}

// Validate reports the first problem with c as a *FieldError.
func (c Config) Validate() error {
	if !ratelimit.ValidNamespace(c.Name) {
		return fieldErr("name", ErrInvalidConfig, "namespace name %q must be 1-64 characters of [A-Za-z0-9_.-]", c.Name)
	}
	if len(c.WindowSizes) == 0 {
		return fieldErr("window_sizes", ErrInvalidConfig, "at least one window size is required")
	}
	if len(c.WindowSizes) > MaxWindowSizes {
		return fieldErr("window_sizes", ErrInvalidConfig, "at most %d window sizes, got %d", MaxWindowSizes, len(c.WindowSizes))
	}
	for i, s := range c.WindowSizes {
		if err := validateWindowSize(s); err != nil {
			return fieldErr(fmt.Sprintf("window_sizes[%d]", i), ErrInvalidConfig, "%s", err.(*ratelimit.FieldError).Reason)
		}
		if slices.Contains(c.WindowSizes[:i], s) {
			return fieldErr(fmt.Sprintf("window_sizes[%d]", i), ErrInvalidConfig, "duplicate window size %s", ratelimit.FormatDuration(s))
		}
	}
	if c.Estimator != nil && c.Shared {
		return fieldErr("estimator", ErrInvalidConfig, "an estimator namespace is counted on its node only: it cannot be shared")
	}
	if c.LeaseIdle < 0 {
		return fieldErr("lease_idle", ErrInvalidConfig, "must not be negative, got %s", ratelimit.FormatDuration(c.LeaseIdle))
	}
	if c.MaxKeys < 0 {
		return fieldErr("max_keys", ErrInvalidConfig, "must not be negative, got %d", c.MaxKeys)
	}
	if c.MaxBytes < 0 || (c.MaxBytes > 0 && c.MaxBytes < MinMaxBytes) {
		return fieldErr("max_bytes", ErrInvalidConfig, "must be 0 (the default, %d) or at least %d, got %d", DefaultMaxBytes, MinMaxBytes, c.MaxBytes)
	}
	switch c.OnFull {
	case "", OnFullRefuse, OnFullEvict:
	default:
		return fieldErr("on_full", ErrInvalidConfig, "must be %q or %q, got %q", OnFullRefuse, OnFullEvict, c.OnFull)
	}
	if c.MaxLeaseTTL < 0 || c.MaxLeaseTTL > MaxLeaseTTLCap {
		return fieldErr("max_lease_ttl", ErrInvalidConfig, "must be between 0 (default %s) and %s, got %s", ratelimit.FormatDuration(DefaultMaxLeaseTTL), ratelimit.FormatDuration(MaxLeaseTTLCap), ratelimit.FormatDuration(c.MaxLeaseTTL))
	}
	if err := c.validatePolicies(); err != nil {
		return err
	}
	if e := c.Estimator; e != nil {
		switch {
		case e.Hashes < 1 || e.Hashes > MaxEstimatorHashes:
			return fieldErr("estimator.hashes", ErrInvalidConfig, "must be between 1 and %d, got %d", MaxEstimatorHashes, e.Hashes)
		case e.Slots < MinEstimatorSlots || e.Slots > MaxEstimatorSlots:
			return fieldErr("estimator.slots", ErrInvalidConfig, "must be between %d and %d, got %d", MinEstimatorSlots, MaxEstimatorSlots, e.Slots)
		case c.OnFull == OnFullEvict:
			return fieldErr("on_full", ErrInvalidConfig, "an estimator namespace holds no keys to evict; leave on_full unset")
		}
	}
	return nil
}

// validateWindowSize checks one window size.
func validateWindowSize(s time.Duration) error {
	switch {
	case s < MinWindowSize || s > MaxWindowSize:
		return fieldErr("window_size", ErrInvalidWindow, "must be between %s and %s, got %s", ratelimit.FormatDuration(MinWindowSize), ratelimit.FormatDuration(MaxWindowSize), ratelimit.FormatDuration(s))
	case s%time.Millisecond != 0:
		return fieldErr("window_size", ErrInvalidWindow, "must be a whole number of milliseconds, got %s", ratelimit.FormatDuration(s))
	}
	return nil
}

// validatePolicies checks each policy's name and its limits, as an
// Allow's limits are checked in a namespace of c's window sizes, and
// that no bucket is in an estimator namespace.
// Errors name policies.<name>.limits[i]....
func (c Config) validatePolicies() error {
	if len(c.Policies) > MaxPolicies {
		return fieldErr("policies", ErrInvalidConfig, "at most %d policies, got %d", MaxPolicies, len(c.Policies))
	}
	tmp := &Namespace{cfg: c}
	for _, s := range c.WindowSizes {
		tmp.sizes = append(tmp.sizes, int64(s))
	}
	slices.Sort(tmp.sizes)
	var buf [MaxLimits]microLimit
	for _, name := range slices.Sorted(maps.Keys(c.Policies)) {
		p := c.Policies[name]
		field := "policies." + name
		if !ratelimit.ValidNamespace(name) {
			return fieldErr(field, ErrInvalidConfig, "policy name %q must be 1-64 characters of [A-Za-z0-9_.-]", name)
		}
		var lims []microLimit
		if len(p.Limits) <= MaxLimits {
			lims = buf[:len(p.Limits)]
		}
		_, kinds, err := tmp.checkAllowRest(&ratelimit.AllowRequest{Limits: p.Limits}, lims)
		if err != nil {
			fe := err.(*ratelimit.FieldError)
			return fieldErr(field+"."+fe.Field, ErrInvalidConfig, "%s", fe.Reason)
		}
		if !kinds {
			continue
		}
		if c.Estimator != nil {
			return fieldErr(field+".limits", ErrInvalidConfig, "an estimator namespace counts sliding windows only: no bucket limits")
		}
	}
	return nil
}

// clonePolicies returns a deep copy of ps (nil for none).
func clonePolicies(ps map[string]ratelimit.Policy) map[string]ratelimit.Policy {
	if len(ps) == 0 {
		return nil
	}
	out := make(map[string]ratelimit.Policy, len(ps))
	for k, p := range ps {
		out[k] = ratelimit.Policy{Limits: slices.Clone(p.Limits), Shadow: p.Shadow}
	}
	return out
}
