-- Sliding log. Format 2 (tag byte LOG2, value.lua): a 73-byte header, then
-- 16-byte entries (stamp ms, running count), oldest first, stamps strictly
-- increasing, then free space:
--   tag (9) | total | head | size | oldest | newest | base | src | moved
-- An entry's running count is the hits of every entry up to it, itself
-- included, modulo M, counted from base: the running count just before the
-- entry at head. total is the hits of the live entries, which run from byte
-- offset head to size; entries before head were pruned, and the bytes from
-- size to the value's end are free (a compaction left them). oldest and
-- newest are the stamps at head and at the end.
--
-- So no call walks the log (issue 28): a call reads the header, finds the
-- first stamp in the window and, when it denies, the entry its RetryAfter
-- waits for by halving (a few dozen reads of 16 bytes for a million
-- entries), and writes one entry in place.
--
-- The pruned prefix is reclaimed when it outweighs the live entries (by a
-- margin, see below): a value of at most KEEP bytes whose live entries fill
-- at most CH bytes is written afresh; any other moves its live entries down
-- to the header in place, at most CH bytes a call, never over an entry not
-- yet pruned: entries src to moved have been copied to the header's end. So
-- no call frees more than KEEP bytes (a free of a larger one held the
-- server for ms): a large value keeps its length, and grows only when its
-- entries reach its end; it goes when its TTL ends.
--
-- A format 1 value (tag byte 3, written by the previous release: each
-- entry's own count, and a 57-byte header total | head | size | oldest |
-- newest | newest's count) is read as that release read it, walking its
-- entries, and the first call that admits hits rewrites it in format 2.
local HDR, PROBE, CH, KEEP = 73, 32, 65536, 4194304
local tag2 = string.char(LOG2) .. string.sub(tag, 2)
local t, count, allowed, retry = now, 0, 0, 0
local total, head, size, oldest, newest, base, src, moved = 0, HDR, HDR, 0, 0, 0, 0, 0
local vs, hdr, len = valueState(key)
if vs == 'bad' then return BAD end
local kind = string.sub(hdr, 1, 9)
if vs == 'ours' and kind == tag then -- format 1
  local CHUNK, ncount = 16 * 32, 0
  total, head, size, oldest, newest, ncount = struct.unpack('<i8i8i8i8i8i8', hdr, 10)
  t = math.max(now, newest)
  local cutoff = t - window
  if newest <= cutoff then -- every stamp has left the window
    total, head = 0, size
  elseif oldest <= cutoff then -- drop the stamps at or before the cutoff
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
  count = total
  if count + n <= limit then
    allowed = 1
    if consume then -- rewrite the live entries in format 2
      local parts, run, p = {}, 0, head
      while p < size do
        local chunk = redis.call('GETRANGE', key, p, p + CHUNK - 1)
        if #chunk == 0 or #chunk % 16 ~= 0 then return BAD end
        for q = 1, #chunk, 16 do
          local s, c = struct.unpack('<i8i8', chunk, q)
          if c < 1 or c >= EXACT or not fits(s) then return BAD end
          run = run + c
          if run >= M then return BAD end
          parts[#parts + 1] = struct.pack('<i8i8', s, run)
        end
        p = p + #chunk
      end
      if run ~= total then return BAD end
      if head == size then oldest = t end
      if newest == t and #parts > 0 then parts[#parts] = nil end
      total, newest = total + n, t
      parts[#parts + 1] = struct.pack('<i8i8', t, total)
      write('SET', key, tag2 .. struct.pack('<i8i8i8i8i8i8i8i8', total, HDR, HDR + 16 * #parts, oldest, newest, 0, 0, 0)
        .. table.concat(parts), 'PX', ttl(t + window))
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
else
  -- at reads the entry at offset off: its stamp and running count, or nil
  -- if it is not there or out of range.
  local function at(off)
    local e = redis.call('GETRANGE', key, off, off + 15)
    if #e ~= 16 then return nil end
    local s, c = struct.unpack('<i8i8', e)
    if not fits(s) or c < 0 or c >= M then return nil end
    return s, c
  end
  -- first returns the offset, stamp and running count of the first entry
  -- in (lo, hi] (offsets of entries) for which ok holds, given that it
  -- holds at hi and not at lo (ok is monotone along a log we wrote), and
  -- the running count of the entry before it if it read it; nil for a
  -- value that contradicts that. It reads the PROBE entries after lo in one
  -- piece (most calls prune a few), then halves the rest: at most log2 of
  -- the entries reads, whatever the value holds.
  local function first(lo, hi, ok)
    local e = redis.call('GETRANGE', key, lo + 16, math.min(hi, lo + 16 * PROBE) + 15)
    if #e == 0 or #e % 16 ~= 0 then return nil end
    local lc
    for q = 1, #e, 16 do
      local s, c = struct.unpack('<i8i8', e, q)
      if not fits(s) or c < 0 or c >= M then return nil end
      if ok(s, c) then return lo + q + 15, s, c, lc end
      lc = c
    end
    lo = lo + #e
    if lo >= hi then return nil end
    local s, c = at(hi)
    if not s then return nil end
    while hi - lo > 16 do
      local mid = lo + 16 * math.floor((hi - lo) / 32)
      local ms, mc = at(mid)
      if not ms then return nil end
      if ok(ms, mc) then hi, s, c = mid, ms, mc else lo, lc = mid, mc end
    end
    return hi, s, c, lc
  end
  if vs == 'ours' and kind == tag2 then
    total, head, size, oldest, newest, base, src, moved = struct.unpack('<i8i8i8i8i8i8i8i8', hdr, 10)
    if moved == 0 then
      if src ~= 0 then return BAD end
    elseif src <= HDR or moved < src or moved > size or (src - HDR) % 16 ~= 0 or (moved - HDR) % 16 ~= 0
      or HDR + moved - src > head then
      return BAD
    end
    t = math.max(now, newest)
    local cutoff = t - window
    if newest <= cutoff then -- every stamp has left the window
      total, head = 0, size
    elseif oldest <= cutoff then -- the first stamp after the cutoff is the new head
      -- (Searched from the entry at head on, so the one before it is read.)
      local j, s, _, c = first(head - 16, size - 16, function(s) return s > cutoff end)
      if not j or j == head then return BAD end -- head's stamp is oldest, at or before the cutoff
      local left = math.fmod(base + total, M) - c -- the running count at the end, less c
      if left < 0 then left = left + M end
      if left > total then return BAD end
      total, head, oldest, base = left, j, s, c
    end
    if (head == size) ~= (total == 0) then return BAD end
  end
  count = total
  if count + n <= limit then
    allowed = 1
    if consume then
      -- Every read comes before the first write (AllowAll holds the writes).
      local px = ttl(t + window)
      local entry = struct.pack('<i8i8', t, n)
      if head == size and (kind ~= tag2 or len <= KEEP) then -- nothing live: write afresh
        total, head, size, oldest, newest = n, HDR, HDR + 16, t, t
        write('SET', key, tag2 .. struct.pack('<i8i8i8i8i8i8i8i8', total, head, size, oldest, newest, 0, 0, 0) .. entry, 'PX', px)
      elseif head == size then -- nothing live in a large value: start over in place
        total, head, size, oldest, newest = n, HDR, HDR + 16, t, t
        write('SETRANGE', key, 9, struct.pack('<i8i8i8i8i8i8i8i8', total, head, size, oldest, newest, 0, 0, 0) .. entry)
        write('PEXPIRE', key, px)
      else
        entry = struct.pack('<i8i8', t, math.fmod(base + total + n, M))
        local merge, sz0 = newest == t, size
        if not merge then size = size + 16 end
        newest, total = t, total + n
        local dead, live = head - HDR, size - head
        local whole, copy, dst, fin = nil, nil, 0, false
        -- Reclaim the pruned prefix once it outweighs the live entries by
        -- what a move may add (an entry a call, for live / (CH - 16) + 2
        -- calls), so that a move always finds room below head.
        if moved == 0 and dead >= 1024 and dead > live + 16 * (math.floor(live / (CH - 16)) + 2) then
          if live <= CH and len <= KEEP then -- few entries, a small value: write them afresh
            local keep = sz0 - 1
            if merge then keep = keep - 16 end
            whole = redis.call('GETRANGE', key, head, keep)
          else
            src, moved = head, head
          end
        end
        if moved ~= 0 then
          -- Copy entries moved.. down to HDR + moved - src, at most CH bytes
          -- and never past head. The entries before e are final; the
          -- newest one is written last, from its value here.
          local e = sz0
          if merge then e = sz0 - 16 end
          local ce = math.min(moved + CH, e, head - HDR + src)
          dst = HDR + moved - src
          if ce > moved then
            copy = redis.call('GETRANGE', key, moved, ce - 1)
            if #copy ~= ce - moved then return BAD end
            moved = ce
          end
          fin = moved == e
        end
        if whole then
          write('SET', key, tag2 .. struct.pack('<i8i8i8i8i8i8i8i8', total, HDR, HDR + live, oldest, newest, base, 0, 0)
            .. whole .. entry, 'PX', px)
        elseif fin then -- every entry is in place below: they become the log
          write('SETRANGE', key, dst, (copy or '') .. entry)
          write('SETRANGE', key, 9, struct.pack('<i8i8i8i8i8i8i8i8', total, HDR + head - src, HDR + size - src, oldest, newest, base, 0, 0))
          write('PEXPIRE', key, px)
        else
          if copy then write('SETRANGE', key, dst, copy) end
          if merge then
            write('SETRANGE', key, sz0 - 16, entry)
          else
            write('SETRANGE', key, sz0, entry)
          end
          write('SETRANGE', key, 9, struct.pack('<i8i8i8i8i8i8i8i8', total, head, size, oldest, newest, base, src, moved))
          write('PEXPIRE', key, px)
        end
      end
      count = total
    end
  else
    -- The oldest count-(limit-n) stamps must leave the window first: the
    -- first entry whose running count, from base, reaches that many.
    local k = count - (limit - n)
    local j, s = first(head - 16, size - 16, function(_, c)
      local d = c - base
      if d < 0 then d = d + M end
      return d >= k
    end)
    if not j then return BAD end
    retry = s + window - t
  end
end
local reset = 0
if count > 0 then reset = newest + window - t end
return reply(allowed, math.max(0, limit - count), retry, reset, 0)
