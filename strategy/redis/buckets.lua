-- Applies one clustersync.BucketStore call: a port, line by line, of
-- sync.ApplyBuckets and of node's advance and take of each kind
-- (node/token.go, leaky.go, fixed.go), so that the answers agree with the
-- reference to the micro-hit and the nanosecond. KEYS[i] is the hash of
-- bucket i (see buckets.go): 'l' its level, 'm' its mark, 'w' (token
-- buckets) its waste, 's' its write count, and per incarnation (field:
-- its row prefix)
-- '<life>:<applied>:<version>'.
--
-- Exactness. Lua numbers are doubles, exact only below 2^53, but marks
-- are Unix ns (~2^60), refill times up to 366 days (~2^55), and lives,
-- totals and levels are int64 too. So every int64 here is a value: a Lua
-- number while |x| < 2^52, else {h, l} meaning h·10^9 + l with
-- 0 <= l < 10^9 (both parts exact). The helpers below take and return
-- values; on numbers they are plain arithmetic, and only a value past
-- 2^52 (a real instant, a long refill time) takes the slow path. A value
-- is canonical (a number iff small), so 0 is always the number 0. What
-- needs a floored division of a signed instant (a fixed bucket's period
-- start) and a new row's state come precomputed from Go.

local fmod = math.fmod
local BASE = 1000000000
local SMALL = 4503599627370496 -- 2^52
local MICRO = 1000000

-- split returns value x as (h, l): x = h·BASE + l, 0 <= l < BASE.
local function split(x)
  if type(x) == 'table' then return x[1], x[2] end
  local l = fmod(x, BASE) -- exact, with x's sign
  local h = (x - l) / BASE
  if l < 0 then return h - 1, l + BASE end
  return h, l
end

-- join returns h·BASE + l (0 <= l < BASE) as a canonical value.
local function join(h, l)
  if h >= -4503600 and h <= 4503600 then -- |h·BASE + l| < 2^53: exact
    local x = h * BASE + l
    if x > -SMALL and x < SMALL then return x end
  end
  return {h, l}
end

local function plus(a, b)
  if type(a) == 'number' and type(b) == 'number' then
    local x = a + b -- |x| < 2^53: exact
    if x > -SMALL and x < SMALL then return x end
    return join(split(x))
  end
  local ah, al = split(a)
  local bh, bl = split(b)
  local h, l = ah + bh, al + bl
  if l >= BASE then h, l = h + 1, l - BASE end
  return join(h, l)
end

local function negate(a)
  if type(a) == 'number' then return -a end
  if a[2] == 0 then return join(-a[1], 0) end
  return join(-a[1] - 1, BASE - a[2])
end

local function minus(a, b) return plus(a, negate(b)) end

local function less(a, b)
  if type(a) == 'number' and type(b) == 'number' then return a < b end
  local ah, al = split(a)
  local bh, bl = split(b)
  return ah < bh or (ah == bh and al < bl)
end

local function same(a, b) return not less(a, b) and not less(b, a) end

