-- What every script starts with, after its layout header.
--
-- A window's rows live in the hash of the key's bucket for that window
-- (see keys.go). For key k, field '=' .. k holds the sum of all totals,
-- and field '+<len(inc)>:<inc>:' .. k holds incarnation inc's row as
-- '<total>:<version>:<expire-at ms>' (canonical decimal int64; the expiry
-- is '0' when the row has none). The sum is written in the same HSET as
-- the row.
--
-- Lua numbers are doubles, exact only up to 2^53: versions are compared
-- exactly as decimal strings, the sum is updated in Lua only while every
-- number involved has at most 15 characters (else by HINCRBY, exact
-- int64), and sums go back to the client as strings.

local find, sub, byte, format, tonumber, call, unpack = string.find, string.sub, string.byte, string.format, tonumber, redis.call, unpack

-- total returns the total of a stored row, '0' for none.
local function total(row)
  if not row then return '0' end
  return sub(row, 1, find(row, ':', 1, true) - 1)
end

-- quick decides the usual row without the helpers of lib: row (total
-- t, version v, expiry exp; tail is ':' .. exp) over old, the
-- incarnation's stored row, with s the key's stored sum. It returns old's
-- total and the new sum — but only when old has the same expiry and an
-- older version of the same length, v has no sign, and the sum and
-- totals are short: then comparing the versions as strings is exact, the
-- hash's expiry stays, and the arithmetic is exact in doubles. Otherwise
-- it returns nil.
local function quick(t, v, tail, s, old)
  if not old or not s or #s > 15 or #t > 15 or byte(v, 1) == 45 then return nil end
  -- old is '<ot>:<ov>' .. tail with #ov == #v exactly when its first
  -- colon sits where these lengths put it and it ends in tail there (its
  -- parts hold no colon).
  local n = #old - #v - #tail - 1 -- #ot
  if n < 1 or n > 15 or byte(old, n + 1) ~= 58 or sub(old, n + #v + 2) ~= tail then return nil end
  if not (v > sub(old, n + 2, n + #v + 1)) then return nil end
  local ot = sub(old, 1, n)
  return ot, format('%d', s - ot + t)
end

-- replace is the usual write of a synchronous call: when quick decides
-- row (total t, version v, expiry exp) over old, it stores the row and
-- the new sum in one HSET of hash h (sum field sf, row field rf) and
-- returns old's total. Otherwise it returns nil and writes nothing.
local function replace(h, sf, rf, row, t, v, exp, s, old)
  local ot, sum = quick(t, v, ':' .. exp, s, old)
  if not ot then return nil end
  call('HSET', h, rf, row, sf, sum)
  return ot
end

-- The change log (clustersync.ChangeReader). Per namespace and bucket, a
-- sorted set beside the bucket's hashes: its key is theirs without
-- ':<size>:<start>' plus ':c', so it shares their hash tag. Each script
-- call adds one member per log it wrote to, listing the windows written:
-- '<row prefix of the writer>*<n>:' and then, per window of the call in
-- turn, '<size>:<start>:<m>:' followed by m keys as '<len(key)>:<key>' (n
-- counts the keys of all windows). The writer's prefix comes first, so a
-- reader can skip its own writes. (Writers before this format added one
-- member per window, '<row prefix><size>:<start>:<key>'; readers still
-- take those, so a cluster can be upgraded node by node.) Its score is a
-- new sequence: max(last + 1, Redis TIME in ms × 1024), unique and
-- growing per log, assigned inside the script, so the log's order is its
-- commit order. A
-- call costs the log one member however many rows it writes; a member
-- written again (the same writer, the same windows) moves to its new
-- sequence. Member '!n' holds −last, and '!t' −(the highest sequence
-- trimmed): negative, so no read of sequences (positive) meets them.
-- Sequences older than CHANGE_KEEP ms are trimmed, at most once a second
-- per log; an idle log expires after twice that.
local CHANGE_KEEP = 60000
local notes = {}
-- lens caches the decimal strings of key lengths: a number in a member's
-- pieces would be formatted as a float by table.concat.
local lens = {}

-- logOf returns the log key of hash h and the prefix of its window's
-- group in a log member, '<size>:<start>:'.
local function logOf(h)
  local base, size, start = string.match(h, '^(.*):([^:]*):([^:]*)$')
  return base .. ':c', size .. ':' .. start .. ':'
end

-- noteKeys records writes by the incarnation of row prefix rp of keys
-- ks[1..m] in the window of group prefix pre. A log's notes are the
-- member's pieces, ms.n of them: ms[2] counts the keys, ms.g indexes the
-- count of the current window's. (Its length is kept, not taken with #:
-- pieces past a table's array part make # a search.)
local function noteKeys(log, rp, pre, ks, m)
  local ms = notes[log]
  if not ms then
    ms = {rp .. '*', 0, ':', n = 3}
    notes[log] = ms
  end
  local n = ms.n
  if ms.pre ~= pre then
    ms[n + 1], ms[n + 2], ms[n + 3] = pre, 0, ':'
    ms.pre, ms.g, n = pre, n + 2, n + 3
  end
  ms[2], ms[ms.g] = ms[2] + m, ms[ms.g] + m
  for i = 1, m do
    local k = ks[i]
    local l = lens[#k]
    if not l then
      l = format('%d:', #k)
      lens[#k] = l
    end
    ms[n + 1], ms[n + 2] = l, k
    n = n + 2
  end
  ms.n = n
end

-- note is noteKeys of the one key k.
local one = {}
local function note(log, rp, pre, k)
  one[1] = k
  noteKeys(log, rp, pre, one, 1)
end

-- logChanges writes the notes of this call to their logs.
local function logChanges()
  local now
  for log, ms in pairs(notes) do
    if not now then
      local tm = call('TIME')
      now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
    end
    local seq, prev = now * 1024, 0
    local n = call('ZSCORE', log, '!n')
    if n then
      prev = -tonumber(n)
      if prev + 1 > seq then seq = prev + 1 end
    end
    call('ZADD', log, format('%d', seq), table.concat(ms, '', 1, ms.n), format('%d', -seq), '!n')
    if math.floor(seq / 1024000) ~= math.floor(prev / 1024000) then
      local cut = format('%d', (now - CHANGE_KEEP) * 1024)
      if call('ZREMRANGEBYSCORE', log, 0, cut) > 0 then call('ZADD', log, 'LT', '-' .. cut, '!t') end
      call('PEXPIRE', log, 2 * CHANGE_KEEP)
    end
  end
end

-- lib returns the general helpers, built only when a call needs them.
local function lib()
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

  -- later returns the later of two expiries (Unix ms, '0' for none).
  local function later(a, b)
    if a == '0' then return b end
    if b == '0' or tonumber(a) >= tonumber(b) then return a end
    return b
  end

  -- A hash's values stay short, so Redis may keep it as a listpack, whose
  -- field lookups scan the whole hash: slow once a bucket holds hundreds
  -- of fields. A new hash gets this one long value in field '~', which
  -- makes Redis store it as a real hash table (with the default
  -- hash-max-listpack-value of 64).
  local WIDE = '................................................................................' -- 80 bytes

  -- step decides one row. t, v, exp: the row sent; s, old: the key's sum
  -- and inc's row as stored (false for none). It returns the row to store
  -- and the new sum (nil when nothing changes or the sum needs HINCRBY,
  -- big true), old's total, and the expiry this row asks of the hash.
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

  -- expire moves h's expiry to e (Unix ms, '0' for nothing to do) unless
  -- it already expires later; cur is its PEXPIRETIME before the writes.
  local function expire(h, e, cur)
    if e == '0' then return end
    if cur < 0 or cur < tonumber(e) then call('PEXPIREAT', h, e) end
  end

  -- put decides and writes one row (t, v, exp) of the key with sum field
  -- sf and row field rf into hash h; r is what HMGET h sf rf read. It
  -- returns the row's old total.
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

  return {step = step, later = later, bigSum = bigSum, expire = expire, put = put, WIDE = WIDE}
end
