package limits

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The pacing cursor books each task that has to wait a wake-up slot of its
// own, spaced at the subscriber's rate after its burst, so that a backlog
// wakes as fast as the limit lets it be sent and no faster, instead of all
// at once and then re-checking forever. Unlike the rate limiter, the cursor
// always advances: it schedules, the limiter (Admit) decides.
//
// Tasks whose slot lies in the future are parked in asynq's schedule and
// listed in the subscriber's waiting index, so that a change of limit or a
// resume can wake them (Wake) instead of leaving them booked on the old
// pace.
//
// Events published with a not-before time are paced on a cursor of their
// own per minute of that time: 100,000 events due at 09:00 wake spread at
// the subscriber's rate from 09:00, without pushing back the events
// published for now.

// pacingKey is the cursor a slot at or after nb (Unix ms, 0: now) is booked on.
func pacingKey(k GateKeys, nb int64) string {
	if nb == 0 {
		return k.Pacing
	}
	return k.Pacing + ":nb:" + strconv.FormatInt(nb/60000, 10)
}

// KEYS: 1 gate record, 2 pacing cursor, 3 waiting index, 4 old publish
// marker (read only: see GateKeys.Seen), 5 fresh-lane tasks (sorted set: task
// id → expiry Unix ms), 6 delivery record, 7 delivery log.
// ARGV: 1 interval ms (float), 2 burst, 3 not-before Unix ms (0: now),
// 4 record ttl ms, 5 task id, 6 "1" to book even when paused (held), "0"
// to refuse then, 7 the most tasks in the fresh lane at once (0: no cap),
// 8 how long a fresh-lane entry counts (ms), 9 fresh queue, 10 backlog
// queue, 11 event type, 12 event id, 13 "1" for a resend (a duplicate is
// booked again, in the same record, counted in r). The log keeps an entry
// for the record's ttl.
// Reply {code, gen, wake Unix ms, ms from now until wake, queue, held, taken}:
// 0 booked; 1 duplicate (booked before in this generation: nothing
// written, wake and queue as first booked; taken "1" when a worker has
// taken its task since (the record is in flight or has attempts), so it
// exists no more or will not be sent again);
// 2 no such subscriber; 3 paused (nothing written). held is "1" when
// booked for a paused subscriber.
//
// The delivery record's booking (g, w, q) makes a re-publish book nothing
// and go to the queue the first publish chose, where asynq's task id makes
// it a duplicate while the task exists; once a worker took it, the
// record alone does. A task due now goes to the fresh queue while fewer
// than ARGV[7] of the subscriber's tasks are there (the worker takes a
// task off the set when it ends; an entry counts for ARGV[8] at most, so a
// lost one frees itself); any other task goes to the backlog queue.
var bookScript = redis.NewScript(`
local rec = redis.call('HMGET', KEYS[1], 'gen', 'paused')
if not rec[1] then return {'2', '', '0', '0', '', '0', '0'} end
if rec[2] and ARGV[6] ~= '1' then return {'3', rec[1], '0', '0', '', '0', '0'} end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local d = redis.call('HMGET', KEYS[6], 'g', 'w', 'q', 's', 'n')
local resend = ARGV[13] == '1' and d[1] == rec[1]
if d[1] == rec[1] and not resend then
  local taken, wake = '0', tonumber(d[2]) or now
  if d[4] == 'in_flight' or d[5] then taken = '1' end
  return {'1', d[1], string.format('%d', wake), string.format('%d', math.max(wake - now, 0)), d[3] or '', '0', taken}
end
local seen = redis.call('GET', KEYS[4])
if seen then
  local gen, wake, q = string.match(seen, '^([^:]*):(%d+):(.*)$')
  if gen == rec[1] then return {'1', gen, wake, string.format('%d', math.max(tonumber(wake) - now, 0)), q, '0', '0'} end
end
local nb = math.max(tonumber(ARGV[3]), now)
local interval = tonumber(ARGV[1])
local tat = math.max(tonumber(redis.call('GET', KEYS[2]) or '0'), nb) + interval
local wake = math.ceil(math.max(tat - interval * tonumber(ARGV[2]), nb))
redis.call('SET', KEYS[2], string.format('%.3f', tat), 'PX', math.ceil(tat - now + 60000))
local queue = ARGV[10]
if tonumber(ARGV[3]) == 0 and wake - now < 1000 and not rec[2] then
  local cap = tonumber(ARGV[7])
  redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
  if cap == 0 or redis.call('ZCARD', KEYS[5]) < cap then
    redis.call('ZADD', KEYS[5], now + tonumber(ARGV[8]), ARGV[5])
    redis.call('PEXPIRE', KEYS[5], tonumber(ARGV[8]))
    queue = ARGV[9]
  end
end
local state, held = 'pending', '0'
if rec[2] then state, held = 'held', '1' elseif wake - now >= 1000 then state = 'scheduled' end
if resend then
  redis.call('HDEL', KEYS[6], 'dl', 'nx')
  redis.call('HINCRBY', KEYS[6], 'r', 1)
  redis.call('HSET', KEYS[6], 'w', string.format('%d', wake), 'q', queue, 's', state, 'u', string.format('%d', nb))
else
  redis.call('DEL', KEYS[6])
  redis.call('HSET', KEYS[6], 'g', rec[1], 'w', string.format('%d', wake), 'q', queue, 't', ARGV[11],
    'p', string.format('%d', now), 'u', string.format('%d', nb), 's', state)
  redis.call('XADD', KEYS[7], 'MINID', '~', string.format('%d', now - tonumber(ARGV[4])), '*', 'e', ARGV[12])
  redis.call('PEXPIRE', KEYS[7], ARGV[4])
end
redis.call('PEXPIRE', KEYS[6], ARGV[4])
if wake - now >= 1000 then redis.call('ZADD', KEYS[3], wake, ARGV[5] .. '@' .. queue) end
return {'0', rec[1], string.format('%d', wake), string.format('%d', wake - now), queue, held, '0'}`)

