package limits

import (
	"context"
	"strconv"
	"time"
)

// Outcome kinds: what a run's request (or its absence) did to its
// delivery.
const (
	// OutcomeDelivered: a 2xx. The delivery ends.
	OutcomeDelivered = "delivered"
	// OutcomeFailed: a counted failure with attempts and horizon left: its
	// attempt is spent and it is parked for its backoff.
	OutcomeFailed = "failed"
	// OutcomeThrottled: a 429 (or 503) with a Retry-After (or a spent
	// quota), its cooldown recorded (Cooldown; else CoolLost): no attempt
	// spent, parked until the cooldown ends, never before its own deadline
	// (CoolUntil).
	OutcomeThrottled = "throttled"
	// OutcomeProbeFailed: the open breaker's probe failed: no attempt spent
	// (the failure is the endpoint's), parked behind the others.
	OutcomeProbeFailed = "probe_failed"
	// OutcomeInterrupted: the request was cut by a shutdown, after asynq
	// had put the task back: no attempt spent, left to that task.
	OutcomeInterrupted = "interrupted"
	// OutcomeDead: dead-lettered (attempts, horizon, gone, refused,
	// undecodable): the ledger entry is written with it.
	OutcomeDead = "dead"
)

// Breaker changes an outcome made.
type BreakerChange int

const (
	BreakerSame     BreakerChange = iota
	BreakerOpened                 // persistent failure: subscriber.failing
	BreakerClosed                 // recovered: its held deliveries may go
	BreakerDisabled               // failing for DisableAfter: paused "failing"
)

// Outcome is one run's outcome, for Commit.
type Outcome struct {
	EventID string
	Token   string // the run's: only the run that owns the delivery commits
	Kind    string
	// Attempt is the request's record field and value
	// (tasks.AttemptField, tasks.EncodeAttempt); "" when no request was
	// made. Lost is the same for a request lost with a worker that died
	// (Admission.TookOver), written beside it.
	AttemptField, Attempt string
	LostField, Lost       string
	Backoff               time.Duration // OutcomeFailed: until the next attempt
	DeliveredAt           time.Time     // OutcomeDelivered: the answer's arrival
	// EndpointFailure counts toward the breaker (no answer, 408, a 5xx
	// without Retry-After); Answered is any other answer, which ends a
	// streak of failures (with Probe or Streak set) and closes an open
	// breaker. Probe: the run held the probe role (it gives it back, even
	// when its request was never sent).
	EndpointFailure, Answered, Probe, Streak bool
	ErrText                                  string // the breaker's last error
	Breaker                                  BreakerPolicy
	Throttled                                bool          // a 429: lower the effective rate (adaptive.go)
	AdaptReason                              string        // why, for status
	Limit                                    Limit         // the subscriber's: the effective rate's unit
	Latency                                  time.Duration // the answer's, for the in-flight pace (0: none)
	Dedup                                    time.Duration // how long an ended record is kept at least
	// CoolUntil is an OutcomeFailed 429's cooldown (the backoff, as
	// recorded: the delivery is due as it ends), or an OutcomeThrottled
	// run's Retry-After deadline: the
	// delivery is parked until then at least, whatever the cooldown key
	// says. CoolLost: the run could not record that cooldown (Cooldown
	// failed), so Commit writes it, as Cooldown would have, for the
	// destination's other deliveries to wait too.
	CoolUntil time.Time
	CoolLost  bool
	// PauseGone pauses the subscriber (reason "gone") with the dead letter
	// of a 410.
	PauseGone bool
	// Counters are the subscriber's counters (Stats) to add to.
	Counters map[string]int64
	// Dead letter (OutcomeDead): the ledger entry's JSON without its
	// closing brace (its attempts are copied from the record), the task id
	// for the index, the retention (0: keep), and the report sample
	// ("<event id> <reason>"; "" for an operator event's dead letter, which
	// is never reported).
	DeadEntry, TaskID string
	DeadAt            time.Time // the entry's dead_at: its score in the dead-letter indexes
	DeadRetention     time.Duration
	ReportSample      string
	// LegacyAttempts is the release before's attempt list of this task's
	// ledger entry, deleted with a stale entry.
	LegacyAttempts string
}

