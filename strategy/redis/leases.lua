-- Applies the ops of one (namespace, key) of a clustersync.LeaseStore
-- call, in order, as sync.ApplyLease does. KEYS: the set S, a sorted set
-- whose scores are all 0 (so ordered by member bytes), and the index I, a
-- hash. A live lease is member 'l' .. t .. id of S and field 'l' .. id = t
-- of I, t its expiry; a remembered release is 'r' .. t .. id and
-- 'r' .. id = t, t its until. Every t is a leaseTime (leases.go): 16
-- hexadecimal digits that sort as the int64 times do, so a range of S by
-- member is a range of time, and comparisons are exact (no double holds
-- a Unix ns exactly; later compares two 32-bit halves).
--
-- All ops see one now: what is at or before it is dropped once, first.
-- A write adds the new member or field before it removes the old one, so
-- neither key empties (and comes back without an expiry) within a call.
-- Each write of an op's time moves both keys' expiry (PEXPIREAT, Unix ms
-- rounded up, from the client) to at least that time: the keys outlive
-- every time they hold, and an expiry never moves earlier.

local S, I = KEYS[LEASES_KEYS_SET], KEYS[LEASES_KEYS_INDEX]
local now, after = ARGV[LEASES_HEAD_NOW], ARGV[LEASES_HEAD_AFTER]

-- later reports a > b for two leaseTimes.
local function later(a, b)
  if a == b then return false end
  local x, y = tonumber(sub(a, 1, 8), 16), tonumber(sub(b, 1, 8), 16)
  if x ~= y then return x > y end
  return tonumber(sub(a, 9), 16) > tonumber(sub(b, 9), 16)
end

-- Drop the live leases and releases at or before now: the members below
-- 'l' .. after and 'r' .. after.
for _, k in ipairs({'l', 'r'}) do
  local lo, hi = '[' .. k, '(' .. k .. after
  local old = call('ZRANGE', S, lo, hi, 'BYLEX')
  if #old > 0 then
    for j = 1, #old, 1000 do -- unpack takes a bounded number of values
      local fs = {}
      for x = j, math.min(j + 999, #old) do fs[#fs + 1] = k .. sub(old[x], 18) end
      call('HDEL', I, unpack(fs))
    end
    call('ZREMRANGEBYLEX', S, lo, hi)
  end
end

local held = call('ZLEXCOUNT', S, '[l', '(m')
local first -- the earliest live expiry; nil: to be read, false: none
local exp = 0 -- the latest PEXPIREAT asked

-- set moves id's time of kind k ('l' or 'r') from old (false: none) to
-- t, which differs from old, and keeps first known where it can.
local function set(k, id, old, t)
  call('ZADD', S, 0, k .. t .. id)
  call('HSET', I, k .. id, t)
  if old then call('ZREM', S, k .. old .. id) end
  if k ~= 'l' or first == nil then return end
  if not first or later(first, t) then
    first = t
  elseif old == first then
    first = nil -- the earliest moved later: another may be earlier now
  end
end

-- release releases id (live: its expiry, released: its release's
-- until, each false when none) as of until t, and reports whether it
-- was live and whether t was stored. The release is remembered until the
-- latest of t, the lease's expiry and an earlier release's, written
-- before the live lease is removed.
local function release(id, t, live, released)
  local ok, wrote = false, false
  local u = t
  if live and later(live, u) then u = live end
  if released and later(released, u) then u = released end
  if u ~= released and later(u, now) then
    set('r', id, released, u)
    wrote = u == t
  end
  if live then
    call('ZREM', S, 'l' .. live .. id)
    call('HDEL', I, 'l' .. id)
    held, ok = held - 1, true
    if live == first then first = nil end
  end
  return ok, wrote
end

local out = {}
for i = 1, (#ARGV - LEASES_HEAD_WIDTH) / LEASES_OP_WIDTH do
  local a = LEASES_HEAD_WIDTH + (i - 1) * LEASES_OP_WIDTH
  local kind, id, t = ARGV[a + LEASES_OP_KIND], ARGV[a + LEASES_OP_LEASE], ARGV[a + LEASES_OP_EXPIRY]
  local ok, wrote = kind == 'c', false -- wrote: t was stored
  if not ok then
    local r = call('HMGET', I, 'l' .. id, 'r' .. id)
    local live, released = r[1], r[2]
    local valid = later(t, now)
    if kind == 'a' or kind == 'p' then
      if valid and not released then
        if live then
          ok = true -- a replay, or a put of a live id: the later expiry
          if later(t, live) then set('l', id, live, t) wrote = true end
        elseif kind == 'p' or held < tonumber(ARGV[a + LEASES_OP_LIMIT]) then
          ok = true
          set('l', id, false, t)
          held, wrote = held + 1, true
        end
      end
    elseif kind == 'r' then
      ok, wrote = release(id, t, live, released)
    elseif kind == 'x' then
      -- Clear: every live id released as 'r' releases one.
      local ms = call('ZRANGE', S, '[l', '(m', 'BYLEX')
      for x = 1, #ms do
        local lid = sub(ms[x], 18)
        local _, w = release(lid, t, sub(ms[x], 2, 17), call('HGET', I, 'r' .. lid))
        ok, wrote = true, wrote or w
      end
    elseif kind == 'n' then
      if valid and live then
        ok = true
        if t ~= live then set('l', id, live, t) wrote = true end
      end
    end
  end
  if wrote then exp = math.max(exp, tonumber(ARGV[a + LEASES_OP_EXPIRE_AT])) end -- ms: exact in a double
  if first == nil then
    first = false
    if held > 0 then first = sub(call('ZRANGE', S, '[l', '(m', 'BYLEX', 'LIMIT', 0, 1)[1], 2, 17) end
  end
  local o = (i - 1) * LEASES_REPLY_WIDTH
  out[o + LEASES_REPLY_GRANTED], out[o + LEASES_REPLY_HELD], out[o + LEASES_REPLY_NEXT] = ok and 1 or 0, held, first or ''
end

-- S and I hold one entry per lease or release each, so they are created,
-- emptied and given an expiry together: S's stands for both.
if exp > 0 then
  local cur = call('PEXPIRETIME', S) -- -1: none, -2: no key
  if cur == -1 or (cur >= 0 and cur < exp) then
    local e = format('%d', exp)
    call('PEXPIREAT', S, e)
    call('PEXPIREAT', I, e)
  end
end
return out
