-- The single-rule scripts' read of KEYS[1], after the prelude.
-- A key that holds something we did not write gets BAD and is never written.
if string.byte(rule, 1) ~= 3 then
  local raw = headOf(key)
  if raw == false then return BAD end
  if raw and string.sub(raw, 1, 9) == tag then st = raw end
end
