-- Decides an AllowRequest atomically over the current and previous window
-- of every limit, and counts the cost in the current windows when allowed
-- (or when denied calls count). Like the key script it takes fields and
-- rows ready-made: a previous window stored exactly as sent is only read,
-- a current window goes through replace when it can, and only other rows
-- build put.
local put
local sf, rf = ARGV[ALLOW_HEAD_SUM_FIELD], ARGV[ALLOW_HEAD_ROW_FIELD]
local wp, key = sub(rf, 1, #rf - #sf + 1), sub(sf, 2) -- rf is wp .. key, sf '=' .. key
local cost = ARGV[ALLOW_HEAD_COST] + 0
local countRejected = ARGV[ALLOW_HEAD_COUNT_REJECTED] == '1'
local n = #KEYS / ALLOW_KEYS_WIDTH
local out = {}
out[ALLOW_REPLY_HEAD_ALLOWED] = '0'
local reads = {}
local allowed = true
for l = 1, n do
  local a = ALLOW_HEAD_WIDTH + (l - 1) * ALLOW_LIMIT_WIDTH
  local k = (l - 1) * ALLOW_KEYS_WIDTH
  local rc = call('HMGET', KEYS[k + ALLOW_KEYS_CUR], sf, rf)
  local rp = call('HMGET', KEYS[k + ALLOW_KEYS_PREV], sf, rf)
  reads[k + ALLOW_KEYS_CUR], reads[k + ALLOW_KEYS_PREV] = rc, rp
  local sc, sp = rc[1] or '0', rp[1] or '0'
  local oc, op = total(rc[2]), ARGV[a + ALLOW_LIMIT_PREV_TOTAL]
  if rp[2] ~= ARGV[a + ALLOW_LIMIT_PREV_ROW] then op = total(rp[2]) end
  local o = ALLOW_REPLY_HEAD_WIDTH + (l - 1) * ALLOW_REPLY_WIDTH
  out[o + ALLOW_REPLY_CUR_SUM], out[o + ALLOW_REPLY_CUR_OWN] = sc, oc
  out[o + ALLOW_REPLY_PREV_SUM], out[o + ALLOW_REPLY_PREV_OWN] = sp, op
  local cur = ARGV[a + ALLOW_LIMIT_CUR_TOTAL] + (sc - oc)
  local prev = ARGV[a + ALLOW_LIMIT_PREV_TOTAL] + (sp - op)
  local size = ARGV[a + ALLOW_LIMIT_SIZE] + 0
  local rate = cur
  if prev ~= 0 then rate = cur + prev * (size - ARGV[a + ALLOW_LIMIT_POS]) / size end
  if rate + cost > ARGV[a + ALLOW_LIMIT_LIMIT] + 0 then allowed = false end
end
local counted = allowed or countRejected
for l = 1, n do
  local a = ALLOW_HEAD_WIDTH + (l - 1) * ALLOW_LIMIT_WIDTH
  local k = (l - 1) * ALLOW_KEYS_WIDTH
  local hp, rp = KEYS[k + ALLOW_KEYS_PREV], reads[k + ALLOW_KEYS_PREV]
  local pt, pv = ARGV[a + ALLOW_LIMIT_PREV_TOTAL], ARGV[a + ALLOW_LIMIT_PREV_VERSION]
  -- A previous row stored as sent, or never stored and sent as 0 with
  -- version 0, needs no write.
  if rp[2] ~= ARGV[a + ALLOW_LIMIT_PREV_ROW] and (rp[2] or pt ~= '0' or pv ~= '0') then
    local lg, pre = logOf(hp)
    note(lg, wp, pre, key)
    put = put or lib().put
    put(hp, sf, rf, pt, pv, ARGV[a + ALLOW_LIMIT_PREV_EXPIRE], rp)
  end
  local hc, rc = KEYS[k + ALLOW_KEYS_CUR], reads[k + ALLOW_KEYS_CUR]
  local t = ARGV[a + ALLOW_LIMIT_CUR_TOTAL]
  if counted then t = ARGV[a + ALLOW_LIMIT_CUR_COUNTED] end
  local v, exp = ARGV[a + ALLOW_LIMIT_CUR_VERSION], ARGV[a + ALLOW_LIMIT_CUR_EXPIRE]
  local lg, pre = logOf(hc)
  note(lg, wp, pre, key)
  if not replace(hc, sf, rf, t .. ':' .. v .. ':' .. exp, t, v, exp, rc[1], rc[2]) then
    put = put or lib().put
    put(hc, sf, rf, t, v, exp, rc)
  end
end
if allowed then out[ALLOW_REPLY_HEAD_ALLOWED] = '1' end
logChanges()
return out
