-- AllowAll: every rule on one key, all or nothing. Follows the prelude and
-- the algorithms, each wrapped as a function of the prelude's variables
-- (algs[algorithm byte]); see remote/multi.go.
-- KEYS[i]: the state of rule i (KEYS[1] is the key's AllowN state).
-- ARGV[1]: rule 1; ARGV[2]: now or ''; ARGV[3]: n; ARGV[3 + i]: rule i + 1.
-- The reply is the algorithms' replies, one per rule, in order.
local hits = tonumber(ARGV[3])
local rules = {ARGV[1]}
for i = 2, #KEYS do rules[i] = ARGV[i + 2] end
-- use points the prelude's variables at rule i, reading its value as the
-- prelude does for KEYS[1] (nil: a value not ours, the call answers BAD).
local function use(i)
  key, rule = KEYS[i], rules[i]
  tag = string.sub(rule, 1, 9)
  window, limit, burst = struct.unpack('<i8i8i8', rule, 2)
  st = nil
  if string.byte(rule, 1) ~= LOG then
    local raw = redis.pcall('GET', key)
    if type(raw) == 'table' then return nil end -- WRONGTYPE
    if raw then
      if not wellFormed(raw, #raw) then return nil end
      if string.sub(raw, 1, 9) == tag then st = raw end
    end
  end
  return algs[string.byte(rule, 1)]
end
local function run(i)
  local f = use(i)
  if not f then return nil end
  return f()
end
-- With hits, a rule whose algorithm writes only through the prelude's save
-- (all but sliding_log, which edits its value in place) decides at once as
-- consuming, its write held back; a sliding_log rule decides without
-- writing. If every rule admits, the held writes are made and the
-- sliding_log rules decide again, writing. Else nothing is written, and the
-- rules that decided as consuming decide again as peeks, to report what
-- they have left. So k rules of buckets and counters cost k runs.
local out, all, held, writes = {}, true, {}, {}
local realSave = save
save = function(value, untilms) writes[#writes + 1] = {key, value, untilms} end
for i = 1, #KEYS do
  local f = use(i)
  if not f then return BAD end
  held[i] = hits > 0 and string.byte(rule, 1) ~= LOG
  consume = held[i]
  out[i] = f()
  if out[i] == BAD then return BAD end -- phase 2 cannot meet one: nothing changed
  if struct.unpack('<i8', out[i]) ~= 1 then all = false end
end
save = realSave
if all and hits > 0 then
  for _, w in ipairs(writes) do
    key = w[1]
    save(w[2], w[3])
  end
  consume = true
  for i = 1, #KEYS do
    if not held[i] then out[i] = run(i) end
  end
else
  consume = false
  for i = 1, #KEYS do
    if held[i] then out[i] = run(i) end
  end
end
return table.concat(out)
