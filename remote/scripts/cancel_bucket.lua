-- Cancel of a bucket's reservation (remote/wait.go, as local/wait.go's
-- cancel): gives back the reservation's units that no later one was
-- promised, if its time to act has not come. ARGV[3]: its n; ARGV[4],
-- ARGV[5], ARGV[6]: its instant t, the level just after, and its time to
-- act (ms). The reply is the units given back.
if not st then return 0 end
local rt, rlevel, ract = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local level, t = bucket()
if t >= ract then return 0 end
local el, expected = t - rt, rlevel
if el > 0 then
  if el >= cdiv(rlevel, limit) then expected = 0 else expected = rlevel - el * limit end
end
local give = n * window - math.max(0, level - expected)
if give <= 0 then return 0 end
level = math.max(0, level - give)
save(tag .. struct.pack('<i8i8', level, t), t + cdiv(level, limit))
return give
