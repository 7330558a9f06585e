-- Shared head of every ringlimit script: what a value of ours looks like
-- (remote/doc.go, "Foreign and corrupt values").
-- BAD is the reply to a key that holds something the scripts did not write:
-- another type, another application's string, or corrupt bytes. It is
-- shorter than any decision's reply, so the client tells them apart.
local BAD = 'bad value'
local EXACT = 9007199254740992 -- 2^53: no field of ours reaches it

-- fits reports whether x is in [0, 2^53). (struct.unpack's i8 always gives
-- an integer.)
local function fits(x) return x >= 0 and x < EXACT end

-- A sliding log's value is in format 2 (tag byte LOG2: running counts, a
-- 73-byte header, free space after its entries; see sliding_log.lua) or in format 1 (tag byte 3: each
-- entry's own count, a 57-byte header), which nodes of the previous release
-- write and which is still read.
local LOG2, M = 131, 4503599627370496 -- M = 2^52: running counts are kept modulo M

-- wellFormed reports whether v, the first bytes (at most 73: the longest
-- header) of a string value of len bytes, could have been written by the
-- scripts: a known algorithm, a window of at least 1 ms, the length the
-- algorithm's state has (a sliding log's header agrees with it), and every
-- header field in range. It reads only what it has checked is there.
local function wellFormed(v, len)
  if #v < 9 then return false end
  local alg = string.byte(v, 1)
  if alg > 4 and alg ~= LOG2 then return false end
  local w = struct.unpack('<i8', v, 2)
  if w < 1 or w >= EXACT then return false end
  if alg == LOG2 then
    if len < 73 or #v < 73 then return false end
    local total, head, size, oldest, newest, base, src, moved = struct.unpack('<i8i8i8i8i8i8i8i8', v, 10)
    return size <= len and head >= 73 and head <= size and (size - head) % 16 == 0
      and fits(total) and fits(oldest) and fits(newest) and base >= 0 and base < M and fits(src) and fits(moved)
  end
  if alg == 3 then
    if len < 57 or #v < 57 then return false end
    local total, head, size, oldest, newest, ncount = struct.unpack('<i8i8i8i8i8i8', v, 10)
    return size == len and head >= 57 and head <= size and (size - head) % 16 == 0
      and fits(total) and fits(oldest) and fits(newest) and fits(ncount)
  end
  if alg == 4 or alg <= 1 and len == 33 then -- a bucket's value of 33 bytes carries its epoch
    if len ~= 33 or #v ~= 33 then return false end
    local a, b, c = struct.unpack('<i8i8i8', v, 10)
    return fits(a) and fits(b) and fits(c) and (alg == 4 or c > 0)
  end
  if len ~= 25 or #v ~= 25 then return false end
  local a, b = struct.unpack('<i8i8', v, 10)
  return fits(a) and fits(b)
end

-- valueState is the key's type: 'none' (absent), 'ours' (a well-formed
-- string) or 'bad' (anything else), and for 'ours' the value's first (at
-- most 73) bytes and its length. It never reads past them, and a
-- non-string key costs one STRLEN that fails.
local function valueState(k)
  local len = redis.pcall('STRLEN', k)
  if type(len) == 'table' then return 'bad', '' end -- WRONGTYPE: a hash, list, set, zset, ...
  if len == 0 then return 'none', '' end
  local head = redis.call('GETRANGE', k, 0, 72)
  if wellFormed(head, len) then return 'ours', head, len end
  return 'bad', ''
end

-- headOf reads a key that a bucket or a window decides on: nil if it is
-- absent (or an empty string, as for valueState), false if it holds
-- something we did not write, else its value (at most 73 bytes: a sliding
-- log's header, when a log is there). One GETRANGE, which a hash, list,
-- set or zset fails as GET does, and a STRLEN only for a longer value: a
-- call never copies a long log into Lua (issue 28).
local function headOf(k)
  local v = redis.pcall('GETRANGE', k, 0, 72)
  if type(v) == 'table' then return false end -- WRONGTYPE: a hash, list, set, zset, ...
  if v == '' then return nil end
  local len = #v
  if len == 73 then len = redis.call('STRLEN', k) end
  if not wellFormed(v, len) then return false end
  return v
end