// Booking asks Book for a wake-up slot and a queue for one new task.
type Booking struct {
	Keys      GateKeys
	Limit     Limit
	NotBefore time.Time // zero: now
	EventID   string    // names the delivery record
	TaskID    string
	// EventType is the event's, for its delivery record.
	EventType string
	// Resend books a delivery booked before again (a resend or a replay):
	// a new series of attempts in the same delivery record.
	Resend bool
	// RecordTTL is how long the delivery record (and with it the
	// booking, so a re-publish books nothing and goes to the queue the
	// first one chose) lives at least: the retry horizon, then the dedup
	// window. The worker extends it by the dedup window as the delivery
	// ends. The delivery log lists it as long.
	RecordTTL time.Duration
	Held      bool // book even when the subscriber is paused
	// FreshMax is how many of the subscriber's tasks may be in the fresh
	// lane at once: a task due now goes to FreshQueue while fewer are, else
	// to BacklogQueue. Zero: no cap.
	FreshMax                 int
	FreshQueue, BacklogQueue string
}

// FreshTTL is how long a task counts as in the fresh lane, at most: one
// whose end was never recorded (a lost worker) frees its place then.
const FreshTTL = 10 * time.Minute

// Booked is Book's answer for one Booking.
type Booked struct {
	Duplicate bool   // booked before, in this generation: nothing was written
	Taken     bool   // a duplicate whose task a worker has taken: enqueue nothing
	Unknown   bool   // no such subscriber
	Paused    bool   // paused and not Held: nothing was written
	Held      bool   // booked (Held) for a paused subscriber: it waits until resumed
	Gen       string // the subscriber's generation, for the task to carry
	// In is how long from now (Redis' clock) the task's slot is: under a
	// second, enqueue it due now (the worker waits out the rest); more,
	// schedule it then. It is parked in the waiting index when ≥ 1s.
	In time.Duration
	// At is the slot itself, in Redis' clock.
	At time.Time
	// Queue is the queue the task goes to (for a duplicate: the first's).
	Queue string
}

