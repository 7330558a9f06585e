-- AllowAll: every rule on one key, all or nothing. Follows the prelude and
-- run(alg), the algorithms' bodies as branches of one function of the
-- prelude's variables; see remote/multi.go.
-- KEYS[i]: the state of rule i (KEYS[1] is the key's AllowN state).
-- ARGV[1]: the rules, 25 bytes each, in order (so the prelude reads rule 1);
-- ARGV[2]: now or ''; ARGV[3]: n.
-- The reply is the algorithms' replies, one per rule, in order.
local rules, k = ARGV[1], #KEYS
-- The states of all but sliding_log rules (which read their own values, in
-- pieces) come from one MGET. MGET answers nil for another type as for an
-- absent key: one EXISTS over the nil ones tells them apart.
local logs = false
for i = 1, k do
  if string.byte(rules, 25 * i - 24) == LOG then logs = true end
end
local reads = KEYS
if logs then
  reads = {}
  for i = 1, k do
    if string.byte(rules, 25 * i - 24) ~= LOG then reads[#reads + 1] = KEYS[i] end
  end
end
local vals = {}
if #reads > 0 then
  local got = redis.call('MGET', unpack(reads))
  local nils = 0
  for j = 1, #reads do
    local raw = got[j]
    if raw then
      if not wellFormed(raw, #raw) then return BAD end
    else
      nils = nils + 1
    end
  end
  if nils > 0 then
    local absent = reads
    if nils < #reads then
      absent = {}
      for j = 1, #reads do
        if not got[j] then absent[#absent + 1] = reads[j] end
      end
    end
    if redis.call('EXISTS', unpack(absent)) > 0 then return BAD end -- another type
  end
  if logs then
    local j = 0
    for i = 1, k do
      if string.byte(rules, 25 * i - 24) ~= LOG then
        j = j + 1
        vals[i] = got[j]
      end
    end
  else
    vals = got
  end
end

-- The rules' replies are kept as numbers, five a rule, and packed once.
reply = function(a, b, c, d, e) return a, b, c, d, e end
-- Writes are held back until every rule has decided: save's by rule (each
-- rule saves at most once), the sliding log's in order.
local cur, saved, held = 0, {}, nil
save = function(value, untilms) saved[cur], saved[k + cur] = value, untilms end
write = function(...)
  held = held or {}
  held[#held + 1] = {...}
end

-- decide runs rule i on the prelude's variables, as the single-rule script
-- of its algorithm runs on KEYS[1], and stores its reply in out.
local out = {}
local function decide(i)
  local o = 25 * i - 24
  cur, key, tag = i, KEYS[i], string.sub(rules, o, o + 8)
  window, limit, burst = struct.unpack('<i8i8i8', rules, o + 1)
  st = nil
  local raw = vals[i]
  if raw and string.sub(raw, 1, 9) == tag then st = raw end
  local a, b, c, d, e = run(string.byte(rules, o))
  if a == BAD then return false end
  o = 5 * i - 4
  out[o], out[o + 1], out[o + 2], out[o + 3], out[o + 4] = a, b, c, d, e
  return true
end
-- Every rule decides as the call asks, its writes held (each algorithm
-- reads its state before it writes). If every rule admits, the held writes
-- are made. Else nothing is written, and the rules that admitted decide
-- again as peeks, to report what they have left (a denial is the same
-- either way). So k rules cost k runs, one MGET and, if some state is
-- absent, one EXISTS.
local all = true
for i = 1, k do
  if not decide(i) then return BAD end -- nothing written yet
  if out[5 * i - 4] ~= 1 then all = false end
end
if all then
  for i = 1, k do
    if saved[i] then redis.call('SET', KEYS[i], saved[i], 'PX', ttl(saved[k + i])) end
  end
  if held then
    for j = 1, #held do redis.call(unpack(held[j])) end
  end
elseif consume then
  consume = false
  for i = 1, k do
    if out[5 * i - 4] == 1 then decide(i) end
  end
end
-- The format of 8 rules' replies (MaxRules), cut to k rules'.
local FMT = '<i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8'
return struct.pack(string.sub(FMT, 1, 1 + 10 * k), unpack(out))
