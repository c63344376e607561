package limits

import (
	"context"
	"strconv"
	"time"
)

// A subscriber's effective rate is the configured limit scaled by what the
// receiver taught: it never exceeds the limit. Two lessons, kept in the
// gate record (Book, Admit and Turn read them in the step they already
// take):
//
//   - 429s, AIMD. A 429 drops the rate at once to AdaptMargin of what the
//     destination accepted (its 2xx a second over the last AdaptWindow,
//     or since its first 2xx there if later, never counted over less than
//     the limit's burst takes at its rate; at most the rate it had), or
//     halves it when it accepted none there; never below a tenth of the
//     limit, nor below half the rate it had when the 2xx came spread over
//     more than a burst's time: the receiver took all that was sent then,
//     so they tell how much traffic there was, not the receiver's rate (a
//     subscriber with an event every few seconds, whose burst after a
//     pause drew one 429, fell to the floor so and drained its next
//     backlog at a tenth of its limit). The answers to requests already
//     in flight (those committed within a second of that 429) measure
//     again from the rate before it instead of lowering it again, so a
//     burst of 429s counts once whatever order its answers are committed
//     in. Then each 2xx gives back AdaptIncrease of the limit a minute for
//     the time since the last one (a second at most): the rate climbs only
//     while 2xx keep coming, until the limit is reached and the lesson
//     forgotten. Sending just under what the receiver took leaves its
//     bucket room for the jitter that makes a sender at exactly its rate
//     draw 429s, and a 429 costs its whole Retry-After; the slow climb
//     finds the rest (a receiver 5× below the limit: its rate again after
//     about two minutes of 2xx).
//     Commit keeps all of it in the script that commits each outcome
//     (luaAdapt), so concurrent workers never fight over it: a_f (the
//     share of the limit), a_at (the last decrease), a_pre (the share
//     before it), a_cu (the end of its cooldown), a_up (the last 2xx that
//     gave some back), a_why; and, for every subscriber, the window of
//     2xx: a_w (its start), a_n (2xx in it), a_cw (the ms its earlier
//     cooldowns took), a_p (2xx a second in the one before, while that
//     was the last).
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
	AdaptMargin   = 0.9
	AdaptWindow   = 10 * time.Second
	AdaptIncrease = 0.01 // of the limit, per minute of 2xx
	adaptFloor    = 0.1
)

// adaptIncreasePerMs is AdaptIncrease per millisecond, as Commit's script
// takes it.
const adaptIncreasePerMs = AdaptIncrease / 60000

// burstSpan is how long limit l's burst takes at its rate, in ms (at least
// 1): hooklane may send that many at once, so the 2xx of a shorter span
// tell the receiver's burst, not its rate.
func burstSpan(l Limit) int64 {
	if l.Rate <= 0 {
		return 1
	}
	return max(1, (time.Duration(l.Burst) * l.Period / time.Duration(l.Rate)).Milliseconds())
}

