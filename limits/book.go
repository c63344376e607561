package limits

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// Booking asks Book to book one new delivery (a publish) or a delivery
// booked before again (a resend, a replay).
type Booking struct {
	Keys      GateKeys
	EventID   string
	EventType string
	NotBefore time.Time // zero: now
	Horizon   time.Duration
	// Dedup is how long the record outlives the delivery's horizon (and,
	// once it ends, its end), so that a re-publish is a duplicate.
	Dedup       time.Duration
	MaxAttempts int
	Held        bool // book even while the subscriber is paused (else: refused, nothing written)
	Resend      bool // a new series of attempts in the record booked before
	// Token names this call: a booking sent again (a retry of the same
	// call) is recognised as its own, not reported a duplicate.
	Token string
	Pace  Pace
}

// Pace is what a subscriber's deliveries may be handed to asynq at: its
// limit, in-flight slots and fresh-lane share, and the worker-side waits
// they are sized for.
type Pace struct {
	Limit       Limit
	MaxInFlight int
	// FreshMax is how many of the subscriber's deliveries may be in the
	// fresh lane at once (0: no cap; negative: none, its tenant is
	// flooding: see producer.Config.TenantFreshRate); the rest go to the
	// backlog lane.
	FreshMax int
	// Lead is how far ahead of its rate slot a delivery is handed out (the
	// worker waits out the rest, up to its MaxWait). Default 1s.
	Lead time.Duration
	// MaxWait is the longest a handed-out delivery may wait in a worker
	// for a free in-flight slot (worker.Config.MaxWait), and Waiters how
	// many of the destination's may wait so: worker.Config.MaxWaiters
	// tasks of its own (a publish's), a quarter of a batch each for a
	// turn's (the worker's pace: a batch's waiting deliveries share its
	// task's place).
	MaxWait time.Duration
	Waiters int
	// Ramp is the slow start after the breaker closes.
	Ramp time.Duration
	// BatchAfter (Book's alone) is how many of the subscriber's deliveries
	// may wait in asynq for a worker as tasks of their own (handed out, not
	// yet taken: out) before its new events join its lot, whence turns
	// hand them out in batches; 0: no such cap.
	BatchAfter int
}

func (p Pace) args() []any {
	lead := p.Lead
	if lead <= 0 {
		lead = time.Second
	}
	waiters := p.Waiters
	if waiters <= 0 {
		waiters = DefaultWaiters
	}
	return []any{p.Limit.Rate, p.Limit.Burst, p.Limit.Period.Milliseconds(), p.MaxInFlight, lead.Milliseconds(),
		max(p.MaxWait, 0).Milliseconds(), p.FreshMax, max(p.Ramp, time.Millisecond).Milliseconds(), waiters}
}

// The worker's defaults a Pace is sized with where the worker's own
// settings are not at hand (the producer's fast path): the lead of a
// hand-out, the longest wait for a slot (worker.Config.MaxWait) and the
// slow start after a breaker closes (BreakerPolicy.Ramp).
const (
	DefaultLead    = time.Second
	DefaultMaxWait = time.Second
	DefaultWaiters = 50
	DefaultRamp    = 10 * time.Second
)

// Where a booked delivery is: handed to asynq in one of the lanes, or
// parked in the lot.
const (
	WhereFresh   = "fresh"
	WhereBacklog = "backlog"
	WhereLot     = "lot"
)

// OutLease is how long a delivery handed to asynq may wait to be taken
// before a turn hands it out again (asynq refuses the second task while
// the first exists: it only replaces one a crash lost).
const OutLease = 2 * time.Minute

// FreshTTL is how often a delivery's place in the fresh lane is looked at
// again: it keeps it while its record says it is still there (waiting or
// running in the fresh queue), and frees it once not (a task lost with
// Redis' data, or deleted by hand).
var FreshTTL = 10 * time.Minute

