package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// summary is the report, as printed with -json.
type summary struct {
	Call        string             `json:"call"`
	Targets     []string           `json:"targets"`
	Mode        string             `json:"mode"` // "closed" or "open"
	Callers     int                `json:"callers"`
	Rate        float64            `json:"rate,omitempty"`
	Seconds     float64            `json:"seconds"`
	Calls       uint64             `json:"calls"`
	CallsPerSec float64            `json:"calls_per_sec"`
	Items       uint64             `json:"decisions"`
	ItemsPerSec float64            `json:"decisions_per_sec"`
	Errors      map[string]uint64  `json:"errors"`
	ItemErrors  map[string]uint64  `json:"item_errors,omitempty"`
	LatencyUS   map[string]float64 `json:"latency_us"`
	// ServerCPUPerCall is the -pids' CPU µs per call (per decision for a
	// batch: ServerCPUPerItem); absent without -pids.
	ServerCPUPerCall *float64      `json:"server_cpu_us_per_call,omitempty"`
	ServerCPUPerItem *float64      `json:"server_cpu_us_per_decision,omitempty"`
	ClientCPUPerCall *float64      `json:"client_cpu_us_per_call,omitempty"`
	Allow            *allowSummary `json:"allow,omitempty"`
}

type allowSummary struct {
	Allowed uint64      `json:"allowed"`
	Denied  uint64      `json:"denied"`
	Limit   float64     `json:"limit"`
	Window  string      `json:"window"`
	Windows windowStats `json:"windows"`
}

var quantiles = []struct {
	name string
	q    float64
}{{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}, {"p99.9", 0.999}}

func summarize(cfg config, res *result) summary {
	secs := res.End.Sub(res.Start).Seconds()
	s := summary{
		Call: cfg.call, Targets: cfg.targets, Mode: "closed", Callers: cfg.callers, Seconds: secs,
		Calls: res.Calls, Items: res.Items, Errors: res.Errors, ItemErrors: res.ItemErrors,
		LatencyUS: map[string]float64{"mean": us(res.Latency.mean()), "max": us(res.Latency.max)},
	}
	if cfg.rate > 0 {
		s.Mode, s.Rate = "open", cfg.rate
	}
	if len(s.ItemErrors) == 0 {
		s.ItemErrors = nil
	}
	if secs > 0 {
		s.CallsPerSec = float64(res.Calls) / secs
		s.ItemsPerSec = float64(res.Items) / secs
	}
	for _, q := range quantiles {
		s.LatencyUS[q.name] = us(res.Latency.quantile(q.q))
	}
	if res.ServerCPU >= 0 && res.Calls > 0 {
		v := us(res.ServerCPU) / float64(res.Calls)
		s.ServerCPUPerCall = &v
		if res.Items > 0 {
			w := us(res.ServerCPU) / float64(res.Items)
			s.ServerCPUPerItem = &w
		}
	}
	if res.ClientCPU >= 0 && res.Calls > 0 {
		v := us(res.ClientCPU) / float64(res.Calls)
		s.ClientCPUPerCall = &v
	}
	if cfg.call == callAllow || cfg.call == callAllowBatch {
		s.Allow = &allowSummary{Allowed: res.Allowed, Denied: res.Denied, Limit: cfg.limit, Window: cfg.window.String(),
			Windows: res.Admitted.stats(res.Start, res.End, cfg.limit)}
	}
	return s
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func writeJSON(w io.Writer, cfg config, res *result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(summarize(cfg, res))
}

// writeText prints the report, one "name: values" line per topic.
func writeText(w io.Writer, cfg config, res *result) {
	s := summarize(cfg, res)
	mode := fmt.Sprintf("closed loop, %d callers", cfg.callers)
	if cfg.rate > 0 {
		mode = fmt.Sprintf("open loop, %.0f calls/s, at most %d in flight", cfg.rate, cfg.callers)
	}
	keys := fmt.Sprintf("%d keys %s", cfg.keys, cfg.dist)
	if cfg.call == callAllowBatch || cfg.call == callIncrementBatch {
		keys += fmt.Sprintf(", batches of %d", cfg.batch)
	}
	fmt.Fprintf(w, "run:       %s on %s (%d conns each), %s, %s, %.1fs measured\n",
		cfg.call, strings.Join(cfg.targets, ","), cfg.conns, mode, keys, s.Seconds)
	fmt.Fprintf(w, "calls:     %d (%.0f/s)", s.Calls, s.CallsPerSec)
	if cfg.call == callAllowBatch || cfg.call == callIncrementBatch {
		fmt.Fprintf(w, ", decisions %d (%.0f/s)", s.Items, s.ItemsPerSec)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "errors:    %s", codeCounts(s.Errors))
	if s.ItemErrors != nil {
		fmt.Fprintf(w, ", batch items %s", codeCounts(s.ItemErrors))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "latency:   mean %s", fmtUS(s.LatencyUS["mean"]))
	for _, q := range quantiles {
		fmt.Fprintf(w, "  %s %s", q.name, fmtUS(s.LatencyUS[q.name]))
	}
	fmt.Fprintf(w, "  max %s\n", fmtUS(s.LatencyUS["max"]))
	if s.ServerCPUPerCall != nil || s.ClientCPUPerCall != nil {
		fmt.Fprint(w, "cpu:      ")
		if s.ServerCPUPerCall != nil {
			fmt.Fprintf(w, " server %.1f µs/call", *s.ServerCPUPerCall)
			if cfg.call == callAllowBatch || cfg.call == callIncrementBatch {
				fmt.Fprintf(w, " (%.2f µs/decision)", *s.ServerCPUPerItem)
			}
		}
		if s.ClientCPUPerCall != nil {
			fmt.Fprintf(w, " client %.1f µs/call", *s.ClientCPUPerCall)
		}
		fmt.Fprintln(w)
	}
	if a := s.Allow; a != nil {
		fmt.Fprintf(w, "allow:     %d allowed, %d denied\n", a.Allowed, a.Denied)
		ws := a.Windows
		fmt.Fprintf(w, "admitted:  limit %g per %s; mean %.1f per window (%.3f× limit) over %d complete key-windows; worst %g (%.3f× limit), key %s%d, window from %s; %d windows over the limit\n",
			a.Limit, a.Window, ws.Mean, ratio(ws.Mean, a.Limit), ws.Windows, ws.Worst, ratio(ws.Worst, a.Limit),
			cfg.keyPrefix, ws.WorstKey, ws.WorstStart.Format(time.RFC3339Nano), ws.Over)
	}
}

func ratio(v, limit float64) float64 {
	if limit == 0 {
		return 0
	}
	return v / limit
}

func codeCounts(m map[string]uint64) string {
	if len(m) == 0 {
		return "0"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// fmtUS prints microseconds with a unit that keeps three digits or so.
func fmtUS(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fs", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.2fms", v/1e3)
	default:
		return fmt.Sprintf("%.0fµs", v)
	}
}
