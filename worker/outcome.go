package worker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

// Dead-letter reasons.
const (
	DeadAttempts    = "attempts"
	DeadHorizon     = "horizon"
	DeadGone        = "gone"
	DeadUndecodable = "undecodable"
	DeadRefused     = "refused" // the SSRF guard refused the endpoint's address
)

// outcome is what a run's request (or its absence) did: the write that
// commits it (limits.Outcome) and what this process does after.
type outcome struct {
	limits.Outcome
	reason string // a dead letter's
	msg    string // asynqmon's last error for the task; the ledger's error
	// answer is what asynq is told once the outcome is committed.
	answer error
	status int    // the answer's HTTP status, 0 none
	what   string // the answer, described
	// att is the request made, if any, as its record keeps it (written by
	// finish, once its next attempt is known).
	att *tasks.Attempt
}

// outcomeOf turns the endpoint's answer into the delivery's next state.
func (h *handler) outcomeOf(ctx context.Context, r *run, sub *tasks.Subscriber, resp response) outcome {
	what := describe(resp)
	switch {
	case resp.err != nil && ctx.Err() != nil:
		// Cut by the shutdown, after asynq put the task back: not an attempt.
		return h.interruption(r, nil)
	case errors.Is(resp.err, ErrForbiddenAddress):
		h.log.Warn("endpoint address refused by the SSRF guard", "subscriber_id", r.sub, "event_id", r.event, "reason", what)
		return h.death(r, DeadRefused, what, &resp)
	case resp.err == nil && resp.status/100 == 2:
		o := h.base(r, &resp, tasks.StateDelivered)
		o.Kind, o.DeliveredAt, o.Answered = limits.OutcomeDelivered, resp.received, true
		due := r.adm.Due
		countDelivered(o.Counters, resp.received.Sub(r.adm.Published), resp.received.Sub(due))
		h.log.Debug("delivered", "subscriber_id", r.sub, "event_id", r.event, "status", resp.status,
			"latency_ms", resp.latency.Milliseconds())
		return o
	case resp.err == nil && resp.status == http.StatusGone:
		h.log.Warn("endpoint gone: subscriber paused, event dead-lettered", "subscriber_id", r.sub, "event_id", r.event)
		o := h.death(r, DeadGone, what+": subscriber paused", &resp)
		o.PauseGone, o.Answered = true, true
		return o
	case !r.coolUntil.IsZero():
		// 429, or 503 with a usable Retry-After (or a spent quota): the
		// endpoint named when to come back. Its cooldown is written
		// (throttledEarly); the deadline is obeyed exactly, spends no
		// attempt, and holds the whole destination.
		what = fmt.Sprintf("%s; deadline %s (Redis clock); received %s", what, stamp(r.coolUntil), stamp(resp.received))
		if !r.coolUntil.Before(r.adm.Expires) {
			return h.death(r, DeadHorizon, what+"; retry horizon "+stamp(r.adm.Expires)+" passed", &resp)
		}
		o := h.base(r, &resp, tasks.StateCooling)
		o.att.NextAt = r.coolUntil
		o.CoolUntil, o.CoolLost = r.coolUntil, r.coolLost
		o.Kind, o.Answered, o.Throttled = limits.OutcomeThrottled, true, resp.status == http.StatusTooManyRequests
		o.AdaptReason = "429 Too Many Requests at " + r.limit.String()
		o.msg = what
		o.Counters["deferred:"+DeferredRetryAfter]++
		h.log.Info("throttled by endpoint", "subscriber_id", r.sub, "status", resp.status, "retry_after", resp.retryAfter,
			"deadline", r.coolUntil)
		return o
	}
	return h.failure(r, resp)
}

