-- Sliding log. The value is a 57-byte header, then 16-byte entries (stamp
-- ms, count), oldest first, stamps strictly increasing:
--   tag (9) | total | head | size | oldest | newest | newest's count
-- total is the sum of the live entries' counts; the live entries run from
-- byte offset head to size (the value's length); entries before head were
-- pruned and are dropped when they outweigh the live ones. oldest and
-- newest are the stamps at head and at the end. So a call reads the header
-- and only the entries it prunes, and appends one entry in place: its cost
-- does not grow with the log.
local HDR, CHUNK = 57, 16 * 32
local t, total = now, 0
local head, size, oldest, newest, ncount = HDR, HDR, 0, 0, 0
local vs, hdr = valueState(key)
if vs == 'bad' then return BAD end
if #hdr == HDR and string.sub(hdr, 1, 9) == tag then
  total, head, size, oldest, newest, ncount = struct.unpack('<i8i8i8i8i8i8', hdr, 10)
  t = math.max(now, newest)
  local cutoff = t - window
  if newest <= cutoff then -- every stamp has left the window
    total, head = 0, size
  elseif oldest <= cutoff then -- drop the stamps at or before the cutoff
    -- Bounded by the entries (head only grows, up to size); entries that
    -- disagree with the header make the value BAD before anything is written.
    local done = false
    while not done and head < size do
      local chunk = redis.call('GETRANGE', key, head, head + CHUNK - 1)
      if #chunk == 0 then return BAD end
      for p = 1, #chunk, 16 do
        local s, c = struct.unpack('<i8i8', chunk, p)
        if c < 1 or c >= EXACT or not fits(s) then return BAD end
        if s > cutoff then
          oldest, done = s, true
          break
        end
        total, head = total - c, head + 16
      end
    end
    if total < 0 or (head == size) ~= (total == 0) then return BAD end
  end
end
local count = total
local allowed, retry = 0, 0
if count + n <= limit then
  allowed = 1
  if consume then
    -- Every read comes before the first write (AllowAll holds the writes).
    local px = ttl(t + window)
    if head == size then -- nothing live: write afresh
      total, head, size, oldest, newest, ncount = n, HDR, HDR + 16, t, t, n
      write('SET', key, tag .. struct.pack('<i8i8i8i8i8i8i8i8', total, head, size, oldest, newest, ncount, t, n), 'PX', px)
    else
      -- Compact (drop the pruned prefix) when it outweighs the live entries,
      -- the new one counted: read them now, write them whole below.
      local dead, grow, live = head - HDR, 16, nil
      if newest == t then grow = 0 end
      local compact = dead >= 1024 and dead > size + grow - head
      if compact then live = redis.call('GETRANGE', key, head, size - 1) end
      if newest == t then -- same ms as the newest entry: add to it
        ncount = ncount + n
        if compact then
          live = string.sub(live, 1, -9) .. struct.pack('<i8', ncount)
        else
          write('SETRANGE', key, size - 8, struct.pack('<i8', ncount))
        end
      else
        if compact then
          live = live .. struct.pack('<i8i8', t, n)
        else
          write('APPEND', key, struct.pack('<i8i8', t, n))
        end
        size, newest, ncount = size + 16, t, n
      end
      total = total + n
      if compact then
        head, size = HDR, HDR + (size - head)
        write('SET', key, tag .. struct.pack('<i8i8i8i8i8i8', total, head, size, oldest, newest, ncount) .. live, 'PX', px)
      else
        write('SETRANGE', key, 9, struct.pack('<i8i8i8i8i8i8', total, head, size, oldest, newest, ncount))
        write('PEXPIRE', key, px)
      end
    end
    count = total
  end
else
  -- The oldest count-(limit-n) stamps must leave the window first.
  local k, p, s = count - (limit - n), head, newest
  while k > 0 and p < size do
    local chunk = redis.call('GETRANGE', key, p, p + CHUNK - 1)
    if #chunk == 0 then return BAD end
    for q = 1, #chunk, 16 do
      local c
      s, c = struct.unpack('<i8i8', chunk, q)
      if c < 1 or c >= EXACT or not fits(s) then return BAD end
      k = k - c
      if k <= 0 then break end
    end
    p = p + CHUNK
  end
  if k > 0 then return BAD end -- the entries hold fewer hits than the header says
  retry = s + window - t
end
local reset = 0
if count > 0 then reset = newest + window - t end
return reply(allowed, math.max(0, limit - count), retry, reset, 0)
