package limits

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// KEYS: 1 gate, 2 cooldown, 3 inflight, 4 gcra, 5 lot, 6 out, 7 exp, 8
// fresh, 9 the delivery's record, 10 the subscriber's counters, 11 retry,
// 12 runs. ARGV: 1 event id, 2 the run's token, 3
// slot ttl ms, 4 reserve ms (the longest a rate slot is booked ahead and
// waited for in the worker), 5 "1" when this run booked its rate slot
// before (a second Admit after waiting for it: the rate is not asked
// again), then Pace.args: 6 rate, 7 burst, 8 period ms, 9 max in flight,
// 10 lead ms, 11 max wait ms, 12 fresh max, 13 ramp ms, 14 waiters.
//
// Reply {code, …}:
//
//	0 admitted: an in-flight slot is the run's, the record in flight and
//	  owned by the run's token, one more request counted. {0, flags ("p"
//	  the breaker's probe, "f" a streak of failures on record, "l" it took
//	  over from a run that died), spent before (c), max attempts, horizon
//	  ms, due ms, published ms, type, requests (n), config version, now ms,
//	  when an operator ended the cooldown it would still wait for (ce: its
//	  request goes early because of it; "" none), the subscriber's
//	  generation (the record's)}
//	1 drop: nothing to send (no such subscriber, another generation, no
//	  record, delivered, or owned by another run's parked copy) {1, why}
//	2 dead already: archive this copy {2}
//	3 past its horizon: dead-letter it; the run owns it {3, horizon ms, now ms}
//	4 every in-flight slot taken: nothing written {4}
//	5 a rate slot booked ms ahead: wait, then Admit again with ARGV[5] {5, ms}
//	6 parked {6, state, when its subscriber needs a turn (-1 none)}: by
//	  this call, or before (a retried call, a stale task): then the time is
//	  its lot entry's, so that the run that answers asynq can write the
//	  ready index again whatever the call before it wrote
//	7 a live run owns it: look again in ms {7, ms}
//
// The record's state decides first: only a delivery that no live run owns
// and that has not ended may be taken. Then the gates, in order: paused,
// breaker (only the probe passes), cooldown, rate (a slot within the
// reservation horizon is booked and waited for; a later one parks the
// delivery at it), in-flight slots. A refusal parks the delivery in the
// lot (one write, in this step), except a full set of slots, which writes
// nothing: the worker may wait for a slot (up to MaxWait) and parks it
// with Park if none frees.
//
// A run that takes the delivery (admitted, a rate slot booked, or past
// its horizon) files it in runs until its slot lapses, so that a turn
// finds it again if its worker dies (turnScript); a drop of a delivery
// that ended or whose record is gone takes it out of out and runs.
var admitScript = script(`
-- what one script reads once for every request of its group (g.f: the
-- gate record's fields, read again after a request writes them; g.now,
-- g.t: the clock; g.cool: the cooldown; g.tat, g.ttl: the limiter as the
-- group left it, written once at its end; g.slots: the in-flight set's
-- lifetime, once a slot was taken). Its writes to the sets (out, runs,
-- the slots, the lot's) are put off to its end (later): one call each.
local g = {now = nil, taken = 0}
local function unpark(k, ev)
  later('ZREM', k.lot, ev)
  later('ZREM', k.exp, ev)
  later('SREM', k.retry, ev)
end
g.now, g.t = now_ms()
g.cool = tonumber(redis.call('GET', KEYS[2]) or '0')
-- the subscriber's keys, the same for every request (k.rec: the
-- request's record, set before each)
local k = {gate = KEYS[1], cool = KEYS[2], inflight = KEYS[3], gcra = KEYS[4], lot = KEYS[5], out = KEYS[6], exp = KEYS[7],
  fresh = KEYS[8], stats = KEYS[10], retry = KEYS[11], runs = KEYS[12]}
-- what a request's answers and refusals do: functions of the script, not
-- closures made for each request (each one garbage more a delivery)
local function gone(ev, reply)
  redis.call('ZREM', k.out, ev)
  redis.call('ZREM', k.runs, ev)
  return reply
end
local function parked_at(ev)
  return tonumber(redis.call('ZSCORE', k.lot, ev) or '-1')
end
local function admitted(d, f, now, flags, spent, requests)
  return {0, flags, spent, d[5] or '1', d[4] or '0', d[7] or '0', d[8] or '0', d[9] or '', requests, f.cv or '', now, d[13] or '', f.gen}
end
local function refuse(ev, token, x, f, now, state, at, notify)
  park(k, ev, state, at, x > 0 and x or nil)
  redis.call('HSET', k.rec, 'pk', token)
  redis.call('HINCRBY', k.stats, 'deferred:' .. state, 1)
  -- the turn it needs, written by the worker unless one asked no later
  -- is to come (lua.go's asked: "a" before the time, as a commit says)
  if notify >= 0 then
    if asked(f.ta, notify, now) then
      notify = string.format('a%d', notify)
    else
      redis.call('HSET', k.gate, 'ta', string.format('%d', notify))
      f.ta = notify
    end
  end
  return {6, state, notify}
end
-- one request of k.rec: ARGV as the comment above lays them out
local function admit(ARGV)
  g.f = g.f or gate_fields(k.gate)
  local f, now, t, cool = g.f, g.now, g.t, g.cool
  local ev, token = ARGV[1], ARGV[2]
  local d = redis.call('HMGET', k.rec, 'g', 's', 'tk', 'x', 'm', 'c', 'u', 'p', 't', 'n', 'pk', 'nx', 'ce', 'lr')
  if not f.gen then return {1, 'the subscriber was deleted'} end
  if not d[1] then return gone(ev, {1, 'no delivery record (past its retention)'}) end
  -- (the record says which generation's the delivery is: one of the new
  -- generation would have replaced it, so out and runs hold the old one)
  if d[1] ~= f.gen then return gone(ev, {1, 'the subscriber was deleted and created again since'}) end
  if d[2] == 'delivered' then return gone(ev, {1, 'delivered already'}) end
  if d[2] == 'dead' then return gone(ev, {2}) end
  local flags = ''
  if d[11] == token then return {6, d[2], parked_at(ev)} end -- parked by this run: a retried call
  -- after waiting for the rate slot it booked: its first call took it out
  -- of the lot and out, and nothing put it back that left it pending
  -- under this run's token (an out entry a turn wrote since is checked,
  -- as every out entry is, by a turn)
  local mine = ARGV[5] == '1' and d[3] == token and d[2] == 'pending'
  if d[3] == token and d[2] == 'in_flight' then -- admitted this run: a retried call
    return admitted(d, f, now, '', tonumber(d[6] or '1') - 1, tonumber(d[10] or '1'))
  end
  if d[3] and d[3] ~= token then
    local slot = tonumber(redis.call('ZSCORE', k.inflight, d[3]) or '0')
    if slot > now then return {7, slot - now} end
    -- a run waiting for the rate slot it booked (pending, its token) holds
    -- no in-flight slot yet: it is live until its runs entry lapses. It
    -- sends within its reservation (a second or two): look again then,
    -- not at the entry's end, which leaves room for its request too
    if d[2] == 'pending' then
      local wait = tonumber(redis.call('ZSCORE', k.runs, ev) or '0')
      if wait > now then return {7, math.min(wait - now, 1000)} end
    end
    if d[2] == 'in_flight' then flags = 'l' end
  end
  local x = tonumber(d[4]) or 0
  if x > 0 and x <= now then
    redis.call('HSET', k.rec, 'tk', token)
    redis.call('ZADD', k.runs, now + num(ARGV[3]), ev)
    return {3, x, now}
  end
  local parked = mine and -1 or parked_at(ev)
  if parked > now then return {6, d[2], parked} end -- a stale task: its lot entry moves it
  -- taken from the lot by its run, not a turn (see the turn's hand)
  local woke = parked >= 0 and woken(f, parked, now)
  if woke then
    redis.call('HSET', k.rec, 'ce', woke)
    d[13] = woke
  end
  if f.paused then return refuse(ev, token, x, f, now, 'held', now, -1) end
  local probe = false
  if f.b_open then
    if f.b_pe ~= ev then return refuse(ev, token, x, f, now, 'held', now, math.max(tonumber(f.b_next) or now, tonumber(f.b_probe) or now)) end
    probe = true
  end
  if cool > now then
    if probe then redis.call('HDEL', k.gate, 'b_probe', 'b_pe'); g.f = nil end
    return refuse(ev, token, x, f, now, 'cooling', cool, cool)
  end
  local new_tat, ttl_s
  if not mine then
    local rate, burst = effective(k.gate, f, now, num(ARGV[6]), num(ARGV[7]), num(ARGV[8]), num(ARGV[13]))
    local T = num(ARGV[8]) / 1000 / rate
    local nows = gcra_now(t)
    local tat = math.max(g.tat or tonumber(redis.call('GET', k.gcra) or '0'), nows)
    new_tat = tat + T
    local wait = new_tat - T * burst - nows
    ttl_s = math.max(1, math.ceil(new_tat - nows))
    if wait > 0 and (probe or wait * 1000 > num(ARGV[4])) then
      local at = now + math.ceil(wait * 1000)
      if probe then redis.call('HDEL', k.gate, 'b_probe', 'b_pe'); g.f = nil end
      return refuse(ev, token, x, f, now, 'scheduled', at, at)
    end
    if wait > 0 then
      g.tat, g.ttl = new_tat, ttl_s
      later('ZREM', k.out, ev)
      if parked >= 0 then unpark(k, ev) end
      redis.call('HSET', k.rec, 'tk', token, 's', 'pending')
      later('ZADD', k.runs, now + math.ceil(wait * 1000) + num(ARGV[3]), ev)
      return {5, math.ceil(wait * 1000)}
    end
  end
  -- Slots whose run vanished lapse: they are trimmed when the live ones
  -- look full, once a group. (g.nin: the live slots, counted once a group
  -- and kept as its requests take theirs; g.taken: those not yet
  -- written.)
  g.nin = g.nin or redis.call('ZCOUNT', k.inflight, now, '+inf')
  if g.nin >= num(ARGV[9]) and not g.trimmed then
    redis.call('ZREMRANGEBYSCORE', k.inflight, '-inf', now)
    g.nin, g.trimmed = redis.call('ZCARD', k.inflight) + g.taken, true
  end
  if g.nin >= num(ARGV[9]) then return {4} end
  if not mine then g.tat, g.ttl = new_tat, ttl_s end
  later('ZADD', k.inflight, fmt(now + num(ARGV[3])), token)
  g.nin, g.taken = g.nin + 1, g.taken + 1
  g.slots = num(ARGV[3]) + 1000
  -- (after its rate slot, its runs entry is the first call's, which lasts
  -- as long as this slot, give or take its sleep's overshoot: a turn that
  -- finds it lapsed with the slot live moves it to the slot's end)
  if not mine then
    later('ZREM', k.out, ev)
    later('ZADD', k.runs, fmt(now + num(ARGV[3])), ev)
  end
  if parked >= 0 then unpark(k, ev) end
  -- lr: a request of it was lost with a worker and is not yet on record
  if d[14] then flags = flags .. 'l' end
  local spent, requests = tonumber(d[6] or '0'), tonumber(d[10] or '0') + 1
  redis.call('HSET', k.rec, 's', 'in_flight', 'tk', token, 'n', fmt(requests), 'c', fmt(spent + 1))
  if d[12] then redis.call('HDEL', k.rec, 'nx') end
  if probe then
    redis.call('HSET', k.gate, 'b_probe', now + num(ARGV[3])); g.f = nil
    flags = flags .. 'p'
  elseif f.b_fails then
    flags = flags .. 'f'
  end
  return admitted(d, f, now, flags, spent, requests)
end
local n, out, admitArgs = tonumber(ARGV[1]), {}, 14
for i = 1, n do
  local o = 1 + (i - 1) * admitArgs -- (one constructor: the table sized once)
  local as = {ARGV[o + 1], ARGV[o + 2], ARGV[o + 3], ARGV[o + 4], ARGV[o + 5], ARGV[o + 6], ARGV[o + 7], ARGV[o + 8],
    ARGV[o + 9], ARGV[o + 10], ARGV[o + 11], ARGV[o + 12], ARGV[o + 13], ARGV[o + 14]}
  k.rec = KEYS[12 + i]
  local r = admit(as)
  out[#out + 1] = #r
  for _, v in ipairs(r) do out[#out + 1] = v end
end
if g.tat then redis.call('SET', KEYS[4], g.tat, 'EX', g.ttl) end
flush()
if g.slots then redis.call('PEXPIRE', KEYS[3], g.slots) end
return out`)

