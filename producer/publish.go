package producer

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

// Outcome is what Publish did for one subscriber.
type Outcome string

const (
	// Enqueued: handed to the workers (asynq) now.
	Enqueued Outcome = "enqueued"
	// Scheduled: parked until Target.ProcessAt (PublishOpts.NotBefore), or
	// behind the subscriber's rate and in-flight limits or its backlog (no
	// ProcessAt: as soon as they allow; Config.BatchAfter).
	Scheduled Outcome = "scheduled"
	Duplicate Outcome = "duplicate" // booked before for the subscriber as it is now: nothing new will be sent
	Failed    Outcome = "failed"    // see Target.Err; publishing again is safe
	// Held: booked, and kept from its destination for Target.HeldReason:
	// the subscriber is paused (until resumed), its breaker is open (until
	// a probe succeeds), or it is cooling down after a 429 (until
	// ProcessAt). Like any delivery it dead-letters at its retry horizon.
	Held Outcome = "held"
	// Skipped: the subscriber is paused and PublishOpts.SkipPaused asked
	// to leave it out: nothing was queued for it.
	Skipped Outcome = "skipped"
)

// Booked reports whether the outcome is a delivery booked by this call:
// enqueued, scheduled or held (each will be sent, or dead-letter at its
// retry horizon).
func (o Outcome) Booked() bool { return o == Enqueued || o == Scheduled || o == Held }

// Target is one subscriber's part of a publish.
type Target struct {
	SubscriberID string    `json:"subscriber_id"`
	TaskID       string    `json:"task_id"`
	Outcome      Outcome   `json:"outcome"`
	ProcessAt    time.Time `json:"process_at,omitzero"` // when it becomes due, if not at once
	// HeldReason says why a Held target waits: HeldPaused,
	// HeldBreakerOpen or HeldCooling.
	HeldReason string `json:"held_reason,omitempty"`
	Err        error  `json:"-"`
}

// Why a Held target waits (Target.HeldReason).
const (
	HeldPaused      = "paused"
	HeldBreakerOpen = "breaker_open"
	HeldCooling     = "cooling"
)

// outcomeOf is what a booking b did, from what the booking script saw, in
// Redis' clock (b.Now): the same clock b.Due is in. A duplicate is one
// whatever its state: nothing new was booked.
func outcomeOf(b limits.Booked) Target {
	var t Target
	switch {
	case b.Duplicate:
		t.Outcome = Duplicate
	case b.Where != limits.WhereLot:
		t.Outcome = Enqueued
	case b.State == tasks.StateHeld && b.Held:
		t.Outcome, t.HeldReason = Held, HeldPaused
	case b.State == tasks.StateHeld:
		t.Outcome, t.HeldReason = Held, HeldBreakerOpen
	case b.State == tasks.StateCooling:
		t.Outcome, t.HeldReason = Held, HeldCooling
	default:
		t.Outcome = Scheduled
	}
	due := b.Due
	if t.HeldReason == HeldCooling && b.CoolingUntil.After(due) {
		due = b.CoolingUntil
	}
	if b.Where == limits.WhereLot && due.After(b.Now) {
		t.ProcessAt = limits.CeilSecond(due).UTC()
	}
	return t
}

// PublishResult lists each matching subscriber's outcome.
type PublishResult struct {
	EventID string   `json:"event_id"`
	Targets []Target `json:"targets"`
	// Note says, when no subscriber matched, that nothing will be sent.
	Note string `json:"note,omitempty"`
}

// PublishOpts are per-call options; nil means none.
type PublishOpts struct {
	// NotBefore delays delivery: no request is sent before it. At most
	// Config.MaxNotBefore ahead.
	NotBefore time.Time
	// SkipPaused leaves paused subscribers out (reported Skipped) instead
	// of holding the event for them until they are resumed (Held, the
	// default): an explicit choice to drop their events.
	SkipPaused bool
}

