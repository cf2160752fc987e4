package redis

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limiterd/limiterd/integration/harness"
)

// arithScript is buckets.lua's exact int64 helpers (everything before
// the kinds) run on ARGV triples (op, a, b), each answered by a string.
func arithScript(t *testing.T) *redis.Script {
	t.Helper()
	lib, err := lua.ReadFile("lib.lua")
	if err != nil {
		t.Fatal(err)
	}
	src, err := lua.ReadFile("buckets.lua")
	if err != nil {
		t.Fatal(err)
	}
	helpers, _, ok := strings.Cut(string(src), "-- ---- the kinds")
	if !ok {
		t.Fatal("buckets.lua: no kinds section")
	}
	return redis.NewScript(string(lib) + helpers + `
local out = {}
for i = 1, #ARGV, 3 do
  local op, a, b = ARGV[i], num(ARGV[i + 1]), num(ARGV[i + 2])
  local r
  if op == '+' then r = str(plus(a, b))
  elseif op == '-' then r = str(minus(a, b))
  elseif op == '<' then r = less(a, b) and '1' or '0'
  elseif op == '*' then r = str(times(a, b))
  elseif op == '/' then local q, m = divmod(a, b); r = str(q) .. ' ' .. str(m)
  elseif op == 'c' then r = str(ceildiv(a, b))
  elseif op == '=' then r = str(a) .. ' ' .. type(a)
  end
  out[#out + 1] = r
end
return out
`)
}

// int64s returns values around every boundary of the helpers (2^52, 2^53,
// 10^9, int64's ends) and random ones of every bit length.
func int64s(r *rand.Rand) []int64 {
	var vs []int64
	for _, b := range []int64{0, 1, 999_999_999, 1_000_000_000, 1 << 52, 1 << 53, 9_999_999_999_999_999, 1_700_000_000_000_000_000, math.MaxInt64} {
		for _, d := range []int64{-1, 0, 1} {
			if b+d >= 0 && !(b == math.MaxInt64 && d == 1) {
				vs = append(vs, b+d, -(b + d))
			}
		}
	}
	vs = append(vs, math.MinInt64)
	for bits := 1; bits <= 63; bits++ {
		for range 3 {
			v := r.Int64N(1 << (bits - 1))
			v |= 1 << (bits - 1)
			vs = append(vs, v, -v)
		}
	}
	return vs
}

// TestBucketsArithmetic compares the script's exact int64 helpers with
// math/big on values across 2^52 (where they leave Lua numbers) and up
// to int64's ends.
func TestBucketsArithmetic(t *testing.T) {
	sc := arithScript(t)
	c := redis.NewClient(&redis.Options{Addr: harness.SharedRedis(t).Addr()})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := rand.New(rand.NewPCG(1, 2))
	vs := int64s(r)
	fits := func(x *big.Int) bool { return x.IsInt64() }
	type check struct {
		op   string
		a, b int64
		want string
	}
	var checks []check
	for _, a := range vs {
		checks = append(checks, check{"=", a, 0, fmt.Sprint(a)})
		for _, b := range vs {
			if r.IntN(4) != 0 {
				continue // a quarter of the pairs keeps the test quick
			}
			A, B := big.NewInt(a), big.NewInt(b)
			if x := new(big.Int).Add(A, B); fits(x) {
				checks = append(checks, check{"+", a, b, x.String()})
			}
			if x := new(big.Int).Sub(A, B); fits(x) {
				checks = append(checks, check{"-", a, b, x.String()})
			}
			lt := "0"
			if a < b {
				lt = "1"
			}
			checks = append(checks, check{"<", a, b, lt})
			if a < 0 || b < 0 {
				continue
			}
			if x := new(big.Int).Mul(A, B); fits(x) {
				checks = append(checks, check{"*", a, b, x.String()})
			}
			if b > 0 {
				checks = append(checks, check{"/", a, b, fmt.Sprint(a/b, " ", a%b)})
				q := a / b
				if a%b != 0 {
					q++
				}
				checks = append(checks, check{"c", a, b, fmt.Sprint(q)})
			}
		}
	}
	for lo := 0; lo < len(checks); lo += 3000 {
		part := checks[lo:min(lo+3000, len(checks))]
		args := make([]any, 0, 3*len(part))
		for _, ch := range part {
			args = append(args, ch.op, ch.a, ch.b)
		}
		got, err := sc.Run(ctx, c, nil, args...).StringSlice()
		if err != nil {
			t.Fatal(err)
		}
		for i, ch := range part {
			want := ch.want
			if ch.op == "=" {
				// A value is a Lua number exactly when |a| < 2^52.
				kind := "table"
				if ch.a > -(1<<52) && ch.a < 1<<52 {
					kind = "number"
				}
				want += " " + kind
			}
			if got[i] != want {
				t.Errorf("%d %s %d = %s, want %s", ch.a, ch.op, ch.b, got[i], want)
			}
		}
	}
	t.Logf("%d checks", len(checks))
}
