-- The push script for the windows of one key, each in its own hash (a
-- synchronous call), with the same reply: one HMGET and at most one HSET
-- per window. Its own Lua is most of what a synchronous call costs the
-- server beyond the commands, so the client sends the fields and rows
-- ready-made and the usual cases take short paths: a row stored exactly
-- as sent (a closed previous window) is only read, and a newer row over
-- one of the same expiry goes through replace; anything else — a new
-- row, an older version, a new expiry, big numbers — goes through put,
-- whose helpers are built only then.
local put
local sf, rf = ARGV[KEY_HEAD_SUM_FIELD], ARGV[KEY_HEAD_ROW_FIELD]
local rp, k = sub(rf, 1, #rf - #sf + 1), sub(sf, 2) -- rf is rp .. k, sf '=' .. k
local out = {}
for i = 1, #KEYS do
  local h, a = KEYS[i], KEY_HEAD_WIDTH + (i - 1) * KEY_WINDOW_WIDTH
  local row, t, v, exp = ARGV[a + KEY_WINDOW_ROW], ARGV[a + KEY_WINDOW_TOTAL], ARGV[a + KEY_WINDOW_VERSION], ARGV[a + KEY_WINDOW_EXPIRE]
  local r = call('HMGET', h, sf, rf)
  local s, old = r[1], r[2]
  local o = (i - 1) * ROW_REPLY_WIDTH
  out[o + ROW_REPLY_SUM] = s or '0'
  if old == row then
    out[o + ROW_REPLY_OWN] = t
  else
    local lg, pre = logOf(h)
    note(lg, rp, pre, k)
    local ot = replace(h, sf, rf, row, t, v, exp, s, old)
    if not ot then
      put = put or lib().put
      ot = put(h, sf, rf, t, v, exp, r)
    end
    out[o + ROW_REPLY_OWN] = ot
  end
end
logChanges()
return out
