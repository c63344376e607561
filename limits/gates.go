package limits

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Gates are the Redis-side checks a delivery passes before its request is
// sent. All keys live under the namespace and are per subscriber; every time
// comparison uses Redis' own clock so that workers on skewed hosts agree.
type Gates struct {
	rdb redis.UniversalClient
	ns  string
}

// NewGates returns gates whose keys start with namespace + ":".
func NewGates(rdb redis.UniversalClient, namespace string) *Gates {
	return &Gates{rdb: rdb, ns: namespace}
}

// CooldownKey holds the Unix-millisecond time before which nothing may be
// sent to the subscriber.
func (g *Gates) CooldownKey(sub string) string { return g.ns + ":cooldown:" + sub }
func (g *Gates) inflightKey(sub string) string { return g.ns + ":inflight:" + sub }
func (g *Gates) pacingKey(sub string) string   { return g.ns + ":pacing:" + sub }

// RateKey is the key of sub's GCRA limit as redis_rate names it (it adds
// the "rate:" prefix itself): a redis_rate.Limiter on it shares the limit.
func (g *Gates) RateKey(sub string) string { return g.ns + ":" + sub }

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

// Admission is the answer of Admit.
type Admission struct {
	Token     string        // the in-flight slot taken; "" unless admitted
	Unknown   bool          // no such subscriber (deleted)
	Paused    bool          // subscriber paused
	CoolUntil time.Time     // destination cooling down until then
	Busy      bool          // all in-flight slots taken
	Wait      time.Duration // rate limited: earliest the next request may go
}

// Admitted reports whether the request may be sent now.
func (a Admission) Admitted() bool { return a.Token != "" }

// KEYS[1]: subscribers hash, KEYS[2]: paused set, KEYS[3]: cooldown (Unix ms),
// KEYS[4]: in-flight zset (member: token, score: expiry Unix ms),
// KEYS[5]: GCRA key, the very key redis_rate uses ("rate:" + key).
// ARGV[1]: subscriber id, ARGV[2]: token, ARGV[3]: slot ttl ms,
// ARGV[4]: max in-flight, ARGV[5]: burst, ARGV[6]: rate, ARGV[7]: period seconds.
// Reply: {code, detail}: 0 admitted (slot taken, one request of the limit
// spent); 1 unknown subscriber; 2 paused; 3 cooling down (detail: until, Unix
// ms); 4 all slots busy; 5 rate limited (detail: seconds to wait).
//
// Every gate of a delivery in one round trip, checked in order; a refusal
// writes nothing. The rate limit step is redis_rate v10's GCRA (allowN with
// cost 1), same key, same arithmetic, so the two can share a limit; it is
// inlined because a Lua script cannot call another and redis_rate cannot be
// pipelined. The cooldown is checked in the same step as the slot is taken,
// so a task that waited for a slot cannot slip out after another task's 429
// set a cooldown: the 429's holder writes the cooldown before it releases its
// slot. Expired slots (a worker that died mid-request) are dropped first.
var admitScript = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return {1, ''} end
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then return {2, ''} end
local t = redis.call('TIME')
local now_ms = t[1] * 1000 + math.floor(t[2] / 1000)
local cool = tonumber(redis.call('GET', KEYS[3]) or '0')
if cool > now_ms then return {3, string.format('%d', cool)} end
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now_ms)
if redis.call('ZCARD', KEYS[4]) >= tonumber(ARGV[4]) then return {4, ''} end

local jan_1_2017 = 1483228800
local now = (t[1] - jan_1_2017) + (t[2] / 1000000)
local emission_interval = tonumber(ARGV[7]) / tonumber(ARGV[6])
local burst_offset = emission_interval * tonumber(ARGV[5])
local tat = redis.call('GET', KEYS[5])
if not tat then tat = now else tat = tonumber(tat) end
tat = math.max(tat, now)
local new_tat = tat + emission_interval
local allow_at = new_tat - burst_offset
if now - allow_at < 0 then return {5, tostring(allow_at - now)} end
redis.call('SET', KEYS[5], new_tat, 'EX', math.ceil(new_tat - now))

redis.call('ZADD', KEYS[4], now_ms + tonumber(ARGV[3]), ARGV[2])
redis.call('PEXPIRE', KEYS[4], tonumber(ARGV[3]) + 1000)
return {0, ''}`)

// Admit runs every gate for one request to sub in one round trip: the
// subscriber exists and is not paused, its destination is not cooling down,
// an in-flight slot (held at most ttl) is free, and its rate limit allows a
// request now. subscribers and paused are the keys of the subscriber hash
// and the paused set.
func (g *Gates) Admit(ctx context.Context, subscribers, paused, sub string, l Limit, maxInFlight int, ttl time.Duration) (Admission, error) {
	var b [12]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	keys := []string{subscribers, paused, g.CooldownKey(sub), g.inflightKey(sub), "rate:" + g.RateKey(sub)}
	res, err := admitScript.Run(ctx, g.rdb, keys, sub, token, ttl.Milliseconds(), maxInFlight,
		l.Burst, l.Rate, l.Period.Seconds()).Slice()
	if err != nil {
		return Admission{}, err
	}
	code, _ := res[0].(int64)
	detail, _ := res[1].(string)
	switch code {
	case 0:
		return Admission{Token: token}, nil
	case 1:
		return Admission{Unknown: true}, nil
	case 2:
		return Admission{Paused: true}, nil
	case 3:
		return Admission{CoolUntil: ParseCooldown(detail)}, nil
	case 4:
		return Admission{Busy: true}, nil
	case 5:
		secs, err := strconv.ParseFloat(detail, 64)
		if err != nil {
			return Admission{}, fmt.Errorf("admit: bad wait %q", detail)
		}
		return Admission{Wait: max(time.Duration(secs*float64(time.Second)), time.Millisecond)}, nil
	}
	return Admission{}, fmt.Errorf("admit: unexpected reply %v", res)
}

// ReleaseIn queues the release of an in-flight slot taken by Admit on a
// pipeline: the worker frees slots with its other writes after a request.
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
	return g.rdb.Del(ctx, g.CooldownKey(sub), g.inflightKey(sub), g.pacingKey(sub), "rate:"+g.RateKey(sub)).Err()
}
