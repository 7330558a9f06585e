-- Give back (remote/giveback.go; internal/memstore/giveback.go's give,
-- step for step): takes back the hits of an admitted charge that its
-- caller did not use, never more than the charge still weighs on the
-- state. ARGV[3]: its hits n; ARGV[4]: an instant at or before the charge
-- (ms); ARGV[5]: the charge's Remaining. The reply is one little-endian
-- int64: what was given back (hits; a bucket's units, 1/window of a hit),
-- 0 for nothing; BAD for a key that holds something we did not write.
local at, rem = tonumber(ARGV[4]), tonumber(ARGV[5])
local alg = string.byte(rule, 1)
local w = window
local atw = fdiv(at, w)
local function given(g) return struct.pack('<i8', g) end
if at > now then return given(0) end -- a caller's clock ahead of this one: at may be after the charge

if alg == 2 then -- fixed window: the window of at, while it is the current one
  if not st then return given(0) end
  local sa, sb = struct.unpack('<i8i8', st, 10)
  if sa ~= atw or fdiv(now, w) ~= atw or sb <= 0 then return given(0) end
  local g = math.min(n, sb)
  write('SET', key, tag .. struct.pack('<i8i8', sa, sb - g), 'KEEPTTL')
  return given(g)
elseif alg == 4 then -- sliding window: the count of at's window, current or previous
  if not st then return given(0) end
  local sa, sb, sc = struct.unpack('<i8i8i8', st, 10)
  local idx = math.max(fdiv(now, w), sa)
  local g = 0
  if sa == atw and idx <= atw + 1 and sb > 0 then
    g = math.min(n, sb)
    sb = sb - g
  elseif sa == atw + 1 and idx == atw + 1 and sc > 0 then
    g = math.min(n, sc)
    sc = sc - g
  else
    return given(0)
  end
  write('SET', key, tag .. struct.pack('<i8i8i8', sa, sb, sc), 'KEEPTTL')
  return given(g)
elseif alg == 0 then -- token bucket: the hits less what drained since at
  if not st then return given(0) end
  local level, t = bucket()
  local d = t - math.min(t, at)
  if d >= cdiv(n * w, limit) then return given(0) end
  local g = math.min(level, n * w - d * limit)
  if g <= 0 then return given(0) end
  level = level - g
  save(bucketValue(level, t, epochOf()), t + cdiv(level, limit))
  redis.call('DEL', KEYS[2]) -- units off the top: the holes' places no longer hold (memstore forgets them too)
  return given(g)
elseif alg == 1 then -- leaky bucket: only hits no later one queued behind
  if not st then return given(0) end
  local sa, sb = struct.unpack('<i8i8', st, 10)
  if sb ~= at or burst - fdiv(sa, w) ~= rem or sa < n * w then return given(0) end
  local level, t = bucket()
  local g = math.min(level, n * w)
  if g <= 0 then return given(0) end
  level = level - g
  save(bucketValue(level, t, epochOf()), t + cdiv(level, limit))
  redis.call('DEL', KEYS[2]) -- units off the top: the holes' places no longer hold (memstore forgets them too)
  return given(g)
end

-- Sliding log (sliding_log.lua's format 2; a format 1 value holds no charge
-- of this release: an admitting call rewrites it): off the newest entry,
-- if its stamp is at and still in the window.
local vs, hdr = valueState(key)
if vs == 'bad' then return BAD end
if vs ~= 'ours' or string.sub(hdr, 1, 9) ~= string.char(LOG2) .. string.sub(tag, 2) then return given(0) end
local total, head, size, oldest, newest, base = struct.unpack('<i8i8i8i8i8i8', hdr, 10)
if head == size or newest ~= at or at <= math.max(now, at) - w then return given(0) end
local last = redis.call('GETRANGE', key, size - 16, size - 1)
if #last ~= 16 then return BAD end
local stamp, run = struct.unpack('<i8i8', last)
local prev, pstamp = base, nil
if size - 16 > head then
  local e = redis.call('GETRANGE', key, size - 32, size - 17)
  if #e ~= 16 then return BAD end
  pstamp, prev = struct.unpack('<i8i8', e)
end
if stamp ~= newest or run < 0 or run >= M or prev < 0 or prev >= M then return BAD end
local own = run - prev
if own < 0 then own = own + M end
if own < 1 or own > total then return BAD end
local g = math.min(n, own)
if g < own then -- the entry stays, with fewer hits
  local r = run - g
  if r < 0 then r = r + M end
  write('SETRANGE', key, size - 8, struct.pack('<i8', r))
  write('SETRANGE', key, 9, struct.pack('<i8', total - g))
elseif size - 16 == head then -- its only entry: the log is empty
  write('SETRANGE', key, 9, struct.pack('<i8i8', 0, size))
  write('PEXPIRE', key, ttl(now))
else -- the entry goes: the one before it is the newest
  write('SETRANGE', key, 9, struct.pack('<i8i8i8', total - g, head, size - 16))
  write('SETRANGE', key, 41, struct.pack('<i8', pstamp))
  write('PEXPIRE', key, ttl(pstamp + w))
end
return given(g)