// failure is a request that failed: a counted failure with backoff, or a
// dead letter once the attempts or the horizon are spent; the open
// breaker's probe spends none.
func (h *handler) failure(r *run, resp response) outcome {
	what := describe(resp)
	endpoint := endpointFailure(resp)
	if r.adm.Probe && endpoint && r.redisNow().Before(r.adm.Expires) {
		o := h.base(r, &resp, tasks.StateHeld)
		o.Kind, o.EndpointFailure, o.msg = limits.OutcomeProbeFailed, true, what
		o.Counters["deferred:"+DeferredProbe]++
		return o
	}
	spent := r.adm.Spent + 1
	if spent >= r.adm.Max {
		h.log.Warn("dead-lettered: attempts exhausted", "subscriber_id", r.sub, "event_id", r.event, "reason", what)
		o := h.death(r, DeadAttempts, fmt.Sprintf("attempt %d of %d: %s", spent, r.adm.Max, what), &resp)
		o.EndpointFailure = endpoint
		return o
	}
	after := limits.Backoff(spent-1, h.cfg.BackoffBase, h.cfg.BackoffMax)
	if next := r.redisNow().Add(after); !next.Before(r.adm.Expires) {
		o := h.death(r, DeadHorizon, fmt.Sprintf("attempt %d: %s; retry horizon %s passed", spent, what, stamp(r.adm.Expires)), &resp)
		o.EndpointFailure = endpoint
		return o
	}
	o := h.base(r, &resp, tasks.StateRetrying)
	o.att.NextAt = resp.received.Add(after)
	o.Kind, o.Backoff, o.EndpointFailure = limits.OutcomeFailed, after, endpoint
	o.Answered = !endpoint && resp.err == nil
	o.msg = fmt.Sprintf("attempt %d of %d: %s; next try in about %s", spent, r.adm.Max, what, tasks.DurationWords(after.Round(time.Second)))
	o.Counters["failed"]++
	if resp.status == http.StatusTooManyRequests {
		// Throttled without a usable Retry-After: the backoff cools the
		// whole destination too, and the rate comes down.
		o.Throttled, o.AdaptReason = true, "429 Too Many Requests at "+r.limit.String()
		if until, _, err := h.gates.Cooldown(context.Background(), r.keys, limits.RetryAfter{After: after}, h.cfg.MaxRetryAfter); err != nil {
			h.log.Error("could not record cooldown", "subscriber_id", r.sub, "err", err)
		} else {
			h.totals.cooling(r.sub, until)
			o.CoolUntil = until // the delivery is due as the cooldown ends
		}
	}
	h.log.Info("delivery failed, will retry", "subscriber_id", r.sub, "event_id", r.event, "reason", what, "retry_in", after)
	return o
}

// death dead-letters the delivery with reason; resp is the request that
// ended it, if any.
func (h *handler) death(r *run, reason, msg string, resp *response) outcome {
	o := h.base(r, resp, tasks.StateDead)
	o.Kind, o.reason, o.msg = limits.OutcomeDead, reason, msg
	o.Counters["dead:"+reason]++
	o.TaskID = r.taskID
	e := tasks.DeadLetter{TaskID: r.taskID, Queue: r.queue, SubscriberID: r.sub, Reason: reason, Error: msg,
		DeadAt: time.Now().UTC().Truncate(time.Millisecond)} // as the indexes keep it
	if r.body == nil {
		p := r.payload
		if p == nil { // a batch's delivery: the task it is archived as
			p = tasks.NewDeliverTask(r.sub, r.event).Payload()
		}
		e.Payload = string(p)
	}
	o.DeadEntry, o.DeadAt, o.DeadRetention = tasks.DeadLetterPrefix(e, r.body), e.DeadAt, h.cfg.DeadLetterRetention
	if !tasks.IsOperatorType(r.adm.EventType) {
		o.ReportSample = r.event + " " + reason
	}
	o.LegacyAttempts = h.keys.Ledger(r.taskID).Attempts
	o.answer = fmt.Errorf("%s: %w", msg, asynq.SkipRetry)
	return o
}