// Publish delivers ev to every subscriber whose filter matches its type. A
// paused subscriber's event is held (queued, waiting until it is resumed)
// unless opts.SkipPaused. A zero ev.Timestamp becomes the publish time (in
// whole seconds); any timestamp is sent in UTC to the millisecond. Its cost
// grows with the number of matching subscribers, not with how many there
// are: the directory indexes them by event type.
//
// The returned error is nil only when every target is enqueued, held or a
// duplicate; otherwise it joins the targets' errors, and the result still
// says what happened to each. Calling Publish again with the same event is
// safe: what was booked is reported as a duplicate. An id published again
// with another type or other data is refused with ErrEventConflict,
// nothing written.
func (p *Producer) Publish(ctx context.Context, ev tasks.Event, opts *PublishOpts) (*PublishResult, error) {
	if tasks.IsOperatorType(ev.Type) {
		return nil, &tasks.FieldError{Field: "type", Msg: "types starting with " + tasks.OperatorPrefix + " are hooklane's own events"}
	}
	return p.publish(ctx, ev, opts)
}

// PublishOperatorEvent publishes one of hooklane's own events (a type
// starting with tasks.OperatorPrefix) to the subscribers that name it: the
// worker reports breakers and dead letters this way.
func (p *Producer) PublishOperatorEvent(ctx context.Context, ev tasks.Event) (*PublishResult, error) {
	if !tasks.IsOperatorType(ev.Type) {
		return nil, &tasks.FieldError{Field: "type", Msg: "an operator event's type starts with " + tasks.OperatorPrefix}
	}
	return p.publish(ctx, ev, nil)
}

func (p *Producer) publish(ctx context.Context, ev tasks.Event, opts *PublishOpts) (*PublishResult, error) {
	if err := p.checkEvent(&ev, opts); err != nil {
		return nil, err
	}
	m, err := p.matchingTypes(ctx, []string{ev.Type}, nil)
	if err != nil {
		return nil, err
	}
	return p.extResult(p.fanOut(ctx, ev, opts, m[ev.Type], bookPublish))
}

// SendTo delivers ev to one subscriber, whatever its event filter. A paused
// subscriber's event is held until it is resumed, unless opts.SkipPaused.
func (p *Producer) SendTo(ctx context.Context, subscriberID string, ev tasks.Event, opts *PublishOpts) (*PublishResult, error) {
	if tasks.IsOperatorType(ev.Type) {
		return nil, &tasks.FieldError{Field: "type", Msg: "types starting with " + tasks.OperatorPrefix + " are hooklane's own events"}
	}
	return p.sendTo(ctx, subscriberID, ev, opts)
}

// SendOperatorEventTo sends one of hooklane's own events (hooklane.ping:
// the API's test endpoint) to one subscriber, whatever its filter.
func (p *Producer) SendOperatorEventTo(ctx context.Context, subscriberID string, ev tasks.Event) (*PublishResult, error) {
	if !tasks.IsOperatorType(ev.Type) {
		return nil, &tasks.FieldError{Field: "type", Msg: "an operator event's type starts with " + tasks.OperatorPrefix}
	}
	return p.sendTo(ctx, subscriberID, ev, nil)
}

func (p *Producer) sendTo(ctx context.Context, subscriberID string, ev tasks.Event, opts *PublishOpts) (*PublishResult, error) {
	if err := p.checkEvent(&ev, opts); err != nil {
		return nil, err
	}
	s, err := p.storedSubscriber(ctx, subscriberID)
	if err != nil {
		return nil, err
	}
	return p.extResult(p.fanOut(ctx, ev, opts, matched{subs: []tasks.Subscriber{s}}, bookPublish))
}

func (p *Producer) checkEvent(ev *tasks.Event, opts *PublishOpts) error {
	if err := ev.Validate(); err != nil {
		return err
	}
	if len(ev.Data) > p.cfg.MaxDataSize {
		return fmt.Errorf("%w: data is %d bytes, limit %d", ErrPayloadTooLarge, len(ev.Data), p.cfg.MaxDataSize)
	}
	now := p.nowFunc()
	if opts != nil && opts.NotBefore.Sub(now) > p.cfg.MaxNotBefore {
		return &tasks.FieldError{Field: "not_before", Msg: fmt.Sprintf("at most %s ahead (%s); this one is %s ahead",
			tasks.DurationWords(p.cfg.MaxNotBefore), now.Add(p.cfg.MaxNotBefore).UTC().Format(time.RFC3339),
			tasks.DurationWords(opts.NotBefore.Sub(now).Round(time.Second)))}
	}
	if ev.Timestamp.IsZero() {
		ev.Timestamp = now.UTC().Truncate(time.Second)
	}
	// Sent and answered as every time is (web/times.go): UTC, to the ms.
	ev.Timestamp = ev.Timestamp.UTC().Truncate(time.Millisecond)
	return nil
}

