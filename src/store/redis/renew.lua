-- Renews the leases of requests still in flight, so a long request keeps its permit while a
-- crashed instance's leases still lapse.
--
-- KEYS[i]  a concurrency counter
-- ARGV     the lease ttl (us), then for each key: its number of members, and the members

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ttl = tonumber(ARGV[1])
local a = 2
for i = 1, #KEYS do
  local n = tonumber(ARGV[a])
  for j = 1, n do
    redis.call('ZADD', KEYS[i], 'XX', now + ttl, ARGV[a + j])
  end
  redis.call('PEXPIRE', KEYS[i], math.ceil(ttl / 1000) + 1000)
  a = a + n + 1
end
return #KEYS
