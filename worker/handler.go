package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
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

// droppedError ends a task that must not be sent: its subscriber was
// deleted, or re-created since (another generation). It is counted, not
// dead-lettered: deleting a subscriber with a million queued events must
// not write a million ledger entries.
type droppedError struct{ msg string }

func (e *droppedError) Error() string { return e.msg }
func (e *droppedError) Unwrap() error { return asynq.RevokeTask } // asynq deletes it

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
		// asynq keeps whole seconds, truncating: round up, so a backoff is
		// never cut short.
		now := time.Now()
		return limits.CeilSecond(now.Add(r.After)).Sub(now)
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
	room   *waitRoom
	subs   *subCache
	// recorder batches the writes that follow a run.
	recorder *recorder
	// totals sums the runs' counters for the namespace's aggregates.
	totals *totals
	log    *slog.Logger
	stats  *Stats
	prod   *producer.Producer // wakes held tasks, carries subscribers over
	bg     background         // wake-ups after a breaker closes
	caps   rateCaps           // the receivers' RateLimit-Policy caps written
}

// ProcessTask delivers one event to one subscriber. Whatever happens,
// record runs: a panic is a counted failure of this task, and its slot is
// released at once instead of after its ttl.
func (h *handler) ProcessTask(ctx context.Context, t *asynq.Task) (err error) {
	var r run
	defer func() {
		if p := recover(); p != nil {
			h.log.Error("panic delivering a task: a hooklane bug", "task_id", r.taskID, "panic", p, "stack", string(debug.Stack()))
			err = h.record(ctx, &r, &RetryError{After: limits.Backoff(r.retried, h.cfg.BackoffBase, h.cfg.BackoffMax),
				Msg: fmt.Sprintf("hooklane panicked delivering this task (a bug): %v", p)})
		}
	}()
	return h.record(ctx, &r, h.process(ctx, t, &r))
}

func (h *handler) process(ctx context.Context, t *asynq.Task, r *run) error {
	r.taskID, _ = asynq.GetTaskID(ctx)
	r.queue, _ = asynq.GetQueueName(ctx)
	r.member = tasks.WaitingMember(r.queue, r.taskID)
	r.retried, _ = asynq.GetRetryCount(ctx)
	r.payload = t.Payload()
	d, err := tasks.DecodeDelivery(t.Payload())
	if err != nil {
		return err
	}
	r.d, r.sub, r.keys = &d, d.SubscriberID, h.keys.Gates(d.SubscriberID)
	sub, err := h.gate(ctx, &d, r)
	if err != nil {
		return err
	}
	resp := post(ctx, h.client, &sub, &d.Event, r.body, h.cfg.ResponseBody, func(status int, hdr http.Header, at time.Time) {
		hint, _ := limits.ReadRateHint(hdr)
		h.throttledEarly(ctx, r, status, hdr.Get("Retry-After"), hint, at)
		h.learnRate(ctx, r, &sub, status, hint)
	})
	h.breakerAfter(ctx, r, &sub, resp)
	r.attempt = &tasks.Attempt{At: resp.received, Status: resp.status, RetryAfter: resp.retryAfter,
		LatencyMS: resp.latency.Milliseconds(), AttemptsSpent: r.retried, Body: strings.ToValidUTF8(string(resp.body), "\uFFFD")}
	if resp.err != nil {
		r.attempt.Error = resp.err.Error()
	}
	if resp.err == nil && resp.status/100 == 2 {
		due := d.EnqueuedAt
		if due.Before(d.NotBefore) {
			due = d.NotBefore
		}
		r.delivered, r.e2e, r.late = true, resp.received.Sub(d.EnqueuedAt), resp.received.Sub(due)
	}
	// The cooldown of a 429 is already written (throttledEarly), before
	// record releases the slot: no task waiting for it can send after a 429.
	return h.finish(ctx, &d, &sub, resp, r)
}

