-- Reset: deletes KEYS[1] if it holds a value of ours; leaves another type or
-- a foreign or corrupt string alone. The reply is 1 if it deleted, else 0.
if valueState(KEYS[1]) ~= 'ours' then return 0 end
return redis.call('DEL', KEYS[1])