// interruption is a run cut short with its delivery taken: by the
// shutdown (asynq has put the task back) or by a failure of hooklane's
// own (err: asynq tries the task again). No attempt is spent.
func (h *handler) interruption(r *run, err error) outcome {
	o := h.base(r, nil, tasks.StatePending)
	o.Kind = limits.OutcomeInterrupted
	o.msg = "interrupted by the worker's shutdown: the task was put back"
	o.answer = context.Canceled
	if err != nil {
		o.msg, o.answer = "interrupted: "+err.Error(), h.infra("run", r.sub, err)
	}
	o.att = &tasks.Attempt{At: time.Now(), Error: o.msg, AttemptsSpent: r.adm.Spent}
	return o
}

// base is the outcome's common part: the attempt made (resp), the breaker
// policy, the counters of the answer.
func (h *handler) base(r *run, resp *response, state string) outcome {
	o := outcome{Outcome: limits.Outcome{EventID: r.event, Token: r.token, Breaker: h.cfg.Breaker, Dedup: h.cfg.DedupWindow,
		Probe: r.adm.Probe, Streak: r.adm.Streak, Limit: r.limit, Counters: map[string]int64{}}}
	if r.adm.TookOver {
		// The request of a run whose worker died mid-request: it counted.
		at := r.adm.Now.Add(-time.Millisecond)
		o.LostField = tasks.AttemptField(at)
		o.Lost = string(tasks.EncodeAttempt(tasks.Attempt{At: at, Error: "lost with its worker (the worker died mid-request)",
			AttemptsSpent: max(r.adm.Spent-1, 0)}))
	}
	if resp == nil || resp.received.IsZero() {
		return o
	}
	o.what, o.status = describe(*resp), resp.status
	o.att = &tasks.Attempt{At: resp.received, Status: resp.status, RetryAfter: resp.retryAfter, LatencyMS: resp.latency.Milliseconds(),
		AttemptsSpent: r.adm.Spent, Body: strings.ToValidUTF8(string(resp.body), "\uFFFD"), RequestHeaders: resp.sent,
		ResponseHeaders: resp.headers, ResponseHeadersCut: resp.cut}
	if resp.err != nil {
		o.att.Error = resp.err.Error()
	} else if resp.raIgnored {
		o.att.Error = retryAfterIgnored(resp.retryAfter)
	}
	code := "error"
	if resp.status > 0 {
		code = strconv.Itoa(resp.status)
		o.Latency = resp.latency
	}
	o.Counters["http:"+code]++
	o.ErrText = o.what
	return o
}

