package redis

import "github.com/redis/go-redis/v9"

// The Lua scripts. On a cluster or ring every call takes only keys of one
// hash tag (see Store), so each is valid on Redis Cluster.
//
// A window's rows live in the hash of the key's bucket for that window
// (see keys.go). For key k, field "=" + k holds the sum of all totals and
// field "+<len(inc)>:<inc>:" + k holds incarnation inc's row as
// "<total>:<version>:<expire-at ms>" (canonical decimal int64; the expiry
// is 0 when the row has none). The sum is written in the same HSET as the
// row, so a window's sum, or the others' sum (sum minus one's own), is
// one HMGET however many incarnations wrote it — and one HMGET reads or
// one HSET writes the rows of many keys of a bucket.
//
// Lua numbers are doubles, exact only up to 2^53: versions are compared
// exactly as decimal strings, the sum is updated in Lua only while every
// number involved is below 10^15 (else by HINCRBY, exact int64), and sums
// go back to Go as strings or integers.

// luaLib is the helpers the writing scripts start with. Globals are
// copied into locals once.
const luaLib = `
local find, sub, byte, format, tonumber, call, unpack = string.find, string.sub, string.byte, string.format, tonumber, redis.call, unpack

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

-- later returns the later of two expiries (Unix ms, '0' for none).
local function later(a, b)
  if a == '0' then return b end
  if b == '0' or tonumber(a) >= tonumber(b) then return a end
  return b
end

-- A hash's values stay short, so Redis may keep it as a listpack, whose
-- field lookups scan the whole hash: slow once a bucket holds hundreds of
-- fields. A new hash gets this one long value, which makes Redis store it
-- as a real hash table (with the default hash-max-listpack-value of 64).
local WIDE = '................................................................................' -- 80 bytes, a constant of the compiled script

-- step decides one row. t, v, exp: the row sent; s, old: the key's sum and
-- inc's row as stored (false for none). It returns the row to store and
-- the new sum (nil when nothing changes or the sum needs HINCRBY, big
-- true), old's total, and the expiry this row asks of the hash.
local function step(t, v, exp, s, old)
  local ot, oe = '0', nil
  if old then
    local oa = find(old, ':', 1, true)
    local ob = find(old, ':', oa + 1, true)
    ot, oe = sub(old, 1, oa - 1), sub(old, ob + 1)
    if not gt(v, sub(old, oa + 1, ob - 1)) then
      if exp ~= oe then return nil, nil, false, ot, exp end
      return nil, nil, false, ot, '0'
    end
  elseif v == '0' and t == '0' then
    -- A window its incarnation never stored: absent already reads 0.
    return nil, nil, false, '0', '0'
  end
  local e = '0'
  if exp ~= oe then e = exp end
  local row = t .. ':' .. v .. ':' .. exp
  if old and s and ot == t then return row, nil, false, ot, e end
  local os = s or '0'
  if #os <= 15 and #ot <= 15 and #t <= 15 then
    return row, format('%d', tonumber(os) - tonumber(ot) + tonumber(t)), false, ot, e
  end
  return row, nil, true, ot, e
end

-- bigSum moves field sf of h by t − ot with HINCRBY (exact int64) and
-- returns the new sum as stored.
local function bigSum(h, sf, t, ot)
  call('HINCRBY', h, sf, t)
  if byte(ot, 1) == 45 then
    call('HINCRBY', h, sf, sub(ot, 2))
  elseif ot ~= '0' then
    call('HINCRBY', h, sf, '-' .. ot)
  end
  return call('HGET', h, sf)
end

-- expire moves h's expiry to e (Unix ms, '0' for nothing to do) unless it
-- already expires later; cur is its PEXPIRETIME before the writes.
local function expire(h, e, cur)
  if e == '0' then return end
  if cur < 0 or cur < tonumber(e) then call('PEXPIREAT', h, e) end
end

-- put decides and writes one row (t, v, exp) of the key with sum field sf
-- and row field rf into hash h; r is what HMGET h sf rf read. It returns
-- the row's old total.
local function put(h, sf, rf, t, v, exp, r)
  local row, sum, big, ot, e = step(t, v, exp, r[1], r[2])
  if not row and e == '0' then return ot end
  local cur = 0
  if e ~= '0' then cur = call('PEXPIRETIME', h) end
  if row then
    if big then
      call('HSET', h, rf, row)
      bigSum(h, sf, t, ot)
    elseif sum then
      if cur == -2 then call('HSET', h, rf, row, sf, sum, '~', WIDE) else call('HSET', h, rf, row, sf, sum) end
    else
      call('HSET', h, rf, row)
    end
  elseif cur == -2 then
    return ot
  end
  expire(h, e, cur)
  return ot
end
`