// KEYS: 1 gate, 2 cooldown, 3 inflight, 4 gcra, 5 lot, 6 out, 7 exp, 8
// fresh, 9 record, 10 log, 11 retry. ARGV: 1 event id, 2 type, 3 not-before ms (0
// none), 4 horizon ms, 5 dedup ms, 6 max attempts, 7 "1" held, 8 "1"
// resend, 9 token, 10 out lease ms, 11 fresh ttl ms, then Pace.args:
// 12 rate, 13 burst, 14 period ms, 15 max in flight, 16 lead ms, 17 max
// wait ms, 18 fresh max, 19 ramp ms, 20 waiters; 21 the records' prefix
// (+ event id: the fresh lane's records, in the same slot), 22 batch after
// (Pace.BatchAfter). Reply {code,
// gen, where, due ms, paused, state, now ms, cooldown end ms, queued}: code "new"
// (booked: where is the lane
// to enqueue its task in, or "lot"), "dup" (booked before in this
// generation: nothing written; where is the lane when its task may need
// enqueueing again, "lot" when it is parked, "" when it is running or
// ended), "unknown" (no such subscriber), "paused" (paused and not held:
// nothing written); paused "1" when the subscriber is paused; state the
// record's (the one it has now, for "dup"); now Redis' clock; the
// cooldown's end, in the past or 0 when none is in force; queued "1" when
// a new booking went to the lot and needs no ready write of its own: a
// turn no later than its due time is asked already (gate ta: lua.go's
// asked), or it is behind due deliveries already there while the last
// turn waits for its rate, a cooldown or the breaker's probe.
//
// The record decides alone whether a booking is new: a record of the
// subscriber's current generation makes it a duplicate; one of another
// generation (a deleted subscriber's) is replaced, and its delivery's
// entries in the lot, exp and retry go with it. A delivery due now goes
// straight to asynq when its destination can take it now — not held, its
// lot empty of due deliveries, a rate slot within the lead, an in-flight
// slot within its capacity — and has no backlog in asynq (fewer than
// batch after of its deliveries wait there for a worker); else to the lot,
// whence turns hand it out in batches.
var bookScript = script(`
local k = {gate = KEYS[1], cool = KEYS[2], inflight = KEYS[3], gcra = KEYS[4], lot = KEYS[5], out = KEYS[6], exp = KEYS[7],
  fresh = KEYS[8], rec = KEYS[9], log = KEYS[10], retry = KEYS[11]}
local f = gate_fields(k.gate)
if not f.gen then return {'unknown', '', '', '0', '', '', '0', '0'} end
local paused = f.paused and '1' or ''
if f.paused and ARGV[7] ~= '1' then return {'paused', f.gen, '', '0', paused, '', '0', '0'} end
local now, t = now_ms()
local cool = tonumber(redis.call('GET', k.cool) or '0')
local queued = ''
local function reply(code, where, due, state)
  return {code, f.gen, where, due, paused, state, string.format('%d', now), string.format('%d', cool), queued}
end
local d = redis.call('HMGET', k.rec, 'g', 's', 'pt', 'q', 'u')
local resend = ARGV[8] == '1' and d[1] == f.gen
local function where_of(s, q)
  if s == 'pending' then return q or 'backlog' end
  if s == 'scheduled' or s == 'held' or s == 'cooling' or s == 'retrying' then return 'lot' end
  return ''
end
if d[1] == f.gen and (d[3] == ARGV[9] or not resend) then
  local code = 'dup'
  if d[3] == ARGV[9] then code = 'new' end
  return reply(code, where_of(d[2], d[4]), d[5] or '0', d[2] or '')
end
-- another generation's delivery of this event (a deleted subscriber's)
-- leaves its places with its record: its lot entry, at its old time,
-- would hold the new delivery's task back as a stale one until then
if d[1] and d[1] ~= f.gen then
  redis.call('ZREM', k.lot, ARGV[1])
  redis.call('ZREM', k.exp, ARGV[1])
  redis.call('SREM', k.retry, ARGV[1])
end
local nb = tonumber(ARGV[3])
local due = math.max(now, nb)
local x = due + tonumber(ARGV[4])
local ttl = x + tonumber(ARGV[5]) - now
local where, state = 'lot', 'scheduled'
if f.paused or f.b_open then state = 'held'
elseif cool > now then state = 'cooling'
elseif nb <= now and redis.call('ZCOUNT', k.lot, '-inf', now) > 0 then
  -- behind the lot's due deliveries: while the last turn waits for what
  -- no booking changes (wr: the rate's next chunk, a cooldown, the probe;
  -- turn.go), the turn arranged by then hands it out too (else the ready
  -- entry is written now: a subscriber its slots bind takes its next turn
  -- at once)
  if f.wr and tonumber(f.wr) > now then queued = '1' end
elseif nb <= now then
  local n_out = redis.call('ZCOUNT', k.out, now, '+inf')
  local n_in = redis.call('ZCOUNT', k.inflight, now, '+inf')
  local rate, burst = effective(k.gate, f, now, tonumber(ARGV[12]), tonumber(ARGV[13]), tonumber(ARGV[14]), tonumber(ARGV[19]))
  local T = tonumber(ARGV[14]) / 1000 / rate
  local nows = gcra_now(t)
  local tat = math.max(tonumber(redis.call('GET', k.gcra) or '0'), nows)
  local allowance = math.floor((nows + tonumber(ARGV[16]) / 1000 - tat) / T + burst)
  local after = tonumber(ARGV[22])
  if n_out + n_in < capacity(tonumber(ARGV[15]), f.lt, tonumber(ARGV[17]), tonumber(ARGV[20])) and allowance > n_out
    and (after == 0 or n_out < after) then
    local cap = tonumber(ARGV[18])
    where, state = 'backlog', 'pending'
    if cap == 0 or cap > 0 and fresh_count(k, ARGV[21], now, tonumber(ARGV[11])) < cap then
      where = 'fresh'
      redis.call('ZADD', k.fresh, now + tonumber(ARGV[11]), ARGV[1])
    end
  end
end
-- the gate's writes: ta, when this booking asks a turn of its own (a
-- turn asked no later than its due time hands it out too: lua.go's
-- asked), and the log's lifetime below
local gw = {}
if where == 'lot' and queued == '' then
  if asked(f.ta, due, now) then queued = '1' else gw = {'ta', string.format('%d', due)} end
end
-- the lane a task is enqueued in, written with the record's state
local lane = {}
if where ~= 'lot' then lane = {'q', where} end
if resend then
  redis.call('HSET', k.rec, 's', state, 'u', due, 'x', x, 'm', ARGV[6], 'pt', ARGV[9], 'c', 0, unpack(lane))
  redis.call('HINCRBY', k.rec, 'r', 1)
  redis.call('HDEL', k.rec, 'dl', 'nx', 'tk', 'pr', 'ok', 'okr')
  if redis.call('PTTL', k.rec) < ttl then redis.call('PEXPIRE', k.rec, ttl) end
else
  -- a record of another generation (a deleted subscriber's) goes whole;
  -- every record has these fields (every script that writes one checks
  -- its generation first), so none read: none there
  if d[1] or d[2] or d[3] or d[4] or d[5] then redis.call('DEL', k.rec) end
  redis.call('HSET', k.rec, 'g', f.gen, 't', ARGV[2], 'p', now, 'u', due, 'x', x, 'm', ARGV[6], 's', state, 'pt', ARGV[9], unpack(lane))
  redis.call('PEXPIRE', k.rec, ttl)
  local keep = tonumber(f.lg or '0')
  if ttl > keep then
    keep = ttl
    gw[#gw + 1], gw[#gw + 2] = 'lg', keep
  end
  redis.call('XADD', k.log, 'MINID', '~', now - keep, '*', 'e', ARGV[1])
  -- The log outlives this record: lengthened 10 min further than the
  -- record needs, so that the next bookings of those 10 min need not
  -- lengthen it again. When it ends (lx, Unix ms) is kept in the gate
  -- record, read above: a booking looks at the log's PTTL only when lx
  -- says it may end before the record (never shortened: the release
  -- before lengthens it without writing lx).
  if tonumber(f.lx or '0') < now + ttl then
    local left = redis.call('PTTL', k.log)
    if left < ttl then
      left = ttl + 600000
      redis.call('PEXPIRE', k.log, left)
    end
    gw[#gw + 1], gw[#gw + 2] = 'lx', now + left
  end
end
if #gw > 0 then redis.call('HSET', k.gate, unpack(gw)) end
if where == 'lot' then
  redis.call('ZADD', k.lot, due, ARGV[1])
  -- a new record was never tried: only a resend's may have been
  if resend then lot_kind(k, ARGV[1]) end
  redis.call('ZADD', k.exp, x, ARGV[1])
else
  redis.call('ZADD', k.out, now + tonumber(ARGV[10]), ARGV[1])
end
return reply('new', where, string.format('%d', due), state)`)

