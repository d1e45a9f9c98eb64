-- The signed, unconditional change of one counter, as Rate::charge in src/engine/rate.rs: a
-- sliding window's current count (a refund beyond it comes out of the previous window's), a GCRA
-- theoretical arrival time, a quota's consumption in its stored period. A counter may go over its
-- limit; the ordinary decision then refuses until it is paid back. Prepended to the scripts that
-- charge (decide.lua commits expired reservations, settle.lua settles one) and to undo.lua, which
-- reads and writes a token bucket's time as they do.
--
-- algo, limit, window as decide.lua takes them; start, stop: a calendar quota's period on the
-- instance's clock `at` (a first-use quota is charged only in the period stored for it).

local function clamp(x) return math.max(0, math.min(x, 4294967295)) end

-- floor(a x b / c) and its remainder, exactly, for whole a < 2^53, b < 2^52, 0 < c < 2^52, and a
-- quotient below 2^53. Lua's numbers are doubles, exact only below 2^53, and a x b reaches 2^69
-- (a count of 2^32 times a day's window in microseconds), so a product that large is never
-- formed: b is split into c's multiple and the rest (a x b = a x bq x c + a x br), and a x br
-- is added up bit by bit of a, its remainder kept below c and no sum above 2c.
local function muldiv(a, b, c)
  local p = a * b
  -- Below 2^53 the product is exact, and so are fmod and the division of a multiple of c.
  if p < 9007199254740992 then
    local r = math.fmod(p, c)
    return (p - r) / c, r
  end
  local br = math.fmod(b, c)
  local whole = a * ((b - br) / c)
  local q, r, bit = 0, 0, 1
  while bit * 2 <= a do bit = bit * 2 end
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

-- A token bucket's theoretical arrival time, exactly: q whole microseconds and f limit-ths of
-- one (0 <= f < limit), as the engine keeps it in nanoseconds (`Tat` in src/engine/rate.rs). A
-- token is window / limit, seldom whole microseconds (3 per 10 s: 3,333,333 1/3), and rounding
-- it down let more through than the limit.
--
-- Stored as one string: the time rounded up to a whole microsecond and, when that added
-- anything, a dot and by how many limit-ths the exact time falls short of it ('11.2' is 10 1/3
-- at a limit of 3). The layout is for a rolling deploy, where instances running the scripts
-- before this one share the key: a whole number (their format) reads here as exact, and their
-- `tonumber` reads '11.2' as 11.2, no earlier than the exact time: neither misreads the other
-- in the caller's favour. A fraction that cannot be this bucket's reads as 0, the later time.
local function tat_get(key, limit)
  local v = redis.call('GET', key)
  if not v then return nil, 0 end
  local up, short = string.match(v, '^(%d+)%.(%d+)$')
  if not up then return tonumber(v) or 0, 0 end
  up, short = tonumber(up), tonumber(short)
  if short == 0 or short >= limit then return up, 0 end
  return up - 1, limit - short
end

-- Writes q + f / limit; with `now`, to expire once the bucket is full again, else keeping the ttl.
local function tat_set(key, q, f, limit, now)
  local v = string.format('%.0f', q)
  if f > 0 then v = string.format('%.0f.%.0f', q + 1, limit - f) end
  if now then
    local up = q
    if f > 0 then up = q + 1 end
    redis.call('SET', key, v, 'PX', math.max(math.ceil((up - now) / 1000), 0) + 1000)
  else
    redis.call('SET', key, v, 'KEEPTTL')
  end
end

-- (q, f) moved n tokens (n x window / limit) on, or back when `back`.
local function tat_move(q, f, n, window, limit, back)
  local dq, df = muldiv(n, window, limit)
  if back then
    q, f = q - dq, f - df
    if f < 0 then q, f = q - 1, f + limit end
  else
    q, f = q + dq, f + df
    if f >= limit then q, f = q + 1, f - limit end
  end
  return q, f
end

-- Whether q1 + f1 / limit <= q2 + f2 / limit.
local function tat_le(q1, f1, q2, f2) return q1 < q2 or (q1 == q2 and f1 <= f2) end

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
    local q, f = tat_get(key, limit)
    if delta >= 0 then
      q = q or 0
      if q < now then q, f = now, 0 end
      q, f = tat_move(q, f, delta, window, limit)
    elseif q then
      q, f = tat_move(q, f, -delta, window, limit, true)
      if q < 0 then q, f = 0, 0 end
    else return end
    tat_set(key, q, f, limit, now)
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
