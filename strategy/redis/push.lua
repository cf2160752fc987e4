-- Pushes rows and replies, per row, the key's sum and the incarnation's
-- total as they were before the write (their difference is the others'
-- sum, which the write does not change), or only the number of rows when
-- the caller does not read them (a plain Push). Per hash it sends one HMGET and
-- at most one HSET (plus PEXPIRETIME and PEXPIREAT when a row asks for a
-- later expiry than it had). A key appears at most once per hash: all
-- reads come before the writes.
local L = lib()
local step, later, bigSum, expire, WIDE = L.step, L.later, L.bigSum, L.expire, L.WIDE
local rp = ARGV[PUSH_HEAD_ROW_PREFIX]
local reply = ARGV[PUSH_HEAD_REPLY] == '1'
local n = (#ARGV - PUSH_HEAD_WIDTH) / PUSH_ROW_WIDTH
local out, fs, w = {}, {}, {}
local i = 1
while i <= n do
  -- Rows i to j − 1 are those of hash h.
  local hi = ARGV[PUSH_HEAD_WIDTH + (i - 1) * PUSH_ROW_WIDTH + PUSH_ROW_HASH]
  local j, nf = i, 0
  while j <= n do
    local a = PUSH_HEAD_WIDTH + (j - 1) * PUSH_ROW_WIDTH
    if ARGV[a + PUSH_ROW_HASH] ~= hi then break end
    local k = ARGV[a + PUSH_ROW_KEY]
    fs[nf + 1], fs[nf + 2] = '=' .. k, rp .. k
    nf = nf + 2
    j = j + 1
  end
  local h = KEYS[tonumber(hi)]
  local lg, pre = logOf(h)
  local r = call('HMGET', h, unpack(fs, 1, nf))
  local m, e = 0, '0'
  for x = i, j - 1 do
    local a = PUSH_HEAD_WIDTH + (x - 1) * PUSH_ROW_WIDTH
    local y = 2 * (x - i)
    local sf, rf = fs[y + 1], fs[y + 2]
    local s, old = r[y + 1], r[y + 2]
    local t, v, ex = ARGV[a + PUSH_ROW_TOTAL], ARGV[a + PUSH_ROW_VERSION], ARGV[a + PUSH_ROW_EXPIRE]
    local row, sum, big
    local ot, qs = quick(t, v, ex, s, old)
    if ot then
      row, sum, big, ex = t .. ':' .. v .. ':' .. ex, qs, false, '0'
    else
      row, sum, big, ot, ex = step(t, v, ex, s, old)
    end
    if reply then
      local o = (x - 1) * ROW_REPLY_WIDTH
      out[o + ROW_REPLY_SUM], out[o + ROW_REPLY_OWN] = s or '0', ot
    end
    e = later(e, ex)
    if row then
      note(lg, rp, pre, ARGV[a + PUSH_ROW_KEY])
      if big then
        if m > 0 then call('HSET', h, unpack(w, 1, m)) m = 0 end
        call('HSET', h, rf, row)
        sum = bigSum(h, sf, t, ot)
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
logChanges()
if not reply then return n end
return out
