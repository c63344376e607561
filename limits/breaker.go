package limits

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The circuit breaker of a destination lives in its gate record (fields
// b_*, see tasks.Keys.Gate), so that Admit reads it in the step it already
// takes and every worker process shares it:
//
//   - closed: b_fails counts consecutive endpoint failures (connection
//     errors, timeouts, 408, 5xx without a usable Retry-After) since
//     b_since; any other answer resets it. Policy.Failures in a row open it.
//   - open (b_open set): nothing is sent but one probe at a time (b_probe:
//     until when the probe in flight holds that role), no earlier than
//     b_next. Every other task is held: Admit books it a wake-up on the
//     breaker's own cursor (b_cur), one per probe gap (b_gap), so the
//     held backlog takes turns as the probe instead of one event spending
//     every attempt, and wakes about once per gap instead of in a loop. A
//     failed probe multiplies the gap by ProbeGrowth, up to MaxProbeGap.
//   - closing: any answer that is not a failure (the probe's, or a late
//     one's) closes it and starts the slow start (b_ramp): for Ramp the
//     rate climbs linearly from a tenth of the limit, without burst. The
//     worker then wakes the held tasks.
//
// A destination failing without a break for DisableAfter is paused with
// reason "failing" (disabled): its events are held until an operator
// resumes it.

// ProbeGrowth is how much each failed probe stretches the gap before the
// next: 1s, 1.5s, 2.25s, … (7 probes in a 40s outage), capped at
// MaxProbeGap.
const ProbeGrowth = 1.5

// BreakerPolicy shapes every destination's circuit breaker.
type BreakerPolicy struct {
	// Failures is how many endpoint failures in a row open it. Default 5;
	// BreakerOff: never (every event spends its attempts on its own).
	Failures int
	// ProbeGap is the wait after opening before the first probe. Default 1s.
	ProbeGap time.Duration
	// MaxProbeGap caps the gap between probes. Default 5m.
	MaxProbeGap time.Duration
	// Ramp is the slow start after it closes. Default 10s.
	Ramp time.Duration
	// DisableAfter is how long a destination may fail without a break
	// before it is disabled (paused, reason "failing"). Default 24h;
	// negative: never.
	DisableAfter time.Duration
}

// BreakerOff as BreakerPolicy.Failures turns the breaker off.
const BreakerOff = -1

// WithDefaults fills the zero fields.
func (p BreakerPolicy) WithDefaults() BreakerPolicy {
	p.Failures = cmp.Or(p.Failures, 5)
	p.ProbeGap = cmp.Or(p.ProbeGap, time.Second)
	p.MaxProbeGap = cmp.Or(p.MaxProbeGap, 5*time.Minute)
	p.Ramp = cmp.Or(p.Ramp, 10*time.Second)
	p.DisableAfter = cmp.Or(p.DisableAfter, 24*time.Hour)
	return p
}

// Validate names the field that is out of range.
func (p BreakerPolicy) Validate() error {
	var errs []error
	if p.Failures < 1 && p.Failures != BreakerOff {
		errs = append(errs, fmt.Errorf("breaker: Failures must be at least 1 (or BreakerOff), not %d", p.Failures))
	}
	if p.ProbeGap < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("breaker: ProbeGap must be at least 100ms, not %s", p.ProbeGap))
	}
	if p.MaxProbeGap < p.ProbeGap {
		errs = append(errs, errors.New("breaker: MaxProbeGap must not be shorter than ProbeGap"))
	}
	if p.Ramp <= 0 {
		errs = append(errs, fmt.Errorf("breaker: Ramp must be positive, not %s", p.Ramp))
	}
	return errors.Join(errs...)
}

// KEYS[1]: gate record. ARGV: 1 generation ("" any), 2 failures that open
// it, 3 first probe gap ms, 4 max gap ms, 5 error text, 6 "1" when the
// failed request was the probe, 7 disable after ms (0: never).
// Reply {code, detail}: 0 counted (failures in a row); 1 opened now
// (failing since, Unix ms); 2 still open (next probe, Unix ms); 3 unknown
// subscriber or another generation: nothing written; 4 disabled now
// (failing since, Unix ms).
var breakerFailScript = redis.NewScript(`
local rec = redis.call('HMGET', KEYS[1], 'gen', 'b_open', 'b_gap', 'b_since', 'paused', 'b_next')
if not rec[1] or (ARGV[1] ~= '' and ARGV[1] ~= rec[1]) then return {3, ''} end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('HSET', KEYS[1], 'b_err', ARGV[5], 'b_err_at', string.format('%d', now))
local since = tonumber(rec[4]) or now
local disable = tonumber(ARGV[7])
if disable > 0 and now - since >= disable and not rec[5] then
  redis.call('HSET', KEYS[1], 'paused', 'failing', 'paused_at', string.format('%d', now))
  return {4, string.format('%d', since)}
end
if rec[2] then
  if ARGV[6] ~= '1' then return {2, rec[6] or ''} end
  local gap = math.min(math.floor((tonumber(rec[3]) or tonumber(ARGV[3])) * 1.5), tonumber(ARGV[4]))
  redis.call('HSET', KEYS[1], 'b_gap', gap, 'b_next', string.format('%d', now + gap))
  redis.call('HDEL', KEYS[1], 'b_probe')
  return {2, string.format('%d', now + gap)}
end
local fails = redis.call('HINCRBY', KEYS[1], 'b_fails', 1)
if not rec[4] then redis.call('HSET', KEYS[1], 'b_since', string.format('%d', now)) end
if fails < tonumber(ARGV[2]) then return {0, string.format('%d', fails)} end
redis.call('HSET', KEYS[1], 'b_open', string.format('%d', now), 'b_gap', ARGV[3], 'b_next', string.format('%d', now + tonumber(ARGV[3])))
redis.call('HDEL', KEYS[1], 'b_ramp', 'b_cur', 'b_probe')
return {1, string.format('%d', since)}`)