// gate passes the gates (passGates); for a task that refers to its event
// (stored once for all its subscribers), the first Admit reads the stored
// event in its round trip, and r.body is what the request sends. An error
// reading the event wins over the gates' answer: a dead letter must carry
// the whole event, or none. A task that never reached Admit reads it only
// to be dead-lettered with it.
func (h *handler) gate(ctx context.Context, d *tasks.Delivery, r *run) (tasks.Subscriber, error) {
	s, err := h.passGates(ctx, d, r)
	if !d.PayloadRef {
		return s, err
	}
	if !r.eventRead {
		if err != nil && !errors.As(err, new(*deadLetter)) {
			return s, err // dropped, or tried again: no event needed
		}
		v, gerr := h.rdb.Get(ctx, h.keys.Event(d.Event.ID)).Result()
		found := gerr == nil
		if errors.Is(gerr, redis.Nil) {
			gerr = nil
		}
		r.eventErr = h.storedEvent(d, r, v, found, gerr)
	}
	if r.eventErr != nil {
		if r.probe { // admitted as the breaker's probe, not sent: another may probe
			if perr := h.gates.ReleaseProbe(context.WithoutCancel(ctx), r.keys); perr != nil {
				h.log.Warn("could not give the probe role back; it expires by itself", "subscriber_id", r.sub, "err", perr)
			}
		}
		return s, r.eventErr
	}
	return s, err
}

// storedEvent checks the stored event read for the task (v; found: it
// exists; err: the read failed) and keeps it as the request's body, byte
// for byte as published (not parsed: a dead letter parses it, see
// run.wholeEvent). The error is what the task ends with instead.
func (h *handler) storedEvent(d *tasks.Delivery, r *run, v string, found bool, err error) error {
	id := d.Event.ID
	if err != nil {
		return h.infra("load event", d.SubscriberID, err)
	}
	if !found {
		return dead(DeadUndecodable, "event %s's payload is gone from Redis (it is kept for its retry horizon and 10 minutes at least)", id)
	}
	body, ok := tasks.StoredEventBody(v, id)
	if !ok {
		return dead(DeadUndecodable, "event %s's stored payload is unreadable", id)
	}
	r.body = body
	return nil
}

// passGates checks the attempt budget, reads the subscriber and admits the
// request (r.token: its in-flight slot).
func (h *handler) passGates(ctx context.Context, d *tasks.Delivery, r *run) (tasks.Subscriber, error) {
	r.maxAttempts = d.MaxAttempts
	if r.maxAttempts == 0 { // a task of the release before: asynq held the budget
		r.maxAttempts, _ = asynq.GetMaxRetry(ctx)
	}
	if r.retried >= r.maxAttempts {
		// Only a lost lease gets here (asynq counts it as an attempt): the
		// last attempt's worker died mid-request. The budget is spent.
		return tasks.Subscriber{}, dead(DeadAttempts, "no attempt left: %d of %d spent, the last one lost with its worker (asynq counts a lost lease as an attempt)",
			r.retried, r.maxAttempts)
	}
	sub, err := h.subscriber(ctx, d.SubscriberID, d.MaxAttempts == 0)
	if err != nil {
		return sub, err
	}
	r.token, err = h.admit(ctx, d, &sub, r)
	return sub, err
}