// pushScript pushes rows and reads back, per row, the key's sum and inc's
// total as they were before the write (their difference is the others'
// sum, which inc's write does not change).
// KEYS = hashes. ARGV = inc's row prefix, then per row 5 values: the index
// of its hash in KEYS, key, total, version, expiry (Unix ms, 0 for none).
// Rows of one hash are consecutive; a key appears once per hash (all reads
// come before the writes). Per hash it sends
// one HMGET and at most one HSET (plus PEXPIRETIME and PEXPIREAT when a
// row asks for a later expiry than it had).
var pushScript = newScript(luaLib + `
local rp = ARGV[1]
local n = (#ARGV - 1) / 5
local out, fs, w = {}, {}, {}
local i = 1
while i <= n do
  local hi = ARGV[5 * i - 3]
  local j, nf = i, 0
  while j <= n and ARGV[5 * j - 3] == hi do
    local k = ARGV[5 * j - 2]
    fs[nf + 1], fs[nf + 2] = '=' .. k, rp .. k
    nf = nf + 2
    j = j + 1
  end
  local h = KEYS[tonumber(hi)]
  local r = call('HMGET', h, unpack(fs, 1, nf))
  local m, e = 0, '0'
  for x = i, j - 1 do
    local a = 5 * x - 3
    local y = 2 * (x - i)
    local sf, rf = fs[y + 1], fs[y + 2]
    local s, old = r[y + 1], r[y + 2]
    local row, sum, big, ot, ex = step(ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], s, old)
    out[2 * x - 1], out[2 * x] = s or '0', ot
    e = later(e, ex)
    if row then
      if big then
        if m > 0 then call('HSET', h, unpack(w, 1, m)) m = 0 end
        call('HSET', h, rf, row)
        sum = bigSum(h, sf, ARGV[a + 2], ot)
      else
        w[m + 1], w[m + 2] = rf, row
        m = m + 2
        if sum then
          w[m + 1], w[m + 2] = sf, sum
          m = m + 2
        end
      end
    end
  end
  if e ~= '0' then
    -- A row new to the hash (or moving its expiry): maybe a new hash.
    local cur = call('PEXPIRETIME', h)
    if cur == -2 and m > 0 then
      w[m + 1], w[m + 2] = '~', WIDE
      m = m + 2
    end
    if m > 0 then call('HSET', h, unpack(w, 1, m)) end
    if cur ~= -2 or m > 0 then expire(h, e, cur) end
  elseif m > 0 then
    call('HSET', h, unpack(w, 1, m))
  end
  i = j
end
return out
`)

// keyScript is pushScript for the windows of one key, each in its own
// hash (a synchronous call): one HMGET and at most one HSET per window.
// Its own Lua is most of what a synchronous call costs the server beyond
// the commands, and every C function it calls or string it builds counts,
// so the client sends the fields and rows ready-made and the usual cases
// take short paths: a row stored exactly as sent (a closed previous
// window) is only read; a row stored exactly as the client's Acked hint
// says (the row it last stored, with the same expiry; the client sends it
// only with a newer version and totals below 10^15) is replaced by one
// HSET of row and sum, with no parsing. Anything else — a new row, an
// older version, a stale hint, big numbers — goes through put, whose
// helpers are built only then.
// KEYS = the windows' hashes. ARGV = the key's sum field and inc's row
// field, then per window: row ("<total>:<version>:<expiry>"), total,
// expiry, the hinted stored row (empty for none), its total. Returns what
// pushScript returns.
var keyScript = newScript(`
local function lib()` + luaLib + `
  return put
end
local call, sub, format = redis.call, string.sub, string.format
local put
local sf, rf = ARGV[1], ARGV[2]
local out = {}
for i = 1, #KEYS do
  local h, a = KEYS[i], 5 * i - 2
  local row, t, exp = ARGV[a], ARGV[a + 1], ARGV[a + 2]
  local r = call('HMGET', h, sf, rf)
  local s, old = r[1], r[2]
  out[2 * i - 1] = s or '0'
  if old == row then
    out[2 * i] = t
  elseif old == ARGV[a + 3] and s and #s <= 15 then
    -- The client hints only totals below 10^15, and s has at most 15
    -- characters: the arithmetic is exact in doubles.
    local ot = ARGV[a + 4]
    call('HSET', h, rf, row, sf, format('%d', s - ot + t))
    out[2 * i] = ot
  else
    put = put or lib()
    out[2 * i] = put(h, sf, rf, t, sub(row, #t + 2, #row - #exp - 1), exp, r)
  end
end
return out
`)