// Admission is Admit's answer. Durations are from now, in Redis' clock.
type Admission struct {
	// Admitted: the run owns the delivery and an in-flight slot; the rest
	// of these fields describe the delivery (from its record).
	Admitted bool
	Probe    bool // admitted as the open breaker's probe
	Streak   bool // failures in a row on record: an answer that is not one ends the streak
	TookOver bool // from a run whose worker died mid-request (its attempt is counted)
	// Spent is the attempts spent in this series before this run; Max the
	// delivery's budget; Requests the requests made, this one included.
	Spent, Max, Requests int
	Expires, Due         time.Time
	Published            time.Time
	EventType            string
	ConfigVersion        string // the subscriber's configuration version (gate record "cv")
	Now                  time.Time
	// CooldownEndedAt: an operator ended, then, the cooldown this delivery
	// would still be waiting for (Gates.EndCooldown): its request goes
	// early because of it, and its attempt says so. Zero: not so.
	CooldownEndedAt time.Time
	// Gen is the subscriber's generation, the record's: the configuration
	// a request is sent with must be of it.
	Gen string

	Drop        string        // not empty: nothing to send, why
	DeadAlready bool          // the record is dead: this copy belongs in the archive
	Expired     bool          // past its horizon (Expires): dead-letter it
	Busy        bool          // every in-flight slot is taken; nothing written
	SendIn      time.Duration // a rate slot booked this far ahead: wait, then Admit with Reserved
	// Parked: refused and parked in the lot in State; Notify is when its
	// subscriber needs a turn (zero: none needed).
	Parked bool
	State  string
	Notify time.Time
	// NotifyAsked: a turn no later than Notify is asked of the ready index
	// already (lua.go's asked): write none, wake the dispatcher.
	NotifyAsked bool
	// OwnedFor: a live run owns the delivery, its slot for this much longer.
	OwnedFor time.Duration
	// Value, Found, ReadErr: AdmitRequest.Read's key, read in the same round trip.
	Value   map[string]string
	Found   bool
	ReadErr error
}

