-- Reservation on a bucket (remote/wait.go, as local/wait.go's reserve): the
-- n hits go in now, past the capacity if need be, and the reply says when
-- they act: a token bucket's once its level is back within the capacity, a
-- leaky bucket's when the queue ahead of them has drained. ARGV[4]: the
-- longest wait the caller takes, in ms from now, or '' for any. Nothing is
-- written unless the reservation is made.
-- Reply: status (1 reserved, 2 past the caller's wait, 3 past the queue's
-- reach), the wait in ms from now, the level just after and its instant t,
-- as four little-endian int64s.
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
if status == 1 then save(tag .. struct.pack('<i8i8', after, t), t + cdiv(after, limit)) end
return struct.pack('<i8i8i8i8', status, t - now + wait, after, t)