// finish commits the outcome (see limits.Commit), then tells what the
// commit changed (the dispatcher, the breaker's operator events, the
// counters' totals), and returns what asynq is to do with the task. The
// commit comes first: nothing of the outcome is written after asynq lets
// the task go, and a worker that dies before it has asynq run the task
// again.
func (h *handler) finish(ctx context.Context, r *run, o outcome) error {
	ctx = context.WithoutCancel(ctx)
	if o.att != nil {
		if at := r.adm.CooldownEndedAt; !at.IsZero() {
			o.att.Note = "sent early: cooldown ended by an operator at " + stamp(at)
		}
		o.AttemptField, o.Attempt = tasks.AttemptField(o.att.At), string(tasks.EncodeAttempt(*o.att))
	}
	if o.Kind == limits.OutcomeDead {
		// Its own slots, before the entry: a reader drops an index entry
		// whose ledger entry is missing, and a report with nothing to
		// report is dropped.
		if _, err := h.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.ZAdd(ctx, h.keys.AllDeadIndex(), redis.Z{Score: float64(o.DeadAt.UnixMilli()), Member: r.taskID})
			if ret := h.cfg.DeadLetterRetention; ret > 0 {
				p.ZRemRangeByScore(ctx, h.keys.AllDeadIndex(), "-inf", strconv.FormatInt(time.Now().Add(-ret).UnixMilli(), 10))
			}
			if o.ReportSample != "" {
				p.ZAddNX(ctx, h.keys.DeadReportsDue(), redis.Z{Score: float64(time.Now().UnixMilli()), Member: r.sub})
			}
			return nil
		}); err != nil {
			return h.infra("dead-letter index", r.sub, err)
		}
	}
	// The commit is idempotent (the record keeps the last committed run):
	// one whose reply was lost is sent again, here, before asynq is
	// answered. Given up, the task runs again; its run waits for this
	// one's slot to lapse and counts this request.
	var c limits.Committed
	var err error
	for try, wait := 0, 100*time.Millisecond; ; try, wait = try+1, 2*wait {
		if err = fault(ctx, FaultCommit, func() (err error) { c, err = r.commit(ctx, h.gatesOf(r), o.Outcome); return err }); err == nil ||
			try == 4 {
			break
		}
		h.stats.CommitErrors.Add(1)
		h.log.Warn("could not commit an outcome; sending it again", "subscriber_id", r.sub, "event_id", r.event, "err", err)
		time.Sleep(wait)
	}
	if err != nil {
		return h.infra("commit", r.sub, err)
	}
	if r.adm.Admitted {
		h.room.released(r.sub)
	}
	if err := h.notify(r, c.Notify, c.Asked); err != nil {
		return err
	}
	if c.Superseded {
		h.log.Info("the delivery was taken over by another run: this run's outcome is not written", "subscriber_id", r.sub,
			"event_id", r.event, "outcome", o.Kind)
		return asynq.RevokeTask
	}
	h.breakerChanged(ctx, r, c, o.what)
	if o.PauseGone {
		h.index(ctx, h.keys.PausedIndex(), r.sub, true) // /metrics' paused count
	}
	for f, n := range o.Counters {
		h.totals.addFor(r.sub, f, n)
	}
	switch o.Kind {
	case limits.OutcomeDelivered:
		h.stats.Delivered.Add(1)
		return nil
	case limits.OutcomeDead:
		h.stats.Dead.Add(1)
		return o.answer
	case limits.OutcomeFailed:
		h.stats.Failed.Add(1)
		return asynq.RevokeTask // parked in the lot for its backoff
	case limits.OutcomeInterrupted:
		return o.answer
	}
	h.stats.Deferred.Add(1)
	return asynq.RevokeTask // parked without spending an attempt
}

// undecodable dead-letters a task whose payload cannot be read: it names
// no delivery record to keep the dead state in, so the ledger alone does.
func (h *handler) undecodable(ctx context.Context, r *run, err error) error {
	ctx = context.WithoutCancel(ctx)
	e := tasks.DeadLetter{TaskID: r.taskID, Queue: r.queue, Reason: DeadUndecodable, Error: err.Error(),
		DeadAt: time.Now().UTC().Truncate(time.Millisecond), Payload: string(r.payload)}
	lk := h.keys.Ledger(r.taskID)
	if sub, _, ok := tasks.SplitTaskID(r.taskID); ok {
		e.SubscriberID = sub
	}
	z := redis.Z{Score: float64(e.DeadAt.UnixMilli()), Member: r.taskID}
	if _, perr := h.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, h.keys.AllDeadIndex(), z)
		return nil
	}); perr != nil {
		return h.infra("dead-letter ledger", e.SubscriberID, perr)
	}
	if _, perr := h.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, lk.Entry, tasks.MarshalLedger(e), h.cfg.DeadLetterRetention)
		p.ZAdd(ctx, lk.Index, z)
		return nil
	}); perr != nil {
		return h.infra("dead-letter ledger", e.SubscriberID, perr)
	}
	h.stats.Dead.Add(1)
	h.totals.add("dead:"+DeadUndecodable, 1)
	return err
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
	if r.raIgnored {
		s += "; " + retryAfterIgnored(r.retryAfter)
	}
	return s
}

// retryAfterIgnored says why a Retry-After value was not obeyed.
func retryAfterIgnored(v string) string {
	return fmt.Sprintf("Retry-After %q ignored: neither delay-seconds nor an HTTP-date", v)
}
