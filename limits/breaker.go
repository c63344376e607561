package limits

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// The circuit breaker of a destination lives in its gate record (fields
// b_*, see tasks.Keys.Gate), so that Admit reads it in the step it already
// takes and every worker process shares it:
//
//   - closed: b_fails counts consecutive endpoint failures (connection
//     errors, timeouts, 408, 5xx without a usable Retry-After) since
//     b_since; any other answer resets it. Policy.Failures in a row open it.
//   - open (b_open set): nothing is sent but one probe at a time (b_probe:
//     until when the probe handed out or in flight holds that role), no
//     earlier than b_next. Every other delivery is parked in the lot (held)
//     and a turn hands out none of them, but the probe (see doc.go). A
//     failed probe spends no attempt and multiplies the gap (b_gap) by
//     ProbeGrowth, up to MaxProbeGap.
//   - closing: any answer that is not a failure (the probe's, or a late
//     one's) closes it and starts the slow start (b_ramp): for Ramp the
//     rate climbs linearly from a tenth of the limit, without burst. The
//     held deliveries are handed out at that pace.
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
