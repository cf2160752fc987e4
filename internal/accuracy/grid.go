package accuracy

import (
	"fmt"
	"strings"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
	clustersync "github.com/limiterd/limiterd/sync"
)

// Cell is one cell of the accuracy grid: a limit of one kind, Limit per
// Window, under a Zipf load whose most called key runs at TopLoad times
// its limit, measured on three nodes at each sync_rate and in the
// synchronous mode, the cell's floor.
type Cell struct {
	Window time.Duration
	Limit  float64
	Kind   ratelimit.LimitKind
	// Keys and ZipfS shape the load; TopLoad is the most called key's
	// load, in limits per window (the rate follows).
	Keys    int
	ZipfS   float64
	TopLoad float64
	// Warmup (fed to the oracle, not judged) and Duration (judged).
	Warmup, Duration time.Duration
}

// Run returns the cell's run at syncRate (0: synchronous), with
// escalation (escalate: auto) when periodic. Namespace and NewStore are
// the caller's.
func (c Cell) Run(syncRate float64) Run {
	r := Run{
		Nodes: 3, SyncRate: syncRate, Escalate: syncRate > 0,
		// A store call past CallTimeout presumes the store down and
		// calls then decide alone; 2 s keeps a pause of a loaded host
		// from turning into that.
		Sync:   clustersync.Config{TickTimeout: time.Second, CallTimeout: 2 * time.Second},
		Window: c.Window, Limit: c.Limit, Kind: c.Kind,
		Keys: c.Keys, ZipfS: c.ZipfS, Warmup: c.Warmup, Duration: c.Duration, Workers: 32,
	}
	r.Rate = r.RateForTop(c.TopLoad)
	return r
}

// KindName is a kind's short name, as the grid's knobs spell it.
func KindName(k ratelimit.LimitKind) string {
	return [...]string{"window", "token", "leaky", "fixed"}[k]
}

// KindOf reads a kind's short name.
func KindOf(name string) (ratelimit.LimitKind, error) {
	for k := ratelimit.WindowLimit; k <= ratelimit.FixedLimit; k++ {
		if KindName(k) == name {
			return k, nil
		}
	}
	return 0, fmt.Errorf("unknown kind %q (window, token, leaky or fixed)", name)
}

// Targets are what a periodic cell should reach next to its floor.
type Targets struct {
	// WronglyAdmitted is the most calls admitted where the oracle
	// refuses, as a share of all.
	WronglyAdmitted float64
	// RefusedFactor times the floor's share of wrongly refused calls, or
	// RefusedSlack of all calls if more, is the most wrongly refused: the
	// synchronous mode refuses a few calls the store took in another
	// order than their time, and may refuse none in a short run.
	RefusedFactor, RefusedSlack float64
	// LocalPoints is how far below its best (every call decided in its
	// node but those admitted into a key's last whole call of room) the
	// share decided without a store round trip may be.
	LocalPoints float64
}

// DefaultTargets: at most 0.01 % wrongly admitted, at most twice the
// floor's wrongly refused (or 0.01 %), the local share within one point
// of its best.
var DefaultTargets = Targets{WronglyAdmitted: 0.0001, RefusedFactor: 2, RefusedSlack: 0.0001, LocalPoints: 0.01}

// BestLocal is the largest share of res's calls that could be decided
// without a store round trip: all but the admissions into a key's last
// whole call of room, which two nodes could both make unless one asks
// the store.
func (res Result) BestLocal() float64 { return 1 - share(res.AtLimit, res.Calls) }

// Misses returns the targets res misses next to its cell's floor (the
// synchronous run), in words; none when it meets them all.
func (tg Targets) Misses(res, floor Result) []string {
	var m []string
	if wa := share(res.WronglyAdmitted, res.Calls); wa > tg.WronglyAdmitted {
		m = append(m, fmt.Sprintf("admits %.4f %% > %.4f %%", 100*wa, 100*tg.WronglyAdmitted))
	}
	want := max(tg.RefusedFactor*share(floor.WronglyRefused, floor.Calls), tg.RefusedSlack)
	if wr := share(res.WronglyRefused, res.Calls); wr > want {
		m = append(m, fmt.Sprintf("refuses %.4f %% > %.4f %%", 100*wr, 100*want))
	}
	if l, best := res.Local(), res.BestLocal(); l < best-tg.LocalPoints {
		m = append(m, fmt.Sprintf("local %.2f %% < %.2f %% − %.0f", 100*l, 100*best, 100*tg.LocalPoints))
	}
	return m
}

// GridHeader is the grid table's header.
var GridHeader = []string{
	"| store | window | L | kind | sync_rate s | calls/s | calls judged | keys ≥ 2× | wrongly admitted | wrongly refused (floor) | at the limit | decided without a store round trip (best) | targets |",
	"|---|---|---|---|---|---|---|---|---|---|---|---|---|",
}

// GridRow is one row of the grid table: res of r next to the cell's floor
// (for the floor itself, res and floor are the same), and the targets
// missed (nil: met). note, when set, replaces the targets column.
func GridRow(store string, r Run, res, floor Result, misses []string, note string) string {
	rate, verdict := fmt.Sprint(r.SyncRate), "yes"
	if r.SyncRate == 0 {
		rate, verdict = "0 (floor)", "–"
	}
	if len(misses) > 0 {
		verdict = "**no**: " + strings.Join(misses, "; ")
	}
	if note != "" {
		verdict = note
	}
	if res.Fallbacks > 0 {
		verdict += fmt.Sprintf(" (%d calls decided alone after a failed store call)", res.Fallbacks)
	}
	return fmt.Sprintf("| %s | %s | %v | %s | %s | %.0f | %d | %d | %.4f %% | %.4f %% (%.4f %%) | %.2f %% | %.2f %% (%.2f %%) | %s |",
		store, r.Window, r.Limit, KindName(r.Kind), rate, res.Offered, res.Calls, r.KeysOver(2),
		100*share(res.WronglyAdmitted, res.Calls), 100*share(res.WronglyRefused, res.Calls), 100*share(floor.WronglyRefused, floor.Calls),
		100*share(res.AtLimit, res.Calls), 100*res.Local(), 100*res.BestLocal(), verdict)
}