// AdmitRequest is what Admit checks one run against.
type AdmitRequest struct {
	EventID string
	Token   string        // the run's (NewToken)
	SlotTTL time.Duration // a slot whose run vanished frees itself after this
	// Reserve is the longest a rate slot is booked ahead and waited for.
	Reserve time.Duration
	// Reserved: this run booked its rate slot before (SendIn) and waited.
	Reserved bool
	Pace     Pace
	// Read: the delivery's stored event (a hash), whose field ReadField
	// (the body) is read in the same round trip; Legacy: the release
	// before's (a string), read only when the hash holds none; "" none.
	Read, ReadField, Legacy string
}

// NewToken names one run of a delivery: its in-flight slot and the record's
// owner.
func NewToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Admit runs a delivery's run through its record and its gates in one
// round trip (see admitScript), with the read of its stored event.
func (g *Gates) Admit(ctx context.Context, k GateKeys, r AdmitRequest) (Admission, error) {
	as, err := g.AdmitGroup(ctx, k, []AdmitRequest{r})
	if err != nil {
		return Admission{}, err
	}
	return as[0], nil
}

// AdmitGroup runs several runs of one subscriber's deliveries (a
// batch's, worker/batch.go) through their records and gates in one
// script, each as Admit does, in their order, with the reads of their
// stored events in the same round trip: what every request needs (the
// gate record, the clock, the cooldown, the limiter) is read once.
func (g *Gates) AdmitGroup(ctx context.Context, k GateKeys, rs []AdmitRequest) ([]Admission, error) {
	keys := []string{k.Record, k.Cooldown, k.InFlight, k.Rate, k.Lot, k.Out, k.Exp, k.Fresh, k.record(rs[0].EventID), k.Stats, k.Retry, k.Runs}
	args := make([]any, 1, 1+admitArgs*len(rs))
	args[0] = len(rs)
	for _, r := range rs {
		keys = append(keys, k.record(r.EventID))
		args = append(append(args, r.EventID, r.Token, r.SlotTTL.Milliseconds(), r.Reserve.Milliseconds(), flag(r.Reserved)), r.Pace.args()...)
	}
	bodies := make([]*redis.StringCmd, len(rs))
	var admit *redis.Cmd
	_, _ = g.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, r := range rs {
			if r.Read != "" {
				bodies[i] = p.HGet(ctx, r.Read, r.ReadField)
			}
		}
		admit = admitScript.EvalSha(ctx, p, keys, args...)
		return nil
	})
	res, err := admit.Slice()
	if IsNoScript(err) { // Redis does not know it yet: sent again in full
		res, err = admitScript.Eval(ctx, g.rdb, keys, args...).Slice()
	}
	if err != nil {
		return nil, err
	}
	replies, err := splitReplies("admit", res, len(rs), 1)
	if err != nil {
		return nil, err
	}
	out := make([]Admission, len(rs))
	for i, r := range replies {
		if out[i], err = admission(r); err != nil {
			return nil, err
		}
	}
	for i, req := range rs {
		if bodies[i] != nil {
			out[i].Value, out[i].Found, out[i].ReadErr = g.readBody(ctx, bodies[i], req.ReadField, req.Legacy)
		}
	}
	return out, nil
}