// KEYS: the index sets an event type is looked up in, the configurations
// hash, then (a registered tenant's publish) its flow counter (all in slot
// {<ns>:subs}). ARGV: 1 the number of index sets, 2 the number of events
// published. Reply: the flow before this publish (0 without a counter),
// then the configurations of the subscribers in any of the sets; the
// counter is given their number times the events' (a second's count:
// advisory, so a call go-redis runs twice may count twice).
var matchScript = redis.NewScript(`
local n = tonumber(ARGV[1])
local ids = redis.call('SUNION', unpack(KEYS, 1, n))
local out = {0}
if #ids == 0 then return out end
for _, v in ipairs(redis.call('HMGET', KEYS[n + 1], unpack(ids))) do
  if v then out[#out + 1] = v end
end
local flow = KEYS[n + 2]
if flow and #out > 1 then
  local add = (#out - 1) * tonumber(ARGV[2])
  local after = redis.call('INCRBY', flow, add)
  if after == add then redis.call('PEXPIRE', flow, 1000) end
  out[1] = after - add
end
return out`)

// Pace is what subscriber s's deliveries are handed to asynq at (see
// limits.Pace): its limit and in-flight slots, the fresh lane's share, the
// workers' wait for a slot (Config.MaxWait) and the lead it allows (none
// beyond a millisecond when they do not wait), and the worker's default
// slow start.
func (p *Producer) Pace(s tasks.Subscriber) limits.Pace { return p.pace(s, false) }

// pace is Pace for a publish; flood: its tenant's flow is past
// Config.TenantFreshRate, so that nothing of it takes the fresh lane.
func (p *Producer) pace(s tasks.Subscriber, flood bool) limits.Pace {
	pace := limits.Pace{Limit: s.Limit, MaxInFlight: s.MaxInFlight, FreshMax: p.cfg.FreshMax, Lead: limits.DefaultLead,
		MaxWait: max(p.cfg.MaxWait, 0), Ramp: limits.DefaultRamp, BatchAfter: max(p.cfg.BatchAfter, 0)}
	if pace.MaxWait == 0 {
		pace.Lead = time.Millisecond
	}
	if flood {
		pace.FreshMax = -1
	}
	return pace
}

// booking is what a fanOut books.
type booking int

const (
	bookPublish booking = iota // new deliveries (a publish)
	bookResend                 // deliveries booked before, again (a resend, a replay)
	// bookRun is bookResend for the run of the delivery's own task, which
	// an operator ran from asynq's archive (ReplayRun): that task is the
	// hand-out, so nothing is enqueued.
	bookRun
)