-- multiples returns b·2^i and 2^i for i = 0, 1, … while b·2^i <= a, the
-- steps of a binary long division or multiplication.
local function multiples(a, b)
  local ms, ps = {b}, {1}
  while true do
    local m = plus(ms[#ms], ms[#ms])
    if less(a, m) then return ms, ps end
    ms[#ms + 1], ps[#ps + 1] = m, plus(ps[#ps], ps[#ps])
  end
end

-- divmod returns ⌊a/b⌋ and a mod b, for a >= 0 and b > 0.
local function divmod(a, b)
  if not less(0, b) then error('buckets: division by ' .. tostring(b)) end
  if type(a) == 'number' and type(b) == 'number' then
    local r = fmod(a, b) -- exact
    return (a - r) / b, r -- a − r is a multiple of b: exact
  end
  local ms, ps = multiples(a, b)
  local q, r = 0, a
  for i = #ms, 1, -1 do
    if not less(r, ms[i]) then r, q = minus(r, ms[i]), plus(q, ps[i]) end
  end
  return q, r
end

-- times returns a·b, for a, b >= 0 whose product is an int64.
local function times(a, b)
  if type(a) == 'number' and type(b) == 'number' then
    local x = a * b -- exact when the product is below 2^52
    if x < SMALL then return x end
  end
  local ps = multiples(a, 1) -- the powers of 2 up to a
  local ms = {b} -- b times each
  for i = 2, #ps do ms[i] = plus(ms[i - 1], ms[i - 1]) end
  local x, r = 0, a
  for i = #ps, 1, -1 do
    if not less(r, ps[i]) then r, x = minus(r, ps[i]), plus(x, ms[i]) end
  end
  return x
end

-- ceildiv returns ⌈a/b⌉, for a >= 0 and b > 0.
local function ceildiv(a, b)
  local q, r = divmod(a, b)
  if r ~= 0 then return plus(q, 1) end
  return q
end

-- num parses a canonical decimal int64.
local function num(s)
  if #s <= 15 then return tonumber(s) end
  local neg_ = byte(s, 1) == 45
  local d = s
  if neg_ then d = sub(s, 2) end
  local x = join(tonumber(sub(d, 1, -10)), tonumber(sub(d, -9)))
  if neg_ then return negate(x) end
  return x
end

-- str formats a value as a canonical decimal int64.
local function str(x)
  if type(x) == 'number' then return format('%d', x) end
  local h, l = x[1], x[2]
  if h >= 0 then return format('%d%09d', h, l) end
  if l == 0 then return format('-%d000000000', -h) end
  return format('-%d%09d', -h - 1, BASE - l) -- |x| >= 2^52: -h − 1 > 0
end

-- ---- the kinds: node's advance and take ---------------------------------
--
-- A bucket b holds kind, A, B, C and strict (its BucketSpec) and its
-- state v (level) and m (mark). t is a time; ws, for a fixed bucket, the
-- start of t's period.

-- advance brings b's state up to t and returns the time used: a t before
-- the mark counts as the mark, since time never moves backwards.
local function advance(b, t, ws)
  if b.kind == 't' then
    -- Whole refills since the mark, capped at max; the mark moves by
    -- as many refill times, keeping the progress towards the next. A
    -- full bucket's mark follows the time, on the refill grid (whole
    -- refill times since the epoch). w becomes what the cap cut off of
    -- the refill at the new mark.
    if less(t, b.m) then return b.m end
    local full = not less(b.v, b.A)
    local n, r = divmod(minus(t, b.m), b.B)
    if n ~= 0 then
      b.w = b.C
      if not full then
        local k = ceildiv(minus(b.A, b.v), b.C)
        if less(k, n) then
          b.v = b.A
        elseif same(n, k) then
          -- Full with the last refill: the cap cut off its excess.
          b.w = minus(times(k, b.C), minus(b.A, b.v))
          b.v = b.A
        else
          b.v = plus(b.v, times(n, b.C))
          b.w = 0
        end
      end
      b.m = minus(t, r) -- mark + n·refill
    end
    if not less(b.v, b.A) then
      local g = t
      if less(0, t) then
        local _, x = divmod(t, b.B)
        g = minus(t, x)
      end
      if not same(g, b.m) then
        -- A grid point after a mark the bucket was full at had all of
        -- its refill cut off; of any other, nothing is known.
        b.w = 0
        if full and less(b.m, g) then b.w = b.C end
        b.m = g
      end
    end
    return t
  elseif b.kind == 'l' then
    -- Whole drips since the mark each drain a drop; an empty bucket's
    -- mark follows the time, on the drip grid (whole drips since the
    -- epoch).
    if less(t, b.m) then t = b.m end
    if less(0, b.v) then
      local n, r = divmod(minus(t, b.m), b.C)
      if less(n, ceildiv(b.v, MICRO)) then
        b.v = minus(b.v, times(n, MICRO))
        b.m = minus(t, r) -- mark + n·drip
      else
        b.v = 0
      end
    end
    if b.v == 0 then
      b.m = t
      if less(0, t) then
        local _, r = divmod(t, b.C)
        b.m = minus(t, r)
      end
    end
    return t
  end
  -- Fixed: a new period starts afresh.
  if less(t, b.m) then return b.m end
  if not less(minus(t, b.m), b.A) then b.v, b.m = 0, ws end
  return t
end

-- take applies a take of n at t (ws: t's period start) to b and returns
-- whether b admits it and what it consumed.
local function take(b, t, ws, n)
  local late = b.kind == 't' and less(t, b.m)
  t = advance(b, t, ws)
  if late and less(0, n) then
    -- Made before the last refill and admitted: taken first, it leaves
    -- room for what the cap cut off of that refill.
    local back = n
    if less(b.w, back) then back = b.w end
    if not less(plus(b.v, back), n) then b.v, b.w = plus(b.v, back), minus(b.w, back) end
  end
  local before = b.v
  if b.kind == 't' then
    local ok = not less(before, n)
    if less(0, n) then
      -- A refused take empties the bucket; one in debt stays in debt.
      local v, floor = minus(before, n), before
      if less(0, floor) then floor = 0 end
      if less(v, floor) then v = floor end
      b.v = v
      if b.strict and not less(0, v) then b.m, b.w = t, 0 end
    end
    return ok, minus(before, b.v)
  end
  local limit = b.A -- leaky: size
  if b.kind == 'f' then limit = b.B end
  local after = plus(before, n)
  if less(limit, after) then return false, 0 end
  b.v = after
  return true, n
end

-- ---- the call: sync.ApplyBuckets ----------------------------------------

local inc = ARGV[BUCKETS_HEAD_INC_FIELD]
local at, n = num(ARGV[BUCKETS_HEAD_AT]), num(ARGV[BUCKETS_HEAD_TAKE])
local bs = {}
local replays, replayOK = 0, true
for i = 1, #KEYS do
  local a = BUCKETS_HEAD_WIDTH + (i - 1) * BUCKETS_CALL_WIDTH
  local arg = function(f) return num(ARGV[a + f]) end
  local b = {kind = ARGV[a + BUCKETS_CALL_KIND], A = arg(BUCKETS_CALL_A), B = arg(BUCKETS_CALL_B),
    C = arg(BUCKETS_CALL_C), strict = ARGV[a + BUCKETS_CALL_STRICT] == '1', a = a}
  local r = call('HMGET', KEYS[i], 'l', 'm', 's', inc, 'w')
  -- A new token bucket has been full for ever: the cap cut off all of
  -- its last refill (a row written without 'w' knows of no waste).
  local w0 = 0
  if b.kind == 't' then w0 = b.C end
  if r[2] then
    b.v, b.m, b.seq, b.w = num(r[1]), num(r[2]), tonumber(r[3]), 0
    if r[5] then b.w = num(r[5]) end
  else
    b.v, b.m, b.seq, b.w = arg(BUCKETS_CALL_INIT_LEVEL), arg(BUCKETS_CALL_INIT_MARK), 0, w0
    b.changed = true
  end
  -- The incarnation's record: life, applied, version.
  b.life, b.applied, b.version = 0, 0, 0
  if r[4] then
    local x = find(r[4], ':', 1, true)
    local y = find(r[4], ':', x + 1, true)
    b.life, b.applied, b.version = num(sub(r[4], 1, x - 1)), num(sub(r[4], x + 1, y - 1)), num(sub(r[4], y + 1))
  end
  local life, total, version = arg(BUCKETS_CALL_LIFE), arg(BUCKETS_CALL_TOTAL), arg(BUCKETS_CALL_VERSION)
  b.callLife = life
  if less(life, b.life) or (same(life, b.life) and less(version, b.version)) then
    -- Late: a newer call of this incarnation went first.
    replays, replayOK = replays + 1, false
  elseif same(life, b.life) and same(version, b.version) then
    replays = replays + 1
    replayOK = replayOK and not less(minus(b.applied, total), n)
  else
    if less(b.life, life) then b.life, b.applied = life, 0 end
    if less(b.applied, total) then
      -- Catch up: BucketSpec.Force at max(ApplyAt, 0). Tokens taken
      -- before the last refill get back what the cap cut off of it.
      local d = minus(total, b.applied)
      local ft = arg(BUCKETS_CALL_FORCE_AT)
      local late = less(ft, b.m)
      advance(b, ft, arg(BUCKETS_CALL_FORCE_START))
      if b.kind == 't' then
        if late then
          local back = d
          if less(b.w, back) then back = b.w end
          b.w, d = minus(b.w, back), minus(d, back)
        end
        b.v = minus(b.v, d)
      else
        b.v = plus(b.v, d)
      end
      b.applied = total
    end
    if ARGV[a + BUCKETS_CALL_RESET] == '1' then
      -- A reset: a new bucket's state at the call's time.
      b.v, b.m, b.w = arg(BUCKETS_CALL_RESET_LEVEL), arg(BUCKETS_CALL_RESET_MARK), w0
    end
    b.version = version
    b.record, b.changed = true, true
  end
  local exp = ARGV[a + BUCKETS_CALL_EXPIRE]
  if exp ~= '0' then
    local cur = call('PEXPIRETIME', KEYS[i]) -- -2: none yet, -1: no expiry
    if cur < 0 or cur < tonumber(exp) then b.expire, b.changed = exp, true end
  end
  b.bv, b.bm, b.bw = b.v, b.m, b.w -- Before
  bs[i] = b
end

-- node.TakeBuckets: all or none; a bucket that refuses keeps the state
-- its refusal gives it, one that would admit is left as it was.
local allowed = replayOK
if replays == 0 then
  allowed = true
  for i = 1, #bs do
    local b = bs[i]
    local ws = 0
    if b.kind == 'f' then ws = num(ARGV[b.a + BUCKETS_CALL_AT_START]) end
    b.ok, b.used = take(b, at, ws, n)
    allowed = allowed and b.ok
  end
  for i = 1, #bs do
    local b = bs[i]
    if same(n, 0) then
      -- A take of nothing leaves the state where it was: a later
      -- catch-up applies from its own time (sync.ApplyBuckets).
      b.v, b.m, b.w = b.bv, b.bm, b.bw
    elseif allowed or not b.ok then
      if b.used ~= 0 or not same(b.v, b.bv) or not same(b.m, b.bm) or not same(b.w, b.bw) then
        b.applied, b.changed = plus(b.applied, b.used), true
      end
    else
      b.v, b.m, b.w = b.bv, b.bm, b.bw
    end
  end
elseif replays < #bs then
  allowed = false -- a call partly replayed decides nothing
end

local out = {}
out[BUCKETS_REPLY_HEAD_ALLOWED] = '0'
if allowed then out[BUCKETS_REPLY_HEAD_ALLOWED] = '1' end
for i = 1, #bs do
  local b, h = bs[i], KEYS[i]
  if b.changed then
    b.seq = b.seq + 1
    local seq = format('%d', b.seq) -- canonical decimal, like the fields str writes
    local fields = {'l', str(b.v), 'm', str(b.m), 's', seq}
    if b.kind == 't' then
      fields[#fields + 1] = 'w'
      fields[#fields + 1] = str(b.w)
    end
    if b.record then
      fields[#fields + 1] = inc
      fields[#fields + 1] = str(b.life) .. ':' .. str(b.applied) .. ':' .. str(b.version)
    end
    call('HSET', h, unpack(fields))
  end
  if b.expire then call('PEXPIREAT', h, b.expire) end
  local o = BUCKETS_REPLY_HEAD_WIDTH + (i - 1) * BUCKETS_REPLY_WIDTH
  out[o + BUCKETS_REPLY_BEFORE_LEVEL], out[o + BUCKETS_REPLY_BEFORE_MARK] = str(b.bv), str(b.bm)
  out[o + BUCKETS_REPLY_AFTER_LEVEL], out[o + BUCKETS_REPLY_AFTER_MARK] = str(b.v), str(b.m)
  out[o + BUCKETS_REPLY_BEFORE_WASTE], out[o + BUCKETS_REPLY_AFTER_WASTE] = str(b.bw), str(b.w)
  out[o + BUCKETS_REPLY_APPLIED] = '0'
  if same(b.life, b.callLife) then out[o + BUCKETS_REPLY_APPLIED] = str(b.applied) end
  out[o + BUCKETS_REPLY_SEQ] = format('%d', b.seq)
end
return out