// admitArgs is how many arguments admitScript takes per request.
const admitArgs = 14

// readBody is a stored event's body from its read (or the release
// before's string, key Legacy, read apart when the hash holds none).
func (g *Gates) readBody(ctx context.Context, body *redis.StringCmd, field, legacy string) (map[string]string, bool, error) {
	switch v, err := body.Result(); {
	case err == nil:
		return map[string]string{field: v}, true, nil
	case !errors.Is(err, redis.Nil):
		return nil, false, err
	case legacy != "":
		// Not stored by this release: the release before's string, read
		// apart (only its adopted deliveries pay the round trip).
		if v, lerr := g.rdb.Get(ctx, legacy).Result(); lerr == nil {
			return map[string]string{"": v}, true, nil
		} else if !errors.Is(lerr, redis.Nil) {
			return nil, false, lerr
		}
	}
	return nil, false, nil
}

// admission reads admitScript's reply to one request.
func admission(r []string) (Admission, error) {
	if len(r) == 0 {
		return Admission{}, fmt.Errorf("admit: unexpected reply %v", r)
	}
	res := r
	ms := func(i int) time.Time {
		if i >= len(r) {
			return time.Time{}
		}
		n, _ := strconv.ParseInt(r[i], 10, 64)
		if n <= 0 {
			return time.Time{}
		}
		return time.UnixMilli(n)
	}
	dur := func(i int) time.Duration {
		n, _ := strconv.ParseInt(r[i], 10, 64)
		return time.Duration(n) * time.Millisecond
	}
	switch r[0] {
	case "0":
		if len(r) < 11 {
			return Admission{}, fmt.Errorf("admit: unexpected reply %v", res)
		}
		a := Admission{Admitted: true, EventType: r[7], ConfigVersion: r[9], Expires: ms(4), Due: ms(5), Published: ms(6), Now: ms(10),
			CooldownEndedAt: ms(11)}
		if len(r) > 12 {
			a.Gen = r[12]
		}
		for _, c := range r[1] {
			switch c {
			case 'p':
				a.Probe = true
			case 'f':
				a.Streak = true
			case 'l':
				a.TookOver = true
			}
		}
		a.Spent, _ = strconv.Atoi(r[2])
		a.Max, _ = strconv.Atoi(r[3])
		a.Requests, _ = strconv.Atoi(r[8])
		return a, nil
	case "1":
		return Admission{Drop: r[1]}, nil
	case "2":
		return Admission{DeadAlready: true}, nil
	case "3":
		return Admission{Expired: true, Expires: ms(1), Now: ms(2)}, nil
	case "4":
		return Admission{Busy: true}, nil
	case "5":
		return Admission{SendIn: max(dur(1), time.Millisecond)}, nil
	case "6":
		a := Admission{Parked: true, State: r[1]}
		a.Notify, a.NotifyAsked = notifyAt(r[2])
		return a, nil
	case "7":
		return Admission{OwnedFor: max(dur(1), time.Millisecond)}, nil
	}
	return Admission{}, fmt.Errorf("admit: unexpected reply %v", res)
}

