-- Shared head of every ringlimit script (see remote/doc.go).
-- KEYS[1]: the key. ARGV[1]: the rule, 25 bytes: algorithm (1), window ms,
-- limit, burst (int64 little-endian each); its first 9 bytes are the tag that
-- starts the stored value. ARGV[2]: now in ms, or '' for the server's TIME.
-- ARGV[3]: n, the hits; 0 is a peek (decide for 1 hit, write nothing).
-- The reply packs allowed, remaining, retry after, reset after and delay (ms)
-- as five little-endian int64s.
-- Every number is an integer below 2^53, so doubles compute exactly.
local key, rule = KEYS[1], ARGV[1]
local now = tonumber(ARGV[2])
if not now then
  local tm = redis.call('TIME')
  now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
end
local n = tonumber(ARGV[3])
local consume = n > 0
if not consume then n = 1 end
local tag = string.sub(rule, 1, 9)
local window, limit, burst = struct.unpack('<i8i8i8', rule, 2)

-- st is the key's value if it was recorded under this tag, else nil (a value
-- of ours under another tag is started afresh); read.lua (the single-rule
-- scripts) or multi.lua sets it. The sliding log reads its value itself, in
-- pieces.
local st
local function stored() return st end

-- Exact integer division (math.fmod is exact; a/b then floor may round).
local function fdiv(a, b)
  local r = math.fmod(a, b)
  local q = (a - r) / b
  if r < 0 then q = q - 1 end
  return q
end
local function cdiv(a, b)
  local r = math.fmod(a, b)
  local q = (a - r) / b
  if r > 0 then q = q + 1 end
  return q
end
-- save writes value with a TTL that ends when the state stops mattering.
-- The TTL is an integer; redis.call sends a number argument below 1e15 as
-- its digits (so string.format, which costs as much as a small command's
-- parsing, is left to the larger ones, reachable from corrupt values).
local function ttl(untilms)
  local ms = math.max(1, untilms - now)
  if ms < 1e15 then return ms end
  return string.format('%d', ms)
end
-- write makes every write of the algorithms (and nothing else): AllowAll's
-- script holds them back until every rule has decided.
local write = redis.call
local function save(value, untilms)
  write('SET', key, value, 'PX', ttl(untilms))
end
local function reply(allowed, remaining, retry, reset, delay)
  return struct.pack('<i8i8i8i8i8', allowed, remaining, retry, reset, delay)
end
-- epochOf is the epoch of the bucket's state (internal/memstore/wait.go:
-- the state a reservation was made in), 0 for none: a value of 33 bytes
-- carries it after the level and the last update.
local function epochOf()
  local st = stored()
  if st and #st == 33 then return (struct.unpack('<i8', st, 26)) end
  return 0
end
-- bucketValue is a bucket's value: 25 bytes, or 33 with an epoch (> 0).
local function bucketValue(level, t, epoch)
  if epoch > 0 then return tag .. struct.pack('<i8i8i8', level, t, epoch) end
  return tag .. struct.pack('<i8i8', level, t)
end
-- bucket returns a bucket's level drained to t = max(now, last update), and
-- t (local/algorithms.go: drain). State: tag, level i8, last update ms i8,
-- and the epoch i8 if it has one.
local function bucket()
  local st = stored()
  local level, last = 0, 0
  if st then level, last = struct.unpack('<i8i8', st, 10) end
  local t = math.max(now, last)
  local el = t - last
  if el > 0 then
    if el >= cdiv(level, limit) then level = 0 else level = level - el * limit end
  end
  return level, t
end
