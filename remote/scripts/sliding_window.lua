-- Sliding window counter. State: tag, window index i8, current i8, previous i8.
local st = stored()
local w = window
local sa, sb, sc = 0, 0, 0
if st then sa, sb, sc = struct.unpack('<i8i8i8', st, 10) end
local idx, t = fdiv(now, w), now
if idx < sa then idx, t = sa, sa * w end -- the clock went back
local cur, prev = 0, 0
if idx == sa then cur, prev = sb, sc elseif idx == sa + 1 then prev = sb end
local e = t - idx * w
local used = fdiv(prev * (w - e), w) + cur

-- firstFit: the least x in [0, w) with floor(p*(w-x)/w) <= r, or w.
local function firstFit(p, r)
  local x = p * w - (r + 1) * w + 1
  if x <= 0 then return 0 end
  return math.min(cdiv(x, p), w)
end

local allowed, retry = 0, 0
if used + n <= limit then
  allowed = 1
  if consume then cur, used = cur + n, used + n end
else
  retry = -1
  local room = limit - cur - n
  if room >= 0 then
    local x = firstFit(prev, room)
    if x < w then retry = x - e end
  end
  if retry < 0 then
    local x = firstFit(cur, limit - n)
    if x < w then retry = w - e + x else retry = 2 * w - e end
  end
end
local reset = 0
if cur > 0 then
  reset = w - e + firstFit(cur, 0)
elseif prev > 0 then
  reset = math.max(0, firstFit(prev, 0) - e)
end
if consume and allowed == 1 then save(tag .. struct.pack('<i8i8i8', idx, cur, prev), t + reset) end
return reply(allowed, math.max(0, limit - used), retry, reset, 0)
