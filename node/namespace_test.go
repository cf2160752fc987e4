package node_test

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

func TestWindowStart(t *testing.T) {
	const ms = int64(time.Millisecond)
	const s = int64(time.Second)
	tests := []struct {
		name string
		t    int64
		size time.Duration
		want int64
	}{
		{"epoch itself", 0, time.Second, 0},
		{"first nanosecond", 1, time.Second, 0},
		{"last nanosecond of first window", s - 1, time.Second, 0},
		{"second window", s, time.Second, s},
		{"minute, mid window", 90 * s, time.Minute, 60 * s},
		{"hour boundary", 7200 * s, time.Hour, 7200 * s},
		{"100ms, exact", 300 * ms, 100 * time.Millisecond, 300 * ms},
		{"100ms, inside", 1_700_000_000*s + 250*ms + 7, 100 * time.Millisecond, 1_700_000_000*s + 200*ms},
		{"100ms, last ns", 1_700_000_000*s + 100*ms - 1, 100 * time.Millisecond, 1_700_000_000 * s},
		{"1ms", 1_700_000_000*s + 5*ms + 999_999, time.Millisecond, 1_700_000_000*s + 5*ms},
		{"7s (not dividing a minute)", 1_700_000_000 * s, 7 * time.Second, 1_700_000_000 * s / (7 * s) * (7 * s)},
		{"before the epoch: floor, not truncation", -1, time.Second, -s},
		{"before the epoch, exact", -s, time.Second, -s},
		{"before the epoch, 100ms", -150 * ms, 100 * time.Millisecond, -200 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ratelimit.WindowStart(tt.t, tt.size); got != tt.want {
				t.Errorf("WindowStart(%d, %v) = %d, want %d", tt.t, tt.size, got, tt.want)
			}
		})
	}
}

// TestWindowAlignmentInNamespace checks that hits land in the epoch-aligned
// window holding their time, for a whole-second and a sub-second size.
func TestWindowAlignmentInNamespace(t *testing.T) {
	tests := []struct {
		name string
		size time.Duration
		hit  time.Time // one hit here
		at   time.Time // rate read here
		want float64
	}{
		{"1s: same window", time.Second, epoch.Add(999 * time.Millisecond), epoch.Add(500 * time.Millisecond), 1},
		{"1s: hit at the last ns, read in the next window's first ns", time.Second, epoch.Add(time.Second - 1), epoch.Add(time.Second), 1},
		{"1s: hit at the boundary belongs to the new window", time.Second, epoch.Add(time.Second), epoch.Add(time.Second), 1},
		{"100ms: previous window half weighted", 100 * time.Millisecond, epoch.Add(50 * time.Millisecond), epoch.Add(150 * time.Millisecond), 0.5},
		{"100ms: previous window 3/4 weighted", 100 * time.Millisecond, epoch.Add(199 * time.Millisecond), epoch.Add(225 * time.Millisecond), 0.75},
		{"100ms: two windows later reads 0", 100 * time.Millisecond, epoch.Add(99 * time.Millisecond), epoch.Add(200 * time.Millisecond), 0},
		{"near the Unix epoch", time.Second, time.Unix(0, 0), time.Unix(1, 500_000_000), 0.5},
		{"first window of the Unix epoch", 100 * time.Millisecond, time.Unix(0, 1), time.Unix(0, 99_999_999), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := newNS(t, localConfig(tt.size), nil)
			incr(t, ns, tt.hit, "k", tt.size, 1)
			if got := rateOf(t, ns, tt.at, "k", tt.size); got != tt.want {
				t.Errorf("rate at %v after a hit at %v = %v, want %v", tt.at.Sub(epoch), tt.hit.Sub(epoch), got, tt.want)
			}
		})
	}
}

func TestSlidingRateFormula(t *testing.T) {
	const size = time.Second
	tests := []struct {
		name      string
		cur, prev int64
		pos       int64
		want      float64
	}{
		{"pos 0: previous counts fully", 10, 40, 0, 50},
		{"half way", 10, 40, int64(size / 2), 30},
		{"size-1ns: previous almost gone", 10, 40, int64(size) - 1, 10 + 40.0/float64(size)},
		{"no previous", 7, 0, 123, 7},
		{"negative previous", 0, -10, int64(size / 4), -7.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ratelimit.SlidingRate(tt.cur, tt.prev, size, tt.pos); !near(got, tt.want) {
				t.Errorf("SlidingRate(%d, %d, %v, %d) = %v, want %v", tt.cur, tt.prev, size, tt.pos, got, tt.want)
			}
		})
	}
}