// Book books a wake-up slot at or after NotBefore for each new task, in one
// round trip (one per Cluster node).
func (g *Gates) Book(ctx context.Context, bs ...Booking) ([]Booked, error) {
	return g.BookWith(ctx, nil, bs...)
}

// BookWith is Book with more script calls (also) in its round trip; an
// error of one of them is Book's.
func (g *Gates) BookWith(ctx context.Context, also []*Call, bs ...Booking) ([]Booked, error) {
	calls := make([]*Call, len(bs), len(bs)+len(also))
	for i, b := range bs {
		var nb int64
		if !b.NotBefore.IsZero() {
			nb = b.NotBefore.UnixMilli()
		}
		held, resend := "0", "0"
		if b.Held {
			held = "1"
		}
		if b.Resend {
			resend = "1"
		}
		ms := float64(b.Limit.Interval()) / float64(time.Millisecond)
		keys := []string{b.Keys.Record, pacingKey(b.Keys, nb), b.Keys.Waiting, b.Keys.Seen + b.EventID, b.Keys.Fresh,
			b.Keys.Deliveries + b.EventID, b.Keys.Log}
		calls[i] = &Call{Script: bookScript, Keys: keys, Args: []any{ms, b.Limit.Burst, nb, b.RecordTTL.Milliseconds(), b.TaskID, held,
			b.FreshMax, FreshTTL.Milliseconds(), b.FreshQueue, b.BacklogQueue, b.EventType, b.EventID, resend}}
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
		res := make([]string, len(c.Res))
		for j, v := range c.Res {
			res[j], _ = v.(string)
		}
		if len(res) < 7 {
			return nil, fmt.Errorf("book: unexpected reply %v", c.Res)
		}
		in, _ := strconv.ParseInt(res[3], 10, 64)
		at, _ := strconv.ParseInt(res[2], 10, 64)
		out[i] = Booked{Gen: res[1], In: time.Duration(in) * time.Millisecond, At: time.UnixMilli(at), Queue: res[4], Held: res[5] == "1",
			Taken: res[6] == "1"}
		switch res[0] {
		case "1":
			out[i].Duplicate = true
		case "2":
			out[i].Unknown = true
		case "3":
			out[i].Paused = true
		}
	}
	return out, nil
}

// KEYS: 1 pacing cursor, 2 waiting index. ARGV: 1 interval ms (float),
// 2 burst, 3 not-before Unix ms (0: now), 4 waiting-index member, 5 "1" to book a slot on
// the cursor, "0" to wake at now + ARGV[6] ms without taking one.
// Reply {wake Unix ms, ms from now}.
var parkScript = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local nb = math.max(tonumber(ARGV[3]), now)
local wake
if ARGV[5] == '1' then
  local interval = tonumber(ARGV[1])
  local tat = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), nb) + interval
  wake = math.ceil(math.max(tat - interval * tonumber(ARGV[2]), nb))
  redis.call('SET', KEYS[1], string.format('%.3f', tat), 'PX', math.ceil(tat - now + 60000))
else
  wake = math.max(nb, now + tonumber(ARGV[6]))
