package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// infraError is a failure of hooklane's own infrastructure (Redis): the
// task is tried again with backoff, spending no attempt, and it is never
// read as "rate limited".
type infraError struct{ err error }

func (e *infraError) Error() string { return "hooklane infrastructure: " + e.err.Error() }
func (e *infraError) Unwrap() error { return e.err }

// isFailure is asynq's Config.IsFailure: no error of hooklane's spends an
// attempt of asynq's (hooklane counts attempts in the delivery record).
func isFailure(error) bool { return false }

// retryDelay is asynq's Config.RetryDelayFunc, for the tasks asynq keeps:
// a delivery owned by a live run elsewhere (DeferredError: look again once
// its slot has lapsed), a later release's task, an infrastructure error.
func (h *handler) retryDelay(n int, err error, _ *asynq.Task) time.Duration {
	var d *limits.DeferredError
	if errors.As(err, &d) {
		return d.Delay(time.Now())
	}
	if errors.Is(err, tasks.ErrNewerTask) {
		return time.Minute
	}
	return limits.Backoff(min(n, 5), time.Second, time.Minute)
}

type handler struct {
	cfg   Config
	rdb   redis.UniversalClient
	gates *limits.Gates
	// freshGates are the gates on the fresh lane's client (Worker.fresh):
	// a fresh-lane run's Admits and commits (gatesOf).
	freshGates *limits.Gates
	keys       tasks.Keys
	client     *http.Client
	room       *waitRoom
	subs       *subCache
	bodies     *bodies // the stored events read last (bodies.go)
	totals     *totals // the runs' counters, for the namespace's aggregates
	log        *slog.Logger
	stats      *Stats
	prod       *producer.Producer
	flows      *tenantFlows // the tenants past their fresh rate (tenantflow.go)
	disp       *dispatchers // told when this process frees a slot or parks a delivery
	caps       rateCaps     // the receivers' RateLimit-Policy caps written
	shards     int
	srvs       *atomic.Pointer[servers] // the worker's, once started: a lane handed a batch is busy (servers.handedOut)
	// sending holds a place for each request under way: at most
	// maxSending(Config), what the lanes' handler slots would send one
	// delivery a task.
	sending chan struct{}
}

// gatesOf are the gates run r's Admits and commits go through: its lane's
// client's.
func (h *handler) gatesOf(r *run) *limits.Gates {
	if h.keys.QueueLane(r.queue) == tasks.LaneFresh {
		return h.freshGates
	}
	return h.gates
}

// maxSending is how many requests a worker sends at once: a request per
// handler slot of its two lanes (Concurrency each), as when every task
// was one delivery.
func maxSending(c Config) int { return 2 * c.Concurrency }

// ProcessTask runs a task: one delivery (deliver), or a batch of one
// subscriber's (runBatch).
func (h *handler) ProcessTask(ctx context.Context, t *asynq.Task) error {
	h.stats.Runs.Add(1)
	r := &run{payload: t.Payload()}
	r.taskID, _ = asynq.GetTaskID(ctx)
	r.queue, _ = asynq.GetQueueName(ctx)
	defer func() { _ = fault(ctx, FaultDone, nil) }()
	d, legacy, err := tasks.DecodeTask(r.payload)
	switch {
	case errors.Is(err, tasks.ErrNewerTask):
		h.stats.Newer.Add(1)
		h.totals.add("refused:newer_task", 1)
		h.log.Warn("task of a later release: put back unsent (run a worker of that release)", "task_id", r.taskID, "err", err)
		return err
	case err != nil:
		return h.undecodable(ctx, r, err)
	case legacy != nil:
		return h.adopt(ctx, r, d, legacy)
	case d.V == tasks.BatchVersion:
		return h.runBatch(ctx, r, d)
	}
	r.sub, r.event, r.keys = d.SubscriberID, d.EventID, h.keys.Gates(d.SubscriberID)
	sub, err := h.subscriberToAdmit(ctx, r.sub)
	if errors.Is(err, errDeleted) {
		return h.dropped(r, "the subscriber was deleted")
	}
	if err != nil {
		return err
	}
	return h.deliver(ctx, r, sub)
}