// TestRateAtWindowEdges reads a key with 10 hits in one window and 4 in the
// next at the edges of the second window.
func TestRateAtWindowEdges(t *testing.T) {
	for _, size := range []time.Duration{100 * time.Millisecond, time.Second, time.Minute} {
		ns := newNS(t, localConfig(size), nil)
		incr(t, ns, epoch.Add(size/3), "k", size, 10)
		incr(t, ns, epoch.Add(size), "k", size, 4)
		tests := []struct {
			name string
			at   time.Time
			want float64
		}{
			{"pos 0", epoch.Add(size), 4 + 10},
			{"pos size/2", epoch.Add(size + size/2), 4 + 5},
			{"pos size-1ns", epoch.Add(2*size - 1), 4 + 10/float64(size)},
			{"next window pos 0: the 4 fully, the 10 gone", epoch.Add(2 * size), 4},
			{"next window pos size-1ns", epoch.Add(3*size - 1), 4 / float64(size)},
			{"two windows later", epoch.Add(3 * size), 0},
		}
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%v/%s", size, tt.name), func(t *testing.T) {
				if got := rateOf(t, ns, tt.at, "k", size); !near(got, tt.want) {
					t.Errorf("rate = %v, want %v", got, tt.want)
				}
			})
		}
	}
}

func TestRolloverAcrossSeveralWindows(t *testing.T) {
	const size = time.Second
	tests := []struct {
		name     string
		idle     int // whole windows between the hit and the read
		wantRead float64
		// wantAfter is the rate returned by an Increment of 1 at the read
		// time (position 0 of its window).
		wantAfter float64
	}{
		{"same window", 0, 5, 6},
		{"next window", 1, 5, 6}, // previous window weighs 1 at pos 0
		{"idle for 2 windows", 2, 0, 1},
		{"idle for 3 windows", 3, 0, 1},
		{"idle for 10 windows", 10, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := newNS(t, localConfig(size), nil)
			incr(t, ns, epoch, "k", size, 5)
			at := epoch.Add(time.Duration(tt.idle) * size)
			if got := rateOf(t, ns, at, "k", size); got != tt.wantRead {
				t.Errorf("rate after %d idle windows = %v, want %v", tt.idle, got, tt.wantRead)
			}
			if got := incr(t, ns, at, "k", size, 1); got[0].Rate != tt.wantAfter {
				t.Errorf("Increment after %d idle windows = %v, want %v", tt.idle, got[0].Rate, tt.wantAfter)
			}
		})
	}
}

// TestLateHitCountsInPreviousWindow: a hit timed in the previous window but
// arriving after the slot rolled over (racing goroutines) still counts there.
func TestLateHitCountsInPreviousWindow(t *testing.T) {
	const size = time.Second
	ns := newNS(t, localConfig(size), nil)
	incr(t, ns, epoch.Add(size), "k", size, 1)     // rolls the slot to window 1
	incr(t, ns, epoch.Add(size-1), "k", size, 10)  // late hit of window 0
	incr(t, ns, epoch.Add(size/2), "k", size, 100) // late hit of window 0
	if got, want := rateOf(t, ns, epoch.Add(size+size/2), "k", size), 1+110*0.5; got != want {
		t.Errorf("rate = %v, want %v", got, want)
	}
	// Three windows late: too old to count anywhere, and not counted.
	incr(t, ns, epoch.Add(3*size), "k", size, 1)
	incr(t, ns, epoch.Add(size/2), "k", size, 1000)
	if got, want := rateOf(t, ns, epoch.Add(3*size), "k", size), 1.0; got != want {
		t.Errorf("rate after a too-late hit = %v, want %v", got, want)
	}
}

func TestFractionalValuesSumExactly(t *testing.T) {
	tests := []struct {
		name  string
		value float64
		times int
		want  float64
	}{
		{"0.1 ten times", 0.1, 10, 1},
		{"0.2 five times", 0.2, 5, 1},
		{"0.3 ten times", 0.3, 10, 3},
		{"0.001 thousand times", 0.001, 1000, 1},
		{"1e-6 a million times", 1e-6, 1_000_000, 1},
		{"0.5 three times", 0.5, 3, 1.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := newNS(t, localConfig(time.Minute), nil)
			var got []ratelimit.Rate
			for range tt.times {
				got = incr(t, ns, epoch, "k", time.Minute, tt.value)
			}
			if got[0].Rate != tt.want {
				t.Errorf("rate after adding %v %d times = %v, want exactly %v", tt.value, tt.times, got[0].Rate, tt.want)
			}
		})
	}
}

func TestToMicroRounding(t *testing.T) {
	tests := []struct {
		v    float64
		want int64
	}{
		{1, 1_000_000},
		{0.1, 100_000},
		{-0.1, -100_000},
		{1e-6, 1},
		{0.4e-6, 0},
		{1.5e-6, 2},   // half away from zero
		{-1.5e-6, -2}, // half away from zero
		{2.5e-6, 3},
		{1e9, 1e15},
		{-1e9, -1e15},
	}
	for _, tt := range tests {
		got, err := ratelimit.ToMicro(tt.v)
		if err != nil || got != tt.want {
			t.Errorf("ToMicro(%v) = %d, %v; want %d, nil", tt.v, got, err, tt.want)
		}
	}
}

