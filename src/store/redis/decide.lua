-- One decision, atomically: check every bound, and commit only if none that enforces refuses.
-- The same arithmetic as src/engine/rate.rs, in microseconds (Lua numbers are doubles: exact to
-- 2^53, about 285 years of microseconds). Redis's own TIME is the clock, so instances whose
-- clocks disagree still agree here.
--
-- KEYS[i]  the counter of check i
-- ARGV     10 values per check: algorithm (1 sliding window, 2 token bucket, 3 concurrency,
--          4 calendar quota, 5 first-use quota in a tentative period, 6 first-use quota in a
--          period the instance worked out from its anchor), limit, window (us; a quota's period
--          start), burst (a quota's period end, us), cost, enforce (1|0), lease ttl (us; a
--          quota's: the instance's now), lease id (a first-use quota's anchor
--          in us, for 6), reservation ttl (us; 0 unless the bound
--          counts by the response, `count-when`), reservation member (`lease:cost`)
--
-- A `count-when` bound's admitted requests whose response has not come are members of the sorted
-- set KEY .. ':r' (the counter's slot: its key carries a hash tag), scored by when they lapse.
-- Their cost weighs as if counted; one that lapsed (its instance died) is committed by the next
-- decision on the key, the safe side. Such a bound reserves instead of committing.
-- returns  {now_us, then 4 integers per check: admitted (1|0, or 2 for refused only because of
--          requests still pending), remaining, reset (us), retry (us)}
--          or, when a first-use quota's stored period is over (5), {-1, then per such check its
--          position in KEYS and its anchor (us)}: nothing was counted, and the instance calls
--          again with that check's current period (6). Lua cannot do calendar arithmetic.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n = #KEYS
local out = {now}
local plans = {}
local refused = false
local rolls = {}