// deliver runs one delivery: its record and gates (Admit), its request,
// and its outcome, committed before it returns what asynq is to do with
// the task. A panic is a counted failure of the delivery, committed like
// any other.
func (h *handler) deliver(ctx context.Context, r *run, sub cachedSub) (err error) {
	defer func() {
		if p := recover(); p != nil {
			h.log.Error("panic delivering a task: a hooklane bug", "task_id", r.taskID, "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("hooklane panicked delivering this task (a bug): %v", p)
			if r.adm.Admitted {
				err = h.finish(ctx, r, h.failure(r, response{err: err, received: time.Now()}))
			}
		}
	}()
	r.limit = sub.Limit
	if err := h.admit(ctx, r, &sub); err != nil {
		return err
	}
	if r.adm.Spent >= r.adm.Max {
		// Only a run that took over from one whose worker died gets here:
		// that request was the last attempt.
		return h.finish(ctx, r, h.death(r, DeadAttempts, fmt.Sprintf("no attempt left: %d of %d spent, the last one lost with its worker",
			r.adm.Spent, r.adm.Max), nil))
	}
	// A subscriber changed since this process cached it (a secret rotated
	// out, a new URL) is read again before the request.
	if r.adm.ConfigVersion != "" && r.adm.ConfigVersion != sub.version {
		if sub, err = h.subscriber(ctx, r.sub, r.adm.ConfigVersion); err != nil {
			return h.finish(ctx, r, h.interruption(r, err))
		}
	}
	if r.adm.Gen != "" && sub.Gen != r.adm.Gen {
		if ended, err := h.otherGeneration(ctx, r, &sub); ended {
			return err
		}
	}
	if len(r.body) == 0 {
		return h.finish(ctx, r, h.death(r, DeadUndecodable, fmt.Sprintf("event %s's payload is gone from Redis", r.event), nil))
	}
	// A batch is one of asynq's handler slots and sends several requests:
	// the process's requests at once stay within its lanes' slots.
	select {
	case h.sending <- struct{}{}:
		defer func() { <-h.sending }()
	case <-ctx.Done():
		return h.finish(ctx, r, h.interruption(r, nil)) // shutting down: not sent, no attempt spent
	}
	_ = fault(ctx, FaultRequest, nil)
	resp := post(ctx, h.client, &sub.Subscriber, r.event, r.body, h.cfg.ResponseBody, func(status int, hdr http.Header, at time.Time) {
		h.learnRate(ctx, r, &sub.Subscriber, status, hdr)
	})
	_ = fault(ctx, FaultResponse, nil)
	return h.finish(ctx, r, h.outcomeOf(ctx, r, &sub.Subscriber, resp))
}

// admit takes the delivery for this run (see limits.Admit), waiting in this
// process for at most MaxWait: for a rate slot booked that far ahead, or
// in the destination's busy lane for a free in-flight slot. It reads the
// stored event in the same round trip. An error ends the run: it says what
// asynq is to do with the task.
func (h *handler) admit(ctx context.Context, r *run, sub *cachedSub) error {
	maxWait := h.cfg.maxWait()
	r.token = limits.NewToken()
	pace := h.pace(&sub.Subscriber)
	stored := h.keys.TenantEvent(tasks.TenantOf(r.sub), r.event)
	req := limits.AdmitRequest{EventID: r.event, Token: r.token, SlotTTL: h.cfg.RequestTimeout + maxWait + 5*time.Second,
		Pace: pace, Read: stored, ReadField: tasks.EventFieldBody,
		Legacy: h.keys.LegacyEvent(tasks.ScopedID(tasks.TenantOf(r.sub), r.event))}
	if b, ok := h.bodies.get(stored); ok {
		r.body, req.Read = b, "" // read for another subscriber's delivery of it
	}
	if maxWait > 0 {
		// A delivery handed out up to the lead before its rate slot waits
		// for it here, and for a free in-flight slot up to MaxWait.
		req.Reserve = maxWait + pace.Lead
	}
	// In all, a run waits here no longer than one wait of each (a run
	// back in the busy lane after its rate slot, or after another one
	// booked, counts what it waited before).
	until := time.Now().Add(maxWait + req.Reserve)
	// The busy lane's head asks again when a slot is released here, and
	// at most every poll: from 20ms, doubled (to 160ms) each time it asks
	// for nothing having been released, back to 20ms once a release came.
	const poll, pollMax = 20 * time.Millisecond, 160 * time.Millisecond
	next := poll
	var deadline time.Time // of the wait in the busy lane, once entered
	var l *lane
	head, replayed := false, false
	// leaveLane gives up its place in the busy lane, if it has one.
	leaveLane := func() {
		if head {
			l.unlock()
			head = false
		}
		if l != nil {
			h.leaveRoom(r, l)
			l = nil
		}
	}
	defer leaveLane()
	// inLane waits in the busy lane for its head's place, then as its head
	// for a release or the next poll; false: no slot by the deadline.
	inLane := func() bool {
		if !head && !l.lock(ctx, deadline) {
			return false
		}
		head = true
		if time.Until(deadline) < poll {
			return false
		}
		freed, ok := l.waitFreed(ctx, min(next, time.Until(deadline)))
		if next = min(2*next, pollMax); freed {
			next = poll
		}
		return ok
	}
	for {
		a, err := h.admitOnce(ctx, r, req)
		if err != nil {
			return h.infra("admit", r.sub, err)
		}
		if req.Read != "" {
			if a.ReadErr != nil {
				h.log.Warn("could not read the stored event; it is read again", "subscriber_id", r.sub, "err", a.ReadErr)
			} else {
				r.body, req.Read = storedBody(a.Value), ""
			}
		}
		r.adm, r.admittedAt = a, time.Now()
		switch {
		case a.Admitted:
			if req.Read != "" { // the read failed: the request needs the event
				return h.finish(ctx, r, h.interruption(r, a.ReadErr))
			}
			// admitted, so within its horizon: the stored event outlives
			// it by producer.EventMargin at least (bodies.go)
			h.bodies.put(stored, r.body)
			return nil
		case a.Expired:
			r.adm.Admitted = true // the run owns it, to dead-letter it
			return h.finish(ctx, r, h.death(r, DeadHorizon, "retry horizon "+stamp(a.Expires)+" passed while it waited", nil))
		case a.Drop != "":
			return h.dropped(r, a.Drop)
		case a.DeadAlready:
			if replayed || r.batch != nil {
				// (a batch's delivery is never an operator's Run from the
				// archive: its batch has its dead copy archived)
				return fmt.Errorf("dead-lettered: %w", asynq.SkipRetry)
			}
			if err := h.replayRun(ctx, r); err != nil {
				return err
			}
			replayed = true // booked again: admitted below, as any delivery
		case a.Parked:
			h.stats.Deferred.Add(1)
			h.totals.add("deferred:"+a.State, 1) // Admit counted it for the subscriber
			if err := h.notify(r, a.Notify, a.NotifyAsked); err != nil {
				return err
			}
			return asynq.RevokeTask
		case a.OwnedFor > 0:
			return &limits.DeferredError{Until: time.Now().Add(a.OwnedFor + time.Second), Reason: "a live run owns the delivery"}
		case a.SendIn > 0:
			// A rate slot of its own, a moment ahead: wait for it, then take an
			// in-flight slot, unless a 429 or a pause came in meanwhile. It
			// waits for it out of the busy lane, which the next may lead.
			leaveLane()
			if time.Now().Add(a.SendIn).After(until) {
				return h.parkBusy(ctx, r, sub, tasks.StateScheduled) // its wait here is over: the rate slot it booked goes unused
			}
			if !sleep(ctx, a.SendIn) {
				return ctx.Err() // shutting down: asynq puts the task back
			}
			req.Reserved = true
		case a.Busy:
			// Wait for a free slot in the destination's busy lane, if it and
			// the process have room, as the lane's head. A rate slot booked
			// before is given up: sent after the wait, it would leave with
			// the requests booked after it, over the limit. The next try
			// asks the limiter again.
			req.Reserved = false
			if l == nil {
				var ok bool
				if maxWait == 0 {
					return h.parkBusy(ctx, r, sub, DeferredInFlight)
				}
				if l, ok = h.enterRoom(r); !ok {
					return h.parkBusy(ctx, r, sub, DeferredInFlight)
				}
				if deadline = time.Now().Add(maxWait); deadline.After(until) {
					deadline = until
				}
			}
			if !inLane() {
				return h.parkBusy(ctx, r, sub, DeferredInFlight)
			}
		default:
			return h.infra("admit", r.sub, fmt.Errorf("unexpected admission %+v", a))
		}
	}
}

// admitOnce runs Admit, sent again (up to three times in a second and a
// half) when its reply is lost: a call sent again under the run's token is
// recognised as its own (admitted, parked), where a run of the task again,
// under a new token, would find the delivery owned by this one and wait
// for its slot to lapse.
func (h *handler) admitOnce(ctx context.Context, r *run, req limits.AdmitRequest) (limits.Admission, error) {
	var a limits.Admission
	var err error
	for try, wait := 0, 100*time.Millisecond; ; try, wait = try+1, 4*wait {
		h.stats.Admits.Add(1)
		err = fault(ctx, FaultAdmit, func() (err error) { a, err = r.admit(ctx, h.gatesOf(r), req); return err })
		if err == nil || try == 2 || ctx.Err() != nil {
			return a, err
		}
		h.log.Warn("admit failed; sending it again", "subscriber_id", r.sub, "event_id", r.event, "err", err)
		if !sleep(ctx, wait) {
			return a, err
		}
	}
}

// otherGeneration runs a delivery admitted for a generation of its
// subscriber other than the configuration's read (deleted and created
// again meanwhile, the gate record not yet the new one's): it is never
// sent with another generation's URL and secrets. The configuration is
// read again; still another generation's, the delivery is put back, no
// attempt spent, and looked at again in a second, when Admit drops it
// once the gate record is the new generation's. ended reports that the
// run ended (err is its answer to asynq); else sub is the configuration
// to send with.
func (h *handler) otherGeneration(ctx context.Context, r *run, sub *cachedSub) (ended bool, err error) {
	h.subs.forget(r.sub)
	s, err := h.subscriber(ctx, r.sub, "")
	if err == nil && s.Gen == r.adm.Gen {
		*sub = s
		return false, nil
	}
	if err == nil || errors.Is(err, errDeleted) {
		why := fmt.Sprintf("subscriber %s is of generation %s now, the delivery of %s: not sent with another generation's configuration",
			r.sub, s.Gen, r.adm.Gen)
		o := h.interruption(r, nil)
		o.msg, o.att.Error = "interrupted: "+why, "interrupted: "+why
		o.answer = &limits.DeferredError{Until: time.Now().Add(time.Second), Reason: why}
		return true, h.finish(ctx, r, o)
	}
	return true, h.finish(ctx, r, h.interruption(r, err))
}

// parkBusy parks a delivery whose destination kept every in-flight slot
// taken for MaxWait (why DeferredInFlight), or whose wait here ended
// before the rate slot it booked (tasks.StateScheduled): its subscriber's
// next turn hands it out again when it can go.
func (h *handler) parkBusy(ctx context.Context, r *run, sub *cachedSub, why string) error {
	if ctx.Err() != nil {
		return ctx.Err() // shutting down: asynq puts the task back
	}
	var ok bool
	err := fault(ctx, FaultPark, func() (err error) {
		ok, err = h.gates.Park(context.WithoutCancel(ctx), r.keys, r.event, r.token, tasks.StateScheduled, why, 0)
		return err
	})
	if err != nil {
		return h.infra("park", r.sub, err)
	}
	if !ok {
		return asynq.RevokeTask // another run has it
	}
	h.stats.Deferred.Add(1)
	h.totals.add("deferred:"+why, 1)
	h.log.Debug("its wait in this process ended: parked", "subscriber_id", r.sub, "event_id", r.event, "why", why, "max_in_flight", sub.MaxInFlight)
	if err := h.notify(r, time.Now(), false); err != nil {
		return err
	}
	return asynq.RevokeTask
}

// storedBody is the request body from a stored event's hash (or the
// release before's string, under key "").
func storedBody(v map[string]string) []byte {
	if b, ok := v[tasks.EventFieldBody]; ok {
		return []byte(b)
	}
	if old, ok := v[""]; ok {
		if se, ok := tasks.ParseLegacyEvent(old); ok {
			return se.Body
		}
	}
	return nil
}

// pace is subscriber s's hand-out pace with this worker's waits: without
// an in-handler wait (NoWait) nothing is handed out ahead of its rate slot.
func (h *handler) pace(s *tasks.Subscriber) limits.Pace {
	p := h.prod.Pace(*s)
	// (a batch's waiting deliveries take one place in the room, so a turn
	// may hand out more to wait than MaxWaiters: a quarter of a batch a
	// place. MaxWaiters full batches waited past MaxWait and parked again,
	// 259 of 1,200 at 20 slots of 5 ms; a quarter lost no pace and parked
	// none.)
	p.MaxWait, p.Waiters, p.Ramp = h.cfg.maxWait(), h.cfg.MaxWaiters*max(h.cfg.BatchMax/4, 1), h.cfg.Breaker.Ramp
	if p.MaxWait == 0 {
		p.Lead = time.Millisecond
	}
	return p
}

// dropped ends a task that must not be sent: its subscriber was deleted or
// re-created, its record expired or ended. It is counted, not
// dead-lettered: deleting a subscriber with a million queued events must
// not write a million ledger entries.
func (h *handler) dropped(r *run, why string) error {
	h.stats.Dropped.Add(1)
	h.totals.count(DroppedDeleted, 1)
	h.log.Debug("task dropped", "task_id", r.taskID, "reason", why)
	return asynq.RevokeTask
}

func (h *handler) infra(what, sub string, err error) error {
	h.log.Error("redis error", "step", what, "subscriber_id", sub, "err", err)
	return &infraError{fmt.Errorf("%s: %w", what, err)}
}

// notify tells subscriber r.sub's dispatchers that its schedule needs a
// turn at at: this process's at once, the region's through its ready
// index, unless the script found a turn no later asked of it already
// (asked: limits' lua.go). The ready write is what moves a parked
// delivery again, so a failed one fails the run (an infrastructure error:
// asynq keeps the task and runs it again, and that run, told the lot
// entry's time by Admit, writes it again) instead of letting the task go.
func (h *handler) notify(r *run, at time.Time, asked bool) error {
	if at.IsZero() {
		return nil
	}
	ctx := context.Background()
	region := h.keys.QueueRegion(r.queue)
	if asked {
		h.disp.poke(region, at)
		return nil
	}
	write := func(ctx context.Context, at time.Time) error {
		return h.gates.Notify(ctx, h.keys.Ready(region), r.sub, at)
	}
	if r.batch != nil {
		// a batch's deliveries that ask at one moment ask once, for the
		// earliest of their times
		write = func(ctx context.Context, at time.Time) error { _, err := r.batch.notifies.call(ctx, at); return err }
	}
	if err := fault(ctx, FaultReadyWrite, func() error { return write(ctx, at) }); err != nil {
		return h.infra("ready index", r.sub, err)
	}
	h.disp.poke(region, at)
	return nil
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
