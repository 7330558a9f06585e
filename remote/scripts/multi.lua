-- AllowAll: every rule on one key, all or nothing. Follows the prelude and
-- the algorithms, each wrapped as a function of the prelude's variables
-- (algs[algorithm byte]); see remote/multi.go.
-- KEYS[i]: the state of rule i (KEYS[1] is the key's AllowN state).
-- ARGV[1]: rule 1; ARGV[2]: now or ''; ARGV[3]: n; ARGV[3 + i]: rule i + 1.
-- The reply is the algorithms' replies, one per rule, in order.
local hits = tonumber(ARGV[3])
local rules = {ARGV[1]}
for i = 2, #KEYS do rules[i] = ARGV[i + 2] end
local function use(i)
  key, rule = KEYS[i], rules[i]
  tag = string.sub(rule, 1, 9)
  window, limit, burst = struct.unpack('<i8i8i8', rule, 2)
  return algs[string.byte(rule, 1)]
end
-- Every rule but the last decides and writes nothing (the prelude set n
-- to at least 1). If they all admit, the last decides and writes at once: a
-- denial writes nothing. Only if it too admits do the others decide again
-- and write. (So one rule runs once, and k rules 2k - 1 times.)
local last, out, all = #KEYS, {}, true
consume = false
for i = 1, last - 1 do
  out[i] = use(i)()
  if struct.unpack('<i8', out[i]) ~= 1 then all = false end
end
consume = all and hits > 0
out[last] = use(last)()
if consume and struct.unpack('<i8', out[last]) == 1 then
  for i = 1, last - 1 do out[i] = use(i)() end
end
return table.concat(out)
