-- The signed, unconditional change of one counter, as Rate::charge in src/engine/rate.rs: a
-- sliding window's current count (a refund beyond it comes out of the previous window's), a GCRA
-- theoretical arrival time, a quota's consumption in its stored period. A counter may go over its
-- limit; the ordinary decision then refuses until it is paid back. Prepended to the scripts that
-- charge (decide.lua commits expired reservations, settle.lua settles one).
--
-- algo, limit, window as decide.lua takes them; start, stop: a calendar quota's period on the
-- instance's clock `at` (a first-use quota is charged only in the period stored for it).

local function clamp(x) return math.max(0, math.min(x, 4294967295)) end

-- floor(a x b / c) and its remainder, exactly, for whole a < 2^32, b < 2^52, 0 < c < 2^52, and a
-- quotient below 2^53. Lua's numbers are doubles, exact only below 2^53, and a x b reaches 2^69
-- (a count of 2^32 times a day's window in microseconds), so a product that large is never
-- formed: b is split into c's multiple and the rest (a x b = a x bq x c + a x br), and a x br
-- is added up bit by bit of a, its quotient kept below 2^32, its remainder below c and no sum
-- above 2c.
local function muldiv(a, b, c)
  local p = a * b
  -- Below 2^53 the product is exact, and so are fmod and the division of a multiple of c.
  if p < 9007199254740992 then
    local r = math.fmod(p, c)
    return (p - r) / c, r
  end
  local br = math.fmod(b, c)
  local whole = a * ((b - br) / c)
  local q, r, bit = 0, 0, 2147483648
  while bit >= 1 do
    q, r = q * 2, r * 2
    if r >= c then q, r = q + 1, r - c end
    if a >= bit then
      a = a - bit
      r = r + br
      if r >= c then q, r = q + 1, r - c end
    end
    bit = bit / 2
  end
  return whole + q, r
end

-- ceil(a x b / c), within muldiv's bounds: a sliding window's previous count weighted by what is
-- left of its share, rounded against the caller (as `sliding` in src/engine/rate.rs).
local function weigh(a, b, c)
  local q, r = muldiv(a, b, c)
  if r > 0 then q = q + 1 end
  return q
end

local function charge(key, now, delta, algo, limit, window, start, stop, at)
  if algo == 1 then
    local h = redis.call('HMGET', key, 'w', 'p', 'c')
    local w, prev0, curr0 = tonumber(h[1]), tonumber(h[2]) or 0, tonumber(h[3]) or 0
    local index = math.floor(now / window)
    local prev, curr = 0, 0
    if w == index then prev, curr = prev0, curr0 elseif w == index - 1 then prev = curr0 end
    local short = math.min(curr + delta, 0)
    redis.call('HSET', key, 'w', index, 'p', clamp(prev + short), 'c', clamp(curr + delta))
    redis.call('PEXPIRE', key, math.ceil(2 * window / 1000) + 1000)
  elseif algo == 2 then
    local span = math.floor(math.abs(delta) * window / limit)
    local tat = tonumber(redis.call('GET', key))
    local a
    if delta >= 0 then a = math.max(tat or 0, now) + span
    elseif tat then a = math.max(tat - span, 0)
    else return end
    redis.call('SET', key, string.format('%.0f', a), 'PX', math.max(math.ceil((a - now) / 1000), 0) + 1000)
  elseif algo >= 4 then
    local h = redis.call('HMGET', key, 'e', 'c')
    local e0, c0 = tonumber(h[1]), tonumber(h[2]) or 0
    if e0 and at < e0 then
      redis.call('HSET', key, 'c', clamp(c0 + delta))
    elseif algo == 4 and delta > 0 then
      redis.call('HSET', key, 's', string.format('%.0f', start), 'e', string.format('%.0f', stop), 'c', clamp(delta))
      redis.call('PEXPIREAT', key, math.floor(stop / 1000) + 60000)
    end
  end
end

-- A reservation's member is `lease:cost`.
local function reserved(member) return tonumber(string.match(member, ':(%d+)$')) or 0 end