// KEYS: 1 gate, 2 lot, 3 out, 4 exp, 5 fresh, 6 record, 7 counters, 8
// retry, 9 inflight, 10 runs. ARGV: 1 event id, 2 token, 3 state, 4
// earliest hand-out ms from now (0: now), 5 why (counted as
// "deferred:<why>"). Parks a delivery this run was handed but did not take
// (every in-flight slot stayed taken for MaxWait), or one it took a rate
// slot for and lost its chance: the record is its token's, or handed out
// and nobody's, or owned by a run whose slot lapsed (its worker died: a
// task run again after a crash finds the slots full again). Reply: {1}
// parked, {0} not (a live run has it, or it ended or is parked).
var parkScript = script(`
local k = {gate = KEYS[1], lot = KEYS[2], out = KEYS[3], exp = KEYS[4], fresh = KEYS[5], rec = KEYS[6], retry = KEYS[8],
  inflight = KEYS[9], runs = KEYS[10]}
local d = redis.call('HMGET', k.rec, 'g', 's', 'tk', 'x', 'pk')
if d[5] == ARGV[2] then return {1} end -- parked by this run: a retried call
local gen = redis.call('HGET', k.gate, 'gen')
if not gen or d[1] ~= gen or (d[2] ~= 'pending' and d[2] ~= 'in_flight') then return {0} end
local now = now_ms()
if d[3] and d[3] ~= ARGV[2] then
  if tonumber(redis.call('ZSCORE', k.inflight, d[3]) or '0') > now then return {0} end
  -- the request of the run that died counted: its next run records it
  if d[2] == 'in_flight' then redis.call('HSET', k.rec, 'lr', 1) end
elseif d[2] ~= 'pending' then
  return {0}
end
park(k, ARGV[1], ARGV[3], now + tonumber(ARGV[4]), tonumber(d[4]))
redis.call('HSET', k.rec, 'pk', ARGV[2])
redis.call('HINCRBY', KEYS[7], 'deferred:' .. ARGV[5], 1)
return {1}`)

