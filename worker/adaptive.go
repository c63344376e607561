package worker

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

// learnRate reads what an answer's headers say of the destination's pace,
// as soon as they arrive, before its body is read and before its slot is
// released (see limits/adaptive.go):
//
//   - a 429 (or 503) with a usable Retry-After, or a RateLimit header
//     saying the quota is spent, cools the whole destination until then
//     (written at once: no request slips out after the 429; r.coolUntil);
//   - a RateLimit-Policy below the configured limit caps the rate, for
//     limits.PolicyLifetime after the last answer that carried it.
//
// The effective rate itself (a 429 drops it to what the destination
// accepted, 2xx climb it back) is kept by the outcome's commit
// (limits.Outcome.Throttled, Limit); learnRate writes nothing for a
// healthy answer without such headers.
func (h *handler) learnRate(ctx context.Context, r *run, sub *tasks.Subscriber, status int, hdr http.Header) {
	ctx = context.WithoutCancel(ctx)
	hint, _ := limits.ReadRateHint(hdr)
	throttled := status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable
	ra, ok := limits.ReadRetryAfter(hdr.Get("Retry-After"))
	switch {
	case throttled && ok:
	case hint.Spent() && (throttled || status/100 == 2):
		ra, ok = limits.RetryAfter{After: hint.Reset}, true
	default:
		ok = false
	}
	if ok {
		var until time.Time
		err := fault(ctx, FaultCooldown, func() (err error) { until, _, err = h.gates.Cooldown(ctx, r.keys, ra, h.cfg.MaxRetryAfter); return err })
		if err != nil {
			// The delivery still waits for its deadline, counted from the
			// later of this host's clock and its reading of Redis' (never
			// early on either); its commit parks it until then and writes
			// the cooldown for the other events (r.coolLost).
			h.log.Error("could not record cooldown", "subscriber_id", r.sub, "err", err)
			until, r.coolLost = ra.Deadline(later(time.Now(), r.redisNow()), h.cfg.MaxRetryAfter), true
		} else {
			h.totals.cooling(r.sub, until)
		}
		if throttled {
			r.coolUntil = until
		}
	}
	if rate := hint.PerSecond() * policyMargin; rate > 0 {
		want := 0.0 // no cap: the policy allows the configured limit
		if rate < sub.Limit.PerSecond() {
			// 4 significant digits, not 3 decimals: a quota of a few a
			// day is under 0.0005/s, and 0 would mean no cap at all.
			want, _ = strconv.ParseFloat(strconv.FormatFloat(rate, 'g', 4, 64), 64)
		}
		if h.caps.due(sub.ID, want) {
			if err := h.gates.SetRateCap(ctx, r.keys, want); err != nil {
				h.caps.forget(sub.ID)
				h.log.Error("could not record the receiver's RateLimit-Policy", "subscriber_id", sub.ID, "err", err)
			}
		}
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// policyMargin is the share of a receiver's announced rate hooklane uses:
// sent at exactly the receiver's own rate, the jitter of the network and
// of the receiver's clock makes some requests land early and draw 429s.
const policyMargin = 0.95

// rateCaps remembers the RateLimit-Policy cap this process last wrote per
// subscriber and when, so that a receiver sending the header on every
// answer costs one write per change, and one per half its lifetime to
// renew it, not one per delivery.
type rateCaps struct{ m sync.Map }

type rateCap struct {
	perSecond float64
	at        time.Time
}

func (c *rateCaps) due(sub string, perSecond float64) bool {
	now := time.Now()
	old, ok := c.m.Load(sub)
	if ok {
		o := old.(rateCap)
		if o.perSecond == perSecond && (perSecond == 0 || now.Sub(o.at) < limits.PolicyLifetime/2) {
			return false
		}
	}
	c.m.Store(sub, rateCap{perSecond, now})
	return true
}

func (c *rateCaps) forget(sub string) { c.m.Delete(sub) }
