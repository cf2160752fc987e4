-- Pushes rows and replies, per row, the key's sum and the incarnation's
-- total as they were before the write (their difference is the others'
-- sum, which the write does not change), or only the number of rows when
-- the caller does not read them (a plain Push). The rows come in groups
-- of one hash, version and expiry (pushGroup in layout.go). Per group it
-- sends one HMGET and at most one HSET (plus PEXPIRETIME and PEXPIREAT
-- when a row asks for a later expiry than it had). A key appears at most
-- once per group: all reads come before the writes.
local L = lib()
local step, later, bigSum, expire, WIDE = L.step, L.later, L.bigSum, L.expire, L.WIDE
local ARGV = ARGV -- a local, not a global, in the loops below
local rp = ARGV[PUSH_HEAD_ROW_PREFIX]
local reply = ARGV[PUSH_HEAD_REPLY] == '1'
local out, fs, w, wk = {}, {}, {}, {}
-- a is where the group's head starts, o where its first reply goes, n
-- the rows so far.
local a, o, n = 0, 0, 0
while PUSH_HEAD_WIDTH + a < #ARGV do
  local g = PUSH_HEAD_WIDTH + a
  local h, m = KEYS[tonumber(ARGV[g + PUSH_GROUP_HASH])], tonumber(ARGV[g + PUSH_GROUP_ROWS])
  local v, gex = ARGV[g + PUSH_GROUP_VERSION], ARGV[g + PUSH_GROUP_EXPIRE]
  local tail = ':' .. gex
  g = g + PUSH_GROUP_WIDTH - PUSH_ROW_WIDTH -- row y's fields are at g + y * PUSH_ROW_WIDTH
  for y = 1, m do
    local k = ARGV[g + y * PUSH_ROW_WIDTH + PUSH_ROW_KEY]
    fs[2 * y - 1], fs[2 * y] = '=' .. k, rp .. k
  end
  local lg, pre = logOf(h)
  local r = call('HMGET', h, unpack(fs, 1, 2 * m))
  local nw, nk, e = 0, 0, '0'
  for y = 1, m do
    local b = g + y * PUSH_ROW_WIDTH
    local sf, rf = fs[2 * y - 1], fs[2 * y]
    local s, old = r[2 * y - 1], r[2 * y]
    local t, ex = ARGV[b + PUSH_ROW_TOTAL], gex
    local row, sum, big
    local ot, qs = quick(t, v, tail, s, old)
    if ot then
      row, sum, big, ex = t .. ':' .. v .. tail, qs, false, '0'
    else
      row, sum, big, ot, ex = step(t, v, ex, s, old)
    end
    if reply then
      out[o + ROW_REPLY_SUM], out[o + ROW_REPLY_OWN] = s or '0', ot
      o = o + ROW_REPLY_WIDTH
    end
    if ex ~= '0' then e = later(e, ex) end
    if row then
      nk = nk + 1
      wk[nk] = ARGV[b + PUSH_ROW_KEY]
      if big then
        if nw > 0 then call('HSET', h, unpack(w, 1, nw)) nw = 0 end
        call('HSET', h, rf, row)
        sum = bigSum(h, sf, t, ot)
      else
        w[nw + 1], w[nw + 2] = rf, row
        nw = nw + 2
        if sum then
          w[nw + 1], w[nw + 2] = sf, sum
          nw = nw + 2
        end
      end
    end
  end
  if e ~= '0' then
    -- A row new to the hash (or moving its expiry): maybe a new hash.
    local cur = call('PEXPIRETIME', h)
    if cur == -2 and nw > 0 then
      w[nw + 1], w[nw + 2] = '~', WIDE
      nw = nw + 2
    end
    if nw > 0 then call('HSET', h, unpack(w, 1, nw)) end
    if cur ~= -2 or nw > 0 then expire(h, e, cur) end
  elseif nw > 0 then
    call('HSET', h, unpack(w, 1, nw))
  end
  if nk > 0 then noteKeys(lg, rp, pre, wk, nk) end
  a, n = a + PUSH_GROUP_WIDTH + m * PUSH_ROW_WIDTH, n + m
end
logChanges()
if not reply then return n end
return out