// BreakerChange is what a request's outcome did to its destination's
// breaker.
type BreakerChange int

// Breaker changes.
const (
	BreakerSame     BreakerChange = iota
	BreakerOpened                 // persistent failure: subscriber.failing
	BreakerClosed                 // recovered: wake the held tasks
	BreakerDisabled               // failing for DisableAfter: paused "failing"
)

// BreakerFailed counts an endpoint failure (errText, as asynqmon shows it)
// of a request to k's destination; probe says it was the breaker's probe.
// It reports whether the breaker opened or the subscriber was disabled,
// and since when the destination has been failing.
func (g *Gates) BreakerFailed(ctx context.Context, k GateKeys, gen string, p BreakerPolicy, errText string, probe bool) (BreakerChange, time.Time, error) {
	if p.Failures == BreakerOff {
		return BreakerSame, time.Time{}, nil
	}
	if len(errText) > 300 {
		errText = errText[:300]
	}
	isProbe, disable := "0", max(p.DisableAfter.Milliseconds(), 0)
	if probe {
		isProbe = "1"
	}
	res, err := breakerFailScript.Run(ctx, g.rdb, []string{k.Record}, gen, p.Failures, p.ProbeGap.Milliseconds(),
		p.MaxProbeGap.Milliseconds(), errText, isProbe, disable).Slice()
	if err != nil {
		return BreakerSame, time.Time{}, err
	}
	code, _ := res[0].(int64)
	detail, _ := res[1].(string)
	ms, _ := strconv.ParseInt(detail, 10, 64)
	switch code {
	case 1:
		return BreakerOpened, time.UnixMilli(ms), nil
	case 4:
		return BreakerDisabled, time.UnixMilli(ms), nil
	}
	return BreakerSame, time.Time{}, nil
}

// KEYS[1]: gate record. ARGV[1]: generation ("" any). Reply {code,
// detail}: 1 closed now (failing since, Unix ms), 0 no change (a streak
// of failures forgotten, if any).
var breakerOKScript = redis.NewScript(`
local rec = redis.call('HMGET', KEYS[1], 'gen', 'b_open', 'b_since')
if not rec[1] or (ARGV[1] ~= '' and ARGV[1] ~= rec[1]) then return {0, ''} end
redis.call('HDEL', KEYS[1], 'b_fails', 'b_since')
if not rec[2] then return {0, ''} end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('HDEL', KEYS[1], 'b_open', 'b_next', 'b_gap', 'b_probe', 'b_cur')
redis.call('HSET', KEYS[1], 'b_ramp', string.format('%d', now))
return {1, rec[3] or ''}`)

// BreakerAnswered records an answer of k's destination that is not a
// failure: it ends a streak of failures and closes an open breaker, which
// it reports with since when the destination had been failing.
func (g *Gates) BreakerAnswered(ctx context.Context, k GateKeys, gen string) (BreakerChange, time.Time, error) {
	res, err := breakerOKScript.Run(ctx, g.rdb, []string{k.Record}, gen).Slice()
	if err != nil {
		return BreakerSame, time.Time{}, err
	}
	if code, _ := res[0].(int64); code == 1 {
		detail, _ := res[1].(string)
		ms, _ := strconv.ParseInt(detail, 10, 64)
		return BreakerClosed, time.UnixMilli(ms), nil
	}
	return BreakerSame, time.Time{}, nil
}

// ReleaseProbe gives the probe role back (a probe cut short by a shutdown),
// so that the next task may probe without waiting for the role to expire.
func (g *Gates) ReleaseProbe(ctx context.Context, k GateKeys) error {
	return g.rdb.HDel(ctx, k.Record, "b_probe").Err()
}

// Breaker is a destination's breaker as Status shows it.
type Breaker struct {
	State        string    // "closed", "open" or "probing" (open, a probe in flight)
	Failures     int       // in a row, while closed
	FailingSince time.Time // zero when not failing
	OpenedAt     time.Time
	NextProbe    time.Time // while open
	LastError    string
	LastErrorAt  time.Time
	RampingSince time.Time // closed less than Ramp ago: slow start
}

// ReadBreaker reads the breaker fields of a gate record's hash (HGETALL);
// now is Redis' clock.
func ReadBreaker(rec map[string]string, now time.Time) Breaker {
	ms := func(f string) time.Time {
		n, err := strconv.ParseInt(rec[f], 10, 64)
		if err != nil || n <= 0 {
			return time.Time{}
		}
		return time.UnixMilli(n)
	}
	b := Breaker{State: "closed", FailingSince: ms("b_since"), LastError: rec["b_err"], LastErrorAt: ms("b_err_at"),
		RampingSince: ms("b_ramp")}
	b.Failures, _ = strconv.Atoi(rec["b_fails"])
	if _, open := rec["b_open"]; open {
		b.State, b.OpenedAt, b.NextProbe, b.RampingSince = "open", ms("b_open"), ms("b_next"), time.Time{}
		if ms("b_probe").After(now) {
			b.State = "probing"
		}
	}
	return b
}