// fanOut books ev for subs, in two round trips: the stored event (refused
// if the id names another event), then every target's booking. What can
// go at once goes to asynq; the rest is parked in the subscriber's lot and
// its dispatcher told.
func (p *Producer) fanOut(ctx context.Context, ev tasks.Event, opts *PublishOpts, m matched, how booking) (*PublishResult, error) {
	subs := m.subs
	resend := how != bookPublish
	now := p.nowFunc()
	var notBefore time.Time
	if opts != nil && opts.NotBefore.After(now) {
		notBefore = opts.NotBefore
	}
	res := &PublishResult{EventID: ev.ID, Targets: []Target{}}
	if len(subs) == 0 {
		res.Note = fmt.Sprintf("no subscriber matches type %q: nothing is stored or sent", ev.Type)
		return res, nil
	}
	shards, err := p.shards(ctx)
	if err != nil {
		return nil, err
	}
	if err := p.storeEvent(ctx, ev, subs, notBefore, !resend); err != nil {
		return nil, err
	}
	token := limits.NewToken()
	held := opts == nil || !opts.SkipPaused
	bs := make([]limits.Booking, len(subs))
	for i, s := range subs {
		bs[i] = limits.Booking{Keys: p.keys.Gates(s.ID), EventID: ev.ID, EventType: ev.Type, NotBefore: notBefore,
			Horizon: p.horizon(s), Dedup: p.cfg.DedupWindow, MaxAttempts: cmp.Or(s.MaxAttempts, p.cfg.MaxAttempts),
			Held: held, Resend: resend, Token: token, Pace: p.bookingPace(ctx, s, m.flood)}
	}
	booked, err := p.gates.Book(ctx, nil, bs...)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	var errs []error
	var notify []int
	for i, s := range subs {
		t, lot := p.target(ctx, ev.ID, s, booked[i], shards, how)
		if lot {
			notify = append(notify, i)
		}
		if t.Err != nil {
			errs = append(errs, t.Err)
		}
		res.Targets = append(res.Targets, t)
	}
	if len(notify) > 0 {
		// After the bookings: a dispatcher that looks before them finds
		// nothing, and this brings it back.
		if _, err := p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
			for _, i := range notify {
				limits.NotifyIn(ctx, pl, p.keys.Ready(subs[i].Region), subs[i].ID, booked[i].Due)
			}
			return nil
		}); err != nil {
			for _, i := range notify {
				t := &res.Targets[i]
				t.Outcome, t.Err = Failed, fmt.Errorf("%w: subscriber %s: %v", ErrRedisUnavailable, t.SubscriberID, err)
				errs = append(errs, t.Err)
			}
		}
	}
	if err := p.waitReplicas(ctx, res); err != nil {
		errs = append(errs, err)
	}
	return res, errors.Join(errs...)
}

// target is what became of subscriber s's booking b of event evID (what
// fanOut reports for it), with its task handed to asynq when it goes at
// once; lot says that it is parked and the subscriber's dispatcher is to
// be told (after every booking of the call: fanOut, PublishEach), which
// one parked behind due deliveries while a turn waits need not be.
func (p *Producer) target(ctx context.Context, evID string, s tasks.Subscriber, b limits.Booked, shards int, how booking) (t Target, lot bool) {
	resend := how != bookPublish
	t = Target{SubscriberID: s.ID, TaskID: tasks.TaskID(s.ID, evID)}
	switch {
	case b.Paused: // only with SkipPaused: nothing was written
		t.Outcome = Skipped
	case b.Unknown:
		t.Outcome, t.Err = Failed, fmt.Errorf("%w: subscriber %s is being created or deleted; publish again", ErrUnknownSubscriber, s.ID)
	default:
		o := outcomeOf(b)
		t.Outcome, t.ProcessAt, t.HeldReason = o.Outcome, o.ProcessAt, o.HeldReason
		switch b.Where {
		case limits.WhereLot:
			lot = !b.Queued // a turn asked or arranged already hands it out
		case limits.WhereFresh, limits.WhereBacklog:
			// A duplicate whose task is missing (the publish before
			// failed between its booking and its task) is this call's,
			// unless the delivery ended since the booking: its task
			// was done and deleted meanwhile, and the copy enqueued
			// finds the delivery ended and drops it. A resend or replay
			// waits a moment for the run of its dead or delivered task
			// to let go of it (committed before asynq archives or
			// deletes it), so that it is not left to the hand-out's
			// 2-minute lease.
			if resend && b.New {
				// A fast-path booking is in the out index with no turn
				// to come: should its task not be enqueued (a failure,
				// a crash, an old task still active) a turn at its
				// lease's end hands it out again. A publish leaves this
				// to the region's rescuer; a resend is rare.
				if err := p.gates.Notify(ctx, p.keys.Ready(s.Region), s.ID, b.Due.Add(limits.OutLease)); err != nil {
					t.Outcome, t.Err = Failed, fmt.Errorf("%w: subscriber %s: %v", ErrRedisUnavailable, s.ID, err)
					break
				}
			}
			if how == bookRun {
				break // its task is running: it is the hand-out
			}
			switch h, err := p.handOut(ctx, s, evID, b.Where, shards, resend); {
			case err != nil:
				t.Outcome, t.Err = Failed, err
			case h == handedBusy:
				// Nothing enqueued: the turn at the lease's end does it.
				if t.Outcome == Enqueued {
					t.Outcome = Scheduled
				}
				t.ProcessAt = limits.CeilSecond(b.Due.Add(limits.OutLease)).UTC()
			case h == handedNew && t.Outcome == Duplicate && !p.ended(ctx, s.ID, evID):
				t.Outcome = Enqueued
			}
		}
	}
	return t, lot
}

