package limits

import (
	"context"
	"strconv"
	"time"
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
	if f, err := strconv.ParseFloat(rec["a_f"], 64); err == nil {
		at, _ := strconv.ParseInt(rec["a_at"], 10, 64)
		if f = min(1, f+adaptIncreasePerMs*float64(now.UnixMilli()-at)); f < 1 {
			e = Effective{Rate: float64(l.Rate) * f, Reason: rec["a_why"], Since: time.UnixMilli(at)}
		}
	}
	until, _ := strconv.ParseInt(rec["a_cap_until"], 10, 64)
	if c, err := strconv.ParseFloat(rec["a_cap"], 64); err == nil && c*l.Period.Seconds() < e.Rate && (until == 0 || until > now.UnixMilli()) {
		at, _ := strconv.ParseInt(rec["a_cap_at"], 10, 64)
		e = Effective{Rate: c * l.Period.Seconds(), Reason: "the receiver's RateLimit-Policy", Since: time.UnixMilli(at)}
	}
	return e
}
