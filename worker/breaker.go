package worker

import (
	"context"
	"net/http"
	"time"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

// endpointFailure reports whether an answer (or its absence) says the
// endpoint itself is failing, which counts toward its breaker: no answer
// (connection refused or reset, timeout, TLS), 408, or a 5xx without a
// usable Retry-After (one with it is handled before: the endpoint said when
// to come back). A 4xx is about one event: it never opens the breaker.
func endpointFailure(resp response) bool {
	if resp.err != nil {
		return true
	}
	return resp.status == http.StatusRequestTimeout || resp.status >= 500
}

// breakerChanged tells operators what a committed outcome did to its
// destination's breaker (limits.Commit): an opened breaker, a disabled
// subscriber, a recovered endpoint, each an operator event and a change of
// the sets /metrics counts.
func (h *handler) breakerChanged(ctx context.Context, r *run, c limits.Committed, what string) {
	if c.Change == limits.BreakerSame {
		return
	}
	log := h.log.With("subscriber_id", r.sub)
	switch c.Change {
	case limits.BreakerOpened:
		log.Warn("circuit breaker opened: endpoint failing; its events are held, one probe at a time",
			"failing_since", c.Since, "last_error", what)
		h.index(ctx, h.keys.OpenBreakers(), r.sub, true)
		h.breakerEvent(ctx, tasks.OperatorFailing, r.sub, c.Since, time.Now(), what, "")
	case limits.BreakerDisabled:
		h.subs.forget(r.sub)
		log.Warn("subscriber disabled: its endpoint has been failing without a break", "failing_since", c.Since,
			"disable_after", h.cfg.Breaker.DisableAfter, "reason", tasks.PauseFailing)
		h.index(ctx, h.keys.PausedIndex(), r.sub, true)
		h.breakerEvent(ctx, tasks.OperatorDisabled, r.sub, c.Since, time.Now(), what, tasks.PauseFailing)
	case limits.BreakerClosed:
		log.Info("circuit breaker closed: endpoint recovered; its held events go out at its slow start's pace", "failing_since", c.Since)
		h.index(ctx, h.keys.OpenBreakers(), r.sub, false)
		h.breakerEvent(ctx, tasks.OperatorRecovered, r.sub, c.Since, time.Now(), "", "")
	}
}

// index adds sub to (or removes it from) a set /metrics counts; the gate
// record, already written, stays the truth.
func (h *handler) index(ctx context.Context, set, sub string, add bool) {
	var err error
	if add {
		err = h.rdb.SAdd(ctx, set, sub).Err()
	} else {
		err = h.rdb.SRem(ctx, set, sub).Err()
	}
	if err != nil {
		h.log.Warn("could not update an index of /metrics (counts only)", "set", set, "subscriber_id", sub, "err", err)
	}
}