// ended reports whether subscriber sub's delivery of event id has ended
// (delivered or dead). The worker commits the end before asynq lets the
// task go, so a task found gone beside an ended record was that
// delivery's. A failed read says no.
func (p *Producer) ended(ctx context.Context, sub, id string) bool {
	d, err := p.GetDelivery(ctx, sub, id)
	return err == nil && (d.State == tasks.StateDelivered || d.State == tasks.StateDead)
}

// horizon is subscriber s's retry horizon.
func (p *Producer) horizon(s tasks.Subscriber) time.Duration {
	return cmp.Or(time.Duration(s.RetryHorizon), p.cfg.RetryHorizon)
}

// HandOut enqueues the task of subscriber s's delivery of event eventID in
// lane (limits.WhereFresh, WhereBacklog): the publish's fast path, and the
// dispatcher's hand-outs. The delivery record decided that it goes; asynq
// refusing the id is only a backstop: a live task of the id (a hand-out
// sent twice) will run it, and an archived one (a dead letter of this
// delivery replayed or resent, or published again after its record
// expired) is deleted from the archive so that this one can be enqueued.
// With wait, an active task of the id (the run of the delivery's last
// series letting go of it) is waited for a moment.
//
// It reports whether it enqueued the task (false: one was there already,
// or an active one stayed: the delivery's hand-out lease brings it back).
func (p *Producer) HandOut(ctx context.Context, s tasks.Subscriber, eventID, lane string, shards int, wait bool) (bool, error) {
	h, err := p.handOut(ctx, s, eventID, lane, shards, wait)
	return h == handedNew, err
}

// What handOut did.
type handed int

const (
	handedNew     handed = iota // enqueued
	handedPresent               // a task of the id waits to run (or runs: !wait); it runs the delivery
	handedBusy                  // an active task of the id stayed while waited for: nothing enqueued
)

func (p *Producer) handOut(ctx context.Context, s tasks.Subscriber, eventID, lane string, shards int, wait bool) (handed, error) {
	q := p.keys.DeliveryQueue(s.Region, s.ID, lane, shards)
	id := tasks.TaskID(s.ID, eventID)
	task := tasks.NewDeliverTask(s.ID, eventID, asynq.TaskID(id), asynq.Queue(q), asynq.MaxRetry(tasks.AsynqMaxRetry(cmp.Or(s.MaxAttempts, p.cfg.MaxAttempts))))
	return p.enqueueOnce(ctx, s, q, id, task, wait)
}

// HandOutBatch enqueues one task for subscriber s's deliveries of events
// eventIDs (a turn's hand-outs, 2 to tasks.MaxBatch) in lane, as HandOut
// does for one, under an id of this hand-out's own (tasks.BatchTaskID).
func (p *Producer) HandOutBatch(ctx context.Context, s tasks.Subscriber, eventIDs []string, lane string, shards int) (bool, error) {
	q := p.keys.DeliveryQueue(s.Region, s.ID, lane, shards)
	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	id := tasks.BatchTaskID(s.ID, eventIDs, hex.EncodeToString(nonce[:]))
	task := tasks.NewBatchTask(s.ID, eventIDs, asynq.TaskID(id), asynq.Queue(q), asynq.MaxRetry(tasks.BatchMaxRetry))
	h, err := p.enqueueOnce(ctx, s, q, id, task, true)
	return h == handedNew, err
}

// DeadCopy enqueues, in queue, the single-delivery task of subscriber
// s's delivery of event eventID that died in a batch: its run finds the
// delivery dead and has asynq archive it, so that asynq's archive (what
// asynqmon lists) holds one task per dead delivery, under its own id, and
// asynqmon's Run replays that delivery alone (worker/replayrun.go). A task
// of the id already there (enqueued before, by a run whose worker died
// before answering asynq; or archived) is the copy: nothing is enqueued.
func (p *Producer) DeadCopy(ctx context.Context, s tasks.Subscriber, eventID, queue string) error {
	id := tasks.TaskID(s.ID, eventID)
	task := tasks.NewDeliverTask(s.ID, eventID, asynq.TaskID(id), asynq.Queue(queue), asynq.MaxRetry(tasks.AsynqMaxRetry(cmp.Or(s.MaxAttempts, p.cfg.MaxAttempts))))
	_, err := p.client.EnqueueContext(ctx, task)
	if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) && !errors.Is(err, asynq.ErrDuplicateTask) {
		return fmt.Errorf("%w: the dead delivery %s's task for asynq's archive: %v", ErrRedisUnavailable, id, err)
	}
	return nil
}

