package limits

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// KEYS: 1 gate, 2 cooldown, 3 inflight, 4 gcra, 5 lot, 6 out, 7 exp, 8
// fresh, 9 retry, 10 runs. ARGV: 1 record prefix (+ event id: the records, in the same
// slot), 2 batch (the most hand-outs), 3 out lease ms, 4 fresh ttl ms, 5
// probe hold ms, then Pace.args: 6 rate, 7 burst, 8 period ms, 9 max in
// flight, 10 lead ms, 11 max wait ms, 12 fresh max, 13 ramp ms, 14
// waiters.
// Reply {next, dropped, stale, ev, lane, why, ev, lane, why, …}: next is
// when (Unix ms) the subscriber needs its next turn, -1 never (nothing
// parked, handed out or running); dropped is how many parked deliveries
// of a deleted subscriber it dropped; stale how many entries of out and
// runs it dropped because their delivery had ended (or its record was
// gone, or was another generation's); then each delivery handed out: its
// event id, its lane, and why: "p" the open breaker's probe, "o" handed
// out again (its lease ran out), "r" its run's worker died, "" due.
//
// A turn hands out, in this order: deliveries whose hand-out lease ran out
// (again, in the lane they went to: asynq refuses the task if it still
// has it), unless their record says they ended, are parked or run;
// deliveries whose run's slot lapsed with nothing else holding them (their
// worker died after Admit, or a task run again found its slots full and
// was let go); parked deliveries past their horizon, whatever holds the
// subscriber (their run dead-letters them); and then (the deliveries
// parked on a cooldown an operator ended made due first), unless the
// subscriber is paused or its destination cools down (a probe too waits
// for the cooldown's end), the due ones: one
// probe while its breaker is open and the probe is due, else as many as a
// rate slot within the lead and the in-flight capacity allow.
var turnScript = script(`
local k = {gate = KEYS[1], cool = KEYS[2], inflight = KEYS[3], gcra = KEYS[4], lot = KEYS[5], out = KEYS[6], exp = KEYS[7],
  fresh = KEYS[8], retry = KEYS[9], runs = KEYS[10]}
local f = gate_fields(k.gate)
if not f.gen then
  local n = redis.call('ZCARD', k.lot)
  redis.call('DEL', k.lot, k.exp, k.out, k.fresh, k.retry, k.runs)
  return {-1, n, 0}
end
local now, t = now_ms()
redis.call('ZREMRANGEBYSCORE', k.inflight, '-inf', now)
local batch, lease, freshttl = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local out = {-1, 0, 0}
local handed = 0
local next = nil
local function soon(at) at = tonumber(at); if at and (not next or at < next) then next = at end end
-- wr: until when no freed in-flight slot lets a due delivery go (the turn
-- waits for its rate's next chunk, a cooldown or the breaker's probe), so
-- that a commit in the meantime asks no turn of its own (commit.go)
local wr = nil
-- the fresh lane's count, looked at once a turn and kept here as the
-- turn adds to it
local cap, nfresh = tonumber(ARGV[12]), nil
local function lane()
  if cap == 0 then return 'fresh' end
  if cap < 0 then return 'backlog' end
  nfresh = nfresh or fresh_count(k, ARGV[1], now, freshttl)
  if nfresh < cap then
    nfresh = nfresh + 1
    return 'fresh'
  end
  return 'backlog'
end
-- due: handed out to be sent (not past its horizon, to be dead-lettered);
-- its moves between the sets are put off to the end of its loop (later,
-- flush): one call for each set, not one per hand-out.
-- one that goes early because an operator ended the cooldown carries the
-- time in its record (woken in lua.go)
local function hand(ev, l, probe, due)
  local woke = due and f.ce_until and tonumber(f.ce_until) > now and woken(f, redis.call('ZSCORE', k.lot, ev), now)
  later('ZREM', k.lot, ev)
  later('SREM', k.retry, ev)
  later('ZREM', k.exp, ev)
  later('ZADD', k.out, fmt(now + lease), ev)
  if l == 'fresh' then later('ZADD', k.fresh, fmt(now + freshttl), ev) end
  redis.call('HSET', ARGV[1] .. ev, 's', 'pending', 'q', l)
  if woke then redis.call('HSET', ARGV[1] .. ev, 'ce', woke) end
  if probe then redis.call('HSET', k.gate, 'b_probe', now + tonumber(ARGV[5]), 'b_pe', ev) end
  out[#out + 1], out[#out + 2], out[#out + 3] = ev, l, probe and 'p' or ''
  handed = handed + 1
end

-- where an entry of out or runs stands: 'ended' (or gone, or another
-- generation's: dropped), 'parked' (its lot entry moves it), 'out'
-- (handed out), a live run's slot end, or 'lost' (nothing holds it)
local function place(ev, d)
  if not d[1] or d[1] ~= f.gen or d[2] == 'delivered' or d[2] == 'dead' then return 'ended' end
  if redis.call('ZSCORE', k.lot, ev) then return 'parked' end
  local slot = d[3] and redis.call('ZSCORE', k.inflight, d[3])
  if slot then return tonumber(slot) end
  return 'lost'
end
local function again(ev, l, why)
  redis.call('ZADD', k.out, now + lease, ev)
  out[#out + 1], out[#out + 2], out[#out + 3] = ev, l or 'backlog', why
  handed = handed + 1
end
for _, ev in ipairs(redis.call('ZRANGEBYSCORE', k.out, '-inf', now, 'LIMIT', 0, batch)) do
  local d = redis.call('HMGET', ARGV[1] .. ev, 'g', 's', 'tk', 'q')
  local p = place(ev, d)
  if p == 'lost' then
    again(ev, d[4], 'o')
  else
    redis.call('ZREM', k.out, ev)
    if p == 'ended' then
      redis.call('ZREM', k.fresh, ev)
      out[3] = out[3] + 1
    elseif p ~= 'parked' then
      redis.call('ZADD', k.runs, p, ev)
    end
  end
end
for _, ev in ipairs(redis.call('ZRANGEBYSCORE', k.runs, '-inf', now, 'LIMIT', 0, math.max(batch - handed, 0))) do
  local d = redis.call('HMGET', ARGV[1] .. ev, 'g', 's', 'tk', 'q')
  local p = place(ev, d)
  if type(p) == 'number' then
    redis.call('ZADD', k.runs, p, ev)
  else
    redis.call('ZREM', k.runs, ev)
    if p == 'ended' then
      out[3] = out[3] + 1
    elseif p == 'lost' and not redis.call('ZSCORE', k.out, ev) then
      again(ev, d[4], 'r')
    end
  end
end
for _, ev in ipairs(redis.call('ZRANGEBYSCORE', k.exp, '-inf', now, 'LIMIT', 0, math.max(batch - handed, 0))) do
  hand(ev, 'backlog', false, false)
end
flush()
local cool = tonumber(redis.call('GET', k.cool) or '0')
-- An operator ended a cooldown (Gates.EndCooldown): the deliveries parked
-- until its end (cooling, at exactly ce_until) are due from the operator's
-- end, moved here a batch a turn rather than by the operator's call (a
-- full batch: another turn at once).
if f.ce_until and tonumber(f.ce_until) > now then
  local evs = redis.call('ZRANGEBYSCORE', k.lot, f.ce_until, f.ce_until, 'LIMIT', 0, batch)
  for _, ev in ipairs(evs) do
    if redis.call('HGET', ARGV[1] .. ev, 's') == 'cooling' then redis.call('ZADD', k.lot, 'XX', f.ce_at, ev) end
  end
  if #evs == batch then soon(now) end
end
if f.paused then
  -- held until resumed (or its horizon, below)
elseif f.b_open and cool <= now then
  local nxt, probe = tonumber(f.b_next) or 0, tonumber(f.b_probe) or 0
  if now >= nxt and probe <= now and handed < batch then
    local head = redis.call('ZRANGEBYSCORE', k.lot, '-inf', now, 'LIMIT', 0, 1)
    if head[1] then
      hand(head[1], lane(), true, true)
      flush()
      soon(now + tonumber(ARGV[5]))
    end
  else
    wr = math.max(nxt, probe)
    soon(wr)
  end
elseif cool > now then
  wr = cool
  soon(cool)
else
  local n_out = redis.call('ZCOUNT', k.out, now, '+inf')
  local n_in = redis.call('ZCARD', k.inflight)
  local rate, burst = effective(k.gate, f, now, tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[13]))
  local T = tonumber(ARGV[8]) / 1000 / rate
  local nows = gcra_now(t)
  local tat = math.max(tonumber(redis.call('GET', k.gcra) or '0'), nows)
  local lead = tonumber(ARGV[10]) / 1000
  local by_rate = math.floor((nows + lead - tat) / T + burst) - n_out
  local by_slots = capacity(tonumber(ARGV[9]), f.lt, tonumber(ARGV[11]), tonumber(ARGV[14])) - n_out - n_in
  -- A subscriber paced by its rate takes its turns in chunks (a quarter of
  -- the lead's slots, at least one): what was handed out before covers
  -- the rest of the lead meanwhile, and each turn's fixed cost is shared.
  local chunk = math.max(1, math.floor(lead / (4 * T)))
  local n = math.min(by_rate, by_slots, batch - handed)
  if by_rate < chunk and by_rate < by_slots then n = 0 end
  local taken = 0
  if n > 0 then
    for _, ev in ipairs(redis.call('ZRANGEBYSCORE', k.lot, '-inf', now, 'LIMIT', 0, n)) do
      hand(ev, lane(), false, true)
      taken = taken + 1
    end
    flush()
  end
  if redis.call('ZCOUNT', k.lot, '-inf', now) > 0 then
    if by_rate <= taken or n == 0 and by_rate < chunk then
      -- the next chunk of rate slots enters the lead
      wr = math.max(now + 1, now + math.ceil(((tat - nows) - lead + T * (n_out + taken + chunk - burst)) * 1000))
      soon(wr)
    elseif by_slots <= taken then
      -- a freed slot wakes it; else the first slot or lease to lapse
      local s = redis.call('ZRANGE', k.inflight, 0, 0, 'WITHSCORES')
      soon(s[2])
    else
      soon(now)
    end
  end
end
local head = redis.call('ZRANGEBYSCORE', k.lot, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if not f.paused then soon(head[2]) end
soon((redis.call('ZRANGE', k.exp, 0, 0, 'WITHSCORES'))[2])
soon((redis.call('ZRANGE', k.out, 0, 0, 'WITHSCORES'))[2])
soon((redis.call('ZRANGE', k.runs, 0, 0, 'WITHSCORES'))[2])
if next then out[1] = math.max(next, now) end
-- wr is written for the turn the dispatcher releases the subscriber to
-- (at or before wr: next), or goes; and the turn a resume asked for
-- (wk: Gates.Resume) or a booking, Admit or a commit did (ta: lua.go's
-- asked) has come: the three go in one HDEL
local gone = {}
if f.wk then gone[#gone + 1] = 'wk' end
if f.ta then gone[#gone + 1] = 'ta' end
if wr and wr > now then
  if f.wr ~= tostring(wr) then redis.call('HSET', k.gate, 'wr', wr) end
elseif f.wr then
  gone[#gone + 1] = 'wr'
end
if #gone > 0 then redis.call('HDEL', k.gate, unpack(gone)) end
flush()
return out`)