// luaAdapt is the Lua of the first lesson, for Commit's script:
// adapt(gate, v, now, delivered, throttled, cool, p) keeps the effective rate
// for one answer of the subscriber's current generation: delivered a 2xx,
// throttled a 429, cool the destination's cooldown end (Unix ms, 0 none);
// v holds the gate's fields adaptFields names, as the script read them with
// its others (no read of its own: one per delivered answer saved);
// p holds margin, floor, incr (share of the limit a ms of 2xx gives back),
// why (the reason status shows), win (the window, ms), per_ms (the limit
// in requests a ms; 0 unknown: a 429 halves) and span (the shortest span
// a rate is counted over, ms: burstSpan). The window's time leaves out
// the cooldowns of the decreases in it (a_cu the last one's end, a_cw the
// time of those before), when the destination could accept nothing:
// counted, each 429 of a receiver close to the limit would lower the rate
// by its cooldown's share of the window too (a test at 30/s of 40 ended at
// 14/s so).
const luaAdapt = `
-- adaptFields: the gate fields adapt reads, in its v's order
local adaptFields = {'a_f', 'a_at', 'a_pre', 'a_up', 'a_cu', 'a_w', 'a_n', 'a_p', 'a_cw'}
-- p.bump() counts a 2xx in the window (the caller adds it to a_n, once a
-- group); p.reset() says a_n is written anew; p.wrote: adapt wrote the
-- gate record itself (what the caller holds of it is stale)
local function adapt(gate, v, now, delivered, throttled, cool, p)
  local function gw(...) p.wrote = true; return redis.call(...) end
  local f, at, pre, up, cu = tonumber(v[1]), tonumber(v[2]), tonumber(v[3]), tonumber(v[4]), tonumber(v[5])
  local w, n, prev, cw = tonumber(v[6]), tonumber(v[7]) or 0, tonumber(v[8]), tonumber(v[9]) or 0
  -- the ms of the window [w, now] its cooldowns took: those of earlier
  -- decreases (cw), and what the last one's took of it so far
  local function closed()
    if not at or not cu then return cw end
    return cw + math.max(0, math.min(now, cu) - math.max(w, at))
  end
  if delivered then
    if not w or now - w >= p.win then
      -- a new window; the one it follows is kept while it is the last, in
      -- 2xx a second of its open time (it may have lasted up to twice the
      -- window)
      prev = nil
      if w and now - w < 2 * p.win then prev = n * 1000 / math.max(now - w - closed(), p.span) end
      w, n, cw = now, 0, 0
      p.reset()
      gw('HSET', gate, 'a_w', now, 'a_n', 1, 'a_cw', 0)
      if prev then gw('HSET', gate, 'a_p', string.format('%.6g', prev)) else gw('HDEL', gate, 'a_p') end
    else
      p.bump()
    end
    n = n + 1
  end
  -- what the destination accepted over the last window, as a share of
  -- the limit: the window before for the part of the last window it
  -- covers, then this one; nil when it accepted nothing there. spread:
  -- the time it is counted over is longer than a burst's (span), so the
  -- 2xx came one after another, not in one burst
  local function accepted()
    if not w or p.per_ms <= 0 then return nil end
    local e = now - w
    local open, n2, t = e - closed(), nil, nil
    if prev and e < p.win then n2, t = prev / 1000 * (p.win - e) + n, p.win - e + open
    elseif e < 2 * p.win then n2, t = n, open end
    if not n2 or n2 <= 0 then return nil end
    return n2 / math.max(t, p.span) / p.per_ms, t > p.span
  end
  -- a rate from what was accepted: 90% of it, or half the rate it had
  -- when nothing was; and no less than half when the 2xx came spread over
  -- the window: at a rate lower than hooklane's they say how much it sent
  -- (the receiver took them all), not how much the receiver takes
  local function lowered(from)
    local x, spread = accepted()
    if not x then x = from / 2
    elseif spread then x = math.max(math.min(from, x) * p.margin, from / 2)
    else x = math.min(from, x) * p.margin end
    return string.format('%.6f', math.max(p.floor, x))
  end
  local recent = at and now - at < 1000
  if recent and pre and (throttled or (delivered and f)) then
    -- an answer of the burst the last decrease came from: measured again
    -- from the rate before it, with this answer counted
    gw('HSET', gate, 'a_f', lowered(pre))
  elseif throttled and not recent then
    pre = math.min(f or 1, 1)
    gw('HSET', gate, 'a_f', lowered(pre), 'a_pre', pre, 'a_at', now, 'a_up', now, 'a_why', p.why)
    -- the cooldown before this one is over: its time in the window stays
    if w then gw('HSET', gate, 'a_cw', closed()) end
    if cool > now then gw('HSET', gate, 'a_cu', cool) else gw('HDEL', gate, 'a_cu') end
  elseif delivered and f then
    -- a 2xx gives back what the time since the last one earns, a second's
    -- at most: the rate climbs while 2xx keep coming
    local x = f + p.incr * math.min(math.max(now - (up or now), 0), 1000)
    if x >= 1 then
      gw('HDEL', gate, 'a_f', 'a_at', 'a_why', 'a_pre', 'a_up', 'a_cu')
    else
      gw('HSET', gate, 'a_f', string.format('%.6f', x), 'a_up', now)
    end
  end
end
`

