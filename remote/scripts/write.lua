-- WriteStates' writes of keys' states, each fenced by its key's version
-- (remote/doc.go, "Versions and claims"). Follows value.lua and
-- version.lua.
-- KEYS: per key, its version's key, then its states' keys.
-- ARGV: per key, its version (checked by the client: 40 bytes, epoch and
-- seq below 2^53), the number m of its states, then each state's value and
-- TTL in ms, in the order of its KEYS.
-- A key's states are written only if no version is stored or its (epoch,
-- seq) is above the stored one's, and then the version is stored too
-- (unless it is zero), living as long as the longest of them and of its
-- own TTL. A state key of another type is skipped, never written over.
-- Reply: one byte per key: '1' written, '0' stale (nothing written), 'b'
-- its version's key holds something not ours (nothing written).
local function fenced(vk, ver, k0, a0, m)
  local e, s = struct.unpack('<i8i8', ver)
  local old = redis.pcall('GET', vk)
  if type(old) == 'table' then return 'b' end -- WRONGTYPE
  if old then
    if not versionOK(old) then return 'b' end
    local oe, os_ = struct.unpack('<i8i8', old)
    if e < oe or e == oe and s <= os_ then return '0' end
  end
  local keep = 0
  for j = 0, m - 1 do
    local k, ms = KEYS[k0 + j], ARGV[a0 + 2 * j + 1]
    -- SET … GET refuses another type (WRONGTYPE) and writes nothing; it
    -- costs one command less than a STRLEN before the SET.
    redis.pcall('SET', k, ARGV[a0 + 2 * j], 'PX', ms, 'GET')
    keep = math.max(keep, tonumber(ms))
  end
  if e > 0 or s > 0 then
    if old then keep = math.max(keep, redis.call('PTTL', vk)) end
    redis.call('SET', vk, ver, 'PX', string.format('%d', keep))
  end
  return '1'
end

local out, ki, ai = {}, 1, 1
while ai <= #ARGV do
  local m = tonumber(ARGV[ai + 1])
  out[#out + 1] = fenced(KEYS[ki], ARGV[ai], ki + 1, ai + 2, m)
  ki, ai = ki + 1 + m, ai + 2 + 2 * m
end
return table.concat(out)