// Committed is Commit's answer.
type Committed struct {
	// Superseded: the run did not own the delivery any more (another run
	// took it over, or it ended): nothing was written but its slot's
	// release, and the hand-out of a delivery booked since under the same
	// task id, which asynq may have refused while this run held it, is
	// handed out again (Notify).
	Superseded bool
	// Notify is when the subscriber needs a dispatcher's turn (zero: none).
	Notify time.Time
	// Asked: a turn no later than Notify is asked of the ready index
	// already (lua.go's asked): write none, wake the dispatcher.
	Asked  bool
	Change BreakerChange
	Since  time.Time // the destination's failing since, for a breaker change
	// ClearedStale: a delivered delivery's stale dead letter (a worker died
	// between writing it and asynq archiving the task) was deleted.
	ClearedStale bool
}

// KEYS: 1 gate, 2 cooldown, 3 inflight, 4 lot, 5 out, 6 exp, 7 fresh, 8
// record, 9 stats, 10 ledger entry, 11 dead index, 12 dead batch, 13 its
// sample, 14 the release before's attempt list, 15 retry, 16 runs (8, 10
// and 14 are each outcome's: a group's follow the 16, four an outcome,
// with its ledger entry's replay claim fourth). ARGV: 1 how many
// outcomes, 2 the counters of them all (as 22 below), then 32 an outcome:
// 1 event id, 2 token, 3 kind, 4 attempt field, 5 attempt, 6 lost field, 7 lost, 8 backoff ms,
// 9 delivered ms, 10 flags (e endpoint failure, a answered, p probe, s
// streak, t throttled, g pause gone, c cooldown lost), 11 breaker failures (-1 off), 12
// first gap ms, 13 max gap ms, 14 disable after ms (0 never), 15 error
// text, 16 adaptive margin, 17 floor, 18 increase per ms, 19 reason, 20
// latency ms (0 none), 21 dedup ms, 22 counters ("field n field n …"), 23
// dead entry prefix (without "gen": the record's is added), 24 task id,
// 25 retention ms, 26 report sample, 27 dead at (ms: the entry's dead_at,
// its index score; 0: now), 28 the throttled run's deadline (ms, rounded
// up; 0 none), 29 the hand-out lease ms (an interrupted run's delivery
// waits in out for its task, put back in asynq), 30 the adaptive window
// ms, 31 the limit in requests per ms (0: unknown, a 429 halves the rate),
// 32 the shortest span the window's rate is counted over (ms: the limit's
// burst at its rate, which hooklane may send at once).
// Reply {result, notify ms, breaker change, since ms}: result "ok",
// "superseded", or "again" (this run's outcome was committed before: the
// reply it had, nothing written again).
//
// One step for everything the outcome changes in the subscriber's slot:
// the slot's release, the attempt, the record's state, the lot, the
// fresh lane, the breaker, the effective rate, the counters, and a dead
// letter's ledger entry and report batch. Written once per run (the
// record keeps the last committed run's token and reply), before the
// worker answers asynq. The delivery leaves runs; one of a generation
// that is not the subscriber's any more (deleted and created again while
// its request was under way) is not parked into the new generation's lot:
// it ends there, unsent again.
var commitScript = script(luaAdapt + `
-- what one script reads once for every outcome of its group (G.now: the
-- clock; G.due: whether the lot holds a due delivery; G.gate: the gate
-- record's fields, read again once an outcome wrote them). Its releases of
-- slots and its removals from runs and the fresh lane are put off to its
-- end (later), and so are the gate's writes: a delivered answer's 2xx
-- counted in the adaptive window (G.an, added to a_n) and latency (G.lt),
-- and the turn the group asked (G.ta): one call for them all.
local G = {an = 0}
-- the gate's fields a commit reads: g[1..7] these, g[8..16] adaptFields,
-- g[17] wr (turn.go), g[18] ta (lua.go's asked)
local gateFields = {'gen', 'b_open', 'b_gap', 'b_since', 'paused', 'b_fails', 'lt'}
for _, f in ipairs(adaptFields) do gateFields[#gateFields + 1] = f end
gateFields[#gateFields + 1] = 'wr'
gateFields[#gateFields + 1] = 'ta'
local function commit_gate(gate)
  local g = redis.call('HMGET', gate, unpack(gateFields))
  if G.lt then g[7] = G.lt end
  if G.ta then g[18] = G.ta end
  if G.an > 0 then g[14] = (tonumber(g[14]) or 0) + G.an end
  return g
end
-- the subscriber's keys, the same for every outcome (rec, ledger, legacy:
-- the outcome's record, ledger entry and the release before's attempt
-- list, set before each)
local k = {gate = KEYS[1], cool = KEYS[2], inflight = KEYS[3], lot = KEYS[4], out = KEYS[5], exp = KEYS[6], fresh = KEYS[7],
  stats = KEYS[9], dindex = KEYS[11], dbatch = KEYS[12], dsample = KEYS[13], retry = KEYS[15], runs = KEYS[16]}
-- an outcome's state, kept here so that the helpers below are made once
-- a script, not once an outcome: its flags (O.f: each letter of ARGV[10]
-- true, read as table fields, not searched for), the record's fields to set
-- (written in one HSET: before the attempts are read for a dead letter,
-- else at the end; O.w[1..O.wn]) and when it needs a turn (O.notify)
local O = {f = {}, w = {}, wn = 0, notify = -1}
local function set(f, v)
  O.w[O.wn + 1], O.w[O.wn + 2] = f, v
  O.wn = O.wn + 2
end
local function write()
  if O.wn > 0 then
    redis.call('HSET', k.rec, unpack(O.w, 1, O.wn))
    O.wn = 0
  end
end
local function soon(at) if at >= 0 and (O.notify < 0 or at < O.notify) then O.notify = at end end
-- an ended record lives the dedup window (ms) at least
local function keep_ended(dedup)
  if redis.call('PTTL', k.rec) < num(dedup) then redis.call('PEXPIRE', k.rec, dedup) end
end
-- one outcome of k.rec: its arguments are A[o + 1] … A[o + 32], laid out
-- as the comment above lays out an outcome's (read where they are: a
-- table of them made for each outcome cost a commit 6 %)
local A = ARGV
local function commit(o)
  local ev, token, kind = A[o + 1], A[o + 2], A[o + 3]
  later('ZREM', k.inflight, token)
  local d = redis.call('HMGET', k.rec, 'tk', 'ok', 'okr', 'x', 'g', 'q', 'le', 'ce')
  if d[2] == token and d[3] then
    local r = {'again'}
    for v in string.gmatch(d[3], '[^|]+') do r[#r + 1] = v end
    return r
  end
  G.now = G.now or now_ms()
  local now = G.now
  if d[1] ~= token then
    -- Handed out while this run held the task id (a re-publish for a new
    -- generation, a resend): asynq may have refused that hand-out's task as
    -- a duplicate of this one, which ends now. Hand it out again.
    if redis.call('ZSCORE', k.out, ev) then
      redis.call('ZREM', k.out, ev)
      redis.call('ZADD', k.lot, now, ev)
      lot_kind(k, ev)
      return {'superseded', now, 0, 0, 0}
    end
    return {'superseded', -1, 0, 0, 0}
  end
  later('ZREM', k.runs, ev)
  O.wn, O.notify = 0, -1
  local fl, F = A[o + 10], O.f
  F.e, F.a, F.p, F.s, F.t, F.g, F.c = false, false, false, false, false, false, false
  for i = 1, #fl do F[string.sub(fl, i, i)] = true end
  if A[o + 4] ~= '' then set(A[o + 4], A[o + 5]) end
  -- the attempt that went early because an operator ended a cooldown says
  -- so (the worker wrote the note from Admission.CooldownEndedAt); the next
  -- does not. An interrupted request's run is tried again: that one says so
  -- too.
  if d[8] and A[o + 4] ~= '' and kind ~= 'interrupted' then redis.call('HDEL', k.rec, 'ce') end
  if A[o + 6] ~= '' then
    set(A[o + 6], A[o + 7])
    redis.call('HDEL', k.rec, 'lr')
  end

  -- the breaker
  local change, since = 0, 0
  -- the breaker's fields, then the effective rate's (adaptFields, from g[8]):
  -- read once a group (commit_gate above), again after an outcome wrote them
  local g = G.gate or commit_gate(k.gate)
  G.gate = g
  local same = g[1] and g[1] == d[5]
  if same and (F.e and num(A[o + 11]) > 0 or F.a and (F.p or F.s or g[6]) or F.p) then
    G.gate = nil -- the breaker's branch below writes the record
  end
  if same and F.e and num(A[o + 11]) > 0 then
    redis.call('HSET', k.gate, 'b_err', A[o + 15], 'b_err_at', now)
    since = tonumber(g[4]) or now
    local disable = tonumber(A[o + 14])
    if g[2] and F.p then
      -- a failed probe: the next one a longer gap later, the role given back
      -- (also when this failure disables the subscriber: a resume probes at
      -- the next gap, not once this probe's lease has lapsed)
      local gap = math.min(math.floor((tonumber(g[3]) or tonumber(A[o + 12])) * 1.5), tonumber(A[o + 13]))
      redis.call('HSET', k.gate, 'b_gap', gap, 'b_next', now + gap)
      redis.call('HDEL', k.gate, 'b_probe', 'b_pe')
      soon(now + gap)
    end
    if disable > 0 and now - since >= disable and not g[5] then
      redis.call('HSET', k.gate, 'paused', 'failing', 'paused_at', now)
      change = 3
    elseif not g[2] then
      local fails = redis.call('HINCRBY', k.gate, 'b_fails', 1)
      if not g[4] then redis.call('HSET', k.gate, 'b_since', now) end
      if fails >= num(A[o + 11]) then
        redis.call('HSET', k.gate, 'b_open', now, 'b_gap', A[o + 12], 'b_next', now + tonumber(A[o + 12]))
        redis.call('HDEL', k.gate, 'b_ramp', 'b_probe', 'b_pe')
        change = 1
        soon(now + tonumber(A[o + 12]))
      end
    end
  elseif same and F.a and (F.p or F.s or g[6]) then
    redis.call('HDEL', k.gate, 'b_fails', 'b_since')
    if g[2] then
      redis.call('HDEL', k.gate, 'b_open', 'b_next', 'b_gap', 'b_probe', 'b_pe')
      redis.call('HSET', k.gate, 'b_ramp', now)
      change, since = 2, tonumber(g[4]) or now
      soon(now)
    end
  elseif same and F.p then
    redis.call('HDEL', k.gate, 'b_probe', 'b_pe') -- never sent: another may probe
    soon(now)
  end
  -- the effective rate (adaptive.go) and the in-flight pace. A 2xx at
  -- the full rate (no a_f) inside the current window (a_w, g[13]) only
  -- counts in that window: adapt does nothing else for it, so it is not
  -- called (its tables and closures, per outcome, cost more than the count)
  local win = num(A[o + 30])
  if same and kind == 'delivered' and not F.t and not g[8] and g[13] and now - tonumber(g[13]) < win then
    G.an = G.an + 1
    g[14] = (tonumber(g[14]) or 0) + 1
  elseif same and (kind == 'delivered' or F.t) then
    local cool = 0
    if F.t then cool = tonumber(redis.call('GET', k.cool) or '0') end
    local p = {margin = tonumber(A[o + 16]), floor = tonumber(A[o + 17]), incr = tonumber(A[o + 18]), why = A[o + 19],
      win = win, per_ms = tonumber(A[o + 31]), span = tonumber(A[o + 32])}
    p.bump = function() G.an = G.an + 1; g[14] = (tonumber(g[14]) or 0) + 1 end
    p.reset = function() G.an = 0 end
    adapt(k.gate, {unpack(g, 8, 7 + #adaptFields)}, now, kind == 'delivered', F.t, cool, p)
    if p.wrote then G.gate = nil end
  end
  local lat = num(A[o + 20])
  if same and lat > 0 then
    local lt = tonumber(g[7])
    if lt then lat = math.floor(0.8 * lt + 0.2 * lat + 0.5) end
    lat = math.max(lat, 1)
    if lat ~= lt then G.lt, g[7] = lat, lat end
  end

  -- the delivery
  local x = tonumber(d[4])
  local stale = 0
  if kind == 'delivered' then
    set('s', 'delivered')
    set('dl', A[o + 9])
    -- what only a delivery under way needs: an ended record stays small
    redis.call('HDEL', k.rec, 'tk', 'nx', 'q', 'pt', 'pk', 'm', 'le')
    if d[6] == 'fresh' then later('ZREM', k.fresh, ev) end
    -- booked to live until its horizon + the dedup window: delivered before
    -- its horizon, it outlives the delivery by the window already
    if not x or now > x then keep_ended(A[o + 21]) end
    -- a dead letter of the delivery (le: one was written, or the release
    -- before may have written one) not replayed is stale: it goes; not
    -- one a replay has claimed, which marks it replayed once its task is
    -- enqueued: this delivery may be that task's, answered first
    if d[7] then
      local entry = redis.call('GET', k.ledger)
      if entry and not string.find(entry, '"replayed_at"', 1, true) and redis.call('EXISTS', k.claim) == 0 then
        redis.call('DEL', k.ledger, k.legacy)
        redis.call('ZREM', k.dindex, A[o + 24])
        stale = 1
      end
    end
  elseif not same and kind ~= 'dead' then
    -- another generation's: nothing of it is parked or sent again
    for _, key in ipairs({k.lot, k.out, k.exp, k.fresh}) do redis.call('ZREM', key, ev) end
    redis.call('SREM', k.retry, ev)
    redis.call('HDEL', k.rec, 'tk', 'nx')
  elseif kind == 'failed' then
    -- a 429 without a usable Retry-After cooled the destination for the
    -- backoff (its deadline, A[o + 28]): due when that ends, not a few ms
    -- after it, which the commit's own clock would give
    local at = now + tonumber(A[o + 8])
    if tonumber(A[o + 28]) > 0 then at = tonumber(A[o + 28]) end
    park(k, ev, 'retrying', at, x)
    set('nx', at)
    soon(at)
  elseif kind == 'throttled' then
    redis.call('HINCRBY', k.rec, 'c', -1)
    -- never before the run's own deadline, even when the cooldown key
    -- holds none (the run could not write it, it lapsed); one the run could
    -- not write is written now, as Gates.Cooldown would have (the later
    -- deadline kept, until its end + 1 min), for the others to wait too
    local cool, deadline = tonumber(redis.call('GET', k.cool) or '0'), tonumber(A[o + 28])
    if F.c and deadline > cool and deadline > now then
      redis.call('SET', k.cool, string.format('%d', deadline), 'PX', deadline - now + 60000)
    end
    local at = math.max(cool, deadline, now)
    park(k, ev, 'cooling', at, x)
    set('nx', at)
    soon(at)
  elseif kind == 'probe_failed' then
    redis.call('HINCRBY', k.rec, 'c', -1)
    park(k, ev, 'held', now, x)
    redis.call('HDEL', k.rec, 'nx')
    soon(now + 100)
  elseif kind == 'interrupted' then
    redis.call('HINCRBY', k.rec, 'c', -1)
    set('s', 'pending')
    redis.call('HDEL', k.rec, 'tk')
    redis.call('ZADD', k.out, now + tonumber(A[o + 29]), ev)
  elseif kind == 'dead' then
    set('s', 'dead')
    set('le', 1)
    write()
    redis.call('HDEL', k.rec, 'tk', 'nx')
    for _, key in ipairs({k.lot, k.out, k.exp, k.fresh}) do redis.call('ZREM', key, ev) end
    redis.call('SREM', k.retry, ev)
    keep_ended(A[o + 21])
    local parts = {}
    local h = redis.call('HGETALL', k.rec)
    for i = 1, #h, 2 do
      if string.sub(h[i], 1, 2) == 'a:' then parts[#parts + 1] = '"' .. string.sub(h[i], 3) .. '":' .. h[i + 1] end
    end
    -- the generation it was booked for: a replay sends it to no other
    local gen = ''
    if d[5] then gen = ',"gen":' .. cjson.encode(d[5]) end
    local entry = A[o + 23] .. gen .. ',"a":{' .. table.concat(parts, ',') .. '}}'
    local retention = tonumber(A[o + 25])
    if retention > 0 then
      redis.call('SET', k.ledger, entry, 'PX', retention)
      redis.call('ZREMRANGEBYSCORE', k.dindex, '-inf', now - retention)
    else
      redis.call('SET', k.ledger, entry)
    end
    redis.call('DEL', k.legacy)
    local dead_at = tonumber(A[o + 27])
    if dead_at <= 0 then dead_at = now end
    redis.call('ZADD', k.dindex, dead_at, A[o + 24])
    if A[o + 26] ~= '' then
      redis.call('HINCRBY', k.dbatch, 'n', 1)
      redis.call('HSETNX', k.dbatch, 'first', now)
      if redis.call('LLEN', k.dsample) < 20 then redis.call('RPUSH', k.dsample, A[o + 26]) end
    end
    if same and F.g and not g[5] then
      redis.call('HSET', k.gate, 'paused', 'gone', 'paused_at', now)
      G.gate = nil
    end
  end
  -- a freed slot may let a parked delivery go: a turn soon, at most one
  -- every 100 ms for the commits of a busy subscriber (what a turn hands
  -- out covers its slots meanwhile); none while the last turn waits for
  -- what no slot changes (g[17], wr: its rate's next chunk, a cooldown,
  -- the probe), with its next turn arranged by then
  -- (the lot counted once a group: what this group parks due now asks
  -- its own turn above)
  if kind ~= 'interrupted' and not (g[17] and tonumber(g[17]) > now) then
    if G.due == nil then G.due = redis.call('ZCOUNT', k.lot, '-inf', now) > 0 end
    if G.due then soon(now + 100) end
  end
  -- the turn it needs, written by the worker unless one asked no later
  -- is to come (lua.go's asked: then "a" before the time, for the
  -- worker's own dispatcher only; ta written once a group, at its end)
  if O.notify >= 0 then
    if asked(g[18], O.notify, now) then O.notify = string.format('a%d', O.notify) else G.ta, g[18] = O.notify, O.notify end
  end
  local reply = (type(O.notify) == 'number' and fmt(O.notify) or O.notify) .. '|' .. fmt(change) .. '|' .. fmt(since) .. '|' .. fmt(stale)
  set('ok', token)
  set('okr', reply)
  write()
  return {'ok', O.notify, change, since, stale}
end
local n, out, commitArgs = tonumber(ARGV[1]), {}, 32
local oks = {} -- the outcomes committed now ("ok"): each one's o, where its arguments start
for i = 1, n do
  k.rec, k.ledger, k.legacy, k.claim = KEYS[13 + 4 * i], KEYS[14 + 4 * i], KEYS[15 + 4 * i], KEYS[16 + 4 * i]
  local o = 2 + (i - 1) * commitArgs
  local r = commit(o)
  if r[1] == 'ok' then oks[#oks + 1] = o end
  out[#out + 1] = #r
  for _, v in ipairs(r) do out[#out + 1] = v end
end
-- the counters of the outcomes committed now, added once: the group's
-- sum (ARGV[2]) when every outcome was, else each one's (one committed
-- before, or superseded, counts nothing again); one field by HINCRBY,
-- more read and written in one HMGET and one HSET (a delivered outcome
-- alone counts three to six). (Lua's numbers are exact to 2^53: a sum of
-- milliseconds past that, some 285,000 years of latency, would round in
-- its last digits.)
local counters = {}
local function count(s)
  for f, v in string.gmatch(s, '(%S+) (%S+)') do counters[f] = (counters[f] or 0) + num(v) end
end
if #oks == n then
  count(ARGV[2])
else
  for _, o in ipairs(oks) do count(ARGV[o + 22]) end
end
local cf = {}
for f in pairs(counters) do cf[#cf + 1] = f end
if #cf == 1 then
  redis.call('HINCRBY', KEYS[9], cf[1], counters[cf[1]])
elseif #cf > 1 then
  local cur, w = redis.call('HMGET', KEYS[9], unpack(cf)), {}
  for i, f in ipairs(cf) do
    w[#w + 1] = f
    w[#w + 1] = string.format('%d', (tonumber(cur[i]) or 0) + counters[f])
  end
  redis.call('HSET', KEYS[9], unpack(w))
end
-- the gate's writes of the group in one HSET: the window's 2xx count of
-- its delivered answers (a_n as the gate was last read, which counts the
-- group's own already; read again when an outcome's write left it
-- stale), the latency and the turn asked (ta)
if G.an > 0 or G.lt or G.ta then
  local w = {}
  if G.an > 0 then
    local g = G.gate or commit_gate(KEYS[1])
    w[1], w[2] = 'a_n', string.format('%d', tonumber(g[14]) or 0)
  end
  if G.lt then
    local n = #w
    w[n + 1], w[n + 2] = 'lt', G.lt
  end
  if G.ta then
    local n = #w
    w[n + 1], w[n + 2] = 'ta', string.format('%d', G.ta)
  end
  redis.call('HSET', KEYS[1], unpack(w))
end
flush()
return out`)

