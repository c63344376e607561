package worker

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

// endpointFailure reports whether an answer (or its absence) says the
// endpoint itself is failing, which counts toward its breaker: no answer
// (connection refused or reset, timeout, TLS), 408, or a 5xx without a
// usable Retry-After. A 4xx is about one event, a 429 or a 503 with
// Retry-After is the endpoint saying when to come back: neither opens it.
func endpointFailure(resp response, r *run) bool {
	if resp.err != nil {
		return true
	}
	return resp.status == http.StatusRequestTimeout || resp.status >= 500 && r.coolLocal.IsZero()
}

// breakerAfter records a request's outcome in its destination's breaker:
// a failure counts (and may open it, or disable the subscriber); any other
// answer ends a streak of failures, and closes an open breaker, waking the
// tasks it held. A healthy destination's delivery writes nothing here.
func (h *handler) breakerAfter(ctx context.Context, r *run, sub *tasks.Subscriber, resp response) {
	if errors.Is(resp.err, ErrForbiddenAddress) {
		return // never sent: it says nothing of the endpoint's health
	}
	if ctx.Err() != nil {
		// Shutting down: the request was cut short by us. A probe gives its
		// role back, so that another worker may probe at once.
		if r.probe {
			if err := h.gates.ReleaseProbe(context.WithoutCancel(ctx), r.keys); err != nil {
				h.log.Warn("could not give the probe role back; it expires by itself", "subscriber_id", r.sub, "err", err)
			}
		}
		return
	}
	ctx = context.WithoutCancel(ctx)
	var change limits.BreakerChange
	var since time.Time
	var err error
	what := describe(resp)
	switch {
	case endpointFailure(resp, r):
		change, since, err = h.gates.BreakerFailed(ctx, r.keys, r.d.Gen, h.cfg.Breaker, what, r.probe)
	case r.probe || r.streak:
		change, since, err = h.gates.BreakerAnswered(ctx, r.keys, r.d.Gen)
	default:
		return
	}
	log := h.log.With("subscriber_id", r.sub)
	switch {
	case err != nil:
		log.Error("could not record the outcome in the circuit breaker", "err", err)
	case change == limits.BreakerOpened:
		log.Warn("circuit breaker opened: endpoint failing; its events are held, one probe at a time",
			"failing_since", since, "last_error", what)
		h.index(ctx, h.keys.OpenBreakers(), r.sub, true)
		h.breakerEvent(ctx, tasks.OperatorFailing, r.sub, since, time.Now(), what, "")
	case change == limits.BreakerDisabled:
		h.subs.forget(r.sub)
		log.Warn("subscriber disabled: its endpoint has been failing without a break", "failing_since", since,
			"disable_after", h.cfg.Breaker.DisableAfter, "reason", tasks.PauseFailing)
		h.index(ctx, h.keys.PausedIndex(), r.sub, true)
		h.breakerEvent(ctx, tasks.OperatorDisabled, r.sub, since, time.Now(), what, tasks.PauseFailing)
	case change == limits.BreakerClosed:
		log.Info("circuit breaker closed: endpoint recovered; waking its held events", "failing_since", since)
		h.index(ctx, h.keys.OpenBreakers(), r.sub, false)
		h.breakerEvent(ctx, tasks.OperatorRecovered, r.sub, since, time.Now(), "", "")
		h.bg.goWake(h, r.sub, sub.Limit.PerSecond(), h.cfg.Breaker.Ramp)
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

// heldByBreaker defers a task the open breaker holds until the wake-up Admit
// booked for it (and listed in the waiting index), or dead-letters it when
// that is past its retry horizon.
func (h *handler) heldByBreaker(d *tasks.Delivery, r *run, in time.Duration) error {
	until := time.Now().Add(in)
	if until.After(d.ExpiresAt) {
		return dead(DeadHorizon, "retry horizon %s passed while the circuit breaker held the destination (its endpoint failing)", stamp(d.ExpiresAt))
	}
	return &limits.DeferredError{Until: until, Gate: GateBreaker,
		Reason: "circuit breaker open: the endpoint is failing; held without spending an attempt until a probe succeeds (next look " + stamp(until) + ")"}
}

// background runs the wake-ups of held tasks after a breaker closes (so a
// handler does not spend its slot on them) and the dead-letter reports;
// stop cancels and waits for them.
type background struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (b *background) init() { b.ctx, b.cancel = context.WithCancel(context.Background()) }

func (b *background) stop() {
	b.cancel()
	b.wg.Wait()
}

// goDeadReports runs h's dead-letter reports until stop.
func (b *background) goDeadReports(h *handler) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		h.runDeadReports(b.ctx)
	}()
}
