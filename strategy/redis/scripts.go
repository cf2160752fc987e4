package redis

import "github.com/redis/go-redis/v9"

// The Lua scripts. On a cluster or ring every call takes only keys of one
// hash tag (see Store), so each is valid on Redis Cluster.
//
// Each window is a hash. Field "+<inc>" holds incarnation inc's row as
// "<total>:<version>:<expire-at ms>" (canonical decimal int64; the expiry
// is 0, or empty as written before, when the row has none); field "=" holds the sum of all totals,
// updated in the same HSET as the row. Reading a window's sum, or the
// others' sum (sum minus one's own), is therefore one HMGET however many
// incarnations wrote the window.
//
// Lua numbers are doubles, exact only up to 2^53: versions are compared
// exactly as decimal strings, the sum is updated in Lua only while every
// number involved is below 10^15 (else by HINCRBY, exact int64), and sums
// go back to Go as strings.

// luaLib is the helpers the writing scripts start with. Globals are
// copied into locals once. A row arrives as three arguments (total,
// version, expiry) so only the stored row is parsed; the work per row is
// an HMGET, an HSET when the row is newer, and a few string operations.
const luaLib = `
local SUM = '='
local find, sub, byte, format, tonumber, call = string.find, string.sub, string.byte, string.format, tonumber, redis.call

-- gt reports a > b for canonical decimal int64 strings, exactly.
local function gt(a, b)
  local la, lb = #a, #b
  -- At most 16 characters, not starting with 9: |value| < 9e15 < 2^53.
  if la <= 16 and lb <= 16 and byte(a, 1) < 57 and byte(b, 1) < 57 then
    return tonumber(a) > tonumber(b)
  end
  if a == b then return false end
  local an, bn = byte(a, 1) == 45, byte(b, 1) == 45
  if an ~= bn then return bn end
  if la ~= lb then return (la > lb) ~= an end
  local ha, hb = tonumber(sub(a, 1, la - 9)), tonumber(sub(b, 1, lb - 9))
  if ha ~= hb then return ha > hb end
  return (tonumber(sub(a, la - 8)) > tonumber(sub(b, lb - 8))) ~= an
end

-- total returns the total of a row, '0' for none.
local function total(v)
  if not v then return '0' end
  return sub(v, 1, find(v, ':', 1, true) - 1)
end

-- expire moves k's expiry to exp (Unix ms; '0' for none) unless it already
-- expires later. oe is the expiry the field held before: k expires no
-- earlier than that, so an exp not after it needs no look. fresh says k
-- was just created (it had no sum field), so it has no expiry yet.
local function expire(k, exp, oe, fresh)
  if exp == '0' or exp == oe then return end
  if fresh then
    call('PEXPIREAT', k, exp)
    return
  end
  local e = tonumber(exp)
  if oe and oe ~= '' and tonumber(oe) >= e then return end
  local cur = call('PEXPIRETIME', k)
  if cur == -1 or (cur >= 0 and cur < e) then call('PEXPIREAT', k, exp) end
end

-- put writes the row (total t, version v, expiry exp) into field f of k if
-- v is newer than the version of old (f's stored row, or nil), keeping
-- k's sum, s as stored (or nil). It returns old's total ('0' for none).
-- The first row of a window always writes the sum too, so a window that
-- exists has a sum field. A row of version 0 with total 0 that finds no
-- row is not written: an incarnation that never stored the window sends
-- it so, and an absent row already reads 0.
local function put(k, f, t, v, exp, old, s)
  local ot, oe = '0', nil
  if old then
    local oa = find(old, ':', 1, true)
    local ob = find(old, ':', oa + 1, true)
    ot, oe = sub(old, 1, oa - 1), sub(old, ob + 1)
    if not gt(v, sub(old, oa + 1, ob - 1)) then
      expire(k, exp, oe, false)
      return ot
    end
  elseif v == '0' and t == '0' then
    return '0'
  end
  local row = t .. ':' .. v .. ':' .. exp
  if ot == t and old then
    call('HSET', k, f, row)
  else
    local os = s or '0'
    if #os <= 15 and #ot <= 15 and #t <= 15 then
      call('HSET', k, f, row, SUM, format('%d', tonumber(os) - tonumber(ot) + tonumber(t)))
    else
      call('HSET', k, f, row)
      call('HINCRBY', k, SUM, t)
      if byte(ot, 1) == 45 then
        call('HINCRBY', k, SUM, sub(ot, 2))
      elseif ot ~= '0' then
        call('HINCRBY', k, SUM, '-' .. ot)
      end
    end
  end
  expire(k, exp, oe, not s)
  return ot
end
`