// Commit writes a run's outcome (see commitScript), in the round trip of
// the gate scripts of concurrent deliveries.
func (g *Gates) Commit(ctx context.Context, k GateKeys, o Outcome) (Committed, error) {
	c, err := g.CommitGroup(ctx, k, []Outcome{o})
	if err != nil {
		return Committed{}, err
	}
	return c[0], nil
}

// CommitGroup writes the outcomes of several runs of one subscriber's
// deliveries (a batch's, worker/batch.go) in one script: each as Commit
// writes it, the subscriber's counters of them all added once.
func (g *Gates) CommitGroup(ctx context.Context, k GateKeys, os []Outcome) ([]Committed, error) {
	keys := []string{k.Record, k.Cooldown, k.InFlight, k.Lot, k.Out, k.Exp, k.Fresh, "", k.Stats, "", k.DeadIndex, k.DeadBatch, k.DeadSample, "",
		k.Retry, k.Runs}
	keys[7], keys[9], keys[13] = k.record(os[0].EventID), k.Dead+os[0].EventID, k.Dead+os[0].EventID // placeholders: each outcome's follow
	args := make([]any, 2, 2+commitArgs*len(os))
	sum := map[string]int64{}
	for _, o := range os {
		ok, oa := commitCall(k, o)
		keys = append(keys, ok...)
		args = append(args, oa...)
		for f, n := range o.Counters {
			sum[f] += n
		}
	}
	args[0], args[1] = len(os), string(appendCounters(nil, sum))
	res, err := g.run(ctx, commitScript, keys, args...)
	if err != nil {
		return nil, err
	}
	replies, err := splitReplies("commit", res, len(os), 5)
	if err != nil {
		return nil, err
	}
	out := make([]Committed, len(os))
	for i, r := range replies {
		out[i] = committed(r)
	}
	return out, nil
}

