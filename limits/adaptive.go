package limits

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// A subscriber's effective rate is the configured limit scaled by what the
// receiver taught: it never exceeds the limit. Two lessons, kept in the
// gate record (Admit reads them in the step it already takes):
//
//   - a 429 multiplies the rate by AdaptDecrease (at most once a second,
//     so one burst of 429s from requests already in flight counts once),
//     down to a tenth of the limit; every minute without one adds
//     AdaptIncrease of the limit back, until the limit is reached and the
//     lesson forgotten (a_f: the factor, a_at: when it was set, a_why).
//     Sending just under a receiver's own limit leaves its bucket room
//     for the jitter that makes a sender at exactly its rate draw 429s.
//   - a receiver's RateLimit-Policy (draft-ietf-httpapi-ratelimit-headers:
//     quota per window) caps the rate at quota/window while it says so
//     (a_cap, requests per second; a_cap_at), without burst: the policy
//     names no burst, and a sender catching up on a late request would
//     land two at once where the receiver's bucket holds one.
//
// A RateLimit header saying the quota is spent (remaining 0) cools the
// destination until its reset, as a Retry-After would, without waiting for
// the 429.
const (
	AdaptDecrease = 0.95
	AdaptIncrease = 0.02 // of the limit, per minute without a 429
	adaptFloor    = 0.1
)

// adaptIncreasePerMs is AdaptIncrease per millisecond, as Admit's script
// takes it.
const adaptIncreasePerMs = AdaptIncrease / 60000

// KEYS[1]: gate record. ARGV: 1 generation ("" any), 2 factor, 3 floor, 4
// increase per ms, 5 reason, 6 least ms between two decreases. Reply
// {code, factor}: 0 unknown subscriber or another generation; 1 decreased
// less than ARGV[6] ago: unchanged; 2 decreased to factor.
var adaptScript = redis.NewScript(`
local rec = redis.call('HMGET', KEYS[1], 'gen', 'a_f', 'a_at')
if not rec[1] or (ARGV[1] ~= '' and ARGV[1] ~= rec[1]) then return {0, ''} end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local f = 1
if rec[2] then
  local at = tonumber(rec[3]) or now
  if now - at < tonumber(ARGV[6]) then return {1, rec[2]} end
  f = math.min(1, tonumber(rec[2]) + tonumber(ARGV[4]) * (now - at))
end
f = math.max(tonumber(ARGV[3]), f * tonumber(ARGV[2]))
local s = string.format('%.4f', f)
redis.call('HSET', KEYS[1], 'a_f', s, 'a_at', string.format('%d', now), 'a_why', ARGV[5])
return {2, s}`)

// Throttled lowers the effective rate of k's destination after a 429
// (reason: what the receiver said), and returns the factor now in force.
func (g *Gates) Throttled(ctx context.Context, k GateKeys, gen, reason string) (float64, error) {
	res, err := adaptScript.Run(ctx, g.rdb, []string{k.Record}, gen, AdaptDecrease, adaptFloor, adaptIncreasePerMs,
		reason, time.Second.Milliseconds()).Slice()
	if err != nil {
		return 0, err
	}
	s, _ := res[1].(string)
	f, _ := strconv.ParseFloat(s, 64)
	return f, nil
}

// SetRateCap records the receiver's own rate (RateLimit-Policy), in
// requests per second; 0 forgets it.
func (g *Gates) SetRateCap(ctx context.Context, k GateKeys, perSecond float64) error {
	if perSecond <= 0 {
		return g.rdb.HDel(ctx, k.Record, "a_cap", "a_cap_at").Err()
	}
	return g.rdb.HSet(ctx, k.Record, "a_cap", strconv.FormatFloat(perSecond, 'f', 3, 64),
		"a_cap_at", time.Now().UnixMilli()).Err()
}

// Effective is a destination's effective rate as Status shows it.
type Effective struct {
	Rate   float64 // requests per Limit.Period, at most Limit.Rate
	Reason string  // "" when it is the configured limit
	Since  time.Time
}

// ReadEffective reads the effective rate from a gate record's hash
// (HGETALL) for limit l; now is Redis' clock.
func ReadEffective(rec map[string]string, l Limit, now time.Time) Effective {
	e := Effective{Rate: float64(l.Rate)}
	if f, err := strconv.ParseFloat(rec["a_f"], 64); err == nil {
		at, _ := strconv.ParseInt(rec["a_at"], 10, 64)
		if f = min(1, f+adaptIncreasePerMs*float64(now.UnixMilli()-at)); f < 1 {
			e = Effective{Rate: float64(l.Rate) * f, Reason: rec["a_why"], Since: time.UnixMilli(at)}
		}
	}
	if c, err := strconv.ParseFloat(rec["a_cap"], 64); err == nil && c*l.Period.Seconds() < e.Rate {
		at, _ := strconv.ParseInt(rec["a_cap_at"], 10, 64)
		e = Effective{Rate: c * l.Period.Seconds(), Reason: "the receiver's RateLimit-Policy", Since: time.UnixMilli(at)}
	}
	return e
}
