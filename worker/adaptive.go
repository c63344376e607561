package worker

import (
	"context"
	"math"
	"net/http"
	"sync"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

// learnRate teaches the destination's effective rate what an answer said
// (see limits/adaptive.go), as soon as its headers arrive: a 429 lowers it;
// a RateLimit-Policy below the configured limit caps it; a RateLimit header
// saying the quota is spent cools the destination until its reset, so the
// next request does not draw the 429. A healthy answer without such
// headers writes nothing.
func (h *handler) learnRate(ctx context.Context, r *run, sub *tasks.Subscriber, status int, hint limits.RateHint) {
	ctx = context.WithoutCancel(ctx)
	log := h.log.With("subscriber_id", sub.ID)
	if status == http.StatusTooManyRequests {
		f, err := h.gates.Throttled(ctx, r.keys, r.d.Gen, "429 Too Many Requests at "+sub.Limit.String())
		if err != nil {
			log.Error("could not lower the effective rate after a 429", "err", err)
		} else if f > 0 {
			log.Info("effective rate lowered after a 429", "factor", f, "limit", sub.Limit.String())
		}
	}
	if hint.Spent() && r.coolLocal.IsZero() && status/100 == 2 {
		if _, _, err := h.gates.Cooldown(ctx, r.keys, limits.RetryAfter{After: hint.Reset}, h.cfg.MaxRetryAfter); err != nil {
			log.Error("could not record the cooldown of a spent quota", "err", err)
		}
	}
	if rate := hint.PerSecond() * policyMargin; rate > 0 {
		want := 0.0 // no cap: the policy allows the configured limit
		if rate < sub.Limit.PerSecond() {
			want = math.Round(rate*1000) / 1000
		}
		if h.caps.changed(sub.ID, want) {
			if err := h.gates.SetRateCap(ctx, r.keys, want); err != nil {
				h.caps.forget(sub.ID)
				log.Error("could not record the receiver's RateLimit-Policy", "err", err)
			} else {
				log.Info("receiver's RateLimit-Policy read", "per_second", rate, "capped", want > 0)
			}
		}
	}
}

// policyMargin is the share of a receiver's announced rate hooklane uses:
// sent at exactly the receiver's own rate, the jitter of the network and
// of the receiver's clock makes some requests land early and draw 429s.
const policyMargin = 0.95

// rateCaps remembers the RateLimit-Policy cap this process last wrote per
// subscriber, so that a receiver sending the header on every answer costs
// one write, not one per delivery.
type rateCaps struct{ m sync.Map }

func (c *rateCaps) changed(sub string, perSecond float64) bool {
	old, ok := c.m.Swap(sub, perSecond)
	return !ok || old.(float64) != perSecond
}

func (c *rateCaps) forget(sub string) { c.m.Delete(sub) }
