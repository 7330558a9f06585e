-- Fixed window. State: tag, window index i8, count i8.
local st = stored()
local sa, sb = 0, 0
if st then sa, sb = struct.unpack('<i8i8', st, 10) end
local idx, t = fdiv(now, window), now
if idx < sa then idx, t = sa, sa * window end -- the clock went back
local count = 0
if idx == sa then count = sb end
local e = (idx + 1) * window
local allowed, retry = 0, 0
if count + n <= limit then
  allowed = 1
  if consume then
    count = count + n
    save(tag .. struct.pack('<i8i8', idx, count), e)
  end
else
  retry = e - t
end
local reset = 0
if count > 0 then reset = e - t end
return reply(allowed, math.max(0, limit - count), retry, reset, 0)