// committed reads one outcome's reply {result, notify, change, since,
// stale}.
func committed(r []string) Committed {
	c := Committed{Superseded: r[0] == "superseded", ClearedStale: r[4] == "1"} // "again": as "ok" the first time
	c.Notify, c.Asked = notifyAt(r[1])
	if c.Superseded {
		return c
	}
	switch r[2] {
	case "1":
		c.Change = BreakerOpened
	case "2":
		c.Change = BreakerClosed
	case "3":
		c.Change = BreakerDisabled
	}
	if ms, _ := strconv.ParseInt(r[3], 10, 64); ms > 0 {
		c.Since = time.UnixMilli(ms)
	}
	return c
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// unixMilli is t in Unix ms, 0 for the zero time.
func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// latencyMilli is an answer's latency as the commit script takes it:
// whole milliseconds, a sub-millisecond answer's 1 (its 0 means none, and
// an endpoint whose latency is never recorded is paced as a 1 s one).
func latencyMilli(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return max(d.Milliseconds(), 1)
}

// ceilMilli is t in Unix ms rounded up (a deadline never moves earlier),
// 0 for the zero time.
func ceilMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	ms := t.UnixMilli()
	if t.Sub(time.UnixMilli(ms)) > 0 {
		ms++
	}
	return ms
}