func TestNegativeValues(t *testing.T) {
	tests := []struct {
		name   string
		values []float64
		want   float64
	}{
		{"release after hits", []float64{5, -2}, 3},
		{"release to zero", []float64{1.5, -1.5}, 0},
		{"below zero", []float64{1, -3}, -2},
		{"fractional release", []float64{1, -0.1, -0.1, -0.1}, 0.7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := newNS(t, localConfig(time.Second), nil)
			var got []ratelimit.Rate
			for _, v := range tt.values {
				got = incr(t, ns, epoch, "k", time.Second, v)
			}
			if got[0].Rate != tt.want {
				t.Errorf("rate after %v = %v, want %v", tt.values, got[0].Rate, tt.want)
			}
		})
	}
	// A negative previous window weighs like a positive one.
	ns := newNS(t, localConfig(time.Second), nil)
	incr(t, ns, epoch, "k", time.Second, -4)
	if got := rateOf(t, ns, epoch.Add(time.Second+time.Second/4), "k", time.Second); got != -3 {
		t.Errorf("rate with -4 in the previous window at 1/4 = %v, want -3", got)
	}
}

func TestIncrementEverySize(t *testing.T) {
	// Configured out of order: rates come back ascending.
	ns := newNS(t, localConfig(time.Minute, 100*time.Millisecond, time.Second), nil)
	got := incr(t, ns, epoch.Add(time.Minute+50*time.Millisecond), "k", 0, 2)
	want := []ratelimit.Rate{{Size: 100 * time.Millisecond, Rate: 2}, {Size: time.Second, Rate: 2}, {Size: time.Minute, Rate: 2}}
	if !slices.Equal(got, want) {
		t.Fatalf("Increment(size 0) = %v, want %v", got, want)
	}
	// Each size counted it: read each separately.
	for _, size := range []time.Duration{100 * time.Millisecond, time.Second, time.Minute} {
		if r := rateOf(t, ns, epoch.Add(time.Minute+50*time.Millisecond), "k", size); r != 2 {
			t.Errorf("rate of %v = %v, want 2", size, r)
		}
	}
	// Counting a single size leaves the others alone.
	got = incr(t, ns, epoch.Add(time.Minute+60*time.Millisecond), "k", time.Second, 1)
	if want := []ratelimit.Rate{{Size: time.Second, Rate: 3}}; !slices.Equal(got, want) {
		t.Errorf("Increment(1s) = %v, want %v", got, want)
	}
	all, err := ns.RateAt(epoch.Add(time.Minute+60*time.Millisecond), "k", 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []ratelimit.Rate{{Size: 100 * time.Millisecond, Rate: 2}, {Size: time.Second, Rate: 3}, {Size: time.Minute, Rate: 2}}; !slices.Equal(all, want) {
		t.Errorf("RateAt(size 0) = %v, want %v", all, want)
	}
	// dst is appended to.
	dst := []ratelimit.Rate{{Size: 42}}
	dst, err = ns.IncrementAt(epoch.Add(time.Minute+60*time.Millisecond), "k", 0, 0, dst)
	if err != nil {
		t.Fatal(err)
	}
	if len(dst) != 4 || dst[0].Size != 42 {
		t.Errorf("IncrementAt did not append to dst: %v", dst)
	}
}

func TestRateCurDiffIsAWhatIf(t *testing.T) {
	ns := newNS(t, localConfig(time.Second), nil)
	incr(t, ns, epoch, "k", time.Second, 2)
	r, err := ns.RateAt(epoch.Add(time.Second/2), "k", time.Second, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r[0].Rate != 5 {
		t.Errorf("RateAt(cur_diff 3) = %v, want 5", r[0].Rate)
	}
	if got := rateOf(t, ns, epoch.Add(time.Second/2), "k", time.Second); got != 2 {
		t.Errorf("rate after a what-if = %v, want 2 (cur_diff must count nothing)", got)
	}
	// Next window: cur_diff goes in the current window, the 2 weigh 1/2.
	r, _ = ns.RateAt(epoch.Add(time.Second*3/2), "k", time.Second, 1, nil)
	if r[0].Rate != 2 {
		t.Errorf("RateAt(next window, cur_diff 1) = %v, want 2", r[0].Rate)
	}
	// Unknown key in a local namespace: just cur_diff, nothing created.
	r, _ = ns.RateAt(epoch, "nobody", time.Second, 1.5, nil)
	if r[0].Rate != 1.5 || ns.ActiveKeys() != 1 {
		t.Errorf("RateAt(unknown key) = %v with %d keys, want 1.5 with 1 key", r[0].Rate, ns.ActiveKeys())
	}
}

func TestUnknownWindowSize(t *testing.T) {
	ns := newNS(t, localConfig(time.Minute, 100*time.Millisecond, time.Second), nil)
	check := func(t *testing.T, err error, field string) {
		t.Helper()
		wantFieldError(t, err, field, node.ErrUnknownWindow)
		if err == nil {
			return
		}
		if msg := err.Error(); !strings.Contains(msg, "100ms, 1s, 1m0s") || !strings.Contains(msg, "2s") {
			t.Errorf("error %q should name the size asked (2s) and list the configured ones (100ms, 1s, 1m0s)", msg)
		}
	}
	t.Run("Increment", func(t *testing.T) {
		_, err := ns.IncrementAt(epoch, "k", 2*time.Second, 1, nil)
		check(t, err, "window_size")
	})
	t.Run("Rate", func(t *testing.T) {
		_, err := ns.RateAt(epoch, "k", 2*time.Second, 0, nil)
		check(t, err, "window_size")
	})
	t.Run("Allow", func(t *testing.T) {
		_, err := ns.AllowAt(epoch, ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{{Size: time.Second, Limit: 5}, {Size: 2 * time.Second, Limit: 5}}}, nil)
		check(t, err, "limits[1].window_size")
	})
	if n := ns.ActiveKeys(); n != 0 {
		t.Errorf("ActiveKeys = %d after rejected calls, want 0", n)
	}
}

func TestInvalidInputsCountNothing(t *testing.T) {
	invalidUTF8 := "ab\xffcd"
	tests := []struct {
		name     string
		key      string
		value    float64
		field    string
		sentinel error
	}{
		{"empty key", "", 1, "key", ratelimit.ErrInvalidKey},
		{"1025-byte key", strings.Repeat("k", ratelimit.MaxKeyLen+1), 1, "key", ratelimit.ErrInvalidKey},
		{"1025-byte multibyte key", strings.Repeat("é", 512) + "x", 1, "key", ratelimit.ErrInvalidKey},
		{"invalid UTF-8", invalidUTF8, 1, "key", ratelimit.ErrInvalidKey},
		{"truncated UTF-8", "é"[:1], 1, "key", ratelimit.ErrInvalidKey},
		{"NaN", "k", math.NaN(), "value", ratelimit.ErrInvalidValue},
		{"+Inf", "k", math.Inf(1), "value", ratelimit.ErrInvalidValue},
		{"-Inf", "k", math.Inf(-1), "value", ratelimit.ErrInvalidValue},
		{"above 1e9", "k", 1e9 + 1, "value", ratelimit.ErrInvalidValue},
		{"below -1e9", "k", -1e9 - 1, "value", ratelimit.ErrInvalidValue},
		{"max float", "k", math.MaxFloat64, "value", ratelimit.ErrInvalidValue},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := newNS(t, localConfig(time.Second, time.Minute), nil)
			for _, size := range []time.Duration{0, time.Second} {
				dst, err := ns.IncrementAt(epoch, tt.key, size, tt.value, nil)
				wantFieldError(t, err, tt.field, tt.sentinel)
				if len(dst) != 0 {
					t.Errorf("IncrementAt returned rates %v with an error", dst)
				}
			}
			if n := ns.ActiveKeys(); n != 0 {
				t.Errorf("ActiveKeys = %d, want 0: nothing may be counted", n)
			}
			if tt.field == "value" {
				if got := rateOf(t, ns, epoch, tt.key, time.Second); got != 0 {
					t.Errorf("rate of %q = %v, want 0", tt.key, got)
				}
			}
			if tt.field == "key" {
				_, err := ns.RateAt(epoch, tt.key, time.Second, 0, nil)
				wantFieldError(t, err, "key", ratelimit.ErrInvalidKey)
				_, err = ns.AllowAt(epoch, ratelimit.AllowRequest{Key: tt.key, Cost: 1, Limits: []ratelimit.Limit{{Size: time.Second, Limit: 1}}}, nil)
				wantFieldError(t, err, "key", ratelimit.ErrInvalidKey)
			}
		})
	}

	t.Run("largest accepted", func(t *testing.T) {
		ns := newNS(t, localConfig(time.Second), nil)
		key := strings.Repeat("é", ratelimit.MaxKeyLen/2) // exactly 1024 bytes
		for _, v := range []float64{1e9, -1e9, 0} {
			if _, err := ns.IncrementAt(epoch, key, time.Second, v, nil); err != nil {
				t.Errorf("IncrementAt(1024-byte key, %v) = %v, want nil", v, err)
			}
		}
	})
	t.Run("odd but valid keys stay distinct", func(t *testing.T) {
		ns := newNS(t, localConfig(time.Second), nil)
		keys := []string{"a|b", "a:b", "a b", "a\x00b", "a", "a\x00", "\x00"}
		for i, k := range keys {
			incr(t, ns, epoch, k, time.Second, float64(i+1))
		}
		for i, k := range keys {
			if got := rateOf(t, ns, epoch, k, time.Second); got != float64(i+1) {
				t.Errorf("rate of %q = %v, want %d", k, got, i+1)
			}
		}
	})
	t.Run("cur_diff", func(t *testing.T) {
		ns := newNS(t, localConfig(time.Second), nil)
		_, err := ns.RateAt(epoch, "k", time.Second, math.NaN(), nil)
		wantFieldError(t, err, "cur_diff", ratelimit.ErrInvalidValue)
	})
}

