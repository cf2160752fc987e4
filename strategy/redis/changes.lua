-- Reads change logs (see lib.lua), each after its own sequence: the
-- windows written since, in order, up to a limit per log, each with the
-- key's sum and the reader's row, all read in one atomic step. The
-- windows' hashes are not in KEYS: their names come from the log, and
-- they share its hash tag, hence its slot.
local limit = tonumber(ARGV[CHANGES_HEAD_LIMIT])
local rp = ARGV[CHANGES_HEAD_ROW_PREFIX]
local out = {}
for l = 1, #KEYS do
  local log, a0 = KEYS[l], CHANGES_HEAD_WIDTH + (l - 1) * CHANGES_LOG_WIDTH
  local since, base = ARGV[a0 + CHANGES_LOG_SINCE], ARGV[a0 + CHANGES_LOG_HASH_BASE]
  local h = #out
  local sc = call('ZMSCORE', log, '!n', '!t')
  local last, trimmed = '0', 0
  if sc[1] then last = format('%d', -tonumber(sc[1])) end
  if sc[2] then trimmed = -tonumber(sc[2]) end
  out[h + CHANGES_REPLY_HEAD_KNOWN], out[h + CHANGES_REPLY_HEAD_NEXT] = '1', last
  out[h + CHANGES_REPLY_HEAD_MORE], out[h + CHANGES_REPLY_HEAD_COUNT] = '0', '0'
  if since ~= '' then
    local s = tonumber(since)
    if s < trimmed or s > tonumber(last) then
      -- Trimmed past the sequence, or a log lost and begun again.
      out[h + CHANGES_REPLY_HEAD_KNOWN] = '0'
    else
      local r = call('ZRANGE', log, '(' .. since, '+inf', 'BYSCORE', 'LIMIT', 0, limit, 'WITHSCORES')
      local n = #r / 2
      out[h + CHANGES_REPLY_HEAD_COUNT] = format('%d', n)
      if limit > 0 and n == limit then
        out[h + CHANGES_REPLY_HEAD_NEXT], out[h + CHANGES_REPLY_HEAD_MORE] = format('%d', tonumber(r[2 * n])), '1'
      end
      -- One HMGET per hash: a log's windows are mostly of a few hashes.
      local fields, at = {}, {} -- per hash: its fields; per window: its hash and place
      for i = 1, n do
        local m = r[2 * i - 1]
        local a = find(m, ':', 1, true)
        local b = find(m, ':', a + 1, true)
        local hk, k = sub(m, 1, b - 1), sub(m, b + 1)
        local f = fields[hk]
        if not f then
          f = {}
          fields[hk] = f
        end
        f[#f + 1], f[#f + 2] = '=' .. k, rp .. k
        at[i] = {hk, #f - 1}
      end
      local got = {}
      for hk, f in pairs(fields) do got[hk] = call('HMGET', base .. hk, unpack(f)) end
      for i = 1, n do
        local v, j = got[at[i][1]], at[i][2]
        local o = h + CHANGES_REPLY_HEAD_WIDTH + (i - 1) * CHANGES_REPLY_WIDTH
        out[o + CHANGES_REPLY_MEMBER], out[o + CHANGES_REPLY_SEQ] = r[2 * i - 1], format('%d', tonumber(r[2 * i]))
        out[o + CHANGES_REPLY_SUM], out[o + CHANGES_REPLY_ROW] = v[j] or '0', v[j + 1] or ''
      end
    end
  end
end
return out
