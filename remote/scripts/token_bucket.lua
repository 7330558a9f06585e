-- Token bucket. State: tag, level i8, last update ms i8 (epoch i8: kept).
local level, t = bucket()
local full = burst * window
local allowed, retry = 0, 0
if level + n * window <= full then
  allowed = 1
  if consume then level = level + n * window end
else
  retry = cdiv(level + n * window - full, limit)
end
local r = cdiv(level, limit)
if consume and allowed == 1 then save(bucketValue(level, t, epochOf()), t + r) end
return reply(allowed, math.max(0, fdiv(full - level, window)), retry, r, 0)
