-- Stores a state (write-behind, hand-off): KEYS[1] the key, ARGV[1] the
-- value (EncodeState), ARGV[2] the TTL in ms. It writes only over nothing or
-- a value of ours, never over another type or a foreign or corrupt string:
-- the reply is 1 if it wrote, 0 if it left the key alone.
if valueState(KEYS[1]) == 'bad' then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
