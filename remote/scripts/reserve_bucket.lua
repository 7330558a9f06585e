-- Reservation on a bucket (remote/wait.go, as local/wait.go's reserve): the
-- n hits go in now, past the capacity if need be, and the reply says when
-- they act: a token bucket's once its level is back within the capacity, a
-- leaky bucket's when the queue ahead of them has drained. ARGV[4]: the
-- longest wait the caller takes, in ms from now, or '' for any. Nothing is
-- written unless the reservation is made.
-- Reply: status (1 reserved, 2 past the caller's wait, 3 past the queue's
-- reach), the wait in ms from now, the level just after and its instant t,
-- and the state's epoch (the cancel names it), as five little-endian
-- int64s. A state without an epoch gets one: the server's clock in µs,
-- which no earlier state of the key took (a script takes longer than 1 µs).
-- It stays below 2^53 until the year 2255.
local MAXQ = 2251799813685248 -- 2^51 units past the capacity: local/wait.go's maxQueue
local level, t = bucket()
local after, full = level + n * window, burst * window
local wait
if string.byte(rule, 1) == 0 then
  wait = math.max(0, cdiv(after - full, limit))
else
  wait = cdiv(level, limit)
end
local maxwait = tonumber(ARGV[4])
local status = 1
if maxwait and t - now + wait > maxwait then
  status = 2
elseif wait > 0 and after > full + MAXQ then
  status = 3
end
local epoch = epochOf()
if status == 1 then
  if epoch == 0 then
    local tm = redis.call('TIME')
    epoch = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
  end
  save(bucketValue(after, t, epoch), t + cdiv(after, limit))
end
return struct.pack('<i8i8i8i8i8', status, t - now + wait, after, t, epoch)
