package limits

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// GateKeys are one subscriber's keys (tasks.Keys.Gates names them; doc.go
// says what each holds). They share one Redis Cluster slot, so each script
// below touches one slot.
type GateKeys struct {
	Record   string // the gate record (hash)
	Cooldown string
	InFlight string
	Rate     string // redis_rate's key of the subscriber's GCRA
	Lot      string
	Retry    string // the parked deliveries a request was made for (a set)
	Out      string
	// Runs: the deliveries a run has taken (event id → when its slot
	// lapses), so that a turn finds one whose worker died.
	Runs       string
	Exp        string
	Fresh      string
	Deliveries string // prefix of the delivery records (+ event id)
	Log        string
	Stats      string
	Dead       string // prefix of the dead-letter ledger entries (+ event id)
	Replaying  string // prefix of a ledger entry's replay claim (+ event id; tasks.LedgerKeys.Claim)
	DeadIndex  string
	DeadBatch  string
	DeadSample string
}

// record is the delivery record of event ev.
func (k GateKeys) record(ev string) string { return k.Deliveries + ev }

// Gates are the Redis-side checks and bookkeeping of a delivery. Every
// time comparison uses Redis' own clock, so workers on skewed hosts agree
// and a deadline is never compared across two clocks.
//
// Each call is one script (Admit's with its stored event's read, in one
// pipeline). A worker gives them a client whose commands share round trips
// (deploy.AutoPipeline), so that the scripts of concurrent deliveries go
// to Redis together.
type Gates struct {
	rdb redis.UniversalClient
}

// NewGates returns gates on rdb.
func NewGates(rdb redis.UniversalClient) *Gates { return &Gates{rdb: rdb} }

// run runs script (by its sha; in full if Redis does not know it) and
// returns its reply.
func (g *Gates) run(ctx context.Context, script *redis.Script, keys []string, args ...any) ([]any, error) {
	return script.Run(ctx, g.rdb, keys, args...).Slice()
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
// The deadline is set on Redis' clock, after the answer was received, its
// milliseconds rounded up, so it is never earlier than the endpoint asked;
// the later of the stored and the new deadline is kept, so a short
// Retry-After never cuts a longer one.
var cooldownScript = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.ceil(t[2] / 1000)
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

// InFlight counts the live slots of a subscriber.
func (g *Gates) InFlight(ctx context.Context, k GateKeys) (int64, error) {
	return g.rdb.ZCount(ctx, k.InFlight, strconv.FormatInt(time.Now().UnixMilli(), 10), "+inf").Result()
}

// InFlightIn queues InFlight on a pipeline, for readers of many subscribers.
func (g *Gates) InFlightIn(ctx context.Context, p redis.Pipeliner, k GateKeys) *redis.IntCmd {
	return p.ZCount(ctx, k.InFlight, strconv.FormatInt(time.Now().UnixMilli(), 10), "+inf")
}

// ParkedIn queues the counts of a subscriber's parked deliveries (its
// lot), of those of them a request was made for (retry: the rest were
// never tried yet) and of those handed to asynq and not yet taken (out)
// on a pipeline.
func (g *Gates) ParkedIn(ctx context.Context, p redis.Pipeliner, k GateKeys) (parked, retrying, handed *redis.IntCmd) {
	return p.ZCard(ctx, k.Lot), p.SCard(ctx, k.Retry), p.ZCard(ctx, k.Out)
}

// Forget queues the deletion of every key of a subscriber's gates and
// schedule but the gate record, which DeleteSubscriber removes apart
// (only if it is still the deleted generation's).
func (g *Gates) Forget(ctx context.Context, p redis.Pipeliner, k GateKeys) {
	p.Del(ctx, k.Cooldown, k.InFlight, k.Rate, k.Lot, k.Retry, k.Out, k.Runs, k.Exp, k.Fresh, k.Log, k.Stats, k.DeadBatch, k.DeadSample)
}

// EndCooldown ends a subscriber's cooldown now (an operator's lever); wake
// the subscriber with Notify. It reports whether a cooldown was running.
// The gate record keeps when the operator ended it (ce_at,
// ReadCooldownEnded) and when it was to end (ce_until). The rest is the
// workers' work, done by the subscriber's turns, so that the call costs
// the same however many deliveries wait: a turn makes the deliveries
// parked until the cooldown's end (state cooling, at exactly ce_until) due
// from ce_at, a batch a turn, and each delivery that goes early because of
// it keeps the time for the note on its next attempt (the scripts' woken).
func (g *Gates) EndCooldown(ctx context.Context, k GateKeys) (bool, error) {
	n, err := g.run(ctx, endCooldownScript, []string{k.Cooldown, k.Record})
	return err == nil && len(n) > 0 && n[0] == int64(1), err
}

// ReadCooldownEnded reads, from a gate record's fields (HGETALL), when an
// operator last ended a running cooldown of the subscriber (EndCooldown;
// zero: never).
func ReadCooldownEnded(rec map[string]string) time.Time { return ParseCooldown(rec["ce_at"]) }

// KEYS: 1 cooldown, 2 gate. Reply: {1} if a cooldown was running (it
// ended now), {0} if not (nothing written but the cooldown's deletion).
var endCooldownScript = script(`
local now = now_ms()
local u = tonumber(redis.call('GET', KEYS[1]) or '0')
redis.call('DEL', KEYS[1])
if u <= now then return {0} end
redis.call('HSET', KEYS[2], 'ce_at', now, 'ce_until', u)
return {1}`)

// KEYS[1]: the GCRA key. ARGV: 1 the old emission interval (s), 2 the new
// one, 3 the old burst, 4 the new one. Carries the limiter's debt — how
// far its theoretical arrival time is ahead of now — over to the new
// limit: rescaled to the new interval, so that the requests sent within
// the burst stay spent (a change never grants a second whole burst) and a
// raised limit applies at once (a debt of hours at 1/h is milliseconds at
// 100/s); but never so far back that the next request would go sooner
// after the last one already booked (a slot reserved under the old limit
// and waited for in a worker) than the new interval allows. Reply: 1
// carried over, 0 no debt.
var rescaleScript = script(`
local _, t = now_ms()
local now = gcra_now(t)
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat <= now then return 0 end
local old, new = tonumber(ARGV[1]), tonumber(ARGV[2])
local new_tat = math.max(now + (tat - now) * new / old, tat - tonumber(ARGV[3]) * old + tonumber(ARGV[4]) * new)
redis.call('SET', KEYS[1], new_tat, 'EX', math.max(1, math.ceil(new_tat - now)))
return 1`)

// ChangeLimit carries the subscriber's limiter over from limit old to new
// (see rescaleScript), and forgets the receiver's RateLimit-Policy cap:
// the operator has said what the limit is.
func (g *Gates) ChangeLimit(ctx context.Context, k GateKeys, old, new Limit) error {
	if err := rescaleScript.Run(ctx, g.rdb, []string{k.Rate}, old.Interval().Seconds(), new.Interval().Seconds(), old.Burst, new.Burst).Err(); err != nil {
		return err
	}
	return g.rdb.HDel(ctx, k.Record, "a_cap", "a_cap_at", "a_cap_until").Err()
}
