package limits

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// GateKeys are one subscriber's keys (tasks.Keys.Gates names them). They
// share one Redis Cluster slot, so each script below touches one slot.
type GateKeys struct {
	Record     string // hash: gen, paused (reason), paused_at
	Cooldown   string // Unix ms, in Redis' clock, before which nothing is sent
	InFlight   string // sorted set: slot token → expiry (Unix ms)
	Rate       string // GCRA theoretical arrival time, redis_rate's key and format
	Pacing     string // pacing cursor: a GCRA theoretical arrival time in Unix ms
	Waiting    string // sorted set: "<task id>@<queue>" → wake-up (Unix ms) of tasks parked in asynq's schedule
	Seen       string // prefix of the old publish markers (+ event id): "<gen>:<wake ms>:<queue>", read only
	Fresh      string // sorted set: id → expiry (Unix ms) of the subscriber's tasks in the fresh lane
	Deliveries string // prefix of the delivery records (+ event id): hashes, see DeliveryRecord
	Log        string // stream of the deliveries in publish order: field "e", the event id
}

// Gates are the Redis-side checks and bookkeeping of a delivery. Every
// time comparison uses Redis' own clock, so workers on skewed hosts agree
// and a deadline is never compared across two clocks.
//
// Admit and Take, run by every delivery, are sent in batches with those of
// concurrent deliveries (see combiner).
type Gates struct {
	rdb  redis.UniversalClient
	comb *combiner
}

// NewGates returns gates on rdb.
func NewGates(rdb redis.UniversalClient) *Gates {
	return &Gates{rdb: rdb, comb: &combiner{rdb: rdb}}
}

