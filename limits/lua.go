package limits

import (
	"strings"

	"github.com/redis/go-redis/v9"
)

// The scripts of a delivery share these Lua helpers; script prepends them
// to a script's own text, so each script stays one self-contained
// EVALSHA.
//
//   - now_ms(): Redis' clock in Unix ms, and TIME's reply.
//   - gcra_now(t): that clock as redis_rate keeps it (seconds since
//     2017-01-01), so that the GCRA here and redis_rate share a key.
//   - effective(gate, f, now, rate, burst, period_ms, ramp): the
//     subscriber's effective rate and burst per period (adaptive.go): the
//     limit scaled by the rate the receiver taught (a_f), capped by its
//     RateLimit-Policy (a_cap, while a_cap_until), and by the slow start
//     after the breaker closed (b_ramp); lessons that have run out are
//     deleted. f is the gate record's fields as gateFields reads them.
//   - capacity(mif, lt, maxwait, waiters): how many deliveries may be
//     handed out or in flight at once: the in-flight slots, and as many
//     more as wait a slot in a worker for at most maxwait (Little's law:
//     the slots free mif ÷ lt a second; 80% of it, so that the last ones
//     do not time out at the edge), within its waiting room. Until the
//     endpoint's latency (lt) is observed it is taken as 1s: a slow
//     endpoint's first burst does not flood the waiting room.
//   - fresh_count(k, recs, now, ttl): how many of the subscriber's
//     deliveries are in its fresh lane. An entry whose time has come is
//     looked at, not dropped: while its record (recs .. event id) says it
//     is still in the fresh lane (pending or in flight there) it counts
//     for ttl more; else (it ended, was parked, or its record is gone) it
//     goes. So a task that waits in the fresh queue longer than ttl still
//     counts, and an entry whose task was lost goes at its next look.
//   - park(k, ev, state, at, x): moves a delivery into the lot (out of
//     out, runs and the fresh lane).
//   - lot_kind(k, ev): files a delivery just put in the lot as retrying
//     (in k.retry) when a request was made for it (its record's n), so
//     that status counts the two apart without reading the lot's records.
//     One never tried is not in k.retry: it was never added, and every
//     script that takes a delivery out of the lot takes it out of k.retry
//     too (SREM). (A record booked anew while its delivery of a deleted
//     generation is still in the lot, after a delete and re-create race,
//     counts as retrying until its turn hands it out: a count, nothing
//     else.)
//   - asked(ta, at, now): whether a turn at at (Unix ms) is asked of
//     the ready index already, so that the ready write can be left out:
//     a script that answers with a turn to ask (a booking parked in the
//     lot, Admit's park, a commit) writes the gate's ta first, and a turn
//     deletes it. While it stands, the ready index holds the subscriber
//     at ta or earlier, or a dispatcher has claimed it and its turn is to
//     run (after this script: it sees what this one wrote, and arranges
//     the next turn for the lot's head, as every turn does); a claim whose
//     dispatcher died lapses back into the index. An ask a second overdue
//     is not trusted (its ready write may have been lost with its
//     process): the next asker asks again, and the rescuer finds the lot's
//     head overdue meanwhile.
//   - woken(f, parked, now): the time an operator ended the subscriber's
//     cooldown (gate ce_at) when a delivery that leaves the lot now goes
//     early because of it, else nil. The rule: it was due (its lot score,
//     parked) no later than the operator's end, and the cooldown the
//     operator ended would still be running now (ce_until). A delivery due
//     by then waited on that cooldown whatever else held it (a delivery
//     parked after the end is due after it: every park is at now or
//     later), and one that goes after the cut cooldown's end goes no
//     earlier than the endpoint asked. Its record keeps the time (ce)
//     until its next attempt is committed, which carries the note.
//   - num(s) is tonumber(s) for a script's arguments, each distinct
//     string converted once a script; fmt(n) is an integer (ms, a count)
//     as the string Redis stores, each formatted once a script. A group
//     repeats both for every delivery, and each costs a C library call
//     otherwise (strtod; a number given to redis.call is formatted with
//     %.17g, one concatenated with %.14g).
//   - later(cmd, key, a[, b]) and flush(): a write the script puts off to
//     its end (flush), each command and key's in one call however many
//     requests of a group ask for it (ZADD score member, ZREM and SREM
//     member), in the order first asked: a group of n pays one call where
//     it paid n. Only for members the script does not read again before
//     flush. (Its lists are found by command, then key, with no string
//     built and no table of arguments made per call: it runs for every
//     delivery of a group several times.)
const luaHelpers = `
local function now_ms()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000), t
end
local deferred, byCmd = {}, {}
local function flush()
  for _, l in ipairs(deferred) do redis.call(unpack(l)) end
  deferred, byCmd = {}, {}
end
local function later(cmd, key, a, b)
  local byKey = byCmd[cmd]
  if not byKey then
    byKey = {}
    byCmd[cmd] = byKey
  end
  local l = byKey[key]
  if not l or #l > 1000 then
    l = {cmd, key}
    byKey[key] = l
    deferred[#deferred + 1] = l
  end
  local n = #l
  l[n + 1] = a
  if b ~= nil then l[n + 2] = b end
end
local nums, fmts = {}, {}
local function num(s)
  local v = nums[s]
  if v == nil then
    v = tonumber(s) or false
    nums[s] = v
  end
  return v or nil
end
local function fmt(n)
  local s = fmts[n]
  if not s then
    s = string.format('%d', n)
    fmts[n] = s
  end
  return s
end
local function gcra_now(t) return (t[1] - 1483228800) + (t[2] / 1000000) end
local function effective(gate, f, now, rate, burst, period, ramp)
  local x = tonumber(f.a_f)
  if x and x < 1 then rate, burst = rate * x, math.max(1, math.floor(burst * x)) end
  if f.a_cap then
    if f.a_cap_until and tonumber(f.a_cap_until) <= now then
      redis.call('HDEL', gate, 'a_cap', 'a_cap_at', 'a_cap_until')
    else
      local c = tonumber(f.a_cap) * period / 1000
      if c < rate then rate, burst = c, 1 end
    end
  end
  if f.b_ramp then
    local x = (now - tonumber(f.b_ramp)) / ramp
    if x >= 1 then redis.call('HDEL', gate, 'b_ramp') else rate, burst = rate * math.max(x, 0.1), 1 end
  end
  return rate, burst
end
local function capacity(mif, lt, maxwait, waiters)
  local l = tonumber(lt) or 1000
  return mif + math.min(waiters, math.floor(0.8 * mif * maxwait / math.max(l, 1)))
end
local function gate_fields(gate)
  local v = redis.call('HMGET', gate, 'gen', 'cv', 'paused', 'b_open', 'b_next', 'b_probe', 'b_pe', 'b_fails', 'b_since', 'b_gap',
    'b_ramp', 'a_f', 'a_cap', 'a_cap_until', 'lt', 'ce_at', 'ce_until', 'lg', 'wk', 'lx', 'wr',
    'ta')
  return {gen = v[1] or nil, cv = v[2] or nil, paused = v[3] or nil, b_open = v[4] or nil, b_next = v[5] or nil,
    b_probe = v[6] or nil, b_pe = v[7] or nil, b_fails = v[8] or nil, b_since = v[9] or nil, b_gap = v[10] or nil,
    b_ramp = v[11] or nil, a_f = v[12] or nil, a_cap = v[13] or nil, a_cap_until = v[14] or nil,
    lt = v[15] or nil, ce_at = v[16] or nil, ce_until = v[17] or nil, lg = v[18] or nil, wk = v[19] or nil, lx = v[20] or nil,
    wr = v[21] or nil, ta = v[22] or nil}
end
-- a turn at at is asked already: one asked (gate ta) no later than at,
-- that no turn has answered yet, not a second overdue (its ready write
-- may have been lost)
local function asked(ta, at, now)
  ta = tonumber(ta)
  return ta ~= nil and ta <= at and ta + 1000 > now
end
local function woken(f, parked, now)
  if not f.ce_at or not parked or tonumber(f.ce_until) <= now or tonumber(parked) > tonumber(f.ce_at) then return nil end
  return f.ce_at
end
local function fresh_count(k, recs, now, ttl)
  for _, ev in ipairs(redis.call('ZRANGEBYSCORE', k.fresh, '-inf', now)) do
    local d = redis.call('HMGET', recs .. ev, 's', 'q')
    if d[2] == 'fresh' and (d[1] == 'pending' or d[1] == 'in_flight') then
      redis.call('ZADD', k.fresh, now + ttl, ev)
    else
      redis.call('ZREM', k.fresh, ev)
    end
  end
  return redis.call('ZCARD', k.fresh)
end
local function lot_kind(k, ev)
  if tonumber(redis.call('HGET', k.rec, 'n') or '0') > 0 then redis.call('SADD', k.retry, ev) end
end
local function park(k, ev, state, at, x)
  redis.call('ZADD', k.lot, at, ev)
  lot_kind(k, ev)
  if x then redis.call('ZADD', k.exp, x, ev) end
  redis.call('ZREM', k.out, ev)
  redis.call('ZREM', k.runs, ev)
  redis.call('ZREM', k.fresh, ev)
  redis.call('HSET', k.rec, 's', state)
  redis.call('HDEL', k.rec, 'tk')
end
`

// script builds a script from its own text and the shared helpers.
func script(body string) *redis.Script {
	return redis.NewScript(luaHelpers + strings.TrimLeft(body, "\n"))
}
