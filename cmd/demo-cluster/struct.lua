-- A pure-Lua stand-in for the struct library that Redis and Valkey give their
-- scripts and miniredis lacks: pack and unpack of little-endian int64s
-- ('<' followed by any number of 'i8'), exact for integers below 2^53.
-- The embedded store prepends it to every script as one line of locals.
local struct = (function()
  local tunpack = unpack
  local function count(fmt)
    local n = 0
    for c in string.gmatch(string.sub(fmt, 2), '..') do
      if c ~= 'i8' then error('struct shim: unsupported format ' .. fmt) end
      n = n + 1
    end
    if string.sub(fmt, 1, 1) ~= '<' then error('struct shim: unsupported format ' .. fmt) end
    return n
  end
  local function pack(fmt, ...)
    local args, out = {...}, {}
    for i = 1, count(fmt) do
      local v = tonumber(args[i])
      local neg = v < 0
      if neg then v = -v - 1 end
      for _ = 1, 8 do
        local b = math.fmod(v, 256)
        v = (v - b) / 256
        if neg then b = 255 - b end
        out[#out + 1] = string.char(b)
      end
    end
    return table.concat(out)
  end
  local function unpack(fmt, s, pos)
    pos = pos or 1
    local out = {}
    for i = 1, count(fmt) do
      local neg = string.byte(s, pos + 7) >= 128
      local v = 0
      for j = pos + 7, pos, -1 do
        local b = string.byte(s, j)
        if neg then b = 255 - b end
        v = v * 256 + b
      end
      if neg then v = -v - 1 end
      out[i] = v
      pos = pos + 8
    end
    out[#out + 1] = pos
    return tunpack(out)
  end
  return {pack = pack, unpack = unpack}
end)()
