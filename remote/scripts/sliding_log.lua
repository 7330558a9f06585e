-- Sliding log. State: tag, total i8, then (stamp ms i8, count i8) entries,
-- oldest first, stamps strictly increasing; total is the sum of the counts.
local t, total, first, len, newest = now, 0, 18, 0, 0
if st then
  len = #st
  total = struct.unpack('<i8', st, 10)
  if len >= 33 then newest = struct.unpack('<i8', st, len - 15) end
  t = math.max(now, newest)
  local cutoff = t - window
  while first < len do -- drop the stamps at or before the cutoff
    local s, c = struct.unpack('<i8i8', st, first)
    if s > cutoff then break end
    total = total - c
    first = first + 16
  end
end
local count = total
local allowed, retry = 0, 0
if count + n <= limit then
  allowed = 1
  if consume then
    local body
    if first < len and newest == t then -- same ms as the newest entry: merge
      body = string.sub(st, first, len - 8) .. struct.pack('<i8', struct.unpack('<i8', st, len - 7) + n)
    elseif first < len then
      body = string.sub(st, first) .. struct.pack('<i8i8', t, n)
    else
      body = struct.pack('<i8i8', t, n)
    end
    count, newest = count + n, t
    save(tag .. struct.pack('<i8', count) .. body, t + window)
  end
else
  -- The oldest count-(limit-n) stamps must leave the window first.
  local k, p, s, c = count - (limit - n), first, newest, 0
  while p < len do
    s, c = struct.unpack('<i8i8', st, p)
    k = k - c
    if k <= 0 then break end
    p = p + 16
  end
  retry = s + window - t
end
local reset = 0
if count > 0 then reset = newest + window - t end
return reply(allowed, math.max(0, limit - count), retry, reset, 0)
