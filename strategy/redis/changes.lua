-- Reads change logs (see lib.lua), each after its own sequence: the
-- members written since, in order, with their sequences, until they list
-- at least limit keys (a negative limit: no bound). It only reads the
-- logs, in one atomic step with each log's last and trimmed sequences;
-- the client parses the members and fetches the sums. The reader's own
-- writes (most of what a busy node reads) are left out here, so they cost
-- no reply and no parsing.
local limit = tonumber(ARGV[CHANGES_HEAD_LIMIT])
local own = ARGV[CHANGES_HEAD_OWN]
local no = #own
-- A read takes at most this many members of a log per call, so a long
-- run of the reader's own writes is skipped in bounded steps.
local page = 1024
if limit < 0 then page = -1 end

-- keys returns how many keys member m lists: m is
-- '+<len(inc)>:<inc>:*<n>:...', or one window of an earlier writer.
local function keys(m)
  local p = find(m, ':', 2, true)
  local q = p + tonumber(sub(m, 2, p - 1)) + 2
  if byte(m, q) ~= 42 then return 1 end
  return tonumber(sub(m, q + 1, find(m, ':', q + 1, true) - 1))
end

local out = {}
for l = 1, #KEYS do
  local log, since = KEYS[l], ARGV[CHANGES_HEAD_WIDTH + (l - 1) * CHANGES_LOG_WIDTH + CHANGES_LOG_SINCE]
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
      local r = call('ZRANGE', log, '(' .. since, '+inf', 'BYSCORE', 'LIMIT', 0, page, 'WITHSCORES')
      local n = #r / 2
      local c, taken, stop = 0, 0, n
      for i = 1, n do
        local m = r[2 * i - 1]
        if sub(m, 1, no) ~= own then
          local o = h + CHANGES_REPLY_HEAD_WIDTH + c * CHANGES_REPLY_WIDTH
          out[o + CHANGES_REPLY_MEMBER], out[o + CHANGES_REPLY_SEQ] = m, format('%d', tonumber(r[2 * i]))
          c = c + 1
          taken = taken + keys(m)
          if limit >= 0 and taken >= limit then
            stop = i
            break
          end
        end
      end
      if n > 0 and (stop < n or n == page) then
        out[h + CHANGES_REPLY_HEAD_NEXT], out[h + CHANGES_REPLY_HEAD_MORE] = format('%d', tonumber(r[2 * stop])), '1'
      end
      out[h + CHANGES_REPLY_HEAD_COUNT] = format('%d', c)
    end
  end
end
return out
