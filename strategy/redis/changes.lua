-- Reads the change log KEYS[1] (see lib.lua) after a sequence: the
-- windows written since, in order, up to a limit, each with the key's sum
-- and the reader's row, read in the same atomic step. The windows' hashes
-- are not in KEYS: their names come from the log, and they share its hash
-- tag, hence its slot.
local log = KEYS[1]
local sc = call('ZMSCORE', log, '!n', '!t')
local last, trimmed = '0', 0
if sc[1] then last = format('%d', -tonumber(sc[1])) end
if sc[2] then trimmed = -tonumber(sc[2]) end
local out = {}
out[CHANGES_REPLY_HEAD_KNOWN], out[CHANGES_REPLY_HEAD_NEXT], out[CHANGES_REPLY_HEAD_MORE] = '1', last, '0'
local since = ARGV[CHANGES_HEAD_SINCE]
if since == '' then return out end
local s = tonumber(since)
if s < trimmed or s > tonumber(last) then
  -- Trimmed past the sequence, or a log lost and begun again.
  out[CHANGES_REPLY_HEAD_KNOWN] = '0'
  return out
end
local limit = tonumber(ARGV[CHANGES_HEAD_LIMIT])
local r = call('ZRANGE', log, '(' .. since, '+inf', 'BYSCORE', 'LIMIT', 0, limit, 'WITHSCORES')
local n = #r / 2
if limit > 0 and n == limit then
  out[CHANGES_REPLY_HEAD_NEXT], out[CHANGES_REPLY_HEAD_MORE] = format('%d', tonumber(r[2 * n])), '1'
end
local rp, base = ARGV[CHANGES_HEAD_ROW_PREFIX], ARGV[CHANGES_HEAD_HASH_BASE]
-- One HMGET per hash: a log's windows are mostly of a few hashes.
local fields, at = {}, {} -- per hash: its fields; per window: its hash and place
for i = 1, n do
  local m = r[2 * i - 1]
  local a = find(m, ':', 1, true)
  local b = find(m, ':', a + 1, true)
  local h, k = sub(m, 1, b - 1), sub(m, b + 1)
  local f = fields[h]
  if not f then
    f = {}
    fields[h] = f
  end
  f[#f + 1], f[#f + 2] = '=' .. k, rp .. k
  at[i] = {h, #f - 1}
end
local got = {}
for h, f in pairs(fields) do got[h] = call('HMGET', base .. h, unpack(f)) end
for i = 1, n do
  local v, j = got[at[i][1]], at[i][2]
  local o = CHANGES_REPLY_HEAD_WIDTH + (i - 1) * CHANGES_REPLY_WIDTH
  out[o + CHANGES_REPLY_MEMBER], out[o + CHANGES_REPLY_SEQ] = r[2 * i - 1], format('%d', tonumber(r[2 * i]))
  out[o + CHANGES_REPLY_SUM], out[o + CHANGES_REPLY_ROW] = v[j] or '0', v[j + 1] or ''
end
return out