// appendCounters appends counters to b as commitScript takes them
// ("field n field n …").
func appendCounters(b []byte, counters map[string]int64) []byte {
	for f, n := range counters {
		b = strconv.AppendInt(append(append(b, f...), ' '), n, 10)
		b = append(b, ' ')
	}
	return b
}

// commitArgs is how many arguments commitScript takes per outcome.
const commitArgs = 32

// commitCall is commitScript's keys of outcome o (its record, its ledger
// entry, the release before's attempt list) and its arguments.
func commitCall(k GateKeys, o Outcome) ([]string, []any) {
	var fl []byte
	for _, f := range [...]struct {
		c  byte
		on bool
	}{{'e', o.EndpointFailure}, {'a', o.Answered}, {'p', o.Probe}, {'s', o.Streak}, {'t', o.Throttled}, {'g', o.PauseGone}, {'c', o.CoolLost}} {
		if f.on {
			fl = append(fl, f.c)
		}
	}
	counters := appendCounters(make([]byte, 0, 128), o.Counters)
	b := o.Breaker
	if b.Failures == BreakerOff {
		b.Failures = -1
	}
	var delivered int64
	if !o.DeliveredAt.IsZero() {
		delivered = o.DeliveredAt.UnixMilli()
	}
	errText := o.ErrText
	if len(errText) > 300 {
		errText = errText[:300]
	}
	keys := []string{k.record(o.EventID), k.Dead + o.EventID, cmpOr(o.LegacyAttempts, k.Dead+o.EventID+":none"), k.Replaying + o.EventID}
	args := []any{o.EventID, o.Token, o.Kind, o.AttemptField, o.Attempt, o.LostField, o.Lost, o.Backoff.Milliseconds(), delivered,
		string(fl), b.Failures, b.ProbeGap.Milliseconds(), b.MaxProbeGap.Milliseconds(), max(b.DisableAfter, 0).Milliseconds(), errText,
		AdaptMargin, adaptFloor, adaptIncreasePerMs, o.AdaptReason, latencyMilli(o.Latency), o.Dedup.Milliseconds(),
		string(counters), o.DeadEntry, o.TaskID, o.DeadRetention.Milliseconds(), o.ReportSample, unixMilli(o.DeadAt), ceilMilli(o.CoolUntil),
		OutLease.Milliseconds(), AdaptWindow.Milliseconds(), perMs(o.Limit), burstSpan(o.Limit)}
	return keys, args
}