for i = 1, n do
  local a = (i - 1) * 10
  local algo = tonumber(ARGV[a + 1])
  local limit = tonumber(ARGV[a + 2])
  local window = tonumber(ARGV[a + 3])
  local burst = tonumber(ARGV[a + 4])
  local cost = tonumber(ARGV[a + 5])
  local enforce = ARGV[a + 6] == '1'
  local key = KEYS[i]
  local reserve = tonumber(ARGV[a + 9])
  local p = {algo = algo, key = key, window = window, reserve = reserve, member = ARGV[a + 10]}
  local pending = 0
  if reserve > 0 then
    local r = key .. ':r'
    local late = 0
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', r, '-inf', string.format('%.0f', now))) do
      late = late + reserved(m)
    end
    if late > 0 then
      redis.call('ZREMRANGEBYSCORE', r, '-inf', string.format('%.0f', now))
      charge(key, now, late, algo, limit, window, window, burst, tonumber(ARGV[a + 7]))
    end
    for _, m in ipairs(redis.call('ZRANGE', r, 0, -1)) do pending = pending + reserved(m) end
  end
  -- What the request weighs, and what admitting it writes to the counter (a reservation: nothing).
  local weight, counted = cost + pending, cost
  if reserve > 0 then counted = 0 end
  if algo == 1 then
    -- Sliding window: previous x (1 - elapsed share) + current + cost <= limit, exactly: the
    -- other terms are whole, so the previous window's share is rounded up (`weigh`).
    local h = redis.call('HMGET', key, 'w', 'p', 'c')
    local w, prev0, curr0 = tonumber(h[1]), tonumber(h[2]) or 0, tonumber(h[3]) or 0
    local index = math.floor(now / window)
    local prev, curr = 0, 0
    if w == index then prev, curr = prev0, curr0 elseif w == index - 1 then prev = curr0 end
    local start = index * window
    local elapsed = now - start
    local weighted = 0
    if prev > 0 then weighted = weigh(prev, window - elapsed, window) end
    local admitted = weighted + curr + weight <= limit
    p.fits = weighted + curr + cost <= limit
    local after = curr + pending
    if admitted then after = curr + weight end
    -- The least elapsed time with count x (window - e) <= budget x window.
    local decay = function(count, budget)
      if count <= budget then return 0 end
      local q = muldiv(budget, window, count)
      return window - q
    end
    -- Reset: the end of the current window (engine/rate.rs says why).
    local reset = start + window - now
    local retry = 0
    if not admitted then
      if curr + weight <= limit then retry = math.max(start + decay(prev, limit - curr - weight) - now, 1)
      else retry = start + window + decay(curr, limit - weight) - now end
    end
    p.admitted, p.index, p.prev, p.after = admitted, index, prev, curr + counted
    p.remaining, p.reset, p.retry = math.max(limit - weighted - after, 0), reset, retry
  elseif algo == 2 then
    -- GCRA: the theoretical arrival time moves cost x window / limit on; it may run at most
    -- burst x window / limit ahead of now. Times are exact (`tat_get` in charge.lua), and so
    -- the comparisons; what the headers say is rounded against the caller.
    local tq, tf = muldiv(burst, window, limit)
    local q, f = tat_get(key, limit)
    q = q or 0
    if q < now then q, f = now, 0 end
    local nq, nf = tat_move(q, f, weight, window, limit)
    local admitted = tat_le(nq - now, nf, tq, tf)
    local cq, cf = tat_move(q, f, cost, window, limit)
    p.fits = tat_le(cq - now, cf, tq, tf)
    local hq, hf = tat_move(q, f, pending, window, limit)
    if admitted then hq, hf = nq, nf end
    p.admitted, p.limit = admitted, limit
    p.hq, p.hf = tat_move(q, f, counted, window, limit)
    -- Whole tokens that still fit: (tolerance - (held - now)) x limit / window, rounded down.
    local sq, sf = tq - (hq - now), tf - hf
    if sf < 0 then sq, sf = sq - 1, sf + limit end
    local remaining = 0
    if sq >= 0 then
      local k, r = muldiv(limit, sq, window)
      remaining = k + math.floor((r + sf) / window)
    end
    p.remaining = math.min(remaining, burst)
    -- Whole microseconds, rounded up: never a wait that is too short.
    p.reset = hq - now
    if hf > 0 then p.reset = p.reset + 1 end
    p.retry = 0
    if not admitted then
      local dq, df = nq - tq - now, nf - tf
      if df < 0 then dq, df = dq - 1, df + limit end
      if df > 0 then dq = dq + 1 end
      p.retry = dq
    end
  elseif algo == 4 then
    -- Quota: consumption in the calendar period [window, burst) the instance computed. A count
    -- from a later period (an instance whose clock runs ahead got there first) is never
    -- overwritten by an earlier one: the request counts in the later period.
    local start, stop = window, burst
    local h = redis.call('HMGET', key, 's', 'c', 'e')
    local s0, c0, e0 = tonumber(h[1]), tonumber(h[2]) or 0, tonumber(h[3])
    local used = 0
    if s0 and s0 >= start then
      used, start = c0, s0
      -- The later period's own end, so its key is not let go at the earlier one's.
      if e0 and e0 > stop then stop = e0 end
    end
    local admitted = used + weight <= limit
    p.fits = used + cost <= limit
    local after = used + pending
    if admitted then after = used + weight end
    p.admitted, p.start, p.stop, p.after = admitted, start, stop, used + counted
    p.remaining = math.max(limit - after, 0)
    -- Until the period's end on the instance's clock, which cut it (and keeps its deny cache).
    p.reset = math.max(stop - tonumber(ARGV[a + 7]), 1)
    p.retry = 0
    if not admitted then p.retry = p.reset end
  elseif algo == 5 or algo == 6 then
    -- First-use quota: the caller's periods are anniversaries of its anchor (its first admitted
    -- request). The instance's clock cuts them, as it cuts calendar ones.
    local start, stop, at = window, burst, tonumber(ARGV[a + 7])
    local h = redis.call('HMGET', key, 'a', 's', 'e', 'c')
    local a0, s0, e0, c0 = tonumber(h[1]), tonumber(h[2]), tonumber(h[3]), tonumber(h[4]) or 0
    local used, anchor = 0, a0
    if algo == 5 then
      if not a0 then
        -- First use: anchored now, in the period the instance sent as if it were.
        anchor = start
      elseif at < e0 then
        -- The stored period (or a later one an instance whose clock runs ahead rolled to).
        used, start, stop = c0, s0, e0
      else
        rolls[#rolls + 1] = i
        rolls[#rolls + 1] = a0
      end
    else
      anchor = a0 or tonumber(ARGV[a + 8])
      -- As for calendar periods: a later period already stored is never set back.
      if s0 and s0 >= start then
        used, start = c0, s0
        if e0 and e0 > stop then stop = e0 end
      end
    end
    local admitted = used + weight <= limit
    p.fits = used + cost <= limit
    local after = used + pending
    if admitted then after = used + weight end
    p.admitted, p.start, p.stop, p.after, p.anchor = admitted, start, stop, used + counted, anchor
    p.remaining = math.max(limit - after, 0)
    p.reset = math.max(stop - at, 1)
    p.retry = 0
    if not admitted then p.retry = p.reset end
  else
    -- Concurrency: leases in a sorted set, scored by when they lapse, so a crashed instance
    -- cannot hold permits for ever.
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
    local inflight = redis.call('ZCARD', key)
    local admitted = inflight + cost <= limit
    local taken = 0
    if admitted then taken = cost end
    p.admitted, p.cost, p.lease = admitted, cost, ARGV[a + 8]
    p.ttl = tonumber(ARGV[a + 7])
    p.remaining = math.max(limit - inflight - taken, 0)
    p.reset, p.retry = 0, 0
    if not admitted then p.retry = 1000000 end
  end
  if enforce and not p.admitted then refused = true end
  -- A cost of 0 never comes from a request (costs are at least 1): it is an operator's look-up,
  -- which reads and writes nothing.
  p.peek = cost == 0
  plans[i] = p
end

-- A period to roll comes before anything is counted: the whole decision is made again.
if #rolls > 0 then
  local reply = {-1}
  for j = 1, #rolls do reply[#reply + 1] = rolls[j] end
  return reply
end

for i = 1, n do
  local p = plans[i]
  -- A refused request is counted by no bound; a shadow bound counts only what it admits.
  if not refused and p.admitted and not p.peek then
    if p.algo == 1 then
      redis.call('HSET', p.key, 'w', p.index, 'p', p.prev, 'c', p.after)
      redis.call('PEXPIRE', p.key, math.ceil(2 * p.window / 1000) + 1000)
    elseif p.algo == 4 then
      -- Kept a minute past the period's end, then Redis lets it go.
      redis.call('HSET', p.key, 's', string.format('%.0f', p.start), 'e', string.format('%.0f', p.stop), 'c', p.after)
      redis.call('PEXPIREAT', p.key, math.floor(p.stop / 1000) + 60000)
    elseif p.algo == 5 or p.algo == 6 then
      redis.call('HSET', p.key, 'a', string.format('%.0f', p.anchor), 's', string.format('%.0f', p.start),
        'e', string.format('%.0f', p.stop), 'c', p.after)
      redis.call('PEXPIREAT', p.key, math.floor(p.stop / 1000) + 60000)
    elseif p.algo == 2 then
      if p.reserve == 0 then tat_set(p.key, p.hq, p.hf, p.limit, now) end
    else
      for j = 1, p.cost do
        redis.call('ZADD', p.key, now + p.ttl, p.lease .. ':' .. j)
      end
      redis.call('PEXPIRE', p.key, math.ceil(p.ttl / 1000) + 1000)
    end
    if p.reserve > 0 then
      local r = p.key .. ':r'
      redis.call('ZADD', r, string.format('%.0f', now + p.reserve), p.member)
      -- Kept as long as a commit of the last one could still matter to the counter.
      local keep = 2 * p.window
      if p.algo == 2 then keep = p.window elseif p.algo >= 4 then keep = math.max(p.stop - now, 0) end
      redis.call('PEXPIRE', r, math.ceil((p.reserve + keep) / 1000) + 60000)
    end
  end
  local admitted = 0
  if p.admitted then admitted = 1 elseif p.fits then admitted = 2 end
  out[#out + 1] = admitted
  out[#out + 1] = p.remaining
  out[#out + 1] = p.reset
  out[#out + 1] = p.retry
end
return out
