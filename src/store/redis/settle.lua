-- Settles one bound's charge when its response head arrives (or, for a response that never came,
-- when the instance gave up on it). A `count-when` reservation still pending is removed and, if
-- the response counts, committed; one that expired meanwhile was committed by a decision (the
-- safe side) and stays so. A `settle` bound is then charged what the upstream reported beyond
-- the estimate (signed).
--
-- KEYS[1]  the counter; its reservations are the sorted set KEYS[1] .. ':r' (the same slot)
-- ARGV     algorithm, limit, window (us; a quota's period start), a quota's period end (us),
--          the instance's time (us), reservation member ('' when none), cost, counted (1|0),
--          used (-1: the estimate stands)
-- returns  the charge made

local key = KEYS[1]
local algo, limit, window, stop, at = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]),
  tonumber(ARGV[4]), tonumber(ARGV[5])
local member, cost, counted, used = ARGV[6], tonumber(ARGV[7]), ARGV[8] == '1', tonumber(ARGV[9])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local delta = 0
if counted and used >= 0 then delta = used - cost end
if member ~= '' and redis.call('ZREM', key .. ':r', member) == 1 and counted then
  delta = delta + cost
end
if delta ~= 0 then charge(key, now, delta, algo, limit, window, window, stop, at) end
return delta