func TestConfigValidate(t *testing.T) {
	valid := func(mod func(*node.Config)) node.Config {
		c := node.DefaultConfig()
		mod(&c)
		return c
	}
	tests := []struct {
		name  string
		cfg   node.Config
		field string // "" = valid
	}{
		{"default", node.DefaultConfig(), ""},
		{"sub-second sizes", valid(func(c *node.Config) { c.WindowSizes = []time.Duration{time.Millisecond, 100 * time.Millisecond} }), ""},
		{"366 days", valid(func(c *node.Config) { c.WindowSizes = []time.Duration{366 * 24 * time.Hour} }), ""},
		{"16 sizes", valid(func(c *node.Config) { c.WindowSizes = nSizes(16) }), ""},
		{"shared", valid(func(c *node.Config) { c.Shared = true }), ""},
		{"lease_idle", valid(func(c *node.Config) { c.Shared, c.LeaseIdle = true, time.Hour }), ""},
		{"max_keys 0 means default", valid(func(c *node.Config) { c.MaxKeys = 0 }), ""},
		{"64-char name", valid(func(c *node.Config) { c.Name = strings.Repeat("a", 64) }), ""},
		{"name with . _ -", valid(func(c *node.Config) { c.Name = "a.b_c-D9" }), ""},

		{"empty name", valid(func(c *node.Config) { c.Name = "" }), "name"},
		{"65-char name", valid(func(c *node.Config) { c.Name = strings.Repeat("a", 65) }), "name"},
		{"name with space", valid(func(c *node.Config) { c.Name = "a b" }), "name"},
		{"name with slash", valid(func(c *node.Config) { c.Name = "a/b" }), "name"},
		{"no sizes", valid(func(c *node.Config) { c.WindowSizes = nil }), "window_sizes"},
		{"17 sizes", valid(func(c *node.Config) { c.WindowSizes = nSizes(17) }), "window_sizes"},
		{"zero size", valid(func(c *node.Config) { c.WindowSizes = []time.Duration{time.Second, 0} }), "window_sizes[1]"},
		{"negative size", valid(func(c *node.Config) { c.WindowSizes = []time.Duration{-time.Second} }), "window_sizes[0]"},
		{"below 1ms", valid(func(c *node.Config) { c.WindowSizes = []time.Duration{500 * time.Microsecond} }), "window_sizes[0]"},
		{"not whole ms", valid(func(c *node.Config) { c.WindowSizes = []time.Duration{1500 * time.Microsecond} }), "window_sizes[0]"},
		{"above 366 days", valid(func(c *node.Config) { c.WindowSizes = []time.Duration{366*24*time.Hour + time.Millisecond} }), "window_sizes[0]"},
		{"duplicate", valid(func(c *node.Config) { c.WindowSizes = []time.Duration{time.Second, time.Minute, time.Second} }), "window_sizes[2]"},
		{"negative lease_idle", valid(func(c *node.Config) { c.LeaseIdle = -time.Second }), "lease_idle"},
		{"negative max_keys", valid(func(c *node.Config) { c.MaxKeys = -1 }), "max_keys"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				if _, err := node.NewNamespace(tt.cfg, nil); err != nil {
					t.Errorf("NewNamespace = %v, want nil", err)
				}
				return
			}
			wantFieldError(t, err, tt.field, node.ErrInvalidConfig)
			if _, err2 := node.NewNamespace(tt.cfg, nil); err2 == nil {
				t.Errorf("NewNamespace accepted a config Validate rejects (%v)", err)
			}
		})
	}
}