// enqueueOnce enqueues task (id, in queue q), or finds it there (see
// HandOut).
func (p *Producer) enqueueOnce(ctx context.Context, s tasks.Subscriber, q, id string, task *asynq.Task, wait bool) (handed, error) {
	for try := 0; ; try++ {
		_, err := p.client.EnqueueContext(ctx, task)
		if err == nil {
			return handedNew, nil
		}
		if !errors.Is(err, asynq.ErrTaskIDConflict) && !errors.Is(err, asynq.ErrDuplicateTask) {
			return 0, fmt.Errorf("%w: subscriber %s: %v", ErrRedisUnavailable, s.ID, err)
		}
		if try == 25 {
			return handedBusy, nil // still there: the hand-out's lease brings it back
		}
		info, err := p.inspector.GetTaskInfo(q, id)
		switch {
		case errors.Is(err, asynq.ErrTaskNotFound):
			continue // gone meanwhile: enqueue it
		case err != nil:
			return 0, fmt.Errorf("%w: subscriber %s: %v", ErrRedisUnavailable, s.ID, err)
		case info.State == asynq.TaskStateActive && wait:
			time.Sleep(20 * time.Millisecond)
			continue
		case info.State != asynq.TaskStateArchived:
			return handedPresent, nil // waiting to run: it runs the delivery
		}
		if err := p.inspector.DeleteTask(q, id); err != nil && !errors.Is(err, asynq.ErrTaskNotFound) {
			return 0, fmt.Errorf("%w: freeing the archived task %s: %v", ErrRedisUnavailable, id, err)
		}
	}
}

// Shards is the namespace's delivery queues per lane and region.
func (p *Producer) Shards(ctx context.Context) (int, error) { return p.shards(ctx) }

// waitReplicas waits, with Config.WaitReplicas, until that many replicas
// hold every write made so far, and marks the targets enqueued or
// duplicate of every result failed with ErrNotReplicated if they do not in
// time (one wait for a whole batch).
//
// WAIT counts the replicas that acknowledged the last write of its own
// connection, and go-redis pools connections: the publish's writes went out
// on others, and a WAIT alone would return at once. So a write goes first
// on the same connection (a pipeline uses one): a PUBLISH, which Redis
// replicates and which stores nothing. The replication stream is one
// ordered log, so a replica that has it has every write acknowledged before.
func (p *Producer) waitReplicas(ctx context.Context, results ...*PublishResult) error {
	want := p.cfg.WaitReplicas
	if want == 0 || !slices.ContainsFunc(results, func(r *PublishResult) bool { return slices.ContainsFunc(r.Targets, written) }) {
		return nil
	}
	var wait *redis.Cmd
	_, err := p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		pl.Publish(ctx, p.keys.ReplicationMark(), "")
		// Pipeliner has no Wait: the command as go-redis' Wait sends it.
		wait = pl.Do(ctx, "wait", want, p.cfg.WaitTimeout.Milliseconds())
		return nil
	})
	var acked int64
	if err == nil {
		acked, err = wait.Int64()
	}
	if err == nil && acked >= int64(want) {
		return nil
	}
	if err != nil {
		err = fmt.Errorf("%w: waiting for %d replicas: %v; publish again", ErrNotReplicated, want, err)
	} else {
		err = fmt.Errorf("%w: %d of %d replicas acknowledged within %s; publish again", ErrNotReplicated, acked, want, tasks.DurationWords(p.cfg.WaitTimeout))
	}
	for _, res := range results {
		for i := range res.Targets {
			if t := &res.Targets[i]; written(*t) {
				t.Outcome, t.Err = Failed, err
			}
		}
	}
	return err
}

// written reports whether the target's publish wrote or found its booking.
func written(t Target) bool { return t.Outcome != Failed && t.Outcome != Skipped }