// allowScript decides an AllowRequest atomically. Like keyScript it
// takes fields and rows ready-made and builds its helpers only when a
// row needs them: a previous window stored exactly as sent is only read,
// and a current window stored exactly as the Acked hint says is replaced
// by one HSET of row and sum.
// KEYS = per limit: the hash of the current window, of the previous one.
// ARGV = the key's sum field, inc's row field, cost, count_rejected ('1'
// or '0'), then per limit 13 values: limit, size, pos (At − Cur.Start),
// cur total, cur total with the cost counted, cur version, cur expiry,
// prev total, prev version, prev expiry, the prev row as sent, the
// hinted stored cur row (empty for none), its total (the client hints
// only totals below 10^15).
// Returns allowed ('1' or '0'), then per limit the sum and inc's stored
// total of the current window, then of the previous one, as read before
// the writes.
var allowScript = newScript(`
local function lib()` + luaLib + `
  return put, total
end
local call, format = redis.call, string.format
local put, total
local sf, rf = ARGV[1], ARGV[2]
local cost = ARGV[3] + 0
local countRejected = ARGV[4] == '1'
local n = #KEYS / 2
local out = {'0'}
local reads = {}
local allowed = true
-- own returns inc's stored total in row, which may equal known (whose
-- total is kt).
local function own(row, known, kt)
  if row == known then return kt end
  if not row then return '0' end
  if not put then put, total = lib() end
  return total(row)
end
for l = 1, n do
  local a = 5 + 13 * (l - 1)
  local rc = call('HMGET', KEYS[2 * l - 1], sf, rf)
  local rp = call('HMGET', KEYS[2 * l], sf, rf)
  reads[2 * l - 1], reads[2 * l] = rc, rp
  local sc, sp = rc[1] or '0', rp[1] or '0'
  local oc, op = own(rc[2], ARGV[a + 11], ARGV[a + 12]), own(rp[2], ARGV[a + 10], ARGV[a + 7])
  out[4 * l - 2], out[4 * l - 1], out[4 * l], out[4 * l + 1] = sc, oc, sp, op
  local cur = ARGV[a + 3] + (sc - oc)
  local prev = ARGV[a + 7] + (sp - op)
  local size = ARGV[a + 1] + 0
  local rate = cur
  if prev ~= 0 then rate = cur + prev * (size - ARGV[a + 2]) / size end
  if rate + cost > ARGV[a] + 0 then allowed = false end
end
local counted = allowed or countRejected
for l = 1, n do
  local a = 5 + 13 * (l - 1)
  local rp = reads[2 * l]
  -- A prev row stored as sent, or never stored and sent as 0 with
  -- version 0, needs no write.
  if rp[2] ~= ARGV[a + 10] and (rp[2] or ARGV[a + 7] ~= '0' or ARGV[a + 8] ~= '0') then
    if not put then put, total = lib() end
    put(KEYS[2 * l], sf, rf, ARGV[a + 7], ARGV[a + 8], ARGV[a + 9], rp)
  end
  local t = ARGV[a + 3]
  if counted then t = ARGV[a + 4] end
  local rc = reads[2 * l - 1]
  if rc[2] == ARGV[a + 11] and rc[1] and #rc[1] <= 15 then
    call('HSET', KEYS[2 * l - 1], rf, t .. ':' .. ARGV[a + 5] .. ':' .. ARGV[a + 6], sf, format('%d', rc[1] - ARGV[a + 12] + t))
  else
    if not put then put, total = lib() end
    put(KEYS[2 * l - 1], sf, rf, t, ARGV[a + 5], ARGV[a + 6], rc)
  end
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