// subscriber returns the subscriber's endpoint, secrets and limits from a
// per-process cache (a second old at most) or Redis. Whether it still
// exists in the task's generation, is paused or cooling down is checked
// fresh by Admit.
//
// A task of the release before (legacy) whose subscriber the directory
// lacks may be for one the old API created during a rolling upgrade: that
// one is carried over (producer.MigrateSubscriber) instead of dropped.
func (h *handler) subscriber(ctx context.Context, id string, legacy bool) (tasks.Subscriber, error) {
	if s, ok := h.subs.get(id); ok {
		return s, nil
	}
	v, err := h.rdb.HGet(ctx, h.keys.SubscriberConfigs(), id).Result()
	if errors.Is(err, redis.Nil) && legacy {
		if err = h.migrateOne(ctx, id); err != nil {
			return tasks.Subscriber{}, h.infra("migrate subscriber", id, err)
		}
		v, err = h.rdb.HGet(ctx, h.keys.SubscriberConfigs(), id).Result()
	}
	switch {
	case errors.Is(err, redis.Nil):
		return tasks.Subscriber{}, &droppedError{fmt.Sprintf("subscriber %s was deleted: not sent", id)}
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

// migrateOne carries subscriber id over from the release before's layout,
// if it has it.
func (h *handler) migrateOne(ctx context.Context, id string) error {
	_, err := h.prod.MigrateSubscriber(ctx, id)
	return err
}

func (h *handler) infra(what, sub string, err error) error {
	h.log.Error("redis error in gate", "gate", what, "subscriber_id", sub, "err", err)
	return &infraError{fmt.Errorf("%s: %w", what, err)}
}

// pacingLead is how long before its pacing slot a paced task becomes due:
// asynq moves due tasks to pending only every ForwardInterval and in whole
// seconds, so a task due exactly at its slot would reach the rate limiter
// late, and the limit would go unused for as long. A task that comes
// early books its slot ahead (Admit's reservation) and waits for it here.
const pacingLead = 500 * time.Millisecond

// deferTo parks the task and reschedules it, or dead-letters it when its
// wake-up is past its retry horizon. pk.Book spreads the wake-ups of the
// destination's waiting tasks at its rate (rate limit, cooldown,
// not-before): such a task wakes pacingLead before its slot's second, but
// never before floor (a cooldown's end, a not-before time). Without Book
// it waits pk.Hold and takes nobody's slot.
func (h *handler) deferTo(ctx context.Context, d *tasks.Delivery, r *run, gate string, pk limits.Parking, floor time.Time, reason string) error {
	pk.Keys, pk.Member = r.keys, r.member
	in, err := h.gates.Park(ctx, pk)
	if err != nil {
		return h.infra("park", r.sub, err)
	}
	until := time.Now().Add(in)
	if until.After(d.ExpiresAt) {
		return dead(DeadHorizon, "retry horizon %s passed while %s", stamp(d.ExpiresAt), reason)
	}
	if pk.Book {
		until = until.Add(-pacingLead).Truncate(time.Second)
		if until.Before(floor) {
			until = floor // DeferredError rounds it up
		}
	}
	return &limits.DeferredError{Until: until, Gate: gate, Reason: reason}
}

// jitter spreads tasks that wait the same hold, so they do not all come
// back in the same instant.
func jitter(d time.Duration) time.Duration { return d + rand.N(d/4+1) }

// admit passes every gate, waiting in this process for at most MaxWait:
// for a rate-limit slot booked that far ahead (plus the second a paced
// task may come early), or in the destination's busy lane for a free
// in-flight slot. It returns the in-flight token.
func (h *handler) admit(ctx context.Context, d *tasks.Delivery, sub *tasks.Subscriber, r *run) (string, error) {
	maxWait := h.cfg.maxWait()
	req := limits.AdmitRequest{Gen: d.Gen, Member: r.member, NotBefore: d.NotBefore, Limit: sub.Limit,
		MaxInFlight: sub.MaxInFlight, SlotTTL: h.cfg.RequestTimeout + maxWait + 5*time.Second, Ramp: h.cfg.Breaker.Ramp,
		Record: r.keys.Deliveries + d.Event.ID}
	if d.PayloadRef {
		req.Read = h.keys.Event(d.Event.ID) // with the first Admit
	}
	if maxWait > 0 {
		// Waiting for a slot of one's own, booked ahead, is bounded and keeps
		// the destination at its rate: it takes no place in the busy lanes.
		req.Reserve = maxWait + time.Second
	}
	const poll = 20 * time.Millisecond
	var deadline time.Time // of the wait in the busy lane, once entered
	var l *lane
	head, reserved := false, false
	defer func() {
		if head {
			l.unlock()
		}
		if l != nil {
			h.room.leave(sub.ID, l)
		}
	}()
	for {
		var a limits.Admission
		var err error
		if reserved {
			a, err = h.gates.Take(ctx, r.keys, req.Record, sub.MaxInFlight, req.SlotTTL)
		} else {
			a, err = h.gates.Admit(ctx, r.keys, req)
			if req.Read != "" && err == nil {
				r.eventRead, r.eventErr = true, h.storedEvent(d, r, a.Value, a.Found, a.ReadErr)
				req.Read = ""
			}
		}
		switch {
		case err != nil:
			return "", h.infra("admit", sub.ID, err)
		case a.Admitted():
			r.probe, r.streak = a.Probe, a.Streak
			return a.Token, nil
		case a.Held > 0 && reserved:
			reserved = false // the breaker opened while it waited: Admit holds it
		case a.Held > 0:
			return "", h.heldByBreaker(d, r, a.Held)
		case a.Reserved():
			// A rate-limit slot of its own, a moment ahead: wait for it, then
			// take an in-flight slot (Take), unless a 429 came in meanwhile.
			if !sleep(ctx, a.SendIn) {
				return "", ctx.Err() // shutting down: asynq puts the task back
			}
			reserved = true
		case a.Unknown:
			h.subs.forget(sub.ID)
			return "", &droppedError{fmt.Sprintf("subscriber %s was deleted or re-created since this event was published: not sent", sub.ID)}
		case a.Paused != "":
			return "", h.deferTo(ctx, d, r, GatePaused, limits.Parking{Hold: jitter(h.cfg.PauseRecheck)}, time.Time{},
				"subscriber paused ("+a.Paused+")")
		case a.NotBefore > 0:
			return "", h.deferTo(ctx, d, r, GateNotBefore, limits.Parking{Limit: sub.Limit, Book: true, NotBefore: d.NotBefore},
				d.NotBefore, "not before "+stamp(d.NotBefore))
		case a.CoolFor > 0:
			until := time.Now().Add(a.CoolFor)
			return "", h.deferTo(ctx, d, r, GateCooldown, limits.Parking{Limit: sub.Limit, Book: true, NotBefore: until},
				until, "destination cooling down until "+stamp(until))
		case a.Busy:
			// Wait for a free slot in the destination's busy lane, if it and
			// the process have room, as the lane's head. A rate-limit slot
			// booked before is given up: sent after the wait, it would leave
			// together with the requests booked after it, over the limit.
			// The next try asks the limiter again.
			reserved = false
			if l == nil {
				var ok bool
				if maxWait == 0 {
					return "", h.deferBusy(ctx, d, r, sub)
				}
				if l, ok = h.room.enter(sub.ID); !ok {
					return "", h.deferBusy(ctx, d, r, sub)
				}
				deadline = time.Now().Add(maxWait)
			}
			if !head && !l.lock(ctx, deadline) {
				return "", h.deferBusy(ctx, d, r, sub)
			}
			head = true
			if time.Until(deadline) < poll || !l.waitFreed(ctx, min(poll, time.Until(deadline))) {
				return "", h.deferBusy(ctx, d, r, sub)
			}
		default: // rate limited beyond what may be waited here
			return "", h.deferTo(ctx, d, r, GateRateLimit, limits.Parking{Limit: sub.Limit, Book: true, NotBefore: time.Now().Add(a.Wait)},
				time.Time{}, "rate limit "+sub.Limit.String())
		}
	}
}

// deferBusy defers a task whose destination has every in-flight slot taken:
// it comes back in about a second, taking no pacing slot.
func (h *handler) deferBusy(ctx context.Context, d *tasks.Delivery, r *run, sub *tasks.Subscriber) error {
	return h.deferTo(ctx, d, r, GateInFlight, limits.Parking{Hold: jitter(time.Second)}, time.Time{},
		fmt.Sprintf("max in-flight %d reached", sub.MaxInFlight))
}

// throttledEarly records the cooldown of a 429 (or 503 with Retry-After) as
// soon as its headers arrive, before the body is read and before the slot
// is released.
//
// A 429 or 503 without a usable Retry-After whose RateLimit header says the
// quota is spent waits for the quota's reset instead.
func (h *handler) throttledEarly(ctx context.Context, r *run, status int, retryAfter string, hint limits.RateHint, at time.Time) {
	if status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable {
		return
	}
	ra, ok := limits.ReadRetryAfter(retryAfter)
	if !ok && hint.Spent() {
		ra, ok = limits.RetryAfter{After: hint.Reset}, true
	}
	if !ok {
		return // a counted failure; finish cools it down with the backoff
	}
	until, left, err := h.gates.Cooldown(context.WithoutCancel(ctx), r.keys, ra, h.cfg.MaxRetryAfter)
	if err != nil {
		// The task still waits for its deadline; only the cooldown of the
		// other events is lost.
		h.log.Error("could not record cooldown", "subscriber_id", r.sub, "err", err)
		r.coolLocal = ra.Deadline(at, h.cfg.MaxRetryAfter)
		return
	}
	r.coolUntil, r.coolLocal = until, time.Now().Add(left)
	h.totals.cooling(r.sub, until)
}

// finish turns the endpoint's answer into the task's next state.
func (h *handler) finish(ctx context.Context, d *tasks.Delivery, sub *tasks.Subscriber, resp response, r *run) error {
	attempt := r.retried + 1
	if resp.err == nil && resp.status/100 == 2 {
		h.log.Debug("delivered", "subscriber_id", sub.ID, "event_id", d.Event.ID, "attempt", attempt,
			"status", resp.status, "latency_ms", resp.latency.Milliseconds())
		return nil
	}
	log := h.log.With("subscriber_id", sub.ID, "event_id", d.Event.ID, "attempt", attempt)
	what := describe(resp)
	if errors.Is(resp.err, ErrForbiddenAddress) {
		log.Warn("endpoint address refused by the SSRF guard", "reason", what)
		return dead(DeadRefused, "%s", what)
	}
	if resp.status == http.StatusGone {
		if paused, err := h.gates.Pause(context.WithoutCancel(ctx), r.keys, d.Gen, tasks.PauseGone); err != nil {
			log.Error("could not pause subscriber after 410", "err", err)
		} else if paused {
			h.index(context.WithoutCancel(ctx), h.keys.PausedIndex(), sub.ID, true) // /metrics' paused count
		}
		log.Warn("endpoint gone: subscriber paused, event dead-lettered")
		return dead(DeadGone, "%s: subscriber paused", what)
	}

	// 429, or 503 with a usable Retry-After: the endpoint names when to come
	// back. The deadline is obeyed exactly (no jitter), spends no attempt,
	// and cools the whole destination so its other events wait too.
	if !r.coolLocal.IsZero() {
		what = fmt.Sprintf("%s; deadline %s (Redis clock); received %s", what, stamp(r.coolUntil), stamp(resp.received))
		if r.coolLocal.After(d.ExpiresAt) {
			return dead(DeadHorizon, "%s; retry horizon %s passed", what, stamp(d.ExpiresAt))
		}
		log.Info("throttled by endpoint", "status", resp.status, "retry_after", resp.retryAfter, "deadline", r.coolUntil)
		r.retryAt = r.coolLocal // listed with the subscriber's waiting tasks
		return &limits.DeferredError{Until: r.coolLocal, Gate: GateRetryAfter, Reason: what}
	}

	// Anything else is a counted failure with backoff and full jitter.
	if attempt >= r.maxAttempts {
		log.Warn("dead-lettered: attempts exhausted", "reason", what)
		return dead(DeadAttempts, "attempt %d of %d: %s", attempt, r.maxAttempts, what)
	}
	after := limits.Backoff(r.retried, h.cfg.BackoffBase, h.cfg.BackoffMax)
	next := resp.received.Add(after)
	if next.After(d.ExpiresAt) {
		return dead(DeadHorizon, "attempt %d: %s; retry horizon %s passed", attempt, what, stamp(d.ExpiresAt))
	}
	if resp.status == http.StatusTooManyRequests {
		// Throttled without a usable Retry-After: the local backoff cools
		// the destination too.
		if until, _, err := h.gates.Cooldown(ctx, r.keys, limits.RetryAfter{After: after}, h.cfg.MaxRetryAfter); err != nil {
			log.Error("could not record cooldown", "err", err)
		} else {
			h.totals.cooling(r.sub, until)
		}
	}
	log.Info("delivery failed, will retry", "reason", what, "retry_in", after)
	return &RetryError{After: after, Msg: fmt.Sprintf("attempt %d of %d: %s; next try in about %s",
		attempt, r.maxAttempts, what, after.Round(time.Second))}
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
