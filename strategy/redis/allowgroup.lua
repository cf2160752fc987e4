-- Decides a group of Allow requests of one key in order, atomically
-- (clustersync.GroupAllower; a single Allow is a group of one): reads the
-- others' totals of every window once, decides each entry against this
-- incarnation's totals as the entries before it left them, then writes
-- every window's previous row as sent and its current row with every
-- counted cost, and notes them in the change logs. Like the key script it
-- takes fields and rows ready-made: a previous window stored exactly as
-- sent is only read, a current window goes through replace when it can,
-- and only other rows build put. When every entry counts, the current
-- total comes ready-made too (exact int64, whatever its size); otherwise
-- it is summed here, so the client sends such groups only with totals and
-- costs below 2^53, where doubles are exact.
local put
local sf, rf = ARGV[GROUP_HEAD_SUM_FIELD], ARGV[GROUP_HEAD_ROW_FIELD]
local wp, key = sub(rf, 1, #rf - #sf + 1), sub(sf, 2) -- rf is wp .. key, sf '=' .. key
local nw = #KEYS / GROUP_KEYS_WIDTH
local ebase = GROUP_HEAD_WIDTH + nw * GROUP_WINDOW_WIDTH
local ew = GROUP_ENTRY_WIDTH + nw
local ne = (#ARGV - ebase) / ew
local out, reads = {}, {}
local own, others, prevPart = {}, {}, {}
for w = 1, nw do
  local a = GROUP_HEAD_WIDTH + (w - 1) * GROUP_WINDOW_WIDTH
  local k = (w - 1) * GROUP_KEYS_WIDTH
  local rc = call('HMGET', KEYS[k + GROUP_KEYS_CUR], sf, rf)
  local rp = call('HMGET', KEYS[k + GROUP_KEYS_PREV], sf, rf)
  reads[k + GROUP_KEYS_CUR], reads[k + GROUP_KEYS_PREV] = rc, rp
  local sc, sp = rc[1] or '0', rp[1] or '0'
  local oc, op = total(rc[2]), ARGV[a + GROUP_WINDOW_PREV_TOTAL]
  if rp[2] ~= ARGV[a + GROUP_WINDOW_PREV_ROW] then op = total(rp[2]) end
  local o = (w - 1) * GROUP_REPLY_WIDTH
  out[o + GROUP_REPLY_CUR_SUM], out[o + GROUP_REPLY_CUR_OWN] = sc, oc
  out[o + GROUP_REPLY_PREV_SUM], out[o + GROUP_REPLY_PREV_OWN] = sp, op
  own[w] = ARGV[a + GROUP_WINDOW_CUR_TOTAL] + 0
  others[w] = sc - oc
  local prev = ARGV[a + GROUP_WINDOW_PREV_TOTAL] + (sp - op)
  local size = ARGV[a + GROUP_WINDOW_SIZE] + 0
  prevPart[w] = 0
  if prev ~= 0 then prevPart[w] = prev * (size - ARGV[a + GROUP_WINDOW_POS]) / size end
end
local counted, all = 0, true
for e = 1, ne do
  local a = ebase + (e - 1) * ew
  local cost = ARGV[a + GROUP_ENTRY_COST] + 0
  local allowed = true
  for w = 1, nw do
    local lim = ARGV[a + GROUP_ENTRY_WIDTH + w]
    if lim ~= '' and (own[w] + counted + others[w]) + prevPart[w] + cost > lim + 0 then allowed = false end
  end
  if allowed then
    out[nw * GROUP_REPLY_WIDTH + e] = 1
  else
    out[nw * GROUP_REPLY_WIDTH + e] = 0
  end
  if allowed or ARGV[a + GROUP_ENTRY_COUNT_REJECTED] == '1' then
    counted = counted + cost
  elseif cost ~= 0 then
    all = false
  end
end
for w = 1, nw do
  local a = GROUP_HEAD_WIDTH + (w - 1) * GROUP_WINDOW_WIDTH
  local k = (w - 1) * GROUP_KEYS_WIDTH
  local hp, rp = KEYS[k + GROUP_KEYS_PREV], reads[k + GROUP_KEYS_PREV]
  local pt, pv = ARGV[a + GROUP_WINDOW_PREV_TOTAL], ARGV[a + GROUP_WINDOW_PREV_VERSION]
  -- A previous row stored as sent, or never stored and sent as 0 with
  -- version 0, needs no write.
  if rp[2] ~= ARGV[a + GROUP_WINDOW_PREV_ROW] and (rp[2] or pt ~= '0' or pv ~= '0') then
    local lg, pre = logOf(hp)
    note(lg, wp, pre, key)
    put = put or lib().put
    put(hp, sf, rf, pt, pv, ARGV[a + GROUP_WINDOW_PREV_EXPIRE], rp)
  end
  local hc, rc = KEYS[k + GROUP_KEYS_CUR], reads[k + GROUP_KEYS_CUR]
  local t = ARGV[a + GROUP_WINDOW_CUR_TOTAL]
  if all then
    t = ARGV[a + GROUP_WINDOW_CUR_ALL]
  elseif counted ~= 0 then
    t = format('%d', own[w] + counted)
  end
  local v, exp = ARGV[a + GROUP_WINDOW_CUR_VERSION], ARGV[a + GROUP_WINDOW_CUR_EXPIRE]
  local lg, pre = logOf(hc)
  note(lg, wp, pre, key)
  if not replace(hc, sf, rf, t .. ':' .. v .. ':' .. exp, t, v, exp, rc[1], rc[2]) then
    put = put or lib().put
    put(hc, sf, rf, t, v, exp, rc)
  end
end
logChanges()
return out
