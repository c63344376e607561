package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

// RetryError is a counted failure that carries its own backoff, so that the
// same delay can also become the destination's cooldown.
type RetryError struct {
	After time.Duration
	Msg   string
}

func (e *RetryError) Error() string { return e.Msg }

// infraError is a failure of hooklane's own infrastructure (Redis) inside a
// gate. It is retried with backoff and logged but spends no attempt, and it
// is never read as "rate limited".
type infraError struct{ err error }

func (e *infraError) Error() string { return "hooklane infrastructure: " + e.err.Error() }
func (e *infraError) Unwrap() error { return e.err }

// isFailure is asynq's Config.IsFailure: deferrals and infrastructure
// errors do not count as attempts.
func isFailure(err error) bool {
	var d *limits.DeferredError
	var i *infraError
	return !errors.As(err, &d) && !errors.As(err, &i)
}

// retryDelay is asynq's Config.RetryDelayFunc.
func (h *handler) retryDelay(n int, err error, _ *asynq.Task) time.Duration {
	var d *limits.DeferredError
	var r *RetryError
	switch {
	case errors.As(err, &d):
		return d.Delay(time.Now())
	case errors.As(err, &r):
		return r.After
	case errors.As(err, new(*infraError)):
		return limits.Backoff(3, time.Second, time.Minute)
	}
	return limits.Backoff(n, h.cfg.BackoffBase, h.cfg.BackoffMax)
}

type handler struct {
	cfg    Config
	rdb    redis.UniversalClient
	gates  *limits.Gates
	keys   tasks.Keys
	client *http.Client
	lanes  *lanes
	subs   *subCache
	// recorder batches the writes that follow a run.
	recorder *recorder
	log      *slog.Logger
	stats    *Stats
}

// Result is what a delivered task's asynq result holds.
type Result struct {
	Status      int       `json:"status"`
	LatencyMS   int64     `json:"latency_ms"`
	Attempt     int       `json:"attempt"`
	DeliveredAt time.Time `json:"delivered_at"`
}

// ProcessTask delivers one event to one subscriber.
func (h *handler) ProcessTask(ctx context.Context, t *asynq.Task) error {
	var r run
	return h.record(ctx, &r, h.process(ctx, t, &r))
}

func (h *handler) process(ctx context.Context, t *asynq.Task, r *run) error {
	r.taskID, _ = asynq.GetTaskID(ctx)
	r.retried, _ = asynq.GetRetryCount(ctx)
	r.payload = t.Payload()
	d, err := tasks.DecodeDelivery(t.Payload())
	if err != nil {
		return err
	}
	r.d, r.sub = &d, d.SubscriberID
	sub, err := h.subscriber(ctx, d.SubscriberID)
	if err != nil {
		return err
	}
	if time.Now().Before(d.NotBefore) {
		return h.deferTo(ctx, &d, &sub, GateNotBefore, d.NotBefore, "not before "+stamp(d.NotBefore))
	}
	if r.token, err = h.admit(ctx, &d, &sub); err != nil {
		return err
	}
	resp := post(ctx, h.client, &sub, &d.Event)
	r.attempt = &tasks.Attempt{At: resp.received, Status: resp.status, RetryAfter: resp.retryAfter}
	if resp.err != nil {
		r.attempt.Error = resp.err.Error()
	}
	if resp.err == nil && resp.status/100 == 2 {
		due := d.EnqueuedAt
		if due.Before(d.NotBefore) {
			due = d.NotBefore
		}
		r.delivered, r.e2e, r.late = true, resp.received.Sub(d.EnqueuedAt), resp.received.Sub(due)
		r.result, _ = json.Marshal(Result{Status: resp.status, LatencyMS: resp.latency.Milliseconds(),
			Attempt: r.retried + 1, DeliveredAt: resp.received})
	}
	// finish records a cooldown before record releases the slot, so no task
	// waiting for this slot can send after a 429.
	return h.finish(ctx, &d, &sub, resp, r.retried)
}

