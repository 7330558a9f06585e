-- Cancel of a bucket's reservation (remote/wait.go, as memstore's cancel:
-- internal/memstore/holes.go says how, and why it is exact; this is its
-- holesAt and cancelRuns, step for step): if its time to act has not
-- come, its units come back at once if no live units lie above them, else
-- they stay in the level as a hole, recorded in KEYS[2] (the key's hole
-- record), until the holes above the last live units reach the top, when
-- the level goes down to them. ARGV[3]: its n; ARGV[4], ARGV[5], ARGV[6],
-- ARGV[7]: its instant t, the level just after, its time to act (ms), and
-- the epoch of the state it was made in. The reply is the units given
-- back, or -1 if the key's state is not that one (gone, reset, started
-- afresh): nothing is given back.
-- The hole record, as little-endian int64s: epoch, window, limit, its
-- instant tau, the level then (top), the deep holes' bottom and units,
-- then up to MAXRUNS runs (lo, hi), the highest first, all as levels at
-- tau. Any other value there is no record: a string is overwritten,
-- another type left alone (and no hole kept).
local MAXRUNS = 16 -- memstore's maxRuns
local rt, rlevel, ract, repoch = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
if not st or epochOf() ~= repoch then return -1 end
local level, t = bucket()
if t >= ract then return 0 end
local top, el = rlevel, t - rt
if el > 0 then
  if el >= cdiv(rlevel, limit) then top = 0 else top = rlevel - el * limit end
end
local u = n * window
local hk = KEYS[2]
local raw = redis.pcall('GET', hk)
local writable = raw == false or type(raw) == 'string'

-- holesAt: the record's runs and deep holes as levels at t.
local los, his, dbot, dh = {}, {}, 0, 0
if type(raw) == 'string' and #raw >= 56 and (#raw - 56) % 16 == 0 and #raw <= 56 + 16 * MAXRUNS then
  local e, w, li, tau, rtop, db, dhh = struct.unpack('<i8i8i8i8i8i8i8', raw)
  local good = e == repoch and w == window and li == limit and fits(tau) and tau - t < 1048576
    and fits(rtop) and fits(db) and fits(dhh)
  local k = (#raw - 56) / 16
  local rl, rh = {}, {}
  if good then
    local prev = EXACT
    for i = 1, k do
      local a, b = struct.unpack('<i8i8', raw, 57 + (i - 1) * 16)
      if not (fits(a) and fits(b) and a < b and b < prev) then
        good = false
        break
      end
      rl[i], rh[i], prev = a, b, a
    end
  end
  if good and t - tau < cdiv(rtop, limit) then
    local s = (t - tau) * limit
    for i = 1, k do
      local a, b = rl[i] - s, rh[i] - s
      if b <= 0 then break end
      los[#los + 1], his[#his + 1] = math.max(a, 0), b
    end
    if dhh > 0 then
      dbot, dh = db - s, dhh
      if dbot < 0 then dh, dbot = dh + dbot, 0 end
    end
    if dh <= 0 then dbot, dh = 0, 0 end
  end
end

-- cancelRuns
local nl = level
if level < top then
  nl, los, his, dbot, dh = math.max(0, level - u), {}, {}, 0, 0
else
  local lo, hi = top - u, top
  local k = #los
  local i = 0 -- runs 1..i lie above the new hole
  while i < k and los[i + 1] >= hi do i = i + 1 end
  if (k > 0 and his[1] > level) or (i < k and his[i + 1] > lo) then
    los, his, dbot, dh, i, k = {}, {}, 0, 0, 0, 0
  end
  local j = i -- runs j+1..k lie below it
  if i > 0 and los[i] == hi then
    hi = his[i]
    i = i - 1
  end
  if j < k and his[j + 1] == lo then
    lo = los[j + 1]
    j = j + 1
  end
  local nlos, nhis = {}, {}
  for x = 1, i do nlos[#nlos + 1], nhis[#nhis + 1] = los[x], his[x] end
  nlos[#nlos + 1], nhis[#nhis + 1] = lo, hi
  for x = j + 1, k do nlos[#nlos + 1], nhis[#nhis + 1] = los[x], his[x] end
  los, his = nlos, nhis
  if his[1] == nl then -- nobody above it: it comes back
    nl = los[1]
    table.remove(los, 1)
    table.remove(his, 1)
  end
  -- All holes up to the top: they all come back.
  local bot, h = dbot, dh
  if h == 0 and #los > 0 then bot = los[1] end
  for x = 1, #los do
    bot, h = math.min(bot, los[x]), h + his[x] - los[x]
  end
  local span = nl - bot
  if h > 0 and h >= span then
    if h == span then nl = bot end
    los, his, dbot, dh = {}, {}, 0, 0
  end
  while #los > MAXRUNS do -- the deepest joins the sum
    local x = #los
    if dh == 0 then dbot = los[x] end
    dbot, dh = math.min(dbot, los[x]), dh + his[x] - los[x]
    los[x], his[x] = nil, nil
  end
end

if writable then
  if #los > 0 or dh > 0 then
    local parts = {struct.pack('<i8i8i8i8i8i8i8', repoch, window, limit, t, nl, dbot, dh)}
    for x = 1, #los do parts[#parts + 1] = struct.pack('<i8i8', los[x], his[x]) end
    write('SET', hk, table.concat(parts), 'PX', ttl(t + cdiv(nl, limit)))
  elseif raw then
    redis.call('DEL', hk)
  end
end
if nl ~= level then save(bucketValue(nl, t, repoch), t + cdiv(nl, limit)) end
return level - nl