// ParseCooldown reads the value stored at GateKeys.Cooldown (absent: zero).
func ParseCooldown(v string) time.Time {
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// KEYS[1]: cooldown. ARGV[1]: delay ms from Redis' now (-1: use ARGV[2]),
// ARGV[2]: an absolute deadline, Unix ms (an HTTP-date), ARGV[3]: cap ms.
// Reply: {until Unix ms, ms from now until then}: the cooldown in force.
// The deadline is set on Redis' clock, after the answer was received, so
// it is never earlier than the endpoint asked; the later of the stored and
// the new deadline is kept, so a short Retry-After never cuts a longer one.
var cooldownScript = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local new
if tonumber(ARGV[1]) >= 0 then new = now + tonumber(ARGV[1]) else new = math.max(tonumber(ARGV[2]), now) end
new = math.min(new, now + tonumber(ARGV[3]))
local old = tonumber(redis.call('GET', KEYS[1]) or '0')
if new > old then
  redis.call('SET', KEYS[1], string.format('%d', new), 'PX', new - now + 60000)
  old = new
end
return {string.format('%d', old), string.format('%d', math.max(old - now, 0))}`)

// Cooldown makes the whole destination wait as ra says, capped at max from
// now (Redis' clock). It returns the cooldown now in force and how long it
// lasts from now.
func (g *Gates) Cooldown(ctx context.Context, k GateKeys, ra RetryAfter, max time.Duration) (time.Time, time.Duration, error) {
	delay, abs := int64(-1), int64(0)
	if ra.At.IsZero() {
		delay = ra.After.Milliseconds()
	} else {
		abs = ra.At.UnixMilli()
	}
	res, err := cooldownScript.Run(ctx, g.rdb, []string{k.Cooldown}, delay, abs, max.Milliseconds()).StringSlice()
	if err != nil {
		return time.Time{}, 0, err
	}
	left, _ := strconv.ParseInt(res[1], 10, 64)
	return ParseCooldown(res[0]), time.Duration(left) * time.Millisecond, nil
}

// Admission is the answer of Admit. Durations are from now, in Redis'
// clock.
type Admission struct {
	Token string // the in-flight slot taken; "" unless admitted now
	// SendIn is how long a request the rate limiter booked a slot ahead
	// must wait; it takes no in-flight slot meanwhile: it takes one with
	// Take when its time comes.
	SendIn    time.Duration
	Unknown   bool          // no such subscriber, or not the generation the task was published for
	Paused    string        // the pause reason, when paused
	NotBefore time.Duration // the task's not-before time is this far off
	CoolFor   time.Duration // the destination cools down this much longer
	Busy      bool          // every in-flight slot is taken
	Wait      time.Duration // rate limited beyond the reservation horizon: the next request may go then
	// Held is how long the open breaker holds the task: its wake-up is
	// booked (the breaker's cursor, the waiting index).
	Held time.Duration
	// Probe: admitted as the open breaker's one probe.
	Probe bool
	// Streak: admitted while the destination has failures in a row on
	// record; an answer that is not a failure must end the streak
	// (BreakerAnswered).
	Streak bool
	// Value and Found are AdmitRequest.Read's key, read whatever the
	// gates answered; ReadErr is the read's failure (not redis.Nil).
	Value   string
	Found   bool
	ReadErr error
}

// Admitted reports whether the request may be sent now.
func (a Admission) Admitted() bool { return a.Token != "" }

// Reserved reports whether the request has a rate-limit slot SendIn ahead.
func (a Admission) Reserved() bool { return a.SendIn > 0 }

// AdmitRequest is what Admit checks one request against.
type AdmitRequest struct {
	Gen         string    // the generation the task was published for; "" takes any
	Member      string    // the task's waiting-index member: it leaves the index when admitted
	NotBefore   time.Time // zero: none
	Limit       Limit
	MaxInFlight int
	SlotTTL     time.Duration // a slot whose holder vanished frees itself after this
	// Reserve is the longest SendIn Admit may book: within it a
	// rate-limited request gets a slot of its own ahead instead of a
	// refusal. 0: admit now or refuse.
	Reserve time.Duration
	// Ramp is the slow start after the breaker closes (BreakerPolicy.Ramp).
	Ramp time.Duration
	// Record is the task's delivery record (GateKeys.Deliveries + event
	// id): admitted, it is marked in flight and taken (see Book).
	Record string
	// Read, if set, is a string key (the task's stored event, in a slot of
	// its own) read in the same round trip, beside the script: Admission's
	// Value, Found and ReadErr.
	Read string
}

// breakerMinHold is the shortest wait of a task the open breaker holds.
const breakerMinHold = time.Second

// KEYS: 1 gate record, 2 cooldown, 3 in-flight, 4 GCRA, 5 waiting, 6 the
// task's delivery record (marked in flight when admitted, if it exists).
// ARGV: 1 generation ("" any), 2 token, 3 slot ttl ms, 4 max in-flight,
// 5 burst, 6 rate, 7 period s, 8 reserve ms, 9 not-before Unix ms (0 none),
// 10 waiting-index member, 11 slow-start ramp ms, 12 the shortest hold ms
// of a task the breaker holds, 13 the adaptive rate's increase per ms (see
// adaptive.go: the rate is the limit's, scaled by a_f and capped by a_cap,
// then by the slow start).
// Reply {code, detail}: 0 admitted now (an in-flight slot taken; detail
// "p": as the breaker's probe, "f": a streak of failures to end if it
// succeeds);
// 1 unknown subscriber or stale generation; 2 paused (reason); 3 cooling
// down (ms left); 4 every slot busy; 5 rate limited (ms to wait); 6 not
// before (ms left); 7 a rate-limit slot booked ahead (ms to wait; no
// in-flight slot taken: Take takes one then); 8 held by the open breaker
// (ms until its wake-up, booked on the breaker's cursor and in the
// waiting index).
//
// Every gate of a delivery in one round trip, checked in order (a request
// booked ahead checks the in-flight slots later, with Take); a refusal
// writes nothing. The rate step is redis_rate v10's GCRA (allowN with cost
// 1), same key, same arithmetic, so the two share a limit; it is inlined
// because a Lua script cannot call another and redis_rate cannot be
// pipelined. Where redis_rate would refuse for less than the reservation
// horizon, the request takes the next slot anyway and is told how long to
// wait: the requests then leave exactly one emission interval apart, each
// holding its own slot, instead of all sleeping the same RetryAfter and
// waking to be refused together. The cooldown is checked in the same step
// as a slot is taken: the holder of a 429 records the cooldown before it
// releases its slot, so no request can slip out after it. Expired slots (a
// worker that died mid-request) are dropped first.
var admitScript = redis.NewScript(`
local rec = redis.call('HMGET', KEYS[1], 'gen', 'paused', 'b_open', 'b_next', 'b_gap', 'b_probe', 'b_cur', 'b_ramp', 'b_fails', 'a_f', 'a_at', 'a_cap')
if not rec[1] or (ARGV[1] ~= '' and ARGV[1] ~= rec[1]) then return {1, ''} end
if rec[2] then return {2, rec[2]} end
local t = redis.call('TIME')
local now_ms = t[1] * 1000 + math.floor(t[2] / 1000)
local nb = tonumber(ARGV[9])
if nb > now_ms then return {6, string.format('%d', nb - now_ms)} end
local cool = tonumber(redis.call('GET', KEYS[2]) or '0')
if cool > now_ms then return {3, string.format('%d', cool - now_ms)} end
local probe = false
if rec[3] then
  local nxt = tonumber(rec[4]) or 0
  if nxt > now_ms or (tonumber(rec[6]) or 0) > now_ms then
    local slot = math.max(tonumber(rec[7]) or 0, nxt, now_ms + tonumber(ARGV[12]))
    redis.call('HSET', KEYS[1], 'b_cur', string.format('%d', slot + (tonumber(rec[5]) or 1000)))
    redis.call('ZADD', KEYS[5], slot, ARGV[10])
    return {8, string.format('%d', slot - now_ms)}
  end
  probe = true
end

local jan_1_2017 = 1483228800
local now = (t[1] - jan_1_2017) + (t[2] / 1000000)
local rate, burst = tonumber(ARGV[6]), tonumber(ARGV[5])
if rec[10] then
  local f = tonumber(rec[10]) + tonumber(ARGV[13]) * (now_ms - (tonumber(rec[11]) or now_ms))
  if f >= 1 then redis.call('HDEL', KEYS[1], 'a_f', 'a_at', 'a_why') else rate, burst = rate * f, math.max(1, math.floor(burst * f)) end
end
if rec[12] then
  local c = tonumber(rec[12]) * tonumber(ARGV[7])
  if c < rate then rate, burst = c, 1 end
end
if rec[8] then
  local f = (now_ms - tonumber(rec[8])) / tonumber(ARGV[11])
  if f >= 1 then redis.call('HDEL', KEYS[1], 'b_ramp') else rate, burst = rate * math.max(f, 0.1), 1 end
end
local emission_interval = tonumber(ARGV[7]) / rate
local burst_offset = emission_interval * burst
local tat = redis.call('GET', KEYS[4])
if not tat then tat = now else tat = tonumber(tat) end
tat = math.max(tat, now)
local new_tat = tat + emission_interval
local wait = new_tat - burst_offset - now
if wait > 0 and (probe or wait * 1000 > tonumber(ARGV[8])) then return {5, string.format('%d', math.ceil(wait * 1000))} end
if wait > 0 then
  redis.call('SET', KEYS[4], new_tat, 'EX', math.ceil(new_tat - now))
  redis.call('ZREM', KEYS[5], ARGV[10])
  return {7, string.format('%d', math.ceil(wait * 1000))}
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now_ms)
if redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[4]) then return {4, ''} end
redis.call('SET', KEYS[4], new_tat, 'EX', math.ceil(new_tat - now))
redis.call('ZREM', KEYS[5], ARGV[10])
redis.call('ZADD', KEYS[3], now_ms + tonumber(ARGV[3]), ARGV[2])
redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[3]) + 1000)
if redis.call('EXISTS', KEYS[6]) == 1 then redis.call('HSET', KEYS[6], 's', 'in_flight') end
if probe then
  redis.call('HSET', KEYS[1], 'b_probe', string.format('%d', now_ms + tonumber(ARGV[3])))
  return {0, 'p'}
