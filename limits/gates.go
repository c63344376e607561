package limits

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// Gates are the Redis-side checks a delivery passes before its request is
// sent. All keys live under the namespace and are per subscriber; every time
// comparison uses Redis' own clock so that workers on skewed hosts agree.
type Gates struct {
	rdb     redis.UniversalClient
	limiter *redis_rate.Limiter
	ns      string
}

// NewGates returns gates whose keys start with namespace + ":".
func NewGates(rdb redis.UniversalClient, namespace string) *Gates {
	return &Gates{rdb: rdb, limiter: redis_rate.NewLimiter(rdb), ns: namespace}
}

// CooldownKey holds the Unix-millisecond time before which nothing may be
// sent to the subscriber.
func (g *Gates) CooldownKey(sub string) string { return g.ns + ":cooldown:" + sub }
func (g *Gates) inflightKey(sub string) string { return g.ns + ":inflight:" + sub }
func (g *Gates) pacingKey(sub string) string   { return g.ns + ":pacing:" + sub }
func (g *Gates) rateKey(sub string) string     { return g.ns + ":" + sub }

// ParseCooldown reads the value stored at CooldownKey (absent: zero time).
func ParseCooldown(v string) time.Time {
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// KEYS[1]: cooldown key. ARGV[1]: until (Unix ms). Reply: the cooldown in force (Unix ms).
// Keeps the later of the stored and the new deadline, so a short Retry-After
// never cuts a longer one short.
var cooldownScript = redis.NewScript(`
local old = tonumber(redis.call('GET', KEYS[1]) or '0')
local new = tonumber(ARGV[1])
if new <= old then return string.format('%d', old) end
local t = redis.call('TIME')
local ttl = new - (t[1] * 1000 + math.floor(t[2] / 1000)) + 60000
if ttl < 1 then ttl = 1 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
return ARGV[1]`)

// Cooldown makes the whole destination wait until at least until. It returns
// the cooldown now in force.
func (g *Gates) Cooldown(ctx context.Context, sub string, until time.Time) (time.Time, error) {
	v, err := cooldownScript.Run(ctx, g.rdb, []string{g.CooldownKey(sub)}, until.UnixMilli()).Text()
	if err != nil {
		return time.Time{}, err
	}
	return ParseCooldown(v), nil
}

// KEYS[1]: in-flight zset (member: token, score: expiry in Unix ms), KEYS[2]: cooldown key.
// ARGV[1]: max slots, ARGV[2]: slot ttl ms, ARGV[3]: token.
// Reply: {1, 0} slot taken; {0, 0} all slots busy; {0, until_ms} destination cooling down.
// The cooldown is checked in the same step, so a task that waited for a slot
// cannot slip out after another task's 429 set a cooldown: the 429's holder
// writes the cooldown before it releases its slot. Expired slots (a worker
// that died mid-request) are dropped first: a crash costs a slot for one ttl.
var acquireScript = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local cool = tonumber(redis.call('GET', KEYS[2]) or '0')
if cool > now then return {0, cool} end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return {0, 0} end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) + 1000)
return {1, 0}`)

// Acquire takes one of max in-flight slots for sub, held for at most ttl,
// unless the destination is cooling down. It returns the slot's token, ""
// when all slots are busy, or the end of the cooldown in force.
func (g *Gates) Acquire(ctx context.Context, sub string, max int, ttl time.Duration) (token string, coolUntil time.Time, err error) {
	var b [12]byte
	_, _ = rand.Read(b[:])
	token = hex.EncodeToString(b[:])
	res, err := acquireScript.Run(ctx, g.rdb, []string{g.inflightKey(sub), g.CooldownKey(sub)},
		max, ttl.Milliseconds(), token).Int64Slice()
	switch {
	case err != nil:
		return "", time.Time{}, err
	case res[1] > 0:
		return "", time.UnixMilli(res[1]), nil
	case res[0] == 0:
		return "", time.Time{}, nil
	}
	return token, time.Time{}, nil
}

// Release frees a slot taken by Acquire.
func (g *Gates) Release(ctx context.Context, sub, token string) error {
	return g.rdb.ZRem(ctx, g.inflightKey(sub), token).Err()
}

// ReleaseIn queues Release on a pipeline.
func (g *Gates) ReleaseIn(ctx context.Context, p redis.Pipeliner, sub, token string) {
	p.ZRem(ctx, g.inflightKey(sub), token)
}

// InFlight counts the live slots of sub.
func (g *Gates) InFlight(ctx context.Context, sub string) (int64, error) {
	return g.rdb.ZCount(ctx, g.inflightKey(sub), strconv.FormatInt(time.Now().UnixMilli(), 10), "+inf").Result()
}

// InFlightIn queues InFlight on a pipeline, for readers of many subscribers.
func (g *Gates) InFlightIn(ctx context.Context, p redis.Pipeliner, sub string) *redis.IntCmd {
	return p.ZCount(ctx, g.inflightKey(sub), strconv.FormatInt(time.Now().UnixMilli(), 10), "+inf")
}

// Allow spends one request of sub's GCRA limit. It returns 0 when the request
// may go now, otherwise how long until it could. A denied call changes nothing.
func (g *Gates) Allow(ctx context.Context, sub string, l Limit) (time.Duration, error) {
	res, err := g.limiter.Allow(ctx, g.rateKey(sub), l.redisRate())
	if err != nil {
		return 0, err
	}
	if res.Allowed > 0 {
		return 0, nil
	}
	return res.RetryAfter, nil
}

// KEYS[1]: pacing cursor, a GCRA theoretical arrival time in Unix ms.
// ARGV[1]: interval ms (float), ARGV[2]: burst, ARGV[3]: not-before Unix ms (0: now).
// Reply: the wake-up time reserved for this task, Unix ms.
// Unlike the rate limiter, the cursor always advances: each deferred task
// books its own future slot, so a backlog of N tasks wakes about Rate at a
// time instead of N at once and then re-checking forever.
var reserveScript = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local nb = math.max(tonumber(ARGV[3]), now)
local interval = tonumber(ARGV[1])
local tat = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), nb) + interval
local wake = math.max(tat - interval * tonumber(ARGV[2]), nb)
redis.call('SET', KEYS[1], string.format('%.3f', tat), 'PX', math.ceil(tat - now + 60000))
return string.format('%d', math.ceil(wake))`)

