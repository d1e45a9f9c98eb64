-- An operator's change to what a quota's caller consumed in a period the instance worked out
-- (a calendar period, or a first-use one from the caller's anchor). A later period already
-- stored (an instance whose clock runs ahead rolled to it) is the one changed.
--
-- KEYS[1]  the counter
-- ARGV     period start (us), period end (us), anchor (us; 0 for a calendar quota), 'set' or
--          'add', the amount
-- returns  {consumed before, consumed after}

local key = KEYS[1]
local start, stop, anchor = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local amount = tonumber(ARGV[5])
local h = redis.call('HMGET', key, 's', 'e', 'c')
local s0, e0, c0 = tonumber(h[1]), tonumber(h[2]), tonumber(h[3]) or 0
local before = 0
if s0 and s0 >= start then
  before, start = c0, s0
  if e0 and e0 > stop then stop = e0 end
end
local after = amount
if ARGV[4] == 'add' then after = before + amount end
after = math.max(0, math.min(after, 4294967295))
redis.call('HSET', key, 's', string.format('%.0f', start), 'e', string.format('%.0f', stop), 'c', after)
-- The first anchor stays: a caller's first use is a fact.
if anchor > 0 then redis.call('HSETNX', key, 'a', string.format('%.0f', anchor)) end
redis.call('PEXPIREAT', key, math.floor(stop / 1000) + 60000)
return {before, after}