// Park parks a delivery handed to this run that it did not take (see
// parkScript), to be handed out again after in; why is counted.
func (g *Gates) Park(ctx context.Context, k GateKeys, eventID, token, state, why string, in time.Duration) (bool, error) {
	n, err := g.run(ctx, parkScript, []string{k.Record, k.Lot, k.Out, k.Exp, k.Fresh, k.record(eventID), k.Stats, k.Retry, k.InFlight, k.Runs},
		eventID, token, state, in.Milliseconds(), why)
	if err != nil {
		return false, err
	}
	return len(n) > 0 && n[0] == int64(1), nil
}

// KEYS: 1 gate, 2 lot, 3 exp, 4 fresh, 5 record, 6 retry. ARGV: 1 event id, 2 the
// generation it was published for, 3 max attempts, 4 horizon ms, 5 due
// ms, 6 published ms, 7 type, 8 attempts spent, 9 its task id (the
// release before's fresh-lane entry), 10 dedup ms. Reply {1, due}
// adopted: parked in the lot; {0} dropped (another generation, or ended);
// {2, parked ms or -1} this release's already: nothing written.
//
// A record with a horizon (x) is this release's: every script of it that
// writes a record writes x (Book, and this one), the release before never
// did. Such a record was adopted before (the task's run died before asynq
// let it go, and asynq runs it again) or booked anew, and this release's
// scripts own it now: parked, handed out, or in flight under a live run.
// Adopting it again would take it from that run (its 2xx discarded, the
// event sent twice), so the task is let go and the record left as it is;
// the reply says when it is parked for, so that a rerun still tells the
// dispatcher the first run may not have told.
var adoptScript = script(`
local k = {gate = KEYS[1], lot = KEYS[2], exp = KEYS[3], fresh = KEYS[4], rec = KEYS[5], retry = KEYS[6]}
local gen = redis.call('HGET', k.gate, 'gen')
if not gen or gen ~= ARGV[2] then return {0} end
local d = redis.call('HMGET', k.rec, 'g', 's', 'x')
if d[1] and d[1] ~= gen then return {0} end
if d[2] == 'delivered' or d[2] == 'dead' then return {0} end
if d[3] then return {2, tonumber(redis.call('ZSCORE', k.lot, ARGV[1]) or '-1')} end
if not d[1] then
  redis.call('HSET', k.rec, 'g', gen, 't', ARGV[7], 'p', ARGV[6], 'u', ARGV[5])
end
redis.call('HSET', k.rec, 'x', ARGV[4], 'm', ARGV[3], 'c', ARGV[8])
local now = now_ms()
local due = math.max(now, tonumber(ARGV[5]))
redis.call('ZADD', k.lot, due, ARGV[1])
lot_kind(k, ARGV[1])
redis.call('ZADD', k.exp, tonumber(ARGV[4]), ARGV[1])
redis.call('ZREM', k.fresh, ARGV[9])
-- le: the release before may have left a stale dead letter of it
redis.call('HSET', k.rec, 's', 'scheduled', 'le', 1)
redis.call('HDEL', k.rec, 'tk', 'w', 'q')
-- it lives as Book's records do: until its horizon + the dedup window
local ttl = math.max(tonumber(ARGV[4]) - now, 0) + tonumber(ARGV[10])
if redis.call('PTTL', k.rec) < ttl then redis.call('PEXPIRE', k.rec, ttl) end
return {1, due}`)