// Reservation asks Reserve for a wake-up slot for one task of Subscriber.
type Reservation struct {
	Subscriber string
	Limit      Limit
	NotBefore  time.Time // zero: now
}

// Reserve books a wake-up slot at or after NotBefore on each subscriber's
// pacing cursor, in one round trip. The slots are spaced at the subscriber's
// rate after its burst, so that work deferred together wakes as fast as the
// limit lets it be sent and no faster.
func (g *Gates) Reserve(ctx context.Context, rs ...Reservation) ([]time.Time, error) {
	cmds := make([]*redis.Cmd, len(rs))
	_, err := g.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, r := range rs {
			var nb int64
			if !r.NotBefore.IsZero() {
				nb = r.NotBefore.UnixMilli()
			}
			ms := float64(r.Limit.Interval()) / float64(time.Millisecond)
			// Eval, not Run: Run's NOSCRIPT fallback cannot work inside a pipeline.
			cmds[i] = reserveScript.Eval(ctx, p, []string{g.pacingKey(r.Subscriber)}, ms, r.Limit.Burst, nb)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]time.Time, len(rs))
	for i, c := range cmds {
		ms, err := strconv.ParseInt(c.Val().(string), 10, 64)
		if err != nil {
			return nil, err
		}
		out[i] = time.UnixMilli(ms)
	}
	return out, nil
}

// Forget deletes every gate key of sub (used when a subscriber is deleted).
func (g *Gates) Forget(ctx context.Context, sub string) error {
	return g.rdb.Del(ctx, g.CooldownKey(sub), g.inflightKey(sub), g.pacingKey(sub), "rate:"+g.rateKey(sub)).Err()
}