end
if rec[9] then return {0, 'f'} end
return {0, ''}`)

// Admit runs every gate for one request to the subscriber of k in one
// round trip: it exists in the task's generation and is not paused, the
// task's not-before time has come, its destination is not cooling down, an
// in-flight slot is free, and its rate limit allows a request now or
// within r.Reserve.
func (g *Gates) Admit(ctx context.Context, k GateKeys, r AdmitRequest) (Admission, error) {
	var b [12]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	var nb int64
	if !r.NotBefore.IsZero() {
		nb = r.NotBefore.UnixMilli()
	}
	// Without a record, a key of the same slot that does not exist.
	keys := []string{k.Record, k.Cooldown, k.InFlight, k.Rate, k.Waiting, cmp.Or(r.Record, k.Deliveries)}
	admit := &scriptCall{script: admitScript, keys: keys, args: []any{r.Gen, token, r.SlotTTL.Milliseconds(), r.MaxInFlight,
		r.Limit.Burst, r.Limit.Rate, r.Limit.Period.Seconds(), r.Reserve.Milliseconds(), nb, r.Member,
		max(r.Ramp, time.Millisecond).Milliseconds(), breakerMinHold.Milliseconds(), adaptIncreasePerMs}}
	if r.Read == "" {
		g.comb.do(ctx, admit)
		return admission(admit.res, admit.err, token)
	}
	var get *redis.StringCmd
	read := &scriptCall{fill: func(p redis.Pipeliner) { get = p.Get(ctx, r.Read) }}
	g.comb.do(ctx, read, admit)
	a, err := admission(admit.res, admit.err, token)
	a.Value, a.ReadErr = get.Val(), get.Err()
	if a.Found = a.ReadErr == nil; errors.Is(a.ReadErr, redis.Nil) {
		a.ReadErr = nil
	}
	return a, err
}

// admission reads the reply of the Admit script.
func admission(res []any, err error, token string) (Admission, error) {
	if err != nil {
		return Admission{}, err
	}
	code, _ := res[0].(int64)
	detail, _ := res[1].(string)
	ms := func() time.Duration {
		n, _ := strconv.ParseInt(detail, 10, 64)
		return time.Duration(n) * time.Millisecond
	}
	switch code {
	case 0:
		return Admission{Token: token, Probe: detail == "p", Streak: detail == "f"}, nil
	case 8:
		return Admission{Held: ms()}, nil
	case 7:
		return Admission{SendIn: ms()}, nil
	case 1:
		return Admission{Unknown: true}, nil
	case 2:
		return Admission{Paused: detail}, nil
	case 3:
		return Admission{CoolFor: ms()}, nil
	case 4:
		return Admission{Busy: true}, nil
	case 5:
		return Admission{Wait: max(ms(), time.Millisecond)}, nil
	case 6:
		return Admission{NotBefore: ms()}, nil
	}
	return Admission{}, fmt.Errorf("admit: unexpected reply %v", res)
}

// ReleaseIn queues the release of an in-flight slot taken by Admit on a
// pipeline: the worker frees slots with its other writes after a request.
func (g *Gates) ReleaseIn(ctx context.Context, p redis.Pipeliner, k GateKeys, token string) {
	p.ZRem(ctx, k.InFlight, token)
}

// InFlight counts the live slots of a subscriber.
func (g *Gates) InFlight(ctx context.Context, k GateKeys) (int64, error) {
	return g.rdb.ZCount(ctx, k.InFlight, strconv.FormatInt(time.Now().UnixMilli(), 10), "+inf").Result()
}

// InFlightIn queues InFlight on a pipeline, for readers of many subscribers.
func (g *Gates) InFlightIn(ctx context.Context, p redis.Pipeliner, k GateKeys) *redis.IntCmd {
	return p.ZCount(ctx, k.InFlight, strconv.FormatInt(time.Now().UnixMilli(), 10), "+inf")
}

// Forget deletes every gate key but the record (used when a subscriber is
// deleted or its limit changes). Publish markers expire by themselves.
func (g *Gates) Forget(ctx context.Context, p redis.Pipeliner, k GateKeys) {
	p.Del(ctx, k.Cooldown, k.InFlight, k.Rate, k.Pacing, k.Waiting)
}

// ResetPace forgets the rate limiter's and the pacing cursor's history, so
// that a changed limit applies from now instead of after the old pace's
// bookings.
func (g *Gates) ResetPace(ctx context.Context, p redis.Pipeliner, k GateKeys) {
	p.Del(ctx, k.Rate, k.Pacing)
}

// KEYS[1]: gate record. ARGV[1]: generation ("" any), ARGV[2]: reason,
// ARGV[3]: Unix ms. Pauses the subscriber if it is still the generation a
// task was published for: a 410 to an old task must not pause a re-created
// subscriber.
var pauseScript = redis.NewScript(`
local gen = redis.call('HGET', KEYS[1], 'gen')
if not gen or (ARGV[1] ~= '' and ARGV[1] ~= gen) then return 0 end
redis.call('HSET', KEYS[1], 'paused', ARGV[2], 'paused_at', ARGV[3])
return 1`)

// Pause pauses the subscriber of k with reason, if gen is its generation
// ("" any), and reports whether it did.
func (g *Gates) Pause(ctx context.Context, k GateKeys, gen, reason string) (bool, error) {
	n, err := pauseScript.Run(ctx, g.rdb, []string{k.Record}, gen, reason, time.Now().UnixMilli()).Int()
	return n == 1, err
}

// KEYS: 1 cooldown, 2 in-flight, 3 gate record, 4 delivery record (see
// Admit). ARGV: 1 token, 2 slot ttl ms, 3 max in-flight. Reply {code, detail}: 0 slot taken (detail "f": a
// streak of failures on record, as Admit); 3 cooling down (ms left); 4
// every slot busy; 8 the breaker opened (ask Admit again: it holds the
// task).
//
// For a request whose rate-limit slot Admit booked ahead, when its time has
// come: a 429 that arrived meanwhile holds it too, and it takes an
// in-flight slot only now, so that waiting for its time holds none.
var takeScript = redis.NewScript(`
local t = redis.call('TIME')
local now_ms = t[1] * 1000 + math.floor(t[2] / 1000)
local cool = tonumber(redis.call('GET', KEYS[1]) or '0')
if cool > now_ms then return {3, string.format('%d', cool - now_ms)} end
local b = redis.call('HMGET', KEYS[3], 'b_open', 'b_fails')
if b[1] then return {8, ''} end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_ms)
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[3]) then return {4, ''} end
redis.call('ZADD', KEYS[2], now_ms + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[2]) + 1000)
if redis.call('EXISTS', KEYS[4]) == 1 then redis.call('HSET', KEYS[4], 's', 'in_flight') end
if b[2] then return {0, 'f'} end
return {0, ''}`)

// Take takes an in-flight slot for a request whose rate-limit slot Admit
// booked and whose time has come, unless the destination cools down (or
// every slot is taken). The answer is an Admission with Token, CoolFor or
// Busy set.
func (g *Gates) Take(ctx context.Context, k GateKeys, record string, maxInFlight int, ttl time.Duration) (Admission, error) {
	var b [12]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	res, err := g.comb.run(ctx, takeScript, []string{k.Cooldown, k.InFlight, k.Record, cmp.Or(record, k.Deliveries)}, token, ttl.Milliseconds(), maxInFlight)
	if err != nil {
		return Admission{}, err
	}
	code, _ := res[0].(int64)
	detail, _ := res[1].(string)
	switch code {
	case 0:
		return Admission{Token: token, Streak: detail == "f"}, nil
	case 8:
		return Admission{Held: breakerMinHold}, nil // not booked: Admit books it
	case 3:
		n, _ := strconv.ParseInt(detail, 10, 64)
		return Admission{CoolFor: time.Duration(n) * time.Millisecond}, nil
	case 4:
		return Admission{Busy: true}, nil
	}
	return Admission{}, fmt.Errorf("take: unexpected reply %v", res)
}
