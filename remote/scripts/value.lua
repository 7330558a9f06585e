-- Shared head of every ringlimit script: what a value of ours looks like
-- (remote/doc.go, "Foreign and corrupt values").
-- BAD is the reply to a key that holds something the scripts did not write:
-- another type, another application's string, or corrupt bytes. It is
-- shorter than any decision's reply, so the client tells them apart.
local BAD = 'bad value'
local EXACT = 9007199254740992 -- 2^53: no field of ours reaches it

-- inRange reports whether every argument is an integer in [0, 2^53).
local function inRange(...)
  for i = 1, select('#', ...) do
    local x = select(i, ...)
    if x < 0 or x >= EXACT or x ~= math.floor(x) then return false end
  end
  return true
end

-- wellFormed reports whether v, the first bytes (at most 57: the longest
-- header) of a string value of len bytes, could have been written by the
-- scripts: a known algorithm, a window of at least 1 ms, the length the
-- algorithm's state has (a sliding log's header agrees with it), and every
-- header field in range. It reads only what it has checked is there.
local function wellFormed(v, len)
  if #v < 9 then return false end
  local alg = string.byte(v, 1)
  local w = struct.unpack('<i8', v, 2)
  if alg > 4 or w < 1 or not inRange(w) then return false end
  if alg == 3 then
    if len < 57 or #v < 57 then return false end
    local total, head, size, oldest, newest, ncount = struct.unpack('<i8i8i8i8i8i8', v, 10)
    return size == len and head >= 57 and head <= size and (size - head) % 16 == 0
      and inRange(total, oldest, newest, ncount)
  end
  local want = 25
  if alg == 4 then want = 33 end
  if len ~= want or #v ~= want then return false end
  if alg == 4 then
    local a, b, c = struct.unpack('<i8i8i8', v, 10)
    return inRange(a, b, c)
  end
  local a, b = struct.unpack('<i8i8', v, 10)
  return inRange(a, b)
end

-- valueState is the key's type: 'none' (absent), 'ours' (a well-formed
-- string) or 'bad' (anything else), and for 'ours' the value's first (at
-- most 57) bytes. It never reads past them, and a non-string key costs one
-- STRLEN that fails.
local function valueState(k)
  local len = redis.pcall('STRLEN', k)
  if type(len) == 'table' then return 'bad', '' end -- WRONGTYPE: a hash, list, set, zset, ...
  if len == 0 then return 'none', '' end
  local head = redis.call('GETRANGE', k, 0, 56)
  if wellFormed(head, len) then return 'ours', head end
  return 'bad', ''
end