// Booked is Book's answer for one Booking.
type Booked struct {
	New       bool   // booked by this call (or by the call it repeats)
	Duplicate bool   // booked before, in this generation: nothing written
	Unknown   bool   // no such subscriber
	Paused    bool   // paused and not Held: nothing written
	Gen       string // the subscriber's generation
	Held      bool   // the subscriber is paused: it waits until resumed
	// Where is the lane to enqueue its task in (WhereFresh, WhereBacklog),
	// WhereLot when it is parked (a dispatcher's turn hands it out: tell
	// the ready index), or "" when a run holds it or it ended.
	Where string
	Due   time.Time // in Redis' clock
	// State is the delivery record's (tasks.State*), Now Redis' clock at
	// the booking: compare Due with Now, not with a local clock.
	State string
	Now   time.Time
	// CoolingUntil is the destination's cooldown end (a 429's Retry-After);
	// not after Now when none is in force.
	CoolingUntil time.Time
	// Queued: parked where a turn already asked or arranged hands it out
	// (one asked no later than its due time, or the one the last turn
	// waits for while it is behind due deliveries): the ready index needs
	// no word.
	Queued bool
}

// Book books each delivery in one round trip (one per Cluster node), with
// the calls of also (the stored event's write) in the same pipeline; an
// error of one of them is Book's.
func (g *Gates) Book(ctx context.Context, also []*Call, bs ...Booking) ([]Booked, error) {
	calls := make([]*Call, len(bs), len(bs)+len(also))
	for i, b := range bs {
		var nb int64
		if !b.NotBefore.IsZero() {
			nb = b.NotBefore.UnixMilli()
		}
		k := b.Keys
		keys := []string{k.Record, k.Cooldown, k.InFlight, k.Rate, k.Lot, k.Out, k.Exp, k.Fresh, k.record(b.EventID), k.Log, k.Retry}
		args := []any{b.EventID, b.EventType, nb, b.Horizon.Milliseconds(), b.Dedup.Milliseconds(), b.MaxAttempts,
			flag(b.Held), flag(b.Resend), b.Token, OutLease.Milliseconds(), FreshTTL.Milliseconds()}
		calls[i] = &Call{Script: bookScript, Keys: keys, Args: append(append(args, b.Pace.args()...), k.Deliveries, max(b.Pace.BatchAfter, 0))}
	}
	g.RunScripts(ctx, append(calls, also...))
	for _, c := range also {
		if c.Err != nil {
			return nil, c.Err
		}
	}
	out := make([]Booked, len(bs))
	for i, c := range calls[:len(bs)] {
		if c.Err != nil {
			return nil, c.Err
		}
		res := replyStrings(c.Res)
		if len(res) < 8 {
			return nil, fmt.Errorf("book: unexpected reply %v", c.Res)
		}
		due, _ := strconv.ParseInt(res[3], 10, 64)
		now, _ := strconv.ParseInt(res[6], 10, 64)
		cool, _ := strconv.ParseInt(res[7], 10, 64)
		out[i] = Booked{Gen: res[1], Where: res[2], Due: time.UnixMilli(due), Held: res[4] == "1", State: res[5],
			Now: time.UnixMilli(now), CoolingUntil: time.UnixMilli(cool), Queued: len(res) > 8 && res[8] == "1"}
		switch res[0] {
		case "new":
			out[i].New = true
		case "dup":
			out[i].Duplicate = true
		case "unknown":
			out[i].Unknown = true
		case "paused":
			out[i].Paused = true
		}
	}
	return out, nil
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// replyStrings reads a script's reply of strings (and integers).
func replyStrings(res []any) []string {
	out := make([]string, len(res))
	for i, v := range res {
		switch x := v.(type) {
		case string:
			out[i] = x
		case int64:
			out[i] = strconv.FormatInt(x, 10)
		}
	}
	return out
}