// subscriber returns the subscriber's endpoint, secrets and limits from a
// per-process cache (a second old at most) or Redis. Whether it still
// exists, is paused or cooling down is checked fresh by Admit.
func (h *handler) subscriber(ctx context.Context, id string) (tasks.Subscriber, error) {
	if s, ok := h.subs.get(id); ok {
		return s, nil
	}
	v, err := h.rdb.HGet(ctx, h.keys.Subscribers(), id).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return tasks.Subscriber{}, dead(DeadDeleted, "subscriber %s was deleted", id)
	case err != nil:
		return tasks.Subscriber{}, h.infra("load subscriber", id, err)
	}
	var s tasks.Subscriber
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return s, dead(DeadUndecodable, "subscriber %s unreadable: %v", id, err)
	}
	h.subs.put(id, s)
	return s, nil
}

func (h *handler) infra(what, sub string, err error) error {
	h.log.Error("redis error in gate", "gate", what, "subscriber_id", sub, "err", err)
	return &infraError{fmt.Errorf("%s: %w", what, err)}
}

// deferTo reschedules the task at a paced slot no earlier than notBefore,
// or dead-letters it when that is past its retry horizon.
func (h *handler) deferTo(ctx context.Context, d *tasks.Delivery, sub *tasks.Subscriber, gate string, notBefore time.Time, reason string) error {
	if notBefore.After(d.ExpiresAt) {
		return dead(DeadHorizon, "retry horizon %s passed while %s", stamp(d.ExpiresAt), reason)
	}
	wake, err := h.gates.Reserve(ctx, limits.Reservation{Subscriber: sub.ID, Limit: sub.Limit, NotBefore: notBefore})
	if err != nil {
		return h.infra("reserve", sub.ID, err)
	}
	// Due at the start of the slot's second (the lane waits out the rest),
	// but never before notBefore, which DeferredError rounds up.
	until := wake[0].Truncate(time.Second)
	if until.Before(notBefore) {
		until = notBefore
	}
	return &limits.DeferredError{Until: until, Gate: gate, Reason: reason}
}

// admit passes the max-in-flight and rate-limit gates, waiting in the
// destination's lane for at most MaxWait. It returns the in-flight token.
func (h *handler) admit(ctx context.Context, d *tasks.Delivery, sub *tasks.Subscriber) (string, error) {
	now := time.Now()
	l, ok := h.lanes.join(sub.ID)
	if !ok {
		return "", h.deferTo(ctx, d, sub, GateWaiters, now, "waiting room full")
	}
	defer h.lanes.leave(sub.ID, l)
	deadline := now.Add(h.cfg.MaxWait)
	if !l.lock(ctx, deadline) {
		return "", h.deferTo(ctx, d, sub, GateWaiters, time.Now(), "destination busy")
	}
	defer l.unlock()

	slotTTL := h.cfg.RequestTimeout + h.cfg.MaxWait + 5*time.Second
	const poll = 20 * time.Millisecond
	for {
		a, err := h.gates.Admit(ctx, h.keys.Subscribers(), h.keys.Paused(), sub.ID, sub.Limit, sub.MaxInFlight, slotTTL)
		switch {
		case err != nil:
			return "", h.infra("admit", sub.ID, err)
		case a.Admitted():
			return a.Token, nil
		case a.Unknown:
			h.subs.forget(sub.ID)
			return "", dead(DeadDeleted, "subscriber %s was deleted", sub.ID)
		case a.Paused:
			return "", h.deferTo(ctx, d, sub, GatePaused, time.Now().Add(h.cfg.PauseRecheck), "subscriber paused")
		case !a.CoolUntil.IsZero():
			return "", h.deferTo(ctx, d, sub, GateCooldown, a.CoolUntil, "destination cooling down until "+stamp(a.CoolUntil))
		case a.Busy:
			if time.Until(deadline) < poll || !sleep(ctx, poll) {
				return "", h.deferTo(ctx, d, sub, GateInFlight, time.Now().Add(time.Second),
					fmt.Sprintf("max in-flight %d reached", sub.MaxInFlight))
			}
		default: // rate limited
			if time.Until(deadline) < a.Wait || !sleep(ctx, a.Wait) {
				return "", h.deferTo(ctx, d, sub, GateRateLimit, time.Now().Add(a.Wait), "rate limit "+sub.Limit.String())
			}
		}
	}
}

