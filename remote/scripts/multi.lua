-- AllowAll: every rule on one key, all or nothing. Follows the prelude; see
-- remote/multi.go.
-- KEYS[i]: the state of rule i (KEYS[1] is the key's AllowN state).
-- ARGV[1]: the rules, 25 bytes each, in order (so the prelude reads rule 1);
-- ARGV[2]: now or ''; ARGV[3]: n.
-- The reply is the algorithms' replies, one per rule, in order.
local rules, k = ARGV[1], #KEYS
-- Writes are held back until every rule has decided: save's by rule (each
-- rule saves at most once) in held, rule i's value at 2i-1 and its instant
-- at 2i, and at 2k+i the value rule i read (false if none); the sliding
-- log's, in order, in logw. (A table made whole costs less than one that
-- grows.)
local cur, held, logw = 1, {false, false, false, false, false, false}, nil
save = function(value, untilms) held[2 * cur - 1], held[2 * cur] = value, untilms end

-- Every rule decides as the call asks, on the prelude's variables, as the
-- single-rule script of its algorithm decides on KEYS[1]: it reads its
-- state, then its algorithm's body runs (MultiScript places the bodies here,
-- each one's reply in verdict; a body that finds a bad value returns BAD,
-- the script's reply, with nothing written yet). If every rule admits, the
-- held writes are made. Else nothing is written, and the rules that
-- admitted decide again (pass 2) as peeks, to report what they have left;
-- a denial is the same either way. Bit i-1 of admitted is set if rule i
-- admitted. So k rules cost k decisions and k reads, one GETRANGE each (a
-- sliding log reads its own value, in pieces, each time it decides).
local res, admitted, all = '', 0, 2 ^ k - 1
for pass = 1, 2 do
  local out, bit = '', 1
  for i = 1, k do
    local verdict
    if pass == 2 and admitted % (2 * bit) < bit then
      verdict = string.sub(res, 40 * i - 39, 40 * i) -- denied: as it was
    else
      local o = 25 * i - 24
      if i ~= cur then
        cur, key, tag = i, KEYS[i], string.sub(rules, o, o + 8)
        window, limit, burst = struct.unpack('<i8i8i8', rules, o + 1)
      end
      local alg = string.byte(rules, o)
      st = nil
      if alg == LOG then
        if not logw then
          logw = {}
          write = function(...) logw[#logw + 1] = {...} end
        end
      else -- as read.lua
        local raw = held[2 * k + i]
        if pass == 1 then
          raw = headOf(key)
          if raw == false then return BAD end
          held[2 * k + i] = raw
        end
        if raw and string.sub(raw, 1, 9) == tag then st = raw end
      end
--{{bodies}}
      if pass == 1 and string.byte(verdict, 1) == 1 then admitted = admitted + bit end
    end
    out, bit = out .. verdict, bit * 2
  end
  res = out
  if admitted == all or admitted == 0 or not consume then break end
  consume = false
end
if consume and admitted == all then
  for i = 1, k do
    local v = held[2 * i - 1]
    if v then redis.call('SET', KEYS[i], v, 'PX', ttl(held[2 * i])) end
  end
  if logw then
    for j = 1, #logw do redis.call(unpack(logw[j])) end
  end
end
return res
