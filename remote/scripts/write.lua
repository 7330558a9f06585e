-- WriteStates' write of one key's states, fenced by the key's version
-- (remote/doc.go, "Versions and claims"). Follows value.lua and
-- version.lua.
-- KEYS[1]: the key's version. KEYS[2..]: the states' keys.
-- ARGV[1]: the states' version (checked by the client: 40 bytes, epoch and
-- seq below 2^53). ARGV[2i-2], ARGV[2i-1]: the value for KEYS[i] and its
-- TTL in ms.
-- The states are written only if no version is stored or ARGV[1]'s (epoch,
-- seq) is above the stored one's, and then the version is stored too
-- (unless it is zero), living as long as the longest of them and of its
-- own TTL. A key of another type is skipped, never written over.
-- Reply: 1 written, 0 stale (nothing written), BAD if the version's key
-- holds something not ours (nothing written).
local vk, ver = KEYS[1], ARGV[1]
local e, s = struct.unpack('<i8i8', ver)
local old = redis.pcall('GET', vk)
if type(old) == 'table' then return BAD end -- WRONGTYPE
if old then
  if not versionOK(old) then return BAD end
  local oe, os_ = struct.unpack('<i8i8', old)
  if e < oe or e == oe and s <= os_ then return 0 end
end
local keep = 0
for i = 2, #KEYS do
  local k, ms = KEYS[i], ARGV[2 * i - 1]
  if type(redis.pcall('STRLEN', k)) ~= 'table' then
    redis.call('SET', k, ARGV[2 * i - 2], 'PX', ms)
  end
  keep = math.max(keep, tonumber(ms))
end
if e > 0 or s > 0 then
  keep = math.max(keep, redis.call('PTTL', vk))
  redis.call('SET', vk, ver, 'PX', string.format('%d', keep))
end
return 1