// finish turns the endpoint's answer into the task's next state.
func (h *handler) finish(ctx context.Context, d *tasks.Delivery, sub *tasks.Subscriber, r response, retried int) error {
	attempt := retried + 1
	if r.err == nil && r.status/100 == 2 {
		h.log.Debug("delivered", "subscriber_id", sub.ID, "event_id", d.Event.ID, "attempt", attempt,
			"status", r.status, "latency_ms", r.latency.Milliseconds())
		return nil
	}
	maxAttempts, _ := asynq.GetMaxRetry(ctx)
	log := h.log.With("subscriber_id", sub.ID, "event_id", d.Event.ID, "attempt", attempt)

	what := describe(r)
	if errors.Is(r.err, ErrForbiddenAddress) {
		log.Warn("endpoint address refused by the SSRF guard", "reason", what)
		return dead(DeadRefused, "%s", what)
	}
	if r.status == http.StatusGone {
		if err := h.rdb.SAdd(ctx, h.keys.Paused(), sub.ID).Err(); err != nil {
			log.Error("could not pause subscriber after 410", "err", err)
		}
		log.Warn("endpoint gone: subscriber paused, event dead-lettered")
		return dead(DeadGone, "%s: subscriber paused", what)
	}

	// 429, or 503 with a usable Retry-After: the endpoint names when to come
	// back. The deadline is obeyed exactly (no jitter), spends no attempt,
	// and cools the whole destination so its other events wait too.
	throttled := r.status == http.StatusTooManyRequests || r.status == http.StatusServiceUnavailable
	if deadline, ok := limits.ParseRetryAfter(r.retryAfter, r.received, h.cfg.MaxRetryAfter); throttled && ok {
		what = fmt.Sprintf("%s; deadline %s; received %s", what, stamp(deadline), stamp(r.received))
		if _, err := h.gates.Cooldown(ctx, sub.ID, deadline); err != nil {
			// The task still waits for its deadline; only the cooldown of
			// the other events is lost.
			log.Error("could not record cooldown", "err", err)
		}
		if deadline.After(d.ExpiresAt) {
			return dead(DeadHorizon, "%s; retry horizon %s passed", what, stamp(d.ExpiresAt))
		}
		log.Info("throttled by endpoint", "status", r.status, "retry_after", r.retryAfter, "deadline", deadline)
		return &limits.DeferredError{Until: deadline, Gate: GateRetryAfter, Reason: what}
	}

	// Anything else is a counted failure with backoff and full jitter.
	if attempt >= maxAttempts {
		log.Warn("dead-lettered: attempts exhausted", "reason", what)
		return dead(DeadAttempts, "attempt %d of %d: %s", attempt, maxAttempts, what)
	}
	after := limits.Backoff(retried, h.cfg.BackoffBase, h.cfg.BackoffMax)
	next := r.received.Add(after)
	if next.After(d.ExpiresAt) {
		return dead(DeadHorizon, "attempt %d: %s; retry horizon %s passed", attempt, what, stamp(d.ExpiresAt))
	}
	if r.status == http.StatusTooManyRequests {
		// Throttled without a usable Retry-After: the local backoff cools
		// the destination too.
		if _, err := h.gates.Cooldown(ctx, sub.ID, next); err != nil {
			log.Error("could not record cooldown", "err", err)
		}
	}
	log.Info("delivery failed, will retry", "reason", what, "retry_in", after)
	return &RetryError{After: after, Msg: fmt.Sprintf("attempt %d of %d: %s; next try in about %s",
		attempt, maxAttempts, what, after.Round(time.Second))}
}

// describe is the error text asynqmon shows: status, raw Retry-After.
func describe(r response) string {
	if r.err != nil {
		return "request failed: " + r.err.Error()
	}
	s := fmt.Sprintf("HTTP %d %s", r.status, http.StatusText(r.status))
	if r.retryAfter != "" || r.status == http.StatusTooManyRequests || r.status == http.StatusServiceUnavailable {
		s += fmt.Sprintf("; Retry-After %q", r.retryAfter)
	}
	return s
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