func nSizes(n int) []time.Duration {
	s := make([]time.Duration, n)
	for i := range s {
		s[i] = time.Duration(i+1) * time.Second
	}
	return s
}

func TestConfigDefaults(t *testing.T) {
	// NewNamespace sorts the sizes and fills MaxKeys, without touching the
	// caller's slice.
	sizes := []time.Duration{time.Minute, time.Second}
	ns := newNS(t, node.Config{Name: "n", WindowSizes: sizes}, nil)
	if got := ns.Config().WindowSizes; !slices.Equal(got, []time.Duration{time.Second, time.Minute}) {
		t.Errorf("Config().WindowSizes = %v, want [1s 1m0s]", got)
	}
	if sizes[0] != time.Minute {
		t.Errorf("NewNamespace reordered the caller's slice: %v", sizes)
	}
	if got := ns.Config().MaxKeys; got != node.DefaultMaxKeys {
		t.Errorf("MaxKeys = %d, want %d", got, node.DefaultMaxKeys)
	}
}

func TestNodeNamespaces(t *testing.T) {
	n, err := node.New([]node.Config{localConfig(time.Second), node.DefaultConfig()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ns, err := n.Namespace(""); err != nil || ns.Name() != node.DefaultNamespace {
		t.Errorf(`Namespace("") = %v, %v; want the default namespace`, ns, err)
	}
	if ns, err := n.Namespace("test"); err != nil || ns.Name() != "test" {
		t.Errorf(`Namespace("test") = %v, %v`, ns, err)
	}
	_, err = n.Namespace("nope")
	wantFieldError(t, err, "namespace", node.ErrUnknownNamespace)
	var names []string
	for _, ns := range n.Namespaces() {
		names = append(names, ns.Name())
	}
	if want := []string{"default", "test"}; !slices.Equal(names, want) {
		t.Errorf("Namespaces() = %v, want %v", names, want)
	}

	_, err = node.New([]node.Config{localConfig(time.Second), localConfig(time.Minute)}, nil)
	wantFieldError(t, err, "namespaces[1].name", node.ErrInvalidConfig)
	empty := localConfig()
	empty.Name = "empty"
	_, err = node.New([]node.Config{localConfig(time.Second), empty}, nil)
	wantFieldError(t, err, "namespaces[1].window_sizes", node.ErrInvalidConfig)
}

func TestShortFormsReadTheClock(t *testing.T) {
	clock := newFakeClock(epoch)
	ns := newNS(t, localConfig(time.Second), clock)
	if _, err := ns.Increment("k", time.Second, 4, nil); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second + time.Second/4)
	r, err := ns.Rate("k", time.Second, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r[0].Rate != 3 {
		t.Errorf("Rate after 1.25 windows = %v, want 3", r[0].Rate)
	}
	d, err := ns.Allow(ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{{Size: time.Second, Limit: 4}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Allowed || d.Limits[0].ResetAfter != 3*time.Second/4 {
		t.Errorf("Allow = %+v, want allowed with reset_after 750ms", d)
	}
	if !ns.Now().Equal(clock.Now()) {
		t.Errorf("Now() = %v, want the clock's %v", ns.Now(), clock.Now())
	}
}

func TestReclaim(t *testing.T) {
	const size = time.Second
	ns := newNS(t, localConfig(size, 10*size), nil)
	for i := range 100 {
		incr(t, ns, epoch, fmt.Sprint("short-", i), size, 1)   // 1s only
		incr(t, ns, epoch, fmt.Sprint("both-", i), 0, 1)       // 1s and 10s
		incr(t, ns, epoch, fmt.Sprint("long-", i), 10*size, 1) // 10s only
	}
	incr(t, ns, epoch.Add(size), "short-0", size, 1) // stays active one window longer
	steps := []struct {
		at          time.Duration
		wantRemoved int
		wantActive  int64
	}{
		{0, 0, 300},
		{size, 0, 300},      // previous window still counts
		{2 * size, 99, 201}, // short-1..99 idle for two windows
		{3 * size, 1, 200},  // short-0
		{19 * size, 0, 200}, // 10s windows: previous still counts
		{20 * size, 200, 0},
	}
	for _, s := range steps {
		if got := ns.Reclaim(epoch.Add(s.at)); got != s.wantRemoved {
			t.Errorf("Reclaim at +%v removed %d keys, want %d", s.at, got, s.wantRemoved)
		}
		if got := ns.ActiveKeys(); got != s.wantActive {
			t.Errorf("ActiveKeys after Reclaim at +%v = %d, want %d", s.at, got, s.wantActive)
		}
	}
	// A reclaimed key starts from zero.
	if got := incr(t, ns, epoch.Add(20*size), "both-1", 0, 1); got[0].Rate != 1 || got[1].Rate != 1 {
		t.Errorf("Increment of a reclaimed key = %v, want 1 in each size", got)
	}
	if ns.DroppedWindows() != 0 {
		t.Errorf("DroppedWindows = %d in a local namespace, want 0", ns.DroppedWindows())
	}
}

// TestReclaimKeepsLiveCounts: reclaiming never changes a rate that still
// counts, and drops a window only once it weighs nothing.
func TestReclaimKeepsLiveCounts(t *testing.T) {
	const size = time.Second
	ns := newNS(t, localConfig(size), nil)
	incr(t, ns, epoch, "k", size, 8)
	incr(t, ns, epoch.Add(size), "k", size, 2)
	at := epoch.Add(size + size/2)
	ns.Reclaim(at)
	if got := rateOf(t, ns, at, "k", size); got != 2+4 {
		t.Errorf("rate after Reclaim = %v, want 6", got)
	}
	at = epoch.Add(2*size + size/2)
	ns.Reclaim(at)
	if got := rateOf(t, ns, at, "k", size); got != 1 {
		t.Errorf("rate after Reclaim a window later = %v, want 1", got)
	}
}

// TestDroppedWindows: in a syncing namespace, reclaiming a window whose
// counts never reached the store is counted.
func TestDroppedWindows(t *testing.T) {
	ns := newNS(t, syncedConfig(time.Second), nil)
	incr(t, ns, epoch, "pushed", time.Second, 1)
	incr(t, ns, epoch, "unpushed", time.Second, 1)
	for _, p := range ns.CollectDirty(epoch, nil) {
		if p.Key == "pushed" {
			ns.MarkPushed(p, 1)
		}
	}
	if got := ns.Reclaim(epoch.Add(2 * time.Second)); got != 2 {
		t.Errorf("Reclaim removed %d keys, want 2", got)
	}
	if got := ns.DroppedWindows(); got != 1 {
		t.Errorf("DroppedWindows = %d, want 1", got)
	}
}

// TestReclaimFreesMemory: memory follows the active keys. After 200,000 keys
// are reclaimed, the heap must give back nearly all they took.
func TestReclaimFreesMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 200,000 keys")
	}
	const n = 200_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%08d", i)
	}
	ns := newNS(t, localConfig(time.Second, time.Minute), nil)
	base := heapInUse()
	for _, k := range keys {
		if _, err := ns.IncrementAt(epoch, k, 0, 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	full := heapInUse()
	if got := ns.Reclaim(epoch.Add(2 * time.Minute)); got != n {
		t.Fatalf("Reclaim removed %d keys, want %d", got, n)
	}
	after := heapInUse()
	used, kept := full-base, after-base
	t.Logf("%d keys: %d B in use (%.0f B/key); after Reclaim %d B kept (%.0f B/reclaimed key)",
		n, used, float64(used)/n, kept, float64(kept)/n)
	if kept > used/4 {
		t.Errorf("after reclaiming every key %d of %d bytes are still held, want at most a quarter", kept, used)
	}
	runtime.KeepAlive(ns)
}

func heapInUse() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

func TestKeyCap(t *testing.T) {
	for _, cfg := range []node.Config{localConfig(time.Second), syncedConfig(time.Second)} {
		t.Run(map[bool]string{false: "local", true: "shared"}[cfg.Shared], func(t *testing.T) {
			cfg.MaxKeys = 10
			ns := newNS(t, cfg, nil)
			for i := range 10 {
				incr(t, ns, epoch, fmt.Sprint("k", i), time.Second, 1)
			}
			_, err := ns.IncrementAt(epoch, "k10", time.Second, 1, nil)
			wantFieldError(t, err, "key", node.ErrKeyLimit)
			if got := ns.RefusedKeys(); got != 1 {
				t.Errorf("RefusedKeys = %d, want 1", got)
			}
			if got := ns.ActiveKeys(); got != 10 {
				t.Errorf("ActiveKeys = %d, want 10", got)
			}
			// Existing keys still count.
			if got := incr(t, ns, epoch, "k3", time.Second, 1); got[0].Rate != 2 {
				t.Errorf("Increment of an existing key at the cap = %v, want 2", got[0].Rate)
			}
			d, err := ns.AllowAt(epoch, ratelimit.AllowRequest{Key: "k4", Cost: 1, Limits: []ratelimit.Limit{{Size: time.Second, Limit: 10}}}, nil)
			if err != nil || !d.Allowed {
				t.Errorf("Allow of an existing key at the cap = %+v, %v; want allowed", d, err)
			}
			_, err = ns.AllowAt(epoch, ratelimit.AllowRequest{Key: "k11", Cost: 1, Limits: []ratelimit.Limit{{Size: time.Second, Limit: 10}}}, nil)
			wantFieldError(t, err, "key", node.ErrKeyLimit)
			if got := ns.RefusedKeys(); got != 2 {
				t.Errorf("RefusedKeys = %d, want 2", got)
			}
			// After reclaiming, room again.
			ns.Reclaim(epoch.Add(2 * time.Second))
			incr(t, ns, epoch.Add(2*time.Second), "k10", time.Second, 1)
		})
	}
}

// TestSyncSemantics covers CollectDirty, MarkPushed, CollectInterest and
// SetOthers as the sync loop uses them.
func TestSyncSemantics(t *testing.T) {
	const size = time.Second
	ns := newNS(t, syncedConfig(size, time.Minute), nil)
	at := epoch.Add(size / 2)

	incr(t, ns, at, "a", size, 1)
	dirty := ns.CollectDirty(at, nil)
	if len(dirty) != 1 || dirty[0].Key != "a" || dirty[0].Size != size || dirty[0].Start != epoch.UnixNano() || dirty[0].Total != 1*ratelimit.Micro {
		t.Fatalf("CollectDirty = %+v, want one window of a/1s starting at the epoch with 1e6", dirty)
	}
	p1 := dirty[0]
	ns.MarkPushed(p1, 10)
	if got := ns.CollectDirty(at, nil); len(got) != 0 {
		t.Fatalf("CollectDirty after MarkPushed = %+v, want none", got)
	}

	// Dirty again after a new hit.
	incr(t, ns, at, "a", size, 2)
	dirty = ns.CollectDirty(at, nil)
	if len(dirty) != 1 || dirty[0].Total != 3*ratelimit.Micro {
		t.Fatalf("CollectDirty after a new hit = %+v, want a with 3e6", dirty)
	}
	p2 := dirty[0]
	// An older push completing late does not undo the newer one.
	ns.MarkPushed(p2, 20)
	ns.MarkPushed(p1, 15)
	if got := ns.CollectDirty(at, nil); len(got) != 0 {
		t.Errorf("CollectDirty after a late older MarkPushed = %+v, want none", got)
	}
	// A push of an older total does not mark a newer total pushed.
	incr(t, ns, at, "a", size, 1)
	p3 := ns.CollectDirty(at, nil)[0]
	ns.MarkPushed(p2, 30) // newer version, but the total it stored is 3e6
	if got := ns.CollectDirty(at, nil); len(got) != 1 || got[0].Total != 4*ratelimit.Micro {
		t.Errorf("CollectDirty = %+v, want a with 4e6 still dirty", got)
	}
	ns.MarkPushed(p3, 40)

	// Interest: the current and previous window of every touched key.
	interest := ns.CollectInterest(at, nil)
	wantInterest := []string{
		fmt.Sprintf("a/1s/%d", epoch.UnixNano()),
		fmt.Sprintf("a/1s/%d", epoch.Add(-size).UnixNano()),
	}
	if got := windowNames(interest); !slices.Equal(got, wantInterest) {
		t.Errorf("CollectInterest = %v, want %v", got, wantInterest)
	}
	// Rate of a new key in a syncing namespace makes it interesting.
	if got := rateOf(t, ns, at, "b", time.Minute); got != 0 {
		t.Errorf("rate of b = %v, want 0", got)
	}
	interest = ns.CollectInterest(at, nil)
	if got := len(interest); got != 4 {
		t.Errorf("CollectInterest after Rate(b) has %d windows (%v), want 4", got, windowNames(interest))
	}
	// Touching is not counting: b is not dirty.
	for _, p := range ns.CollectDirty(at, nil) {
		t.Errorf("CollectDirty lists %+v after a Rate only", p)
	}

	// Others add to rates, replace (not add to) the previous fetch, and do
	// not make the key dirty.
	for _, w := range interest {
		if w.Key == "a" && w.Start == epoch.UnixNano() {
			ns.SetOthers(w, 7*ratelimit.Micro)
			ns.SetOthers(w, 5*ratelimit.Micro)
		}
		if w.Key == "a" && w.Start == epoch.Add(-size).UnixNano() {
			ns.SetOthers(w, 10*ratelimit.Micro) // previous window, weight 1/2 at 'at'
		}
	}
	if got, want := rateOf(t, ns, at, "a", size), 4.0+5+10*0.5; got != want {
		t.Errorf("rate of a with others = %v, want %v", got, want)
	}
	if got := ns.CollectDirty(at, nil); len(got) != 0 {
		t.Errorf("CollectDirty after SetOthers = %+v, want none", got)
	}
	r, _ := ns.IncrementAt(at, "a", size, 1, nil)
	if r[0].Rate != 15 {
		t.Errorf("Increment with others = %v, want 15", r[0].Rate)
	}

	// Next window: a's unpushed current window shows as the previous one;
	// others of the window that became previous weigh in.
	next := epoch.Add(size + size/4)
	dirty = ns.CollectDirty(next, nil)
	if len(dirty) != 1 || dirty[0].Start != epoch.UnixNano() || dirty[0].Total != 5*ratelimit.Micro {
		t.Errorf("CollectDirty in the next window = %+v, want a's window at the epoch with 5e6", dirty)
	}
	if got, want := rateOf(t, ns, next, "a", size), (5.0+5)*0.75; got != want {
		t.Errorf("rate of a in the next window = %v, want %v", got, want)
	}
	// Two windows later nothing of a's 1s windows is dirty any more.
	for _, p := range ns.CollectDirty(epoch.Add(2*size), nil) {
		if p.Size == size {
			t.Errorf("CollectDirty two windows later lists %+v", p)
		}
	}

	// SetOthers for a window the key has no bucket for creates it when
	// non-zero and is a no-op when zero.
	ns2 := newNS(t, syncedConfig(size), nil)
	rateOf(t, ns2, at, "c", size) // touch
	for _, w := range ns2.CollectInterest(at, nil) {
		if w.Start == epoch.Add(-size).UnixNano() {
			ns2.SetOthers(w, 2*ratelimit.Micro)
		} else {
			ns2.SetOthers(w, 0)
		}
	}
	if got := rateOf(t, ns2, at, "c", size); got != 1 {
		t.Errorf("rate of c with 2 others in the previous window at 1/2 = %v, want 1", got)
	}
}

func windowNames(ws []node.Window) []string {
	var out []string
	for _, w := range ws {
		out = append(out, fmt.Sprintf("%s/%v/%d", w.Key, w.Size, w.Start))
	}
	return out
}

// TestLocalNamespaceTracksNoInterest: Rate in a local namespace creates
// nothing; only counted keys are collected.
func TestLocalNamespaceTracksNoInterest(t *testing.T) {
	ns := newNS(t, localConfig(time.Second), nil)
	rateOf(t, ns, epoch, "x", time.Second)
	if got := ns.ActiveKeys(); got != 0 {
		t.Errorf("ActiveKeys after Rate in a local namespace = %d, want 0", got)
	}
	if got := ns.CollectInterest(epoch, nil); len(got) != 0 {
		t.Errorf("CollectInterest = %v, want none", windowNames(got))
	}
}

func TestErrorsUnwrap(t *testing.T) {
	err := error(&ratelimit.FieldError{Field: "f", Reason: "r", Err: ratelimit.ErrInvalidKey})
	if !errors.Is(err, ratelimit.ErrInvalidKey) || err.Error() != "f: r" {
		t.Errorf("FieldError = %q, Is(ErrInvalidKey) = %v; want \"f: r\", true", err, errors.Is(err, ratelimit.ErrInvalidKey))
	}
	wrapped := fmt.Errorf("outer: %w", err)
	if !errors.Is(wrapped, ratelimit.ErrInvalidKey) {
		t.Errorf("errors.Is through a %%w wrap = false, want true")
	}
}
