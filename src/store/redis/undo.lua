-- Takes back what one decision committed when it was refused after all (by a bound in another
-- hash slot, or by a local fallback). Best effort: concurrent requests may have moved on.
--
-- KEYS[i]  the counter of check i
-- ARGV     7 values per check: algorithm, limit, window (us; a calendar quota's period start, a
--          first-use quota's period end), cost,
--          the decision's time (us),
--          lease id, reservation member ('' when none: a `count-when` bound reserved, and only
--          the reservation is taken back)

for i = 1, #KEYS do
  local a = (i - 1) * 7
  local algo = tonumber(ARGV[a + 1])
  local limit = tonumber(ARGV[a + 2])
  local window = tonumber(ARGV[a + 3])
  local cost = tonumber(ARGV[a + 4])
  local at = tonumber(ARGV[a + 5])
  local key = KEYS[i]
  if ARGV[a + 7] ~= '' then
    redis.call('ZREM', key .. ':r', ARGV[a + 7])
  elseif algo == 1 then
    -- Only if the window the request was counted in is still the current one.
    if tonumber(redis.call('HGET', key, 'w')) == math.floor(at / window) then
      local c = tonumber(redis.call('HGET', key, 'c')) or 0
      redis.call('HSET', key, 'c', math.max(c - cost, 0))
    end
  elseif algo == 4 then
    -- Only if the period the request was counted in is still the one kept.
    if tonumber(redis.call('HGET', key, 's')) == window then
      local c = tonumber(redis.call('HGET', key, 'c')) or 0
      redis.call('HSET', key, 'c', math.max(c - cost, 0))
    end
  elseif algo == 5 or algo == 6 then
    -- A first-use period is known by its end: the instance learnt it from the answer.
    if tonumber(redis.call('HGET', key, 'e')) == window then
      local c = tonumber(redis.call('HGET', key, 'c')) or 0
      redis.call('HSET', key, 'c', math.max(c - cost, 0))
    end
  elseif algo == 2 then
    local q, f = tat_get(key, limit)
    if q then
      q, f = tat_move(q, f, cost, window, limit, true)
      if q < at then q, f = at, 0 end
      tat_set(key, q, f, limit)
    end
  else
    for j = 1, cost do
      redis.call('ZREM', key, ARGV[a + 6] .. ':' .. j)
    end
  end
end
return #KEYS