end
redis.call('ZADD', KEYS[2], wake, ARGV[4])
return {string.format('%d', wake), string.format('%d', wake - now)}`)

// Parking asks Park to schedule a task's next wake-up.
type Parking struct {
	Keys      GateKeys
	Limit     Limit
	Member    string    // the task's waiting-index member (tasks.WaitingMember)
	NotBefore time.Time // no earlier than this (zero: now)
	// Book takes a slot on the pacing cursor: for a task waiting for the
	// rate limit or a cooldown, whose wake-ups must be spread at the
	// subscriber's rate. Without it the task wakes after Hold and takes
	// nobody's slot: a busy destination or a paused subscriber must not
	// push back the tasks behind it.
	Book bool
	Hold time.Duration
}

// Park parks a task in the subscriber's waiting index and returns how long
// from now (Redis' clock) it should wake.
func (g *Gates) Park(ctx context.Context, pk Parking) (time.Duration, error) {
	var nb int64
	if !pk.NotBefore.IsZero() {
		nb = pk.NotBefore.UnixMilli()
	}
	book := "0"
	cursor := pk.Keys.Pacing
	ms := 0.0
	if pk.Book {
		book = "1"
		ms = float64(pk.Limit.Interval()) / float64(time.Millisecond)
		if nb > time.Now().Add(time.Minute).UnixMilli() {
			cursor = pacingKey(pk.Keys, nb) // a business deadline: its own minute's cursor
		}
	}
	res, err := parkScript.Run(ctx, g.rdb, []string{cursor, pk.Keys.Waiting}, ms, pk.Limit.Burst, nb, pk.Member, book,
		pk.Hold.Milliseconds()).StringSlice()
	if err != nil {
		return 0, err
	}
	in, _ := strconv.ParseInt(res[1], 10, 64)
	return time.Duration(in) * time.Millisecond, nil
}

// ParkIn queues a task's entry (member) in the waiting index on a
// pipeline, for a counted failure that waits out its backoff in asynq's
// retry set.
func (g *Gates) ParkIn(ctx context.Context, p redis.Pipeliner, k GateKeys, member string, wake time.Time) {
	p.ZAdd(ctx, k.Waiting, redis.Z{Score: float64(wake.UnixMilli()), Member: member})
}

// LeftFreshIn queues the removal of a task from the fresh-lane set: it
// ended (delivered, dead, dropped).
func (g *Gates) LeftFreshIn(ctx context.Context, p redis.Pipeliner, k GateKeys, taskID string) {
	p.ZRem(ctx, k.Fresh, taskID)
}

// UnparkIn queues the removal of a task from the waiting index: it ended
// without passing Admit (dropped, dead).
func (g *Gates) UnparkIn(ctx context.Context, p redis.Pipeliner, k GateKeys, member string) {
	p.ZRem(ctx, k.Waiting, member)
}

// WaitingAll returns every entry of the waiting index (member and wake-up,
// Unix ms), soonest first: a snapshot to wake them from.
func (g *Gates) WaitingAll(ctx context.Context, k GateKeys) ([]redis.Z, error) {
	return g.rdb.ZRangeWithScores(ctx, k.Waiting, 0, -1).Result()
}

// KEYS[1]: waiting index. ARGV: member, wake-up, member, wake-up, … Each
// member leaves the index only if its wake-up is still the one given.
var unparkScript = redis.NewScript(`
local n = 0
for i = 1, #ARGV, 2 do
  local s = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if s and tonumber(s) == tonumber(ARGV[i + 1]) then
    redis.call('ZREM', KEYS[1], ARGV[i])
    n = n + 1
  end
end
return n`)

// Unpark removes entries read from the waiting index (with WaitingAll)
// after their tasks were woken or found gone, except those parked anew
// since they were read: a woken task that is held again (its breaker
// reopened) or throttled writes a new wake-up, and its entry must stay for
// the next wake to find it.
func (g *Gates) Unpark(ctx context.Context, k GateKeys, entries []redis.Z) error {
	for len(entries) > 0 {
		n := min(len(entries), 500)
		args := make([]any, 0, 2*n)
		for _, z := range entries[:n] {
			args = append(args, z.Member, strconv.FormatFloat(z.Score, 'f', -1, 64))
		}
		if err := unparkScript.Run(ctx, g.rdb, []string{k.Waiting}, args...).Err(); err != nil {
			return err
		}
		entries = entries[n:]
	}
	return nil
}

// WaitingCount is how many of a subscriber's tasks are parked.
func (g *Gates) WaitingCount(ctx context.Context, k GateKeys) (int64, error) {
	return g.rdb.ZCard(ctx, k.Waiting).Result()
}