// perMs is limit l in requests per millisecond, 0 for the zero limit.
func perMs(l Limit) float64 {
	if l.Rate <= 0 || l.Period <= 0 {
		return 0
	}
	return float64(l.Rate) / float64(l.Period.Milliseconds())
}

// PolicyLifetime is how long a receiver's RateLimit-Policy cap lasts after
// the last answer that carried it: a receiver that stops sending the
// header stops capping the rate then (and an operator's change of the
// limit forgets it at once: ChangeLimit).
const PolicyLifetime = 10 * time.Minute

// SetRateCap records the receiver's own rate (RateLimit-Policy), in
// requests per second, for PolicyLifetime from now; 0 forgets it. It is
// kept as given (a quota of one a day is 1.157e-05/s; the scripts read
// the exponent).
func (g *Gates) SetRateCap(ctx context.Context, k GateKeys, perSecond float64) error {
	if perSecond <= 0 {
		return g.rdb.HDel(ctx, k.Record, "a_cap", "a_cap_at", "a_cap_until").Err()
	}
	now := time.Now()
	return g.rdb.HSet(ctx, k.Record, "a_cap", strconv.FormatFloat(perSecond, 'g', -1, 64),
		"a_cap_at", now.UnixMilli(), "a_cap_until", now.Add(PolicyLifetime).UnixMilli()).Err()
}

// Effective is a destination's effective rate as Status shows it.
type Effective struct {
	Rate   float64 // requests per Limit.Period, at most Limit.Rate
	Reason string  // "" when it is the configured limit
	Since  time.Time
}

// ReadEffective reads the effective pace from a gate record's hash
// (HGETALL) for limit l and maxInFlight slots; now is Redis' clock. It is
// the lowest of the limit, the adaptive rate, the receiver's policy cap,
// and what the in-flight slots carry at the endpoint's observed latency
// (Little's law: maxInFlight ÷ latency), which is what the schedule hands
// out at when the slots, not the rate, are what limits the destination.
func ReadEffective(rec map[string]string, l Limit, maxInFlight int, now time.Time) Effective {
	e := readRate(rec, l, now)
	if lt, err := strconv.ParseFloat(rec["lt"], 64); err == nil && lt > 0 && maxInFlight > 0 {
		if slots := float64(maxInFlight) / (lt / 1000) * l.Period.Seconds(); slots < e.Rate {
			e = Effective{Rate: slots, Reason: "max_in_flight " + strconv.Itoa(maxInFlight) + " at the endpoint's " +
				strconv.FormatFloat(lt, 'f', 0, 64) + "ms latency"}
		}
	}
	return e
}

// readRate is the effective rate without the in-flight slots' pace.
func readRate(rec map[string]string, l Limit, now time.Time) Effective {
	e := Effective{Rate: float64(l.Rate)}
	if f, err := strconv.ParseFloat(rec["a_f"], 64); err == nil && f < 1 {
		at, _ := strconv.ParseInt(rec["a_at"], 10, 64)
		e = Effective{Rate: float64(l.Rate) * f, Reason: rec["a_why"], Since: time.UnixMilli(at)}
	}
	until, _ := strconv.ParseInt(rec["a_cap_until"], 10, 64)
	if c, err := strconv.ParseFloat(rec["a_cap"], 64); err == nil && c*l.Period.Seconds() < e.Rate && (until == 0 || until > now.UnixMilli()) {
		at, _ := strconv.ParseInt(rec["a_cap_at"], 10, 64)
		e = Effective{Rate: c * l.Period.Seconds(), Reason: "the receiver's RateLimit-Policy", Since: time.UnixMilli(at)}
	}
	return e
}
