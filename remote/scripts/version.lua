-- A key's version (remote/version.go): 40 bytes, epoch, seq and three
-- origins, int64 little-endian each; epoch and seq below 2^53.
-- versionOK reports whether v, read from the store, is one.
local function versionOK(v)
  if #v ~= 40 then return false end
  local e, s = struct.unpack('<i8i8', v)
  return fits(e) and fits(s)
end
