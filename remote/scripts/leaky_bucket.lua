-- Leaky bucket. State: tag, level i8, last update ms i8 (epoch i8: kept).
local level, t = bucket()
local allowed, retry, delay = 0, 0, 0
if fdiv(level, window) + n <= burst then
  allowed = 1
  delay = cdiv(level, limit)
  if consume then level = level + n * window end
else
  retry = cdiv(level - (burst - n + 1) * window + 1, limit)
end
local r = cdiv(level, limit)
if consume and allowed == 1 then save(bucketValue(level, t, epochOf()), t + r) end
return reply(allowed, math.max(0, burst - fdiv(level, window)), retry, r, delay)
