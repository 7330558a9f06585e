-- Shared head of every ringlimit script (see remote/doc.go).
-- KEYS[1] the key; ARGV: tag, now ms ('' = server TIME), limit, burst,
-- window ms, n, consume ('1' or '0'), extra TTL ms (tests only, optional).
-- Every number is an integer below 2^53, so doubles compute exactly.
local key, tag = KEYS[1], ARGV[1]
local now = tonumber(ARGV[2])
if not now then
  local tm = redis.call('TIME')
  now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
end
local limit, burst, window = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local n, consume = tonumber(ARGV[6]), ARGV[7] == '1'
local raw = redis.call('GET', key)
local st = nil -- the stored value, if it was recorded under this tag
if raw and string.sub(raw, 1, 9) == tag then st = raw end

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
local function save(value, untilms)
  local px = math.max(1, untilms - now + (tonumber(ARGV[8]) or 0))
  redis.call('SET', key, value, 'PX', string.format('%d', px))
end
