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
      if limit > 0 and n == limit then
        out[h + CHANGES_REPLY_HEAD_NEXT], out[h + CHANGES_REPLY_HEAD_MORE] = format('%d', tonumber(r[2 * n])), '1'
      end
      -- The reader's own writes are skipped, a window written by several
      -- is read once, and each hash with one HMGET: a log's windows are
      -- mostly of a few hashes.
      local fields, at, seen, c = {}, {}, {}, 0 -- per hash: its fields; per window: its hash, place, member, sequence
      for i = 1, n do
        local m = r[2 * i - 1]
        if sub(m, 1, #rp) ~= rp then
          local w = find(m, ':', 1, true) -- m is '+<len>:<inc>:' .. window
          m = sub(m, w + tonumber(sub(m, 2, w - 1)) + 2)
          if not seen[m] then
            seen[m] = true
            local a = find(m, ':', 1, true)
            local b = find(m, ':', a + 1, true)
            local hk, k = sub(m, 1, b - 1), sub(m, b + 1)
            local f = fields[hk]
            if not f then
              f = {}
              fields[hk] = f
            end
            f[#f + 1], f[#f + 2] = '=' .. k, rp .. k
            c = c + 1
            at[c] = {hk, #f - 1, m, r[2 * i]}
          end
        end
      end
      out[h + CHANGES_REPLY_HEAD_COUNT] = format('%d', c)
      local got = {}
      for hk, f in pairs(fields) do got[hk] = call('HMGET', base .. hk, unpack(f)) end
      for i = 1, c do
        local v, j = got[at[i][1]], at[i][2]
        local o = h + CHANGES_REPLY_HEAD_WIDTH + (i - 1) * CHANGES_REPLY_WIDTH
        out[o + CHANGES_REPLY_MEMBER], out[o + CHANGES_REPLY_SEQ] = at[i][3], format('%d', tonumber(at[i][4]))
        out[o + CHANGES_REPLY_SUM], out[o + CHANGES_REPLY_ROW] = v[j] or '0', v[j + 1] or ''
      end
    end
  end
end
return out