// pushScript: KEYS = windows; ARGV = field ("+" inc), then per key its
// row's total, version and expiry (Unix ms; 0 for none).
// Returns the number of keys.
var pushScript = newScript(luaLib + `
local f = ARGV[1]
for i = 1, #KEYS do
  local k, a = KEYS[i], 3 * i - 1
  local r = call('HMGET', k, SUM, f)
  put(k, f, ARGV[a], ARGV[a + 1], ARGV[a + 2], r[2], r[1])
end
return #KEYS
`)

// pushFetchScript: as pushScript, returning per key the window's sum and
// inc's total as they were before the write (their difference is the
// others' sum, which inc's write does not change).
var pushFetchScript = newScript(luaLib + `
local f = ARGV[1]
local out = {}
for i = 1, #KEYS do
  local k, a = KEYS[i], 3 * i - 1
  local r = call('HMGET', k, SUM, f)
  out[2 * i - 1] = r[1] or '0'
  out[2 * i] = put(k, f, ARGV[a], ARGV[a + 1], ARGV[a + 2], r[2], r[1])
end
return out
`)

// allowScript decides an AllowRequest atomically.
// KEYS = per limit: cur key, prev key.
// ARGV = field ("+" inc), cost, count_rejected ('1' or '0'), then per limit
// 10 values: limit, size, pos (At − Cur.Start), cur total, cur total with
// the cost counted, cur version, cur expiry, prev total, prev version,
// prev expiry.
// Returns allowed ('1' or '0'), then per limit the sum and inc's stored
// total of the current window, then of the previous one, as read before
// the writes.
var allowScript = newScript(luaLib + `
local f = ARGV[1]
local cost = tonumber(ARGV[2])
local countRejected = ARGV[3] == '1'
local n = #KEYS / 2
local out = {'0'}
local reads = {}
local allowed = true
for l = 1, n do
  local a = 4 + 10 * (l - 1)
  local rc = call('HMGET', KEYS[2 * l - 1], SUM, f)
  local rp = call('HMGET', KEYS[2 * l], SUM, f)
  reads[2 * l - 1], reads[2 * l] = rc, rp
  local sc, oc, sp, op = rc[1] or '0', total(rc[2]), rp[1] or '0', total(rp[2])
  out[4 * l - 2], out[4 * l - 1], out[4 * l], out[4 * l + 1] = sc, oc, sp, op
  local cur = tonumber(ARGV[a + 3]) + (tonumber(sc) - tonumber(oc))
  local prev = tonumber(ARGV[a + 7]) + (tonumber(sp) - tonumber(op))
  local size = tonumber(ARGV[a + 1])
  local rate = cur
  if prev ~= 0 then rate = cur + prev * (size - tonumber(ARGV[a + 2])) / size end
  if rate + cost > tonumber(ARGV[a]) then allowed = false end
end
local counted = allowed or countRejected
for l = 1, n do
  local a = 4 + 10 * (l - 1)
  local rp, rc = reads[2 * l], reads[2 * l - 1]
  put(KEYS[2 * l], f, ARGV[a + 7], ARGV[a + 8], ARGV[a + 9], rp[2], rp[1])
  local t = ARGV[a + 3]
  if counted then t = ARGV[a + 4] end
  put(KEYS[2 * l - 1], f, t, ARGV[a + 5], ARGV[a + 6], rc[2], rc[1])
end
if allowed then out[1] = '1' end
return out
`)

// script is a Lua script run by EVALSHA, falling back to EVAL (which also
// caches it on that server) after NOSCRIPT.
type script struct {
	src string
	sha string
}

func newScript(src string) *script {
	return &script{src: src, sha: redis.NewScript(src).Hash()}
}
