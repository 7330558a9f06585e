-- Reset: deletes each of KEYS (a key's states, one per index of AllowAll)
-- that holds a value of ours; leaves another type or a foreign or corrupt
-- string alone. The reply is the number deleted.
local n = 0
for _, k in ipairs(KEYS) do
  if valueState(k) == 'ours' then n = n + redis.call('DEL', k) end
end
return n