// Handout is one delivery a turn handed out: enqueue its task in Lane.
type Handout struct {
	EventID string
	Lane    string // WhereFresh or WhereBacklog
	Probe   bool   // the open breaker's probe
	// Again: handed out again because its hand-out lease ran out (a task
	// that is still in asynq refuses the new one; a lost one is replaced).
	Again bool
	// Lost: its run's worker died and nothing else held it (the record
	// still names that run: the next run counts its request).
	Lost bool
}

// TurnResult is what a subscriber's turn did.
type TurnResult struct {
	Handouts []Handout
	// Next is when the subscriber needs its next turn (Redis' clock); zero:
	// never, until something notifies the ready index.
	Next time.Time
	// Dropped counts the parked deliveries of a deleted subscriber the
	// turn dropped (they are counted, not sent).
	Dropped int
	// Stale counts the entries of out and runs dropped because their
	// delivery had ended, or its record was gone or another generation's.
	Stale int
}

// TurnBatch is the most deliveries one turn hands out.
const TurnBatch = 500

// Turn runs one dispatcher turn for the subscriber of k (see turnScript).
// probeHold is how long a probe holds the role while it is handed out and
// sent (the request timeout and a margin).
func (g *Gates) Turn(ctx context.Context, k GateKeys, pace Pace, probeHold time.Duration) (TurnResult, error) {
	keys := []string{k.Record, k.Cooldown, k.InFlight, k.Rate, k.Lot, k.Out, k.Exp, k.Fresh, k.Retry, k.Runs}
	args := append([]any{k.Deliveries, TurnBatch, OutLease.Milliseconds(), FreshTTL.Milliseconds(), probeHold.Milliseconds()}, pace.args()...)
	res, err := g.run(ctx, turnScript, keys, args...)
	if err != nil {
		return TurnResult{}, err
	}
	r := replyStrings(res)
	if len(r) < 3 || (len(r)-3)%3 != 0 {
		return TurnResult{}, fmt.Errorf("turn: unexpected reply %v", res)
	}
	var tr TurnResult
	if next, _ := strconv.ParseInt(r[0], 10, 64); next >= 0 {
		tr.Next = time.UnixMilli(next)
	}
	tr.Dropped, _ = strconv.Atoi(r[1])
	tr.Stale, _ = strconv.Atoi(r[2])
	for i := 3; i+2 < len(r); i += 3 {
		tr.Handouts = append(tr.Handouts, Handout{EventID: r[i], Lane: r[i+1], Probe: r[i+2] == "p", Again: r[i+2] == "o",
			Lost: r[i+2] == "r"})
	}
	return tr, nil
}