// Legacy is a task of the release before (tasks.LegacyDelivery), as Adopt
// takes it.
type Legacy struct {
	EventID, Gen, Type, TaskID string
	MaxAttempts, Spent         int
	Published, Due, Expires    time.Time
	// Dedup is how long the record outlives the horizon (Booking.Dedup).
	Dedup time.Duration
}

// Adopted is Adopt's answer.
type Adopted struct {
	// Due is when the delivery adopted now is due (zero: not adopted).
	Due time.Time
	// Owned: the record is this release's already (adopted before, or
	// booked anew): nothing was written, the task is to be let go. Parked
	// is when it is parked for in the lot (zero: it is not there: handed
	// out or in flight).
	Owned  bool
	Parked time.Time
}

// Adopt parks a task of the release before in its subscriber's lot, with
// what its payload carried that this release keeps in the record (the
// horizon, the attempt budget), so that a dispatcher hands it out as a
// task of this release. A zero answer: it was dropped (its subscriber was
// deleted or created again, or it ended).
func (g *Gates) Adopt(ctx context.Context, k GateKeys, l Legacy) (Adopted, error) {
	res, err := g.run(ctx, adoptScript, []string{k.Record, k.Lot, k.Exp, k.Fresh, k.record(l.EventID), k.Retry},
		l.EventID, l.Gen, l.MaxAttempts, l.Expires.UnixMilli(), l.Due.UnixMilli(), l.Published.UnixMilli(), l.Type, l.Spent, l.TaskID,
		l.Dedup.Milliseconds())
	if err != nil {
		return Adopted{}, err
	}
	r := replyStrings(res)
	if len(r) < 2 {
		return Adopted{}, nil
	}
	ms, _ := strconv.ParseInt(r[1], 10, 64)
	switch r[0] {
	case "1":
		return Adopted{Due: time.UnixMilli(ms)}, nil
	case "2":
		a := Adopted{Owned: true}
		if ms >= 0 {
			a.Parked = time.UnixMilli(ms)
		}
		return a, nil
	}
	return Adopted{}, nil
}
