-- ClaimState: a key's load from the store, and its claim, in one script
-- (remote/doc.go, "Versions and claims"). Follows value.lua and
-- version.lua.
-- KEYS: the key's states, one per index, then its version, then its claim.
-- ARGV[1]: the claim (checked by the client): the member's incarnation
-- (int64 little-endian), then its name (1 to 255 bytes: MaxMemberLen).
-- ARGV[2]: the claim's TTL in ms. ARGV[3..]: the members whose claims no
-- longer stand.
-- Another member's claim stands unless it is one of ARGV[3..]: the reply is
-- then {that claim}, and nothing is read or written. Otherwise the claim
-- becomes ARGV[1]'s and the reply is {version, value, pttl, value, pttl,
-- ...}, one pair per state key ('' for none, pttl as PTTL gives it).
-- BAD if a key holds something not ours: nothing is written.
local n = #KEYS - 2
local vk, ck, me = KEYS[n + 1], KEYS[n + 2], ARGV[1]
local held = redis.pcall('GET', ck)
if type(held) == 'table' then return BAD end -- WRONGTYPE
if held then
  if #held < 9 or #held > 8 + 255 then return BAD end
  local who = string.sub(held, 9)
  if who ~= string.sub(me, 9) then
    local stands = true
    for i = 3, #ARGV do
      if ARGV[i] == who then stands = false; break end
    end
    if stands then return {held} end
  end
end
local ver = redis.pcall('GET', vk)
if type(ver) == 'table' or ver and not versionOK(ver) then return BAD end
local out = {ver or ''}
for i = 1, n do
  local v = redis.pcall('GET', KEYS[i])
  if type(v) == 'table' then return BAD end
  v = v or ''
  if v ~= '' and not wellFormed(string.sub(v, 1, 73), #v) then return BAD end
  out[2 * i] = v
  out[2 * i + 1] = redis.call('PTTL', KEYS[i])
end
redis.call('SET', ck, me, 'PX', ARGV[2])
return out
